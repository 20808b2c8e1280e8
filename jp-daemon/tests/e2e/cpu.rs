//! CPU per exact context, for real: jpd's kernel sampler joined to the
//! contexts that JVMs running the agent (`profiler=usdt`) publish, on JDK 17 and 25.
//! `tests/fixtures/jvm/CpuSplit.java` spins in `a()` for twice the iterations of `b()` (the same
//! loop), reads `/dev/zero` in `readZero()`, or allocates for the GC. What jpd says is
//! read as users read it: `go tool pprof` on the exported profile and `jpctl jvm list`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::fleet::tool;
use crate::support::jpd::Jpd;
use crate::support::require_root;
use jp_testkit::jdk::Jdk;
use serde_json::Value;

pub(crate) const CONFIG: &str = "[usdt]\nscan_interval_ms = 100\n";

/// The two JDKs as (tag, home), for the tests' directories and messages.
pub(crate) fn jdks() -> [(&'static str, PathBuf); 2] {
    Jdk::ALL.map(|j| (j.name(), j.home()))
}

/// `CpuSplit.class` for one JDK, compiled fresh in this test process.
fn classes(tag: &str, home: &Path) -> PathBuf {
    compile("CpuSplit", tag, home)
}

/// `tests/fixtures/jvm/PROGRAM.java` for one JDK, compiled fresh in this test process.
pub(crate) fn compile(program: &str, tag: &str, home: &Path) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{program}-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/jvm/{program}.java"));
    let status = Command::new(home.join("bin/javac"))
        .arg("-d")
        .arg(&dir)
        .arg(&src)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac {} failed", src.display());
    dir
}

pub(crate) struct Jvm {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: BufReader<ChildStdout>,
}

impl Jvm {
    fn start(home: &Path, dir: &Path, mode: &str, seconds: u32, threads: u32) -> Jvm {
        Jvm::start_under(&[], home, dir, mode, seconds, threads)
    }

    /// As [`Jvm::start`], run by `wrapper` (e.g. `unshare`) when not empty.
    fn start_under(
        wrapper: &[&str],
        home: &Path,
        dir: &Path,
        mode: &str,
        seconds: u32,
        threads: u32,
    ) -> Jvm {
        let args = [mode.to_string(), seconds.to_string(), threads.to_string()];
        Jvm::launch(wrapper, home, dir, "CpuSplit", &args)
    }

    /// `CLASS ARGS…` from `dir` with the agent (`profiler=usdt`), run by `wrapper` when
    /// not empty.
    pub(crate) fn launch(
        wrapper: &[&str],
        home: &Path,
        dir: &Path,
        class: &str,
        args: &[String],
    ) -> Jvm {
        Jvm::launch_with(wrapper, home, dir, class, args, "")
    }

    /// As [`Jvm::launch`], with `extra` appended to the agent's options.
    pub(crate) fn launch_with(
        wrapper: &[&str],
        home: &Path,
        dir: &Path,
        class: &str,
        args: &[String],
        extra: &str,
    ) -> Jvm {
        let java = home.join("bin/java");
        let mut cmd = match wrapper.split_first() {
            Some((w, args)) => {
                let mut c = Command::new(w);
                c.args(args).arg(&java);
                c
            }
            None => Command::new(&java),
        };
        let mut child = cmd
            .arg(format!(
                // A small granularity: even the allocating threads (few bytecodes)
                // report soon, and so announce their context slot.
                "-agentpath:{}=profiler=usdt,granularity=100000{extra}",
                jp_testkit::agent_lib().display()
            ))
            .arg("-XX:-UsePerfData")
            .arg("-cp")
            .arg(dir)
            .arg(class)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start java");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Jvm {
            child,
            stdin,
            stdout,
        }
    }

    /// The JVM's host PID (under a wrapper, the java process below it).
    pub(crate) fn pid(&self) -> u32 {
        crate::support::java_under(self.child.id())
    }

    pub(crate) fn expect_line(&mut self, want: &str) {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read JVM stdout");
        assert!(
            n > 0 && line.trim() == want,
            "the JVM printed {line:?} instead of {want:?}"
        );
    }

    pub(crate) fn finish(mut self) {
        let _ = self.stdin.write_all(b"\n");
        let _ = self.stdin.flush();
        let status = self.child.wait().expect("wait java");
        assert!(status.success(), "the JVM failed: {status}");
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

fn listed(d: &Jpd, pid: u32) -> Option<Value> {
    let list = d.jpctl_json(&["jvm", "list", "--json"]);
    list["jvms"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["pid"].as_u64() == Some(u64::from(pid))))
        .cloned()
}

/// Waits until jpd lists `pid` with `pred` true.
pub(crate) fn wait_listed(d: &Jpd, pid: u32, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let j = listed(d, pid);
        if let Some(j) = &j {
            if pred(j) {
                return j.clone();
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "JVM {pid} was not {what} within 30 s: {j:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The CPU (ns) jpd lists for `kind` ("app", "gc", …), user and kernel together.
pub(crate) fn cpu_of_kind(j: &Value, kind: &str) -> u64 {
    j["cpu"]["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|k| k["kind"] == kind)
        .map(|k| k["user_ns"].as_u64().unwrap_or(0) + k["kernel_ns"].as_u64().unwrap_or(0))
        .sum()
}

/// jpd's pprof of `pid` (with the `cpu` sample type), exported by jpctl.
pub(crate) fn export_pprof(d: &Jpd, pid: u32, tag: &str) -> PathBuf {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cpu-{tag}.pb.gz"));
    d.export_to(pid, "pprof", &file);
    file
}

/// jpd's jp-mct/1 JSON of `pid` (with its `cpu` keys), exported by jpctl.
fn export_json(d: &Jpd, pid: u32, tag: &str) -> Value {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cpu-{tag}.json"));
    d.export_to(pid, "json", &file);
    let text = std::fs::read(&file).expect("read the exported JSON");
    serde_json::from_slice(&text).expect("the export is JSON")
}

/// A JSON node's own CPU (user + kernel ns).
fn node_cpu(n: &Value) -> u64 {
    n["cpu"]["user"].as_u64().unwrap_or(0) + n["cpu"]["kernel"].as_u64().unwrap_or(0)
}

/// Every node of a jp-mct/1 document, pre-order, with its subtree's CPU.
fn json_nodes(doc: &Value) -> Vec<(Value, u64)> {
    fn walk(n: &Value, out: &mut Vec<(Value, u64)>) -> u64 {
        let at = out.len();
        out.push((n.clone(), 0));
        let below: u64 = n["children"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| walk(c, out))
            .sum();
        let inclusive = node_cpu(n) + below;
        out[at].1 = inclusive;
        inclusive
    }
    let mut out = Vec::new();
    for c in doc["root"]["children"].as_array().into_iter().flatten() {
        walk(c, &mut out);
    }
    out
}

/// Inclusive CPU (ns) of the JSON contexts of methods starting with `prefix`.
fn json_inclusive(nodes: &[(Value, u64)], prefix: &str) -> u64 {
    nodes
        .iter()
        .filter(|(n, _)| n["method"].as_str().is_some_and(|m| m.starts_with(prefix)))
        .map(|(_, ns)| ns)
        .sum()
}

/// The value of `series` in jpd's /metrics, as a float.
fn metric_f64(d: &Jpd, series: &str) -> Option<f64> {
    d.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn go_pprof(file: &Path, args: &[&str]) -> String {
    let out = Command::new(tool("go", "golang-go"))
        .args(["tool", "pprof", "-sample_index=cpu"])
        .args(args)
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Inclusive CPU (ns) by function, from `go tool pprof -top` (the cum column).
pub(crate) fn cum_ns(file: &Path) -> (Vec<(String, u64)>, String) {
    let text = go_pprof(
        file,
        &["-top", "-nodecount=100000", "-nodefraction=0", "-unit=ns"],
    );
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.trim_start().starts_with("flat ") {
            in_table = true;
        } else if in_table {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() >= 6 {
                let ns = cols[3].trim_end_matches("ns").parse().unwrap_or(0);
                rows.push((cols[5..].join(" "), ns));
            }
        }
    }
    (rows, text)
}

pub(crate) fn cum_of(rows: &[(String, u64)], prefix: &str) -> u64 {
    rows.iter()
        .filter(|(f, _)| f.starts_with(prefix))
        .map(|(_, ns)| *ns)
        .sum()
}

/// a() ran twice the iterations of b() on the same loop: with `n` samples in the two,
/// a's share is 2/3 up to sampling noise. Accepts 4 standard deviations of a binomial
/// share, plus 3 % for what differs between the two (their calls, JIT timing).
pub(crate) fn assert_two_to_one(what: &str, a_ns: u64, b_ns: u64, period_ns: u64, text: &str) {
    let (a, b) = ((a_ns / period_ns) as f64, (b_ns / period_ns) as f64);
    let n = a + b;
    assert!(
        n >= 300.0,
        "{what}: only {n} samples in a() and b()\n{text}"
    );
    let share = a / n;
    let sigma = (2.0 / 9.0 / n).sqrt();
    let bound = 4.0 * sigma + 0.03;
    assert!(
        (share - 2.0 / 3.0).abs() <= bound,
        "{what}: a() has {:.1} % of the CPU of a() and b() ({a} and {b} samples), \
         2/3 ± {:.1} % expected\n{text}",
        100.0 * share,
        100.0 * bound
    );
}

/// One thread, then two at once: CPU(a) / CPU(b) is 2; the kernel's read_zero is under
/// readZero() in the pprof (a mixed stack), and jpd's list shows the CPU as the app's.
#[test]
fn cpu_per_context_splits_two_to_one_and_puts_read_zero_under_its_method() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    let period_ns = 1_000_000_000 / 997;
    for (tag, home) in jdks() {
        let dir = classes(tag, &home);
        // The threads publish on the heap (the default, under G1), or in native slots.
        for (threads, publish) in [(1u32, ""), (2, ""), (1, ",publish=slot")] {
            let what = format!("{tag}, {threads} thread(s){publish}");
            let args = ["split".to_string(), "4".to_string(), threads.to_string()];
            let mut jvm = Jvm::launch_with(&[], &home, &dir, "CpuSplit", &args, publish);
            jvm.expect_line("started");
            jvm.expect_line("done");
            let pid = jvm.pid();
            // The samples of the last pass and the workers' last records are in.
            // The workers ended (their last records are in), the kernel collector has
            // read their last samples, and none waits for its node any more.
            std::thread::sleep(Duration::from_millis(2500));
            let j = wait_listed(&d, pid, "sampled", |j| {
                j["threads"]["total"].as_u64() >= Some(u64::from(threads))
                    && cpu_of_kind(j, "app") > 0
                    && j["cpu"]["pending_ns"].as_u64() == Some(0)
            });
            assert_eq!(j["cpu"]["unresolved_ns"], 0, "{what}: {j}");
            let file = export_pprof(&d, pid, &format!("{tag}-{threads}"));
            let (rows, text) = cum_ns(&file);
            let (a, b) = (cum_of(&rows, "CpuSplit.a("), cum_of(&rows, "CpuSplit.b("));
            assert_two_to_one(&what, a, b, period_ns, &text);
            // Nothing went missing: what the list says the app used is what the
            // profile holds (up to what is still waiting for its node).
            // The workers' trees start at the lambda the thread runs (Thread.run is
            // the JDK's, not instrumented).
            let total = cum_of(&rows, "CpuSplit.main(") + cum_of(&rows, "CpuSplit.lambda$");
            let app = cpu_of_kind(&j, "app");
            assert!(
                a + b <= total && total <= app,
                "{what}: a+b {} ns, main {total} ns, app {app} ns\n{j}\n{text}",
                a + b
            );
            // The kernel function that serves /dev/zero, one frame under the Java
            // method that read it.
            let traces = go_pprof(&file, &["-traces"]);
            let found = traces.split("-----------+").any(|block| {
                let frames: Vec<&str> = block
                    .lines()
                    .map(|l| l.split_whitespace().last().unwrap_or(""))
                    .filter(|f| !f.is_empty())
                    .collect();
                frames
                    .windows(2)
                    .any(|w| w[0] == "read_zero" && w[1].starts_with("CpuSplit.readZero("))
            });
            assert!(
                found,
                "{what}: no trace with read_zero directly under CpuSplit.readZero:\n{traces}"
            );
            // The JSON export carries the same CPU: the workers' contexts ended, so
            // a() and b() hold exactly what the pprof holds; read_zero is among the
            // kernel functions of readZero()'s context.
            let doc = export_json(&d, pid, &format!("{tag}-{threads}"));
            assert_eq!(doc["cpu_unit"], "nanoseconds", "{what}");
            let nodes = json_nodes(&doc);
            // The loop is work()'s, which a() and b() call as a second body (a static of
            // their class): its entry publishes its own context, so nearly all of their
            // CPU is on work() itself, none of it left on its caller.
            let work: u64 = nodes
                .iter()
                .filter(|(n, _)| {
                    n["method"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("CpuSplit.work("))
                })
                .map(|(n, _)| node_cpu(n))
                .sum();
            assert!(
                work * 10 >= (a + b) * 8,
                "{what}: work() itself has {work} ns of the {} ns of a() and b()",
                a + b
            );
            for (m, pprof_ns) in [("CpuSplit.a(", a), ("CpuSplit.b(", b)] {
                assert_eq!(
                    json_inclusive(&nodes, m),
                    pprof_ns,
                    "{what}: {m} JSON vs pprof"
                );
            }
            let read_zero: u64 = nodes
                .iter()
                .filter(|(n, _)| {
                    n["method"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("CpuSplit.readZero("))
                })
                .filter_map(|(n, _)| n["cpu"]["kernel_functions"]["read_zero"].as_u64())
                .sum();
            assert!(
                read_zero > 0,
                "{what}: no read_zero under readZero() in the JSON"
            );
            // Prometheus: the app's CPU seconds of the label hold this JVM's (the
            // label sums every CpuSplit JVM so far, exited ones included).
            let series = "jp_jvm_cpu_seconds_total{main=\"CpuSplit\",kind=\"app\"}";
            let seconds =
                metric_f64(&d, series).unwrap_or_else(|| panic!("{what}: no {series} in /metrics"));
            assert!(
                seconds * 1e9 >= app as f64 * 0.999_999,
                "{what}: {series} = {seconds} s, the JVM's app CPU {app} ns"
            );
            jvm.finish();
        }
    }
    d.stop();
}

/// A program that allocates: the GC threads' CPU is listed as "gc", not as the
/// application's contexts.
#[test]
fn gc_cpu_is_counted_on_gc_threads_not_on_contexts() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = classes(&format!("{tag}-gc"), &home);
        let mut jvm = Jvm::start(&home, &dir, "alloc", 3, 2);
        jvm.expect_line("started");
        jvm.expect_line("done");
        let pid = jvm.pid();
        let j = wait_listed(&d, pid, "sampled", |j| cpu_of_kind(j, "gc") > 0);
        let (gc, app) = (cpu_of_kind(&j, "gc"), cpu_of_kind(&j, "app"));
        assert!(
            gc > 0 && app > gc / 10,
            "{tag}: gc {gc} ns, app {app} ns: {j}"
        );
        // The GC's samples are not in any context of the profile. The list is read
        // again after the export: samples still arriving only add to it.
        let file = export_pprof(&d, pid, &format!("{tag}-gc"));
        let (rows, text) = cum_ns(&file);
        let in_contexts = cum_of(&rows, "CpuSplit.main(") + cum_of(&rows, "CpuSplit.lambda$");
        let app = listed(&d, pid).map_or(0, |j| cpu_of_kind(&j, "app"));
        assert!(
            in_contexts <= app,
            "{tag}: {in_contexts} ns in contexts, app {app} ns\n{text}"
        );
        jvm.finish();
    }
    d.stop();
}

/// An operator's `publish=false`: the JVM is joined (its CPU split by thread kind, its
/// tree live) but its threads publish no context, so no CPU lands on any context.
#[test]
fn a_jvm_that_does_not_publish_is_split_by_thread_kind_only() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let what = format!("{tag}, publish=false");
        let dir = classes(&format!("{tag}-nopublish"), &home);
        let args = ["split".to_string(), "2".to_string(), "1".to_string()];
        let mut jvm = Jvm::launch_with(&[], &home, &dir, "CpuSplit", &args, ",publish=false");
        jvm.expect_line("started");
        jvm.expect_line("done");
        let pid = jvm.pid();
        // The worker spun for 2 s: about 2000 samples, counted as the app's by its name.
        let j = wait_listed(&d, pid, "sampled", |j| {
            j["threads"]["total"].as_u64() >= Some(1) && cpu_of_kind(j, "app") > 500_000_000
        });
        assert_eq!(j["cpu"]["read_failed_ns"], 0, "{what}: {j}");
        let doc = export_json(&d, pid, &format!("{tag}-nopublish"));
        let nodes = json_nodes(&doc);
        let calls = |m: &str| -> u64 {
            nodes
                .iter()
                .filter(|(n, _)| n["method"].as_str().is_some_and(|x| x.starts_with(m)))
                .map(|(n, _)| n["calls"].as_u64().unwrap_or(0))
                .sum()
        };
        assert!(
            calls("CpuSplit.a(") > 0 && calls("CpuSplit.b(") > 0,
            "{what}: the tree did not arrive: {doc}"
        );
        let in_contexts: u64 = nodes.iter().map(|(n, _)| node_cpu(n)).sum();
        assert_eq!(
            in_contexts, 0,
            "{what}: CPU on contexts without publishing: {doc}"
        );
        // The list says so too, and why.
        let j = listed(&d, pid).expect("still listed");
        assert_eq!(
            (&j["cpu"]["contexts_ns"], &j["cpu"]["publishing_threads"]),
            (&Value::from(0), &Value::from(0)),
            "{what}: {j}"
        );
        jvm.finish();
    }
    d.stop();
}

/// What a split run must show once its workers ended: every sample resolved to a
/// context, none failed, and a() has twice b()'s CPU.
fn assert_split_resolved(d: &Jpd, pid: u32, what: &str, tag: &str, threads: u32) {
    let period_ns = 1_000_000_000 / 997;
    let j = wait_listed(d, pid, "sampled", |j| {
        j["threads"]["total"].as_u64() >= Some(u64::from(threads))
            && cpu_of_kind(j, "app") > 0
            && j["cpu"]["pending_ns"].as_u64() == Some(0)
    });
    assert_eq!(j["cpu"]["unresolved_ns"], 0, "{what}: {j}");
    assert_eq!(j["cpu"]["read_failed_ns"], 0, "{what}: {j}");
    let file = export_pprof(d, pid, tag);
    let (rows, text) = cum_ns(&file);
    let (a, b) = (cum_of(&rows, "CpuSplit.a("), cum_of(&rows, "CpuSplit.b("));
    assert_two_to_one(what, a, b, period_ns, &text);
}

/// jpd killed (SIGKILL) while the JVM runs, and a new one started: the agent announces
/// its threads' slots again with the full trees the new jpd asks for, and the new jpd's
/// CPU per context splits as before, every sample resolved.
#[test]
fn a_jpd_restarted_while_the_jvm_runs_joins_its_threads_again() {
    require_root();
    let _one = crate::support::exclusive();
    for (tag, home) in jdks() {
        let dir = classes(&format!("{tag}-restart"), &home);
        let d = Jpd::start(CONFIG);
        let mut jvm = Jvm::start(&home, &dir, "split", 7, 2);
        jvm.expect_line("started");
        let pid = jvm.pid();
        // Both workers publish, and jpd says so.
        wait_listed(&d, pid, "joined", |j| {
            cpu_of_kind(j, "app") > 0 && j["cpu"]["publishing_threads"].as_u64() >= Some(2)
        });
        d.kill9();
        let d = Jpd::start(CONFIG);
        jvm.expect_line("done");
        std::thread::sleep(Duration::from_millis(2500));
        assert_split_resolved(
            &d,
            pid,
            &format!("{tag}, jpd restarted"),
            &format!("{tag}-restart"),
            2,
        );
        jvm.finish();
        d.stop();
    }
}

/// Many threads at once (32 workers on 2 CPUs): every worker's slot is joined, the
/// split holds, nothing is left unresolved.
#[test]
fn many_threads_are_all_joined() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = classes(&format!("{tag}-many"), &home);
        let mut jvm = Jvm::start(&home, &dir, "split", 4, 32);
        jvm.expect_line("started");
        jvm.expect_line("done");
        let pid = jvm.pid();
        std::thread::sleep(Duration::from_millis(2500));
        assert_split_resolved(
            &d,
            pid,
            &format!("{tag}, 32 threads"),
            &format!("{tag}-many"),
            32,
        );
        jvm.finish();
    }
    d.stop();
}

/// A JVM in its own PID namespace announces the thread ids it sees there; jpd finds
/// their host ids, so the JVM is joined like any other.
#[test]
fn a_jvm_in_its_own_pid_namespace_is_joined() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    let (tag, home) = jdks()[0].clone();
    let dir = classes(&format!("{tag}-pidns"), &home);
    let wrapper = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"];
    let mut jvm = Jvm::start_under(&wrapper, &home, &dir, "split", 4, 2);
    jvm.expect_line("started");
    jvm.expect_line("done");
    let pid = jvm.pid();
    let j = wait_listed(&d, pid, "listed", |_| true);
    assert!(
        j["ns_pid"].as_u64().is_some_and(|p| p != u64::from(pid)),
        "the JVM should have a PID of its own namespace: {j}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_split_resolved(
        &d,
        pid,
        &format!("{tag}, own PID namespace"),
        &format!("{tag}-pidns"),
        2,
    );
    jvm.finish();
    d.stop();
}

/// Threads that live a fraction of a second, one after another (6 × 300 ms of CPU each):
/// jpd joins each as soon as it announces its context, so nearly all of their CPU, as
/// the JVM measured it (`ThreadMXBean`), lands under `burst()`. Joining only at the
/// collector's next pass (every second, the default) left such a thread counted by its
/// name for most of its life: about 15 % of it on its context, on average.
#[test]
fn short_lived_threads_are_joined_as_they_announce() {
    require_root();
    let _one = crate::support::exclusive();
    // The daemon's own pace of reading the kernel's maps, not the tests' 100 ms.
    let d = Jpd::start(&format!("read_interval_ms = 1000\n{CONFIG}"));
    for (tag, home) in jdks() {
        let what = format!("{tag}, short-lived threads");
        let dir = classes(&format!("{tag}-bursts"), &home);
        let args = ["bursts".to_string(), "3".to_string(), "6".to_string()];
        let mut jvm = Jvm::launch(&[], &home, &dir, "CpuSplit", &args);
        jvm.expect_line("started");
        let mut line = String::new();
        jvm.stdout.read_line(&mut line).expect("read JVM stdout");
        let used: u64 = line
            .trim()
            .strip_prefix("cpu ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{what}: the JVM printed {line:?}, not its CPU"));
        jvm.expect_line("done");
        let pid = jvm.pid();
        wait_listed(&d, pid, "sampled", |j| {
            j["threads"]["total"].as_u64() >= Some(6)
                && cpu_of_kind(j, "app") > used / 2
                && j["cpu"]["pending_ns"].as_u64() == Some(0)
        });
        // The collector hands samples over once a second: wait for the last ones.
        std::thread::sleep(Duration::from_millis(2500));
        let doc = export_json(&d, pid, &format!("{tag}-bursts"));
        let on_burst = json_inclusive(&json_nodes(&doc), "CpuSplit.burst(");
        // What the list says is on contexts holds burst()'s, and is the app's.
        let j = listed(&d, pid).expect("still listed");
        let contexts = j["cpu"]["contexts_ns"].as_u64().unwrap_or(0);
        assert!(
            on_burst <= contexts && contexts <= cpu_of_kind(&j, "app"),
            "{what}: {on_burst} ns under burst(), {contexts} ns on contexts: {j}"
        );
        let share = on_burst as f64 / used as f64;
        eprintln!("{what}: {:.1} % of their CPU under burst()", 100.0 * share);
        assert!(
            (0.85..=1.10).contains(&share),
            "{what}: {on_burst} ns under burst() of the {used} ns the threads used \
             ({:.1} %): {j}",
            100.0 * share
        );
        jvm.finish();
    }
    d.stop();
}
