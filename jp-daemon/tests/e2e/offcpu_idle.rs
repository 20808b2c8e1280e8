//! Idle threads in the off-CPU views, for real: `tests/fixtures/jvm/OffcpuIdle.java`
//! keeps a 2-thread `ThreadPoolExecutor` waiting for work beside a busy thread that
//! sleeps in `work()`, on JDK 17 and 25, with only application classes instrumented
//! (the pool's threads wait at their root context) and with `jdk=true` (they wait under
//! `ThreadPoolExecutor.getTask`). The default views leave the pool's waits out and say
//! how much; `--all` shows them; `--idle PATTERN` hides one more context.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::cpu::{compile, jdks, Jvm};
use crate::offcpu::{done_line, go, measured, pprof_cum, CONFIG};
use crate::support::jpd::Jpd;
use crate::support::require_root;

const GET_TASK: &str = "java.util.concurrent.ThreadPoolExecutor.getTask(";

/// Each context's `offcpu` object by its path of methods from the root ("" = the root).
fn offcpu_by_path(doc: &Value) -> BTreeMap<String, Value> {
    fn walk(n: &Value, path: &str, out: &mut BTreeMap<String, Value>) {
        for c in n["children"].as_array().into_iter().flatten() {
            let p = format!("{path} > {}", c["method"].as_str().unwrap_or("?"));
            if !c["offcpu"].is_null() {
                out.insert(p.clone(), c["offcpu"].clone());
            }
            walk(c, &p, out);
        }
    }
    let mut out = BTreeMap::new();
    if !doc["root"]["offcpu"].is_null() {
        out.insert(String::new(), doc["root"]["offcpu"].clone());
    }
    walk(&doc["root"], "", &mut out);
    out
}

/// A pool thread waiting for work: at the root, or in or under `getTask`.
fn is_idle(path: &str) -> bool {
    path.is_empty() || path.contains(&format!("> {GET_TASK}"))
}

fn ns(v: &Value) -> u64 {
    v["ns"].as_u64().unwrap_or(0)
}

fn sum<'a>(m: impl IntoIterator<Item = (&'a String, &'a Value)>) -> u64 {
    m.into_iter().map(|(_, v)| ns(v)).sum()
}

/// `jpctl jvm export PID --format FORMAT -o FILE FLAGS…`; the file's path.
fn export(d: &Jpd, pid: u32, format: &str, flags: &[&str], tag: &str) -> PathBuf {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("offcpu-idle-{tag}"));
    let _ = std::fs::remove_file(&file);
    let pid = pid.to_string();
    let mut args = vec!["jvm", "export", &pid, "--format", format, "-o"];
    args.push(file.to_str().expect("UTF-8 path"));
    args.extend(flags);
    d.jpctl_output(&args);
    file
}

fn export_json(d: &Jpd, pid: u32, flags: &[&str], tag: &str) -> Value {
    let file = export(d, pid, "json", flags, &format!("{tag}.json"));
    serde_json::from_slice(&std::fs::read(&file).expect("read the export")).expect("JSON")
}

/// The views of one quiet moment: every export and top asked between two `--all`
/// exports that agree (the pool's threads wait for work that never comes, the busy
/// thread has ended, main waits on stdin: no thread switches in, nothing is added).
struct Views {
    all: Value,
    default: Value,
    mine: Value,
    top_all: Value,
    top_default: Value,
    tree_all: Value,
    tree_default: Value,
    pprof_all: PathBuf,
    pprof_default: PathBuf,
}

fn quiet_views(d: &Jpd, pid: u32, tag: &str) -> Views {
    let top = |flags: &[&str]| {
        let pid = pid.to_string();
        let mut args = vec!["jvm", "top", &pid, "--by", "offcpu", "-n", "0", "--json"];
        args.extend(flags);
        d.jpctl_json(&args)
    };
    let tree = |flags: &[&str]| {
        let pid = pid.to_string();
        let mut args = vec!["jvm", "tree", &pid, "--json"];
        args.extend(flags);
        d.jpctl_json(&args)
    };
    for _ in 0..10 {
        let all = export_json(d, pid, &["--all"], &format!("{tag}-all"));
        let views = Views {
            default: export_json(d, pid, &[], &format!("{tag}-default")),
            mine: export_json(
                d,
                pid,
                &["--idle", "OffcpuIdle.work"],
                &format!("{tag}-mine"),
            ),
            top_all: top(&["--all"]),
            top_default: top(&[]),
            tree_all: tree(&["--all"]),
            tree_default: tree(&[]),
            pprof_all: export(d, pid, "pprof", &["--all"], &format!("{tag}-all.pb.gz")),
            pprof_default: export(d, pid, "pprof", &[], &format!("{tag}-default.pb.gz")),
            all: export_json(d, pid, &["--all"], &format!("{tag}-all2")),
        };
        if offcpu_by_path(&all) == offcpu_by_path(&views.all) {
            return views;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("{tag}: the JVM's off-CPU time kept growing after its work was done");
}

/// The busy thread's sleeps in work() are in every view; the pool threads' waits for
/// work only with `--all`, and the default views say how much they left out.
#[test]
fn idle_pool_threads_are_left_out_of_off_cpu_views_unless_asked() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = compile("OffcpuIdle", &format!("{tag}-idle"), &home);
        for jdk in [false, true] {
            let tag = format!("{tag}-jdk-{jdk}");
            let extra = if jdk { ",jdk=true" } else { "" };
            let args = ["3".to_string()];
            let mut jvm = Jvm::launch_with(&[], &home, &dir, "OffcpuIdle", &args, extra);
            jvm.expect_line("started");
            go(&d, &mut jvm, 3);
            let line = done_line(&mut jvm);
            let (slept, waited, ticks) = match measured(&line)[..] {
                [s, w, t] => (s, w, t),
                _ => panic!("{tag}: {line}"),
            };
            let pid = jvm.pid();
            // Not `settled`: the pool's threads report only when their granularity
            // fills up, so the contexts of their short ticks (and, with the JDK's
            // frames, main's last println) wait for their definitions: their CPU
            // samples stay pending. The quiet views compare what is defined.
            std::thread::sleep(Duration::from_millis(2500));
            let v = quiet_views(&d, pid, &tag);
            check_views(&tag, jdk, &v, [slept, waited, ticks]);
            jvm.finish();
        }
    }
    d.stop();
}

fn check_views(tag: &str, jdk: bool, v: &Views, [slept, waited, ticks]: [u64; 3]) {
    let (all, default, mine) = (
        offcpu_by_path(&v.all),
        offcpu_by_path(&v.default),
        offcpu_by_path(&v.mine),
    );
    let idle = sum(all.iter().filter(|(p, _)| is_idle(p)));
    let what = format!(
        "{tag}: measured slept {slept} waited {waited} ns ({ticks} ticks); jpd idle {idle}\n\
         all {all:#?}\ndefault {default:#?}"
    );
    // Where the pool's threads wait: at their root with application classes only,
    // under getTask with the JDK's classes too.
    let under_get_task = sum(all.iter().filter(|(p, _)| p.contains(GET_TASK)));
    let waits = if jdk { under_get_task } else { ns(&all[""]) };
    if !jdk {
        assert_eq!(under_get_task, 0, "{what}");
    }
    // Each wait between two ticks is off CPU but for the few µs around it.
    assert!(
        waits + ticks * 2_000_000 >= waited && waited > 2_000_000_000,
        "{what}"
    );
    // Default: no idle context has time, every other one has all of its time, and the
    // document says how much was left out.
    for (path, o) in &all {
        let want = (!is_idle(path)).then_some(o);
        assert_eq!(default.get(path), want, "{what}\n{path}");
    }
    assert_eq!(
        default.len(),
        all.keys().filter(|p| !is_idle(p)).count(),
        "{what}"
    );
    assert_eq!(
        v.default["offcpu_idle_hidden_ns"].as_u64(),
        Some(idle),
        "{what}"
    );
    assert!(v.all["offcpu_idle_hidden_ns"].is_null(), "{what}");
    // work()'s sleeps are futex waits (Thread.sleep), not idle.
    let work: Vec<(&String, &Value)> = all
        .iter()
        .filter(|(p, _)| p.ends_with("> OffcpuIdle.work()J"))
        .collect();
    let lock: u64 = work
        .iter()
        .map(|(_, o)| o["kinds"]["lock"].as_u64().unwrap_or(0))
        .sum();
    let iterations = slept / 50_000_000;
    assert!(
        lock <= slept && lock + iterations * 2_000_000 >= slept,
        "{what}: work() lock {lock}"
    );
    // A user's pattern hides work() and what it calls (hold()) too, and says so.
    let under_work = |p: &String| p.contains("> OffcpuIdle.work()J");
    let work_ns = sum(default.iter().filter(|(p, _)| under_work(p)));
    for (path, o) in &default {
        assert_eq!(
            mine.get(path),
            (!under_work(path)).then_some(o),
            "{what}\n{path}"
        );
    }
    assert_eq!(
        mine.len(),
        default.keys().filter(|p| !under_work(p)).count(),
        "{what}"
    );
    assert_eq!(
        v.mine["offcpu_idle_hidden_ns"].as_u64(),
        Some(idle + work_ns),
        "{what}"
    );
    check_top_and_pprof(tag, v, &all, &default, idle, &what);
}

/// `jvm top --by offcpu` and the pprof export agree with the JSON, with and without
/// `--all` (top has no root: its times are the methods').
fn check_top_and_pprof(
    tag: &str,
    v: &Views,
    all: &BTreeMap<String, Value>,
    default: &BTreeMap<String, Value>,
    idle: u64,
    what: &str,
) {
    let top_sum = |t: &Value| -> u64 {
        t["methods"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| m["offcpu_ns"].as_u64().unwrap_or(0))
            .sum()
    };
    let no_root = |m: &BTreeMap<String, Value>| sum(m.iter().filter(|(p, _)| !p.is_empty()));
    assert_eq!(top_sum(&v.top_all), no_root(all), "{what}\n{}", v.top_all);
    assert_eq!(
        top_sum(&v.top_default),
        no_root(default),
        "{what}\n{}",
        v.top_default
    );
    assert_eq!(
        v.top_default["offcpu_idle_hidden_ns"].as_u64(),
        Some(idle),
        "{what}"
    );
    assert_eq!(
        v.top_all["offcpu_idle_hidden_ns"].as_u64(),
        Some(0),
        "{what}"
    );
    // `jvm tree`: its top-level contexts hold every context's time but the root's.
    let tree_sum = |t: &Value| -> u64 {
        t["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["depth"] == 0)
            .map(|n| n["inclusive_offcpu_ns"].as_u64().unwrap_or(0))
            .sum()
    };
    for (tree, doc, hidden) in [(&v.tree_all, all, 0), (&v.tree_default, default, idle)] {
        assert_eq!(tree_sum(tree), no_root(doc), "{what}: jvm tree\n{tree}");
        assert_eq!(
            tree["offcpu_idle_hidden_ns"].as_u64(),
            Some(hidden),
            "{what}: jvm tree"
        );
    }
    for (file, doc) in [(&v.pprof_all, all), (&v.pprof_default, default)] {
        let (kinds, text) = pprof_cum(file, "offcpu", "off-CPU: ");
        assert_eq!(kinds, sum(doc.iter()), "{tag}: {}\n{text}", file.display());
    }
    let comments = std::process::Command::new(crate::support::fleet::tool("go", "golang-go"))
        .args(["tool", "pprof", "-comments"])
        .arg(&v.pprof_default)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    let comments = String::from_utf8_lossy(&comments.stdout);
    assert_eq!(
        comments.trim(),
        format!("offcpu: {idle} ns of idle threads (waiting for work) not shown; --all shows them"),
        "{tag}"
    );
}
