//! jpd's live flame pages on the HTTP exporter, in a real headless Chromium (Debian's
//! chromium, driven over the DevTools protocol by jp-mct/tests/browser): `/flame` lists the
//! JVM under the agent and the kernel's hotspots (read_zero under a /dev/zero load),
//! `/flame/kernel` draws them, `/flame/jvm?pid=P` is the JVM's flame graph with its frames
//! by method name, search highlights a frame, a click zooms, and the page refreshes itself:
//! after the JVM ran once more, the new counts show within a few refresh periods.
//! `jpctl jvm export --format html` of the same JVM draws the same frames.
//!
//! Needs `JPD`, `JPCTL`, `JP_AGENT_LIB`, `JP_JDK17`, root, chromium and Node.js >= 20.10;
//! fails with what is missing, never skips.

use std::time::{Duration, Instant};

use crate::support::fleet::{compile_fleet_paper, Java};
use crate::support::jpd::Jpd;
use crate::support::read_dev_zero;
use serde_json::json;

/// jp_daemon::export::flame_page::REFRESH_SECONDS, as the page says it.
const REFRESH_MS: u64 = 5_000;

/// The calls of FleetPaper.f() in the page's data (summed over its contexts; the
/// bytecodes graph when the page has several sample types), once the page has loaded;
/// false before.
const F_CALLS: &str = "(() => { if (document.readyState !== 'complete') return false; \
    const all = JSON.parse(document.getElementById('jp-data').textContent); \
    const d = all.graphs ? all.graphs[all.types.indexOf('bytecodes')] : all; \
    const f = d.names.indexOf('FleetPaper.f()'); \
    return d.frames.filter(x => x[0] === f).reduce((s, x) => s + x[3], 0); })()";

#[test]
fn live_pages_list_draw_search_zoom_and_refresh_in_a_real_browser() {
    let lib = jp_testkit::agent_lib();
    let scratch = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(scratch.path());
    let _one = crate::support::exclusive();
    let jpd = Jpd::start("[usdt]\nscan_interval_ms = 100\n");
    let mut java = Java::start(&jpd, &lib, scratch.path(), "profiler=usdt");
    let pid = java.child.id();
    java.run_once();
    // 68 calls per run (see fleet/jvm.rs).
    jpd.wait_metric("jp_jvm_calls_total{main=\"FleetPaper\"}", 68);
    read_dev_zero(Duration::from_millis(1500));

    // The browser signals once it has seen one run and let go of zoom and search; then the
    // JVM runs once more, and the page must show it by itself.
    let signal = scratch.path().join("first-run-seen");
    let more_work = {
        let signal = signal.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !signal.exists() {
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "the browser never got to the refresh"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            java.run_once();
            java
        })
    };
    let base = format!("http://{}", jpd.http);
    let jvm_page = format!("{base}/flame/jvm?pid={pid}");
    let t_drive = Instant::now();
    let r = crate::browser::drive(json!([
        {"do": "goto", "url": format!("{base}/flame")},
        {"do": "eval", "js": "[...document.querySelectorAll('#jvms tr')].slice(1).map(r => [...r.cells].map(c => c.textContent))"},
        {"do": "eval", "js": "[...document.querySelectorAll('#kernel tr')].slice(1).map(r => r.cells[2].textContent)"},
        {"do": "eval", "js": format!("[...document.querySelectorAll('#jvms a')].map(a => a.getAttribute('href')).filter(h => h.endsWith('={pid}'))")},
        {"do": "screenshot", "name": "flame-live-index"},
        {"do": "goto", "url": format!("{base}/flame/kernel")},
        {"do": "frames"},
        // 6: the JVM's page; zoomed or searching, it does not reload under the steps.
        {"do": "goto", "url": jvm_page},
        {"do": "frames"},
        {"do": "hover", "frame": "FleetPaper.f()"},
        {"do": "search", "text": "FleetPaper\\.g"},
        {"do": "click", "frame": "FleetPaper.f()"},
        {"do": "reset"},
        {"do": "search", "text": ""},
        // 13: free to reload now; the JVM runs once more.
        {"do": "signal", "file": signal},
        {"do": "until", "js": format!("{F_CALLS} >= 2"), "ms": 4 * REFRESH_MS},
        {"do": "frames"},
        {"do": "hover", "frame": "FleetPaper.f()"},
        {"do": "screenshot", "name": "flame-live"},
        {"do": "eval", "js": "document.getElementById('subtitle').textContent"},
    ]));
    let drive_time = t_drive.elapsed();
    let java = more_work.join().expect("the second run");

    // /flame: the JVM (among any other JVM on the host under the agent), linked to its
    // page, and read_zero among the kernel's hotspots.
    let ours = r[1]["value"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row[0] == json!(pid.to_string())))
        .unwrap_or_else(|| panic!("JVM {pid} is not listed: {}", r[1]));
    assert_eq!(
        ours,
        &json!([
            pid.to_string(),
            "FleetPaper",
            "default",
            "68",
            ours[4],
            "running"
        ]),
        "{}",
        r[1]
    );
    assert!(
        r[2]["value"]
            .as_array()
            .is_some_and(|fs| fs.iter().any(|f| f == "read_zero")),
        "read_zero is not among the hotspots: {}",
        r[2]
    );
    let link = format!("/flame/jvm?pid={pid}");
    assert_eq!(r[3]["value"], json!([link]), "{}", r[3]);
    let kernel = crate::browser::labels(&r[6]);
    assert!(
        kernel.iter().any(|l| l == "vmlinux") && kernel.iter().any(|l| l == "read_zero"),
        "{kernel:?}"
    );

    // The JVM's graph: the worker's tree by method name (f calls h and g, g calls h).
    let run = "FleetPaper$Worker.run()";
    let (f, g, h) = ("FleetPaper.f()", "FleetPaper.g(int)", "FleetPaper.h()");
    let frames = crate::browser::labels(&r[8]);
    for name in [run, f, g, h] {
        assert!(frames.iter().any(|l| l == name), "{name}: {frames:?}");
    }
    let tip = crate::browser::tooltip(&r[9]);
    assert!(tip.starts_with("FleetPaper.f()\ncalls: 1\n"), "{tip}");
    assert_eq!(crate::browser::flagged(&r[10], "match"), [g], "{}", r[10]);
    // Zoomed into f: f spans the graph, its callers above it are ancestors.
    assert_eq!(crate::browser::width_of(&r[11], f), 1180);
    assert!(
        crate::browser::flagged(&r[11], "ancestor").contains(&run.to_string()),
        "{}",
        r[11]
    );
    assert_eq!(
        crate::browser::flagged(&r[12], "ancestor"),
        Vec::<String>::new()
    );
    assert_eq!(
        crate::browser::flagged(&r[13], "match"),
        Vec::<String>::new()
    );

    // The refresh: the second run shows without the test touching the page.
    assert_eq!(
        r[15]["value"], true,
        "no new data within 4 refresh periods: {}",
        r[15]
    );
    let waited = r[15]["waited_ms"].as_u64().unwrap_or(u64::MAX);
    assert!(waited <= 4 * REFRESH_MS, "{}", r[15]);
    assert_eq!(
        crate::browser::labels(&r[16]),
        frames,
        "same tree, more counts"
    );
    let tip = crate::browser::tooltip(&r[17]);
    assert!(tip.starts_with("FleetPaper.f()\ncalls: 2\n"), "{tip}");
    assert!(
        r[19]["value"].as_str().is_some_and(
            |s| s.ends_with("live: reloads every 5 s (paused while zoomed or searching)")
        ),
        "{}",
        r[19]
    );
    eprintln!(
        "fleet_flame: the browser session took {:.1} s, the refresh {waited} ms",
        drive_time.as_secs_f64()
    );

    // jpctl's export of the same JVM draws the same frames as the live page.
    let out = jpd
        .jpctl()
        .args([
            "jvm",
            "export",
            &pid.to_string(),
            "--format",
            "html",
            "-o",
            "-",
        ])
        .output()
        .expect("run jpctl");
    assert!(
        out.status.success(),
        "jpctl jvm export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exported = crate::browser::drive_page(
        &String::from_utf8_lossy(&out.stdout),
        json!([{"do": "frames"}]),
    );
    assert_eq!(crate::browser::labels(&exported[1]), frames);
    drop(java);
    jpd.stop();
}
