//! Off-CPU and wall time per exact context, for real: jpd's scheduler program on the
//! threads of JVMs running the agent, on JDK 17 and 25. `tests/fixtures/jvm/OffcpuWaits.java`
//! sleeps in `a()` and spins in `b()`, contends on a monitor in `c()`, or sleeps in `d()`;
//! it measures those times itself (`System.nanoTime`, CLOCK_MONOTONIC like the kernel's
//! `ktime`), and jpd's export is compared with them.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::cpu::{compile, jdks, wait_listed, Jvm};
use crate::cpu_views::{first_jvm_row, percent_before};
use crate::support::jpd::Jpd;
use crate::support::require_root;

pub(crate) const CONFIG: &str = "offcpu = true\n[usdt]\nscan_interval_ms = 100\n";

/// The sampler's period at its default 997 Hz.
const PERIOD_NS: u64 = 1_000_000_000 / 997;

/// jpd's jp-mct/1 JSON of `pid`.
pub(crate) fn export_json(d: &Jpd, pid: u32, tag: &str) -> Value {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("offcpu-{tag}.json"));
    d.export_to(pid, "json", &file);
    serde_json::from_slice(&std::fs::read(&file).expect("read the export")).expect("JSON")
}

/// Every node of a jp-mct/1 document, pre-order.
pub(crate) fn nodes(doc: &Value) -> Vec<Value> {
    fn walk(n: &Value, out: &mut Vec<Value>) {
        out.push(n.clone());
        for c in n["children"].as_array().into_iter().flatten() {
            walk(c, out);
        }
    }
    let mut out = Vec::new();
    for c in doc["root"]["children"].as_array().into_iter().flatten() {
        walk(c, &mut out);
    }
    out
}

/// The contexts of methods starting with `prefix`.
pub(crate) fn of<'a>(nodes: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    nodes
        .iter()
        .filter(|n| n["method"].as_str().is_some_and(|m| m.starts_with(prefix)))
        .collect()
}

pub(crate) fn offcpu_ns(ctx: &[&Value]) -> u64 {
    ctx.iter()
        .map(|n| n["offcpu"]["ns"].as_u64().unwrap_or(0))
        .sum()
}

pub(crate) fn offcpu_kind_ns(ctx: &[&Value], kind: &str) -> u64 {
    ctx.iter()
        .map(|n| n["offcpu"]["kinds"][kind].as_u64().unwrap_or(0))
        .sum()
}

pub(crate) fn cpu_ns(ctx: &[&Value]) -> u64 {
    ctx.iter()
        .map(|n| n["cpu"]["user"].as_u64().unwrap_or(0) + n["cpu"]["kernel"].as_u64().unwrap_or(0))
        .sum()
}

/// Inclusive time (ns) of the functions starting with `prefix`, for pprof's `sample`
/// type, read by `go tool pprof -top` (the cum column).
pub(crate) fn pprof_cum(file: &Path, sample: &str, prefix: &str) -> (u64, String) {
    pprof_cum_with(file, sample, prefix, &[])
}

/// As [`pprof_cum`], with more options for `go tool pprof` (e.g. `-focus=REGEX`).
pub(crate) fn pprof_cum_with(
    file: &Path,
    sample: &str,
    prefix: &str,
    options: &[&str],
) -> (u64, String) {
    let out = std::process::Command::new(crate::support::fleet::tool("go", "golang-go"))
        .args(["tool", "pprof", &format!("-sample_index={sample}")])
        .args(options)
        .args(["-top", "-nodecount=100000", "-nodefraction=0", "-unit=ns"])
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "go tool pprof: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut in_table = false;
    let mut sum = 0;
    for line in text.lines() {
        if line.trim_start().starts_with("flat ") {
            in_table = true;
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if in_table && cols.len() >= 6 && cols[5..].join(" ").starts_with(prefix) {
            sum += cols[3].trim_end_matches("ns").parse::<u64>().unwrap_or(0);
        }
    }
    (sum, text)
}

/// The numbers after the words of a "done …" line: "done sleep 1 spin 2" → [1, 2].
pub(crate) fn measured(line: &str) -> Vec<u64> {
    line.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Once `threads` threads of `jvm` publish their context and jpd had time to join them,
/// lets them start their measured work.
pub(crate) fn go(d: &Jpd, jvm: &mut Jvm, threads: u64) {
    use std::io::Write as _;
    wait_listed(d, jvm.pid(), "joined", |j| {
        j["cpu"]["publishing_threads"].as_u64() >= Some(threads)
    });
    std::thread::sleep(Duration::from_millis(300));
    jvm.stdin.write_all(b"go\n").expect("write to the JVM");
    jvm.stdin.flush().expect("flush");
}

pub(crate) fn done_line(jvm: &mut Jvm) -> String {
    use std::io::BufRead as _;
    let mut line = String::new();
    jvm.stdout.read_line(&mut line).expect("read JVM stdout");
    assert!(line.starts_with("done"), "the JVM printed {line:?}");
    line
}

/// Waits until jpd's export of `pid` has no time left waiting for its context.
pub(crate) fn settled(d: &Jpd, pid: u32) {
    std::thread::sleep(Duration::from_millis(2500));
    wait_listed(d, pid, "settled", |j| {
        j["cpu"]["pending_ns"].as_u64() == Some(0)
    });
}

/// a() sleeps 200 ms and b() spins 100 ms, in turn: a()'s time off CPU is what the
/// thread measured of its sleeps, b()'s CPU what it measured of its spins (within the
/// sampler's bounds), and wall(a) / wall(b) is 2.
#[test]
fn a_sleep_and_a_spin_split_off_cpu_and_wall_time_by_context() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    // The JSON export's time off CPU by kind, summed over the JVMs that ran (one label).
    let mut kinds_of_all = std::collections::BTreeMap::new();
    for (tag, home) in jdks() {
        let dir = compile("OffcpuWaits", tag, &home);
        let args = ["waits".to_string(), "4".to_string(), "1".to_string()];
        let mut jvm = Jvm::launch(&[], &home, &dir, "OffcpuWaits", &args);
        jvm.expect_line("started");
        go(&d, &mut jvm, 1);
        let line = done_line(&mut jvm);
        let (slept, spun) = match measured(&line)[..] {
            [s, p] => (s, p),
            _ => panic!("{tag}: {line}"),
        };
        let iterations = slept / 200_000_000;
        let pid = jvm.pid();
        settled(&d, pid);
        let doc = export_json(&d, pid, tag);
        let all = nodes(&doc);
        let (a, b) = (of(&all, "OffcpuWaits.a("), of(&all, "OffcpuWaits.b("));
        let (off_a, cpu_a, off_b, cpu_b) = (offcpu_ns(&a), cpu_ns(&a), offcpu_ns(&b), cpu_ns(&b));
        let what = format!(
            "{tag}: measured sleep {slept} spin {spun} ns; jpd a() off {off_a} cpu {cpu_a}, \
             b() off {off_b} cpu {cpu_b}"
        );
        // Off CPU in a() is the sleep, less the few µs each sleep runs on CPU around
        // its wait (entry, timer set-up, return): the clocks are the same.
        assert!(
            off_a <= slept && off_a + iterations * 2_000_000 >= slept,
            "{what}"
        );
        // The sleep is a futex wait in both JDKs (Thread.sleep parks on an event): the
        // kernel reports a futex, which is the "lock" kind.
        assert!(
            offcpu_kind_ns(&a, "lock") * 100 >= off_a * 99,
            "{what}: {:?}",
            a.iter().map(|n| &n["offcpu"]).collect::<Vec<_>>()
        );
        let futex: u64 = a
            .iter()
            .filter_map(|n| n["offcpu"]["functions"].as_object())
            .flat_map(|f| f.iter())
            .filter(|(name, _)| name.starts_with("futex"))
            .map(|(_, ns)| ns.as_u64().unwrap_or(0))
            .sum();
        assert!(futex * 100 >= off_a * 99, "{what}: {}", doc["root"]);
        // b()'s CPU is sampled: 4 standard deviations of its sample count, plus what it
        // spent waiting for a CPU on this shared machine (its off-CPU time).
        let samples = (spun / PERIOD_NS) as f64;
        let bound = 4.0 * samples.sqrt() * PERIOD_NS as f64 + off_b as f64;
        assert!(
            (cpu_b as f64 - spun as f64).abs() <= bound,
            "{what}: bound {bound}"
        );
        // Wall: a() twice b() (the thread's own measure says the same, up to its
        // loop's overhead).
        let ratio = (off_a + cpu_a) as f64 / (off_b + cpu_b) as f64;
        let own = slept as f64 / spun as f64;
        let tolerance = 4.0 / samples.sqrt() * own + 0.02;
        assert!(
            (ratio - own).abs() <= tolerance,
            "{what}: wall ratio {ratio}, measured {own}"
        );
        assert!((own - 2.0).abs() < 0.1, "{what}");
        // The pprof carries the same times: `offcpu` under a() with the futex function
        // and the kind as leaf frames, `wall` = CPU + off CPU.
        let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("offcpu-{tag}.pb.gz"));
        d.export_to(pid, "pprof", &file);
        let (pprof_off_a, text) = pprof_cum(&file, "offcpu", "OffcpuWaits.a(");
        assert_eq!(pprof_off_a, off_a, "{what}\n{text}");
        let (lock_frame, text) = pprof_cum(&file, "offcpu", "off-CPU: lock");
        assert!(lock_frame >= futex, "{what}\n{text}");
        let (wall_b, text) = pprof_cum(&file, "wall", "OffcpuWaits.b(");
        assert_eq!(wall_b, off_b + cpu_b, "{what}\n{text}");
        // `jpctl jvm top --by offcpu|wall`: a() first, with the export's times (a() and
        // b() have one context each).
        for (by, ns) in [("offcpu", off_a), ("wall", off_a + cpu_a)] {
            let top = d.jpctl_json(&["jvm", "top", &pid.to_string(), "--by", by, "--json"]);
            let first = &top["methods"][0];
            assert!(
                first["method"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("OffcpuWaits.a(")),
                "{what}: {top}"
            );
            assert_eq!(
                first[format!("{by}_ns")].as_u64(),
                Some(ns),
                "{what}: {top}"
            );
        }
        tree_has_the_exports_times(&d, pid, &a, &what);
        jvm.finish();
        // Exited: its times are final in the export and in /metrics.
        settled(&d, pid);
        metrics_have_the_exports_kinds(&d, pid, tag, &mut kinds_of_all);
        status_has_the_dropped_periods(&d, tag);
    }
    d.stop();
}

/// The kinds of time off CPU /metrics counts (every reason of [`kinds_of`]).
const KINDS: [&str; 7] = [
    "lock",
    "sleep",
    "page_fault",
    "network",
    "disk",
    "run_queue",
    "other",
];

/// `jp_jvm_offcpu_seconds_total{main="OffcpuWaits",reason=KIND}` in ns (rounded: the
/// exposition has seconds), or `None` without the series.
fn offcpu_metric_ns(metrics: &str, kind: &str) -> Option<u64> {
    let series = format!("jp_jvm_offcpu_seconds_total{{main=\"OffcpuWaits\",reason=\"{kind}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse::<f64>().ok())
        .map(|s| (s * 1e9).round() as u64)
}

/// /metrics' time off CPU of the label by kind equals, kind by kind, the sum of the JSON
/// exports' (`kinds_of_all`, with `pid`'s added) over every JVM of the label.
fn metrics_have_the_exports_kinds(
    d: &Jpd,
    pid: u32,
    tag: &str,
    kinds_of_all: &mut std::collections::BTreeMap<&'static str, u64>,
) {
    let doc = export_json(d, pid, &format!("{tag}-exited"));
    let all = nodes(&doc);
    let every: Vec<&Value> = all.iter().collect();
    for kind in KINDS {
        *kinds_of_all.entry(kind).or_default() += offcpu_kind_ns(&every, kind);
    }
    let metrics = d.metrics();
    let got: std::collections::BTreeMap<&str, u64> = KINDS
        .iter()
        .map(|&k| (k, offcpu_metric_ns(&metrics, k).unwrap_or(u64::MAX)))
        .collect();
    assert_eq!(&got, kinds_of_all, "{tag}: {metrics}");
    // The export names every kind it has among the seven.
    let total: u64 = every.iter().map(|n| offcpu_ns(&[n])).sum();
    assert_eq!(
        KINDS.iter().map(|k| offcpu_kind_ns(&every, k)).sum::<u64>(),
        total,
        "{tag}: {}",
        doc["root"]
    );
}

/// `jpctl status --json` has /metrics' periods not timed, reason by reason (read
/// between two scrapes that agree: other JVMs on the host may be joined too).
fn status_has_the_dropped_periods(d: &Jpd, tag: &str) {
    let reasons = [
        ("over_cap", "over_cap"),
        ("orphan", "orphans"),
        ("stale", "stale"),
        ("read_failed", "read_failed"),
        ("lost", "lost"),
    ];
    let scrape = || -> Vec<Option<u64>> {
        reasons
            .iter()
            .map(|(metric, _)| dropped(d, metric))
            .collect()
    };
    for _ in 0..5 {
        let before = scrape();
        let status = d.jpctl_json(&["status", "--json"]);
        if scrape() != before {
            continue;
        }
        let got: Vec<Option<u64>> = reasons
            .iter()
            .map(|(_, field)| status["jvm"]["offcpu_dropped"][field].as_u64())
            .collect();
        assert_eq!(got, before, "{tag}: {status}");
        return;
    }
    panic!("{tag}: the dropped periods never stood still over a status read");
}

/// `jpctl jvm tree`: every context of `a` (the export's nodes of a()) with the export's
/// own times off CPU and wall, and the off-CPU and wall columns in its text.
fn tree_has_the_exports_times(d: &Jpd, pid: u32, a: &[&Value], what: &str) {
    let tree = d.jpctl_json(&["jvm", "tree", &pid.to_string(), "--json"]);
    let tree_a: Vec<&Value> = tree["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            n["method"]
                .as_str()
                .is_some_and(|m| m.starts_with("OffcpuWaits.a("))
        })
        .collect();
    let own = |ctx: &[&Value], key: &str| -> Vec<u64> {
        let mut v: Vec<u64> = ctx.iter().map(|n| n[key].as_u64().unwrap_or(0)).collect();
        v.sort_unstable();
        v
    };
    let mut export_off: Vec<u64> = a.iter().map(|n| offcpu_ns(&[n])).collect();
    let mut export_wall: Vec<u64> = a.iter().map(|n| offcpu_ns(&[n]) + cpu_ns(&[n])).collect();
    export_off.sort_unstable();
    export_wall.sort_unstable();
    assert_eq!(own(&tree_a, "offcpu_ns"), export_off, "{what}: {tree}");
    assert_eq!(own(&tree_a, "wall_ns"), export_wall, "{what}: {tree}");
    let text = d.jpctl_output(&["jvm", "tree", &pid.to_string()]);
    let head = text
        .lines()
        .find(|l| l.trim_end().ends_with("method"))
        .unwrap_or_default();
    assert_eq!(
        head.split_whitespace().take(10).collect::<Vec<_>>(),
        ["cpu", "ms", "incl", "ms", "offcpu", "ms", "off", "incl", "wall", "ms"],
        "{what}:\n{text}"
    );
}

/// Two threads contend on one monitor in c(): c()'s time blocked (a futex wait, the
/// "lock" kind) is what the threads measured themselves waiting for the monitor, within
/// 5 %. The rest of c()'s time off CPU is the run queue's: on a loaded machine a thread
/// that releases the monitor is often preempted by the one it wakes.
#[test]
fn monitor_contention_is_lock_time_under_its_context() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = compile("OffcpuWaits", &format!("{tag}-lock"), &home);
        let args = ["lock".to_string(), "4".to_string(), "2".to_string()];
        let mut jvm = Jvm::launch(&[], &home, &dir, "OffcpuWaits", &args);
        jvm.expect_line("started");
        go(&d, &mut jvm, 2);
        let line = done_line(&mut jvm);
        let blocked = measured(&line).first().copied().unwrap_or(0);
        let pid = jvm.pid();
        settled(&d, pid);
        let doc = export_json(&d, pid, &format!("{tag}-lock"));
        let all = nodes(&doc);
        let c = of(&all, "OffcpuWaits.c(");
        let (off, lock) = (offcpu_ns(&c), offcpu_kind_ns(&c, "lock"));
        let what = format!("{tag}: measured {blocked} ns blocked; jpd c() off {off} (lock {lock})");
        assert!(blocked > 1_000_000_000, "{what}: too little contention");
        let kinds: Vec<&Value> = c.iter().map(|n| &n["offcpu"]).collect();
        assert_eq!(
            lock + offcpu_kind_ns(&c, "run_queue"),
            off,
            "{what}: no other reason: {kinds:?}"
        );
        let diff = (lock as f64 - blocked as f64).abs();
        assert!(diff <= blocked as f64 * 0.05, "{what}");
        jvm.finish();
    }
    d.stop();
}

/// jpd's count of periods off CPU not timed for `reason`.
pub(crate) fn dropped(d: &Jpd, reason: &str) -> Option<u64> {
    let series = format!("jp_offcpu_periods_dropped_total{{reason=\"{reason}\"}}");
    crate::support::jpd::metric(&d.metrics(), &series)
}

/// jpd killed and started again while three threads sleep 4 s at a time in d(): a
/// thread's first switch-in after the new jpd joined it has no switch-out when the join
/// came while it slept, and is then counted as an orphan, not timed (no negative or
/// huge time). Whether the join comes during a sleep or during the 50 ms a thread spins
/// to report depends on when jpd reads that report: at most one orphan per thread. Then
/// the JVM exits while the threads sleep: they leave off CPU, and nothing is left that a
/// reused thread id would be timed from.
#[test]
fn a_restart_while_threads_sleep_counts_orphans_and_times_nothing_wrong() {
    require_root();
    let _one = crate::support::exclusive();
    for (tag, home) in jdks() {
        let dir = compile("OffcpuWaits", &format!("{tag}-blocked"), &home);
        let d = Jpd::start(CONFIG);
        let args = ["blocked".to_string(), "0".to_string(), "3".to_string()];
        let mut jvm = Jvm::launch(&[], &home, &dir, "OffcpuWaits", &args);
        jvm.expect_line("started");
        jvm.expect_line("done");
        go(&d, &mut jvm, 3);
        std::thread::sleep(Duration::from_millis(1000));
        d.kill9();
        let d = Jpd::start(CONFIG);
        let restarted = std::time::Instant::now();
        let pid = jvm.pid();
        wait_listed(&d, pid, "joined again", |j| {
            j["cpu"]["publishing_threads"].as_u64() >= Some(3)
        });
        // Every thread slept at least once whole since it was joined again.
        std::thread::sleep(Duration::from_millis(8500));
        let what = format!("{tag}: {}", d.metrics());
        let orphans = dropped(&d, "orphan").unwrap_or(u64::MAX);
        assert!(orphans <= 3, "{what}");
        assert_eq!(dropped(&d, "stale"), Some(0), "{what}");
        assert_eq!(dropped(&d, "lost"), Some(0), "{what}");
        jvm.finish();
        std::thread::sleep(Duration::from_millis(500));
        let elapsed = restarted.elapsed().as_nanos() as u64;
        let doc = export_json(&d, pid, &format!("{tag}-blocked"));
        let all = nodes(&doc);
        let off = offcpu_ns(&of(&all, "OffcpuWaits.d("));
        // Only sleeps that began after the new jpd joined the threads are timed: at
        // least one whole each, and none longer than jpd has been running.
        assert!(
            off >= 3 * 3_900_000_000 && off <= 3 * elapsed,
            "{tag}: d() off CPU {off} ns, jpd up {elapsed} ns"
        );
        assert_eq!(dropped(&d, "stale"), Some(0), "{tag}");
        d.stop();
    }
}

/// `jpctl top` in tmux while a() sleeps 200 ms and b() spins 100 ms in turn: the JVM
/// pane has an `off%` column after `cpu%` (a() off CPU about 2/3 of the time, more than
/// b()), and `s` sorts by it after cpu% (a() first).
#[test]
fn jpctl_top_shows_and_sorts_by_time_off_cpu_in_tmux() {
    require_root();
    let bin = crate::support::fleet::tool("tmux", "tmux");
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = compile("OffcpuWaits", &format!("{tag}-top"), &home);
        let args = ["waits".to_string(), "60".to_string(), "1".to_string()];
        let mut jvm = Jvm::launch(&[], &home, &dir, "OffcpuWaits", &args);
        jvm.expect_line("started");
        go(&d, &mut jvm, 1);
        let pid = jvm.pid();
        let tmux = crate::support::tmux::Tmux::session(bin.clone(), &format!("jp-off-{pid}"));
        tmux.jpctl_top(&d.socket);
        tmux.wait_for("the JVM pane", |t| t.screen().contains("┌ JVM "));
        tmux.show_jvm(pid);
        let (a, b) = ("OffcpuWaits.a()", "OffcpuWaits.b()");
        tmux.wait_for(&format!("{tag}: a()'s off% above b()'s"), |t| {
            let s = t.screen();
            matches!(
                (percent_before(&s, a), percent_before(&s, b)),
                (Some(off_a), Some(off_b)) if off_a > 30.0 && off_a > off_b
            )
        });
        // Tab twice: the JVM pane; s twice: cpu%, then off%.
        tmux.cmd(&["send-keys", "-t", "top", "Tab", "Tab", "s"]);
        tmux.wait_for(&format!("{tag}: sorted by cpu%"), |t| {
            t.screen().contains("sort: cpu%)")
        });
        tmux.cmd(&["send-keys", "-t", "top", "s"]);
        tmux.wait_for(&format!("{tag}: sorted by off%, a() first"), |t| {
            let s = t.screen();
            s.contains("sort: off%)")
                && first_jvm_row(&s, " cpu%    off% method")
                    .is_some_and(|r| r.contains(&format!(" {a} ")))
        });
        tmux.quit_top();
        drop(tmux);
        drop(jvm);
    }
    d.stop();
}
