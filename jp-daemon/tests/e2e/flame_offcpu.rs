//! jpd's live flame page of a JVM with off-CPU on, in a real headless Chromium (Debian's
//! chromium, driven by jp-mct/tests/browser), on JDK 17 and 25: `OffcpuWaits waits`
//! sleeps in a() and spins in b(). The page's selector switches the graph to `offcpu`,
//! where a() is drawn with its kind of wait and kernel function as frames under it and as
//! wide as the JSON export's time off CPU of a() says; `cpu` draws b()'s spin; a URL with
//! `#type=wall` opens on wall time; `all=1` adds the idle threads' time that the default
//! page leaves out and says it left out. Compared once the JVM exited, so that the page
//! and the export read the same, final numbers.

use std::path::Path;

use serde_json::{json, Value};

use crate::cpu::{compile, jdks, Jvm};
use crate::offcpu::{cpu_ns, done_line, export_json, go, nodes, of, offcpu_ns, settled, CONFIG};
use crate::support::jpd::Jpd;
use crate::support::require_root;

/// The width of the graph in the driver's 1200-pixel window (the body's padding off).
const GRAPH_PX: f64 = 1180.0;

/// Switches the page's selector to KEY as a user does; the URL's fragment after it.
fn switch(key: &str) -> String {
    format!(
        "(() => {{ const s = document.getElementById('type'); s.value = '{key}'; \
         s.dispatchEvent(new Event('change')); return location.hash; }})()"
    )
}

/// The drawn graph's data: the selected type, its total, and its frames as
/// [name, depth, inclusive], pre-order.
const GRAPH: &str = "(() => { const all = JSON.parse(document.getElementById('jp-data').textContent); \
    const ty = document.getElementById('type').value; \
    const d = all.graphs[all.types.indexOf(ty)]; \
    return { type: ty, types: all.types, total: d.total, subtitle: document.getElementById('subtitle').textContent, \
      frames: d.frames.map(f => [d.names[f[0]], f[1], f[4]]) }; })()";

/// (name, depth, inclusive) of a [`GRAPH`] report.
fn frames(entry: &Value) -> Vec<(String, u64, u64)> {
    entry["value"]["frames"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f[0].as_str().unwrap_or_default().to_string(),
                f[1].as_u64().unwrap_or(0),
                f[2].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The inclusive count of the frames named `name`, summed.
fn inclusive(frames: &[(String, u64, u64)], name: &str) -> u64 {
    frames.iter().filter(|f| f.0 == name).map(|f| f.2).sum()
}

/// (name, inclusive) of the frames `levels` deeper than the frames named `name`, under them.
fn under(frames: &[(String, u64, u64)], name: &str, levels: u64) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate().filter(|(_, f)| f.0 == name) {
        for g in frames[i + 1..].iter().take_while(|g| g.1 > f.1) {
            if g.1 == f.1 + levels {
                out.push((g.0.clone(), g.2));
            }
        }
    }
    out
}

/// `n` as the page's tooltips write it (en-US grouping).
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (k, c) in s.chars().enumerate() {
        if k > 0 && (s.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The time off CPU of every context of a jp-mct/1 document, the root's included.
pub(crate) fn offcpu_total(doc: &Value) -> u64 {
    let all = nodes(doc);
    let every: Vec<&Value> = all.iter().collect();
    offcpu_ns(&every) + doc["root"]["offcpu"]["ns"].as_u64().unwrap_or(0)
}

#[test]
fn the_flame_page_switches_to_off_cpu_and_wall_time_in_a_real_browser() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    let base = format!("http://{}", d.http);
    for (tag, home) in jdks() {
        let dir = compile("OffcpuWaits", &format!("{tag}-flame"), &home);
        let args = ["waits".to_string(), "2".to_string(), "1".to_string()];
        let mut jvm = Jvm::launch(&[], &home, &dir, "OffcpuWaits", &args);
        jvm.expect_line("started");
        go(&d, &mut jvm, 1);
        done_line(&mut jvm);
        let pid = jvm.pid();
        jvm.finish();
        settled(&d, pid);
        let doc = export_json(&d, pid, &format!("{tag}-flame"));
        let every = export_all(&d, pid, &format!("flame-{tag}"));
        let all = nodes(&doc);
        let (a, b) = (of(&all, "OffcpuWaits.a("), of(&all, "OffcpuWaits.b("));
        let (off_a, cpu_a, cpu_b) = (offcpu_ns(&a), cpu_ns(&a), cpu_ns(&b));
        let what = format!("{tag}: export a() off {off_a} cpu {cpu_a}, b() cpu {cpu_b}");
        assert!(off_a > 1_000_000_000, "{what}");
        let page = format!("{base}/flame/jvm?pid={pid}");
        // A search pauses the page's refresh (it reloads every 5 s otherwise), so that
        // no reload comes between a step and what it reads; it changes no width.
        let pause = json!({"do": "search", "text": "OffcpuWaits"});
        let r = crate::browser::drive(json!([
            {"do": "goto", "url": page},
            pause,
            {"do": "eval", "js": GRAPH},
            // 3: the selector to offcpu, as a user picks it.
            {"do": "eval", "js": switch("offcpu")},
            {"do": "eval", "js": GRAPH},
            {"do": "frames"},
            {"do": "hover", "frame": "OffcpuWaits.a()"},
            {"do": "screenshot", "name": format!("flame-offcpu-{tag}")},
            // 8: cpu.
            {"do": "eval", "js": switch("cpu")},
            {"do": "eval", "js": GRAPH},
            {"do": "frames"},
            // 11: URLs open on the type they name.
            {"do": "goto", "url": format!("{page}&type=cpu")},
            pause,
            {"do": "eval", "js": GRAPH},
            {"do": "goto", "url": format!("{page}#type=wall")},
            pause,
            {"do": "eval", "js": GRAPH},
            // 17: idle threads' time too.
            {"do": "goto", "url": format!("{page}&all=1#type=offcpu")},
            pause,
            {"do": "eval", "js": GRAPH},
        ]));
        // The page opens on the tree's bytecodes and offers every type.
        assert_eq!(r[2]["value"]["type"], "bytecodes", "{what}: {}", r[2]);
        assert_eq!(
            r[2]["value"]["types"],
            json!(["bytecodes", "cpu", "offcpu", "wall"]),
            "{what}"
        );
        offcpu_view(&r[3..7], &doc, &a, off_a, &what);
        // cpu: b()'s spin, as the export counts it, drawn wider than a().
        assert_eq!(r[8]["value"], "#type=cpu", "{what}");
        let cpu = frames(&r[9]);
        assert_eq!(inclusive(&cpu, "OffcpuWaits.b()"), cpu_b, "{what}");
        assert_eq!(inclusive(&cpu, "OffcpuWaits.a()"), cpu_a, "{what}");
        let px = |label: &str| crate::browser::width_of(&r[10], label);
        assert!(
            px("OffcpuWaits.b()") > 2 * px("OffcpuWaits.a()").max(0),
            "{what}: {}",
            r[10]
        );
        // The URLs: the query's type, the fragment's.
        assert_eq!(r[13]["value"]["type"], "cpu", "{what}");
        assert_eq!(r[16]["value"]["type"], "wall", "{what}");
        let wall = frames(&r[16]);
        assert_eq!(inclusive(&wall, "OffcpuWaits.a()"), off_a + cpu_a, "{what}");
        assert_eq!(
            inclusive(&wall, "OffcpuWaits.b()"),
            cpu_b + offcpu_ns(&b),
            "{what}"
        );
        // all=1: every thread's time off CPU, as `jpctl jvm export --all` has it.
        assert_eq!(r[19]["value"]["type"], "offcpu", "{what}");
        assert_eq!(
            r[19]["value"]["total"].as_u64(),
            Some(offcpu_total(&every)),
            "{what}"
        );
        let subtitle = r[19]["value"]["subtitle"].as_str().unwrap_or_default();
        assert!(
            subtitle.contains(" · idle threads (waiting for work) shown: all=1"),
            "{what}: {subtitle}"
        );
    }
    d.stop();
}

/// `jpctl jvm export PID --format json --all` (every thread's time, idle ones too), parsed.
pub(crate) fn export_all(d: &Jpd, pid: u32, tag: &str) -> Value {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-all.json"));
    let _ = std::fs::remove_file(&file);
    d.jpctl_output(&[
        "jvm",
        "export",
        &pid.to_string(),
        "--format",
        "json",
        "--all",
        "-o",
        file.to_str().expect("UTF-8 path"),
    ]);
    serde_json::from_slice(&std::fs::read(&file).expect("read the export")).expect("JSON")
}

/// The offcpu graph (the switch, its data, its frames, a hover): the export's numbers, a() with its kinds of
/// wait and kernel functions under it, drawn as wide as its share, and the idle time left
/// out said in the subtitle.
fn offcpu_view(r: &[Value], doc: &Value, a: &[&Value], off_a: u64, what: &str) {
    assert_eq!(r[0]["value"], "#type=offcpu", "{what}");
    assert_eq!(r[1]["value"]["type"], "offcpu", "{what}");
    let off = frames(&r[1]);
    let total = offcpu_total(doc);
    assert_eq!(r[1]["value"]["total"].as_u64(), Some(total), "{what}");
    assert_eq!(inclusive(&off, "OffcpuWaits.a()"), off_a, "{what}");
    // The kinds of wait under a(): those of the export, the largest one whole (smaller
    // ones may be merged into a grey frame when under 0.005 % of the graph).
    let mut kinds: Vec<(String, u64)> = Vec::new();
    for n in a {
        for (k, ns) in n["offcpu"]["kinds"].as_object().into_iter().flatten() {
            let name = format!("off-CPU: {k}");
            match kinds.iter_mut().find(|(m, _)| *m == name) {
                Some(at) => at.1 += ns.as_u64().unwrap_or(0),
                None => kinds.push((name, ns.as_u64().unwrap_or(0))),
            }
        }
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    let drawn = under(&off, "OffcpuWaits.a()", 1);
    assert!(
        drawn
            .iter()
            .all(|(k, _)| kinds.iter().any(|(m, _)| m == k) || k == "[smaller frames]"),
        "{what}: drawn {drawn:?}, export {kinds:?}"
    );
    assert!(
        drawn.contains(&kinds[0]),
        "{what}: drawn {drawn:?}, export {kinds:?}"
    );
    let functions: Vec<String> = a
        .iter()
        .filter_map(|n| n["offcpu"]["functions"].as_object())
        .flat_map(|f| f.keys().cloned())
        .collect();
    let leaves = under(&off, "OffcpuWaits.a()", 2);
    assert!(
        !leaves.is_empty()
            && leaves
                .iter()
                .all(|(f, _)| functions.contains(f) || f == "[smaller frames]"),
        "{what}: drawn {leaves:?}, export {functions:?}"
    );
    // As wide on screen as its share of the graph (to the pixel's rounding).
    let px = crate::browser::width_of(&r[2], "OffcpuWaits.a()");
    let expected = GRAPH_PX * off_a as f64 / total as f64;
    assert!(
        (px as f64 - expected).abs() <= 1.0,
        "{what}: {px} px, expected {expected:.1}"
    );
    let tip = crate::browser::tooltip(&r[3]);
    assert!(
        tip.contains(&format!("\ninclusive ns off CPU: {}\n", grouped(off_a))),
        "{what}: {tip}"
    );
    let hidden = doc["offcpu_idle_hidden_ns"].as_u64().unwrap_or(0);
    let subtitle = r[1]["value"]["subtitle"].as_str().unwrap_or_default();
    let note = jp_mct::idle_note(hidden, "all=1 in the URL shows them");
    assert_eq!(
        subtitle.contains(&note),
        hidden > 0,
        "{what}: {subtitle} / {note}"
    );
}
