//! End to end, for real: JVMs running the agent (`libjpagent.so`, live view by USDT) and the
//! `jpd`/`jpctl` that `cargo xtask build` delivers, as root. The tree jpd holds when a JVM
//! exits must equal, node for node, the one the agent itself writes with `out=` in the same
//! run — with jpd started before the JVM, after it, and killed and restarted while it runs.
//!
//! `cargo xtask test` passes `JPD`, `JPCTL`, `JP_AGENT_LIB`, `JP_JDK17` and `JP_JDK25`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::jpd::Jpd;
use crate::support::tree::{assert_same_tree, read_json, strip_cpu};
use serde_json::Value;

/// Fast discovery, so that the tests wait in tenths of seconds.
const USDT_CONFIG: &str = "[usdt]\nscan_interval_ms = 100\n";

/// The two JDKs (the rotation's tests use them from here too).
pub(crate) use jp_testkit::jdk::Jdk;

/// `Phases.class`, compiled once per JDK and test process (never reused from an earlier
/// run: the source may have changed since).
fn classes(jdk: Jdk) -> PathBuf {
    static DONE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-jvm-{jdk:?}"));
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    let key = format!("{jdk:?}");
    if done.contains(&key) {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jvm/Phases.java");
    let status = Command::new(jdk.home().join("bin/javac"))
        .arg("-d")
        .arg(&dir)
        .arg(&src)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac {} failed", src.display());
    done.push(key);
    dir
}

/// A JVM running `Phases PHASES SIZE` with the agent writing `out=` too.
struct Jvm {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    out: PathBuf,
    started: bool,
    phases_done: usize,
}

impl Jvm {
    /// `wrapper` runs the JVM under another command (e.g. `unshare`).
    fn start(jdk: Jdk, tag: &str, phases: u32, size: u32, wrapper: &[&str], lib: &Path) -> Jvm {
        let dir = classes(jdk);
        let out = dir.join(format!("{tag}.json"));
        let _ = std::fs::remove_file(&out);
        let java = jdk.home().join("bin/java");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&java);
                c
            }
            None => Command::new(&java),
        };
        // A small granularity: many report points, so the deltas are exercised hard.
        cmd.arg(format!(
            "-agentpath:{}=out={},granularity=20000",
            lib.display(),
            out.display()
        ))
        // No hsperfdata file: two JVMs that are both PID 1 in their own PID namespaces
        // would share /tmp/hsperfdata_root/1, and the loser warns on stdout.
        .arg("-XX:-UsePerfData")
        .arg("-cp")
        .arg(&dir)
        .arg("Phases")
        .arg(phases.to_string())
        .arg(size.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("start java");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Jvm {
            child,
            stdin,
            stdout,
            out,
            started: false,
            phases_done: 0,
        }
    }

    /// The host PID of the JVM: the child itself, or the innermost process under a wrapper
    /// (`unshare --fork` puts the JVM one level down, once it has forked).
    fn host_pid(&self) -> u32 {
        crate::support::java_under(self.child.id())
    }

    /// Waits for "started" (main began, nothing else ran yet).
    fn wait_started(&mut self) {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read JVM stdout");
        assert!(
            n > 0 && line.starts_with("started"),
            "the JVM printed {line:?} instead of started"
        );
        self.started = true;
    }

    /// Waits for the next "phase N done" line.
    fn wait_phase(&mut self) {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read JVM stdout");
        assert!(n > 0, "the JVM exited before phase {}", self.phases_done);
        let want = format!("phase {} done", self.phases_done);
        assert!(
            line.starts_with(&want),
            "expected {want:?}, the JVM printed {line:?}"
        );
        self.phases_done += 1;
    }

    fn release(&mut self) {
        self.stdin.write_all(b"\n").expect("write JVM stdin");
        self.stdin.flush().expect("flush JVM stdin");
    }

    /// Waits for the exit and returns the agent's own tree (`out=`).
    fn finish(mut self) -> Value {
        let status = self.child.wait().expect("wait java");
        assert!(status.success(), "the JVM failed: {status}");
        read_json(&self.out)
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn agent_lib() -> PathBuf {
    jp_testkit::agent_lib()
}

/// `jpctl jvm list --json`'s entry for `pid`, if listed.
fn listed(d: &Jpd, pid: u32) -> Option<Value> {
    let list = d.jpctl_json(&["jvm", "list", "--json"]);
    let jvms = list
        .get("jvms")
        .and_then(Value::as_array)
        .or_else(|| list.as_array())
        .unwrap_or_else(|| panic!("jvm list --json: no array of JVMs: {list}"))
        .clone();
    jvms.into_iter()
        .find(|j| j["pid"].as_u64() == Some(u64::from(pid)))
}

/// Polls `jvm list` until `pred` holds for `pid`'s entry.
fn wait_listed(d: &Jpd, pid: u32, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        if let Some(j) = listed(d, pid) {
            if pred(&j) {
                return j;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "JVM {pid} never became {what} within 30 s: {j}"
            );
        } else {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "jpd did not list JVM {pid} within 30 s"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn is_exited(j: &Value) -> bool {
    j.get("exited_unix_ms").is_some_and(|v| !v.is_null())
}

/// jpd's tree of `pid` in the agent's own `jp-mct/1` JSON, without the CPU keys jpd adds
/// when its kernel sampler is joined to the JVM (the agent's file has none; `cpu.rs`
/// checks them).
fn exported(d: &Jpd, pid: u32, tag: &str) -> Value {
    let mut v = exported_with_cpu(d, pid, tag);
    strip_cpu(&mut v);
    v
}

fn exported_with_cpu(d: &Jpd, pid: u32, tag: &str) -> Value {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-jpd.json"));
    d.export_to(pid, "json", &file);
    read_json(&file)
}

/// Checks a finished JVM: listed as exited and complete, and its tree equal to `out=`.
fn check_final(d: &Jpd, pid: u32, agent_tree: &Value, what: &str) {
    let entry = wait_listed(d, pid, "exited", is_exited);
    assert_eq!(
        entry["complete"],
        Value::Bool(true),
        "{what}: JVM {pid} exited cleanly but jpd does not call its profile complete: {entry}"
    );
    let jpd_tree = exported(d, pid, &format!("{what}-{pid}"));
    assert_same_tree(what, agent_tree, &jpd_tree);
}

fn run_all_phases(jvm: &mut Jvm, phases: usize) {
    if !jvm.started {
        jvm.wait_started();
        jvm.release();
    }
    while jvm.phases_done < phases {
        jvm.wait_phase();
        if jvm.phases_done < phases {
            jvm.release();
        }
    }
}

#[test]
fn jpd_started_before_the_jvm_holds_the_agents_tree_on_both_jdks() {
    let _one = crate::support::exclusive();
    let d = Jpd::start(USDT_CONFIG);
    for jdk in [Jdk::J17, Jdk::J25] {
        let mut jvm = Jvm::start(jdk, &format!("before-{jdk:?}"), 3, 300, &[], &agent_lib());
        let pid = jvm.host_pid();
        // jpd finds a new JVM at its next /proc rescan: the workload starts once it has.
        jvm.wait_started();
        wait_listed(&d, pid, "listed", |_| true);
        jvm.release();
        run_all_phases(&mut jvm, 3);
        let agent_tree = jvm.finish();
        check_final(
            &d,
            pid,
            &agent_tree,
            &format!("jpd before the JVM ({jdk:?})"),
        );
    }
    d.stop();
}

#[test]
fn jpd_started_after_the_jvm_gets_the_whole_tree() {
    let _one = crate::support::exclusive();
    let mut jvm = Jvm::start(Jdk::J17, "after", 2, 300, &[], &agent_lib());
    let pid = jvm.host_pid();
    jvm.wait_started();
    jvm.release();
    jvm.wait_phase(); // phase 0 ran with nobody listening
    let d = Jpd::start(USDT_CONFIG);
    wait_listed(&d, pid, "listed", |_| true);
    jvm.release();
    jvm.wait_phase();
    let agent_tree = jvm.finish();
    check_final(&d, pid, &agent_tree, "jpd after the JVM");
    d.stop();
}

#[test]
fn jpd_killed_and_restarted_while_the_jvm_runs_loses_nothing() {
    let _one = crate::support::exclusive();
    let d = Jpd::start(USDT_CONFIG);
    let mut jvm = Jvm::start(Jdk::J25, "restart", 3, 300, &[], &agent_lib());
    let pid = jvm.host_pid();
    jvm.wait_started();
    jvm.release();
    jvm.wait_phase();
    wait_listed(&d, pid, "listed", |_| true);
    // SIGKILL: jpd cannot clean up; the kernel drops the probes and the semaphore.
    d.kill9();
    jvm.release();
    jvm.wait_phase(); // phase 1 ran with nobody listening
    let d = Jpd::start(USDT_CONFIG);
    wait_listed(&d, pid, "listed", |_| true);
    jvm.release();
    jvm.wait_phase();
    let agent_tree = jvm.finish();
    check_final(&d, pid, &agent_tree, "jpd restarted");
    d.stop();
}

#[test]
fn several_jvms_at_once_each_exact_and_a_killed_one_is_flagged() {
    let _one = crate::support::exclusive();
    let d = Jpd::start(USDT_CONFIG);
    let mut jvms: Vec<Jvm> = (0..3)
        .map(|i| {
            Jvm::start(
                Jdk::J17,
                &format!("many-{i}"),
                2,
                200 + 50 * i,
                &[],
                &agent_lib(),
            )
        })
        .collect();
    let mut victim = Jvm::start(Jdk::J17, "victim", 2, 200, &[], &agent_lib());
    let victim_pid = victim.host_pid();
    victim.wait_started();
    victim.release();
    victim.wait_phase();
    wait_listed(&d, victim_pid, "listed", |_| true);
    let _ = victim.child.kill(); // SIGKILL mid-run: no thread end, no VM death
    let _ = victim.child.wait();

    let pids: Vec<u32> = jvms.iter().map(Jvm::host_pid).collect();
    for jvm in &mut jvms {
        run_all_phases(jvm, 2);
    }
    for (jvm, pid) in jvms.into_iter().zip(pids) {
        let agent_tree = jvm.finish();
        check_final(
            &d,
            pid,
            &agent_tree,
            &format!("one of several JVMs ({pid})"),
        );
    }
    let killed = wait_listed(&d, victim_pid, "exited", is_exited);
    assert_eq!(
        killed["complete"],
        Value::Bool(false),
        "a JVM killed mid-run never sent its end: jpd must not call it complete: {killed}"
    );
    // jpd is still fine.
    d.jpctl_output(&["status"]);
    d.stop();
}

#[test]
fn a_jvm_in_other_mount_and_pid_namespaces_is_found_and_exact() {
    let _one = crate::support::exclusive();
    // The library exists only inside the JVM's mount namespace (a private tmpfs), and the JVM
    // is PID 1-ish in its own PID namespace: jpd must open the library through
    // /proc/PID/root and identify the JVM by its host PID.
    let private = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-ns-lib");
    std::fs::create_dir_all(&private).expect("mount point");
    let inner_lib = private.join("libjpagent.so");
    let script = format!(
        "mount -t tmpfs jp-ns {dir} && cp {lib} {dir}/ && exec \"$@\"",
        dir = private.display(),
        lib = agent_lib().display()
    );
    let d = Jpd::start(USDT_CONFIG);
    let wrapper = [
        "unshare",
        "--mount",
        "--pid",
        "--fork",
        "--mount-proc",
        "sh",
        "-c",
        &script,
        "sh",
    ];
    let mut jvm = Jvm::start(Jdk::J17, "ns", 2, 200, &wrapper, &inner_lib);
    jvm.wait_started();
    jvm.release();
    jvm.wait_phase();
    let pid = jvm.host_pid();
    assert!(
        !inner_lib.exists(),
        "the library copy must be visible only inside the JVM's mount namespace"
    );
    wait_listed(&d, pid, "listed", |_| true);
    jvm.release();
    jvm.wait_phase();
    let agent_tree = jvm.finish();
    check_final(&d, pid, &agent_tree, "JVM in other namespaces");
    d.stop();
}

#[test]
fn a_jvm_that_no_scan_found_is_held_exactly() {
    let _one = crate::support::exclusive();
    // jpd scans /proc once at start, then not for a minute: the first JVM makes it attach
    // to the library; the next ones (JDK 17, then 25) start, run and exit between two scans.
    let mut first = Jvm::start(Jdk::J17, "unseen-first", 1, 100, &[], &agent_lib());
    let first_pid = first.host_pid();
    first.wait_started();
    let d = Jpd::start("[usdt]\nscan_interval_ms = 60000\n");
    wait_listed(&d, first_pid, "listed", |_| true);
    // `jpctl status` says which library file the probe is attached to.
    let status = d.jpctl_json(&["status", "--json"]);
    let files = &status["jvm"]["collector"]["files"];
    assert!(
        files.as_array().is_some_and(|f| f.len() == 1
            && f[0]["path"].as_str() == agent_lib().to_str()
            && f[0]["processes"] == 1
            && f[0]["idle"] == false),
        "jpctl status --json: collector files {files}"
    );
    let t0 = Instant::now();
    for jdk in [Jdk::J17, Jdk::J25] {
        let mut short = Jvm::start(
            jdk,
            &format!("unseen-short-{jdk:?}"),
            2,
            300,
            &[],
            &agent_lib(),
        );
        let pid = short.host_pid();
        run_all_phases(&mut short, 2);
        let agent_tree = short.finish();
        // The kernel armed the probe in it when it mapped the library; its records carry
        // its tgid and its HELLO names it. Its exit is noticed at the next scan, so wait
        // for the tree itself.
        let what = format!("a JVM no scan found ({jdk:?})");
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut jpd_tree = Value::Null;
        while Instant::now() < deadline {
            if listed(&d, pid).is_some_and(|j| j["complete"] == Value::Bool(true)) {
                jpd_tree = exported(&d, pid, &format!("unseen-{jdk:?}-{pid}"));
                if jpd_tree == agent_tree {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_same_tree(&what, &agent_tree, &jpd_tree);
        let entry = listed(&d, pid).expect("listed");
        assert!(
            entry["main"].as_str().is_some_and(|m| m.contains("Phases")),
            "{what}: the HELLO names the main class: {entry}"
        );
    }
    assert!(
        t0.elapsed() < Duration::from_secs(55),
        "the short JVMs ran too long for this test's premise (no scan during their lives)"
    );
    first.release();
    run_all_phases(&mut first, 1);
    first.finish();
    d.stop();
}
