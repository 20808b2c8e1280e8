//! End to end, for real: exact windows opened by `jpctl jvm profile` through the
//! delivered jpd, in JVMs started with no jp option, with the agent dormant, and
//! profiled from start (refused); a JVM that disallows attach; and jpd killed during a
//! window (the agent closes it at its deadline by itself). Counts are compared node
//! by node with what `WinTiny` does: after its signal file appears, exactly
//! `base × (round + 1)` calls of `work`, 4 bytecodes each.
//!
//! `cargo xtask test` passes `JPD`, `JPCTL`, `JP_AGENT_LIB`, `JP_JDK17` and `JP_JDK25`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jp_daemon::windows::hotspot::hotspot_jvm;
use jp_daemon::windows::AgentPresence;

use crate::support::jpd::Jpd;

/// Fast discovery, so that the tests wait in tenths of seconds.
const CONFIG: &str = "[usdt]\nscan_interval_ms = 100\n";
/// Calls of round 0; round R makes BASE × (R + 1).
const BASE: u64 = 1000;
/// Bytecodes of one `work` call: iload_0, iconst_1, iadd, ireturn.
const WORK_BYTECODES: u64 = 4;
const MAIN: &str = "WinTiny.main([Ljava/lang/String;)V";
const WORK: &str = "WinTiny.work(I)I";

fn jdks() -> [PathBuf; 2] {
    jp_testkit::jdk::Jdk::ALL.map(|j| j.home())
}

/// `WinTiny.class` compiled by `jdk` into a fresh directory.
fn compile(jdk: &Path, dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jvm/WinTiny.java");
    let status = Command::new(jdk.join("bin/javac"))
        .arg("-d")
        .arg(dir)
        .arg(&src)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac {} failed", src.display());
}

/// A running `WinTiny`, driven round by round through its signal files.
struct Tiny {
    child: Child,
    dir: tempfile::TempDir,
    round: u64,
}

impl Tiny {
    fn start(jdk: &Path, options: &[String]) -> Tiny {
        let dir = tempfile::tempdir().expect("temp dir");
        compile(jdk, dir.path());
        let mut child = Command::new(jdk.join("bin/java"))
            .args(options)
            .arg("-cp")
            .arg(dir.path())
            .arg("WinTiny")
            .arg(dir.path().join("go"))
            .arg(BASE.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start java");
        // Anything an agent prints comes before WinTiny's line.
        let stdout = child.stdout.take().expect("stdout");
        let ready = BufReader::new(stdout)
            .lines()
            .any(|l| l.is_ok_and(|l| l == "ready"));
        assert!(ready, "WinTiny did not start");
        Tiny {
            child,
            dir,
            round: 0,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts the next round and waits until its calls are made; its call count.
    fn round(&mut self) -> u64 {
        let go = self.dir.path().join(format!("go.{}", self.round));
        let done = self.dir.path().join(format!("go.{}.done", self.round));
        std::fs::write(&go, b"").expect("signal file");
        wait_for(&format!("round {} of WinTiny", self.round), || {
            done.exists()
        });
        self.round += 1;
        BASE * self.round
    }

    fn agent(&self) -> AgentPresence {
        hotspot_jvm(self.pid())
            .unwrap_or_else(|e| panic!("JVM {}: {e}", self.pid()))
            .agent
    }

    /// Waits until jpd says it opened a window in this JVM (the agent returned from
    /// the open: the classes in scope are rewritten), the `seen`th of this JVM; its id.
    fn wait_window_open(&self, jpd: &Jpd, seen: usize) -> u64 {
        let line = format!("opened in JVM {} ", self.pid());
        wait_for("jpd to open the window", || {
            jpd.log_text().matches(&line).count() > seen
        });
        match self.agent() {
            AgentPresence::WindowOpen(id) => id,
            other => panic!("the window is open, the agent says {other:?}"),
        }
    }

    fn maps_agent(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/maps", self.pid()))
            .expect("maps")
            .contains("libjpagent.so")
    }
}

impl Drop for Tiny {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "waited 90 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `jpctl jvm profile PID --seconds N --include WinTiny --format json -o FILE`, started.
fn profile(jpd: &Jpd, pid: u32, seconds: u32, out: &Path) -> Child {
    jpd.jpctl()
        .args(["jvm", "profile", &pid.to_string(), "--seconds"])
        .arg(seconds.to_string())
        .args(["--include", "WinTiny", "--format", "json", "-o"])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run jpctl")
}

/// jpctl's stdout once it succeeded.
fn finished(jpctl: Child) -> String {
    let out = jpctl.wait_with_output().expect("wait jpctl");
    assert!(
        out.status.success(),
        "jpctl jvm profile failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// (path, calls, bytecodes) of every context, sorted.
fn rows(file: &Path) -> Vec<(String, u64, u64)> {
    let t = jp_mct::read_json(&std::fs::read(file).expect("the window's file")).expect("json");
    let mut out = Vec::new();
    for (i, n) in t.nodes.iter().enumerate().skip(1) {
        let mut path = vec![n.method.to_string()];
        let mut at = n.parent;
        while let Some(p) = at.filter(|&p| p != 0) {
            path.push(t.nodes[p].method.to_string());
            at = t.nodes[p].parent;
        }
        path.reverse();
        out.push((path.join(" > "), t.nodes[i].calls, t.nodes[i].bytecodes));
    }
    out.sort();
    out
}

/// The tree of a window in which WinTiny made `calls` calls: `main` seeded (running
/// when the window opened: 0 calls, 0 bytecodes of its own), `work` exact.
fn expected(calls: u64) -> Vec<(String, u64, u64)> {
    vec![
        (MAIN.to_string(), 0, 0),
        (format!("{MAIN} > {WORK}"), calls, calls * WORK_BYTECODES),
    ]
}

/// One window around one round of WinTiny (the `seen`th this jpd opened in it): its
/// header line and id, the file's tree checked.
fn window_round(jpd: &Jpd, tiny: &mut Tiny, tag: &str, seen: usize) -> (String, u64) {
    let out = tiny.dir.path().join(format!("{tag}.json"));
    let jpctl = profile(jpd, tiny.pid(), 5, &out);
    let id = tiny.wait_window_open(jpd, seen);
    let calls = tiny.round();
    let stdout = finished(jpctl);
    assert_eq!(rows(&out), expected(calls), "{tag}");
    assert!(
        stdout.starts_with(&format!("# window {id} of JVM {} (WinTiny), origin request, scope include=WinTiny, 5 s, closed by deadline: contexts with 0 calls were running when the window opened: their own calls and bytecodes are not counted\n", tiny.pid())),
        "{stdout}"
    );
    (stdout, id)
}

/// A JVM started with no jp option: the first window loads the agent (dormant), two
/// windows back to back count exactly their own rounds, and jpd keeps both.
#[test]
fn windows_in_a_jvm_started_without_the_agent() {
    let _turn = crate::support::exclusive();
    let jpd = Jpd::start(CONFIG);
    for jdk in jdks() {
        let mut tiny = Tiny::start(&jdk, &[]);
        assert_eq!(tiny.agent(), AgentPresence::None);
        let (_, first) = window_round(&jpd, &mut tiny, "first", 0);
        wait_for("the agent to go dormant", || {
            tiny.agent() == AgentPresence::Dormant
        });
        let (_, second) = window_round(&jpd, &mut tiny, "second", 1);
        assert_ne!(first, second);
        let list = jpd.jpctl_json(&["jvm", "windows", &tiny.pid().to_string(), "--json"]);
        let ids: Vec<u64> = list["windows"]
            .as_array()
            .expect("windows")
            .iter()
            .map(|w| w["id"].as_u64().expect("id"))
            .collect();
        assert_eq!(ids, [first, second]);
        let calls: Vec<u64> = list["windows"]
            .as_array()
            .expect("windows")
            .iter()
            .map(|w| w["calls"].as_u64().expect("calls"))
            .collect();
        assert_eq!(calls, [BASE, 2 * BASE]);
        // Both were asked for: their origin says so, in the JSON and in the table.
        let origins: Vec<&str> = list["windows"]
            .as_array()
            .expect("windows")
            .iter()
            .map(|w| w["origin"].as_str().expect("origin"))
            .collect();
        assert_eq!(origins, ["request", "request"]);
        let table = jpd.jpctl_output(&["jvm", "windows", &tiny.pid().to_string()]);
        let columns: Vec<(&str, &str)> = table
            .lines()
            .map(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                (c[1], c[2])
            })
            .collect();
        let (first_id, second_id) = (first.to_string(), second.to_string());
        assert_eq!(
            columns,
            [
                ("WINDOW", "ORIGIN"),
                (first_id.as_str(), "request"),
                (second_id.as_str(), "request")
            ],
            "{table}"
        );
    }
    let m = jpd.metrics();
    assert_eq!(
        crate::support::jpd::metric(&m, "jp_jvm_windows_completed_total{origin=\"request\"}"),
        Some(4),
        "{m}"
    );
    assert_eq!(
        crate::support::jpd::metric(&m, "jp_jvm_windows_failed_total{origin=\"request\"}"),
        Some(0)
    );
    jpd.stop();
}

/// A JVM started with the agent dormant; HTTP may not open a window by default.
#[test]
fn a_window_in_a_dormant_jvm() {
    let _turn = crate::support::exclusive();
    let jpd = Jpd::start(CONFIG);
    let lib = jp_testkit::agent_lib();
    for jdk in jdks() {
        let mut tiny = Tiny::start(
            &jdk,
            &[format!("-agentpath:{}=mode=dormant", lib.display())],
        );
        assert_eq!(tiny.agent(), AgentPresence::Dormant);
        let (status, body) = jpd.get(&format!("/debug/pprof/jvm?pid={}&seconds=1", tiny.pid()));
        assert_eq!(status, 403);
        assert_eq!(
            String::from_utf8_lossy(&body),
            format!("JVM {0} is not profiled from start: a window over HTTP needs export.open_windows = true in jpd's configuration (or use `jpctl jvm profile {0}`)\n", tiny.pid())
        );
        window_round(&jpd, &mut tiny, "dormant", 0);
    }
    jpd.stop();
}

/// With `export.open_windows = true`, `/debug/pprof/jvm` opens a window in a dormant JVM:
/// jpd keeps it with the origin `http` and counts it under that origin.
#[test]
fn an_http_window_is_kept_with_its_origin() {
    let _turn = crate::support::exclusive();
    let jpd = Jpd::start_exporting(CONFIG, &[], "", "open_windows = true\n", &[]);
    let lib = jp_testkit::agent_lib();
    let [jdk, _] = jdks();
    let tiny = Tiny::start(
        &jdk,
        &[format!("-agentpath:{}=mode=dormant", lib.display())],
    );
    let (status, body) = jpd.get(&format!("/debug/pprof/jvm?pid={}&seconds=1", tiny.pid()));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let list = jpd.jpctl_json(&["jvm", "windows", &tiny.pid().to_string(), "--json"]);
    let origins: Vec<&str> = list["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .map(|w| w["origin"].as_str().expect("origin"))
        .collect();
    assert_eq!(origins, ["http"], "{list}");
    let m = jpd.metrics();
    for (origin, completed) in [("http", 1), ("request", 0)] {
        assert_eq!(
            crate::support::jpd::metric(
                &m,
                &format!("jp_jvm_windows_completed_total{{origin=\"{origin}\"}}")
            ),
            Some(completed),
            "{m}"
        );
    }
    jpd.stop();
}

/// A JVM profiled from start is refused with the reason; one that disallows attach is
/// refused before anything is sent to it, and runs on without jp's agent.
#[test]
fn live_and_attach_disabled_jvms_are_refused() {
    let _turn = crate::support::exclusive();
    let jpd = Jpd::start(CONFIG);
    let lib = jp_testkit::agent_lib();
    for jdk in jdks() {
        let live = Tiny::start(&jdk, &[format!("-agentpath:{}", lib.display())]);
        let out = jpd
            .jpctl()
            .args(["jvm", "profile", &live.pid().to_string(), "--seconds", "1"])
            .output()
            .expect("run jpctl");
        assert!(!out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim_end().lines().last(),
            Some(format!("jpctl: JVM {0} is profiled from start: its live tree is already exact: jpctl jvm tree {0}", live.pid()).as_str()),
        );
        let mut closed = Tiny::start(&jdk, &["-XX:+DisableAttachMechanism".into()]);
        let out = jpd
            .jpctl()
            .args([
                "jvm",
                "profile",
                &closed.pid().to_string(),
                "--seconds",
                "1",
            ])
            .output()
            .expect("run jpctl");
        assert!(!out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim_end().lines().last(),
            Some(format!("jpctl: JVM {} runs with -XX:+DisableAttachMechanism: jpd cannot reach it (it is left as it is)", closed.pid()).as_str()),
        );
        assert!(!closed.maps_agent(), "no agent was loaded");
        assert_eq!(closed.round(), BASE, "it runs on");
    }
    let m = jpd.metrics();
    assert_eq!(
        crate::support::jpd::metric(&m, "jp_jvm_windows_refused_total{origin=\"request\"}"),
        Some(4),
        "{m}"
    );
    jpd.stop();
}

/// jpd killed during a window: the agent closes it at its deadline by itself (its
/// result lands in the window's directory, its state goes back to dormant), and a new
/// jpd opens the next window.
#[test]
fn jpd_killed_during_a_window() {
    let _turn = crate::support::exclusive();
    let jdk = &jdks()[0];
    let mut tiny = Tiny::start(jdk, &[]);
    let jpd = Jpd::start(CONFIG);
    let out = tiny.dir.path().join("lost.json");
    let jpctl = profile(&jpd, tiny.pid(), 3, &out);
    let id = tiny.wait_window_open(&jpd, 0);
    jpd.kill9();
    let failed = jpctl.wait_with_output().expect("wait jpctl");
    assert!(!failed.status.success(), "jpctl saw jpd go");
    assert!(!out.exists());
    wait_for("the agent to close the window at its deadline", || {
        tiny.agent() == AgentPresence::Dormant
    });
    let jvm = hotspot_jvm(tiny.pid()).expect("the JVM");
    let dir = jp_daemon::windows::attach::window_dir(&jvm).expect("the window directory");
    let done = std::fs::read_to_string(dir.host.join(format!("window-{id}.done")))
        .expect("the agent's .done file");
    assert!(done.lines().any(|l| l == "closed_by=deadline"), "{done}");
    assert!(done.lines().any(|l| l == format!("id={id}")), "{done}");
    let jpd = Jpd::start(CONFIG);
    assert_eq!(tiny.agent(), AgentPresence::Dormant);
    window_round(&jpd, &mut tiny, "after", 0);
    jpd.stop();
}
