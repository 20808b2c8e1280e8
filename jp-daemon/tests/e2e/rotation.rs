//! The fleet rotation for real: jpd (as delivered) with `[windows.rotation]` on a tiny
//! window length and a large budget, over JVMs of both JDKs started with the agent dormant
//! and one started without it. The windows it delivers are read back from the window store
//! (`jpctl jvm windows --json`) and its counters from /metrics.
//!
//! `cargo xtask test` passes `JPD`, `JPCTL`, `JP_AGENT_LIB`, `JP_JDK17` and `JP_JDK25`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::jvm::Jdk;
use crate::support::jpd::{metric, Jpd};

/// The rotation's settings: 1 s windows, one at a time, a budget that with the prior cost
/// (4.0) gives each JVM a duty of 50 % / 4 = 12.5 % (a window every 8 s on average); only
/// this test's JVMs (other JVMs of the host are left alone).
const CONFIG: &str = "[usdt]\nscan_interval_ms = 100\n\
    [windows]\nmax_open = 2\nkeep = 1000\n\
    [windows.rotation]\nbudget_percent = 50\nseconds = 1\nmax_open = 1\n\
    main_class = [\"RotationWork\"]\n";
/// How long the rotation runs. Its first window in a JVM waits 12 window lengths (12 s).
const RUN: Duration = Duration::from_secs(45);
const WATCH_SECONDS: f64 = 12.0;
/// The plan's bounds (`windows::rotation::plan`): a JVM's duty is at most 50 %, and the
/// fleet's windows expected open at once at most 0.8 of `max_open`.
const MAX_DUTY: f64 = 0.5;
const SLOT_LOAD: f64 = 0.8;

/// RotationWork compiled by `jdk` into a fresh directory.
fn classes(jdk: Jdk) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-rotation-{jdk:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jvm/RotationWork.java");
    let status = Command::new(jdk.home().join("bin/javac"))
        .arg("-d")
        .arg(&dir)
        .arg(&src)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac {} failed", src.display());
    dir
}

/// A RotationWork JVM, killed on drop.
struct Worker {
    child: Child,
    dormant: bool,
}

impl Worker {
    fn start(jdk: Jdk, classes: &Path, dormant: bool) -> Worker {
        let mut cmd = Command::new(jdk.home().join("bin/java"));
        if dormant {
            cmd.arg(format!(
                "-agentpath:{}=mode=dormant",
                jp_testkit::agent_lib().display()
            ));
        }
        let mut child = cmd
            .arg("-cp")
            .arg(classes)
            .arg("RotationWork")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start java");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the JVM's first line");
        assert_eq!(line.trim(), "started");
        Worker { child, dormant }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the JVM maps jp's agent library.
    fn maps_agent(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/maps", self.pid()))
            .expect("read the JVM's maps")
            .contains("libjpagent")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rotation_counter(metrics: &str, name: &str) -> u64 {
    metric(metrics, &format!("{name}{{origin=\"rotation\"}}")).unwrap_or(0)
}

#[test]
fn rotation_opens_windows_within_budget_and_max_open_in_dormant_jvms_only() {
    let _turn = crate::support::exclusive();
    let (c17, c25) = (classes(Jdk::J17), classes(Jdk::J25));
    let jpd = Jpd::start(CONFIG);
    let workers = [
        Worker::start(Jdk::J17, &c17, true),
        Worker::start(Jdk::J17, &c17, true),
        Worker::start(Jdk::J25, &c25, true),
        Worker::start(Jdk::J25, &c25, true),
        Worker::start(Jdk::J17, &c17, false),
    ];
    std::thread::sleep(RUN);
    // Stop the rotation (a reload), and wait for the window it may have open.
    let stopped = std::fs::read_to_string(&jpd.config)
        .expect("read jpd's config")
        .replace(
            "[windows.rotation]\n",
            "[windows.rotation]\nenabled = false\n",
        );
    std::fs::write(&jpd.config, stopped).expect("write jpd's config");
    jpd.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_secs(2));
    jpd.wait_metric("jp_jvm_windows_open", 0);
    let metrics = jpd.metrics();
    let list = jpd.jpctl_json(&["jvm", "windows", "--json"]);
    let windows = list["windows"].as_array().expect("windows").clone();
    check_windows(&windows, &workers, &metrics);
    let no_agent = &workers[4];
    assert!(
        !no_agent.maps_agent(),
        "the JVM started without the agent was attached"
    );
    jpd.stop();
}

/// The windows the store holds against the rotation's rules.
fn check_windows(windows: &[Value], workers: &[Worker], metrics: &str) {
    let dormant: Vec<u32> = workers
        .iter()
        .filter(|w| w.dormant)
        .map(Worker::pid)
        .collect();
    let n = windows.len() as u64;
    // Each window completed into the store, and nothing else happened.
    assert_eq!(
        rotation_counter(metrics, "jp_jvm_windows_completed_total"),
        n,
        "{metrics}"
    );
    assert_eq!(
        rotation_counter(metrics, "jp_jvm_windows_opened_total"),
        n,
        "{metrics}"
    );
    assert_eq!(
        rotation_counter(metrics, "jp_jvm_windows_failed_total"),
        0,
        "{metrics}"
    );
    assert_eq!(
        rotation_counter(metrics, "jp_jvm_windows_refused_total"),
        0,
        "{metrics}"
    );
    for w in windows {
        let pid = w["pid"].as_u64().expect("pid") as u32;
        assert!(
            dormant.contains(&pid),
            "a window in JVM {pid}, not a dormant one: {w}"
        );
        assert_eq!(w["closed_by"], "deadline", "{w}");
        assert_eq!(w["seconds"], 1, "{w}");
        assert_eq!(w["main"], "RotationWork", "{w}");
        assert_eq!(w["origin"], "rotation", "{w}");
    }
    // Never more than max_open (1) at once: each opened after the previous one closed.
    let mut spans: Vec<(u64, u64)> = windows
        .iter()
        .map(|w| {
            (
                w["opened_unix_ms"].as_u64().expect("opened"),
                w["closed_unix_ms"].as_u64().expect("closed"),
            )
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two rotation windows open at once: {pair:?}"
        );
    }
    // Several windows across several JVMs (each JVM's first after the watch, then one
    // every 8 s on average at the prior's duty).
    let mut jvms: Vec<u64> = windows.iter().filter_map(|w| w["pid"].as_u64()).collect();
    jvms.sort();
    jvms.dedup();
    assert!(
        n >= 3 && jvms.len() >= 2,
        "{n} windows in {} JVMs",
        jvms.len()
    );
    // Within the arithmetic: the fleet's duty is at most min(Σ MAX_DUTY, max_open ×
    // SLOT_LOAD) = 0.8, so the expected count over the run after the watch is at most
    // 0.8 × 33 s / 1 s; four standard deviations of a Poisson count above it.
    let horizon = RUN.as_secs_f64() - WATCH_SECONDS;
    let duty = (MAX_DUTY * dormant.len() as f64).min(SLOT_LOAD);
    let expected = duty * horizon;
    assert!(
        (n as f64) <= expected + 4.0 * expected.sqrt(),
        "{n} windows, the budget allows {expected:.1} expected"
    );
    // The gauges the rotation publishes agree with what it did.
    let jvms_gauge = metric(metrics, "jp_jvm_rotation_jvms").expect("jp_jvm_rotation_jvms");
    assert_eq!(jvms_gauge, dormant.len() as u64, "{metrics}");
    assert!(metrics.contains("jp_jvm_window_cpu_seconds_total{origin=\"rotation\"}"));
}
