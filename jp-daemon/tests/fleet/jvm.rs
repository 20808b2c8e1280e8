//! A JVM with jp's agent (live view over USDT) seen through the exporters:
//! `go tool pprof -top` reads its Method Call Tree from /debug/pprof/jvm — the whole
//! tree and a 3-second window — and prints the calls and bytecodes that the agent's
//! own `out=` file holds for the same run; /metrics counts the JVM under its main
//! class.
//!
//! Needs `JPD`, `JP_AGENT_LIB` and `JP_JDK17` (as `cargo xtask test` passes them).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::support::fleet::{compile_fleet_paper, go_pprof_top, Java};
use crate::support::jpd::{http_get, metric, Jpd};
use serde_json::Value;

/// What every "run" of FleetPaper adds: calls per method, by the program's text
/// (f calls h once and g(1..10); g(i) calls h i times: 1 + 55 calls of h).
const CALLS_PER_RUN: [(&str, u64); 4] = [
    ("FleetPaper$Worker.run()", 1),
    ("FleetPaper.f()", 1),
    ("FleetPaper.g(int)", 10),
    ("FleetPaper.h()", 56),
];

/// `go tool pprof -top` of `file`: function → flat value of `index`.
fn go_top(file: &Path, index: &str) -> BTreeMap<String, u64> {
    let (rows, text) = go_pprof_top(file, index);
    assert!(text.contains(&format!("Type: {index}")), "{text}");
    rows.into_iter()
        .map(|(flat, name)| {
            let v = flat
                .parse()
                .unwrap_or_else(|_| panic!("flat value {flat:?} of {name}"));
            (name, v)
        })
        .collect()
}

/// The agent's own jp-mct/1 file: per method (pprof's readable name), summed calls
/// and bytecodes over its contexts.
fn agent_totals(file: &Path) -> BTreeMap<String, (u64, u64)> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("the agent's out= file"))
            .expect("JSON");
    let mut out = BTreeMap::new();
    let mut stack: Vec<&Value> = v["root"]["children"]
        .as_array()
        .expect("children")
        .iter()
        .collect();
    while let Some(n) = stack.pop() {
        let name = jp_mct::java_signature(n["method"].as_str().expect("method"));
        let e = out.entry(name).or_insert((0, 0));
        e.0 += n["calls"].as_u64().expect("calls");
        e.1 += n["bytecodes"].as_u64().expect("bytecodes");
        stack.extend(n["children"].as_array().into_iter().flatten());
    }
    out
}

#[test]
fn go_pprof_and_prometheus_see_a_jvms_exact_counts() {
    let lib = jp_testkit::agent_lib();
    let scratch = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(scratch.path());
    let _one = crate::support::exclusive();
    let jpd = Jpd::start("[usdt]\nscan_interval_ms = 100\n");
    let out_file = scratch.path().join("agent.json");
    let mut java = Java::start(
        &jpd,
        &lib,
        scratch.path(),
        &format!(
            "bba=precise,profiler=usdt,out={},format=json",
            out_file.display()
        ),
    );
    let pid = java.child.id();
    let wait_calls = |n: u64| jpd.wait_metric("jp_jvm_calls_total{main=\"FleetPaper\"}", n);
    java.run_once();
    wait_calls(68);

    // A 3-second window with one more run in it.
    let http = jpd.http;
    let window = std::thread::spawn(move || {
        http_get(http, &format!("/debug/pprof/jvm?pid={pid}&seconds=3"))
    });
    std::thread::sleep(Duration::from_millis(700));
    java.run_once();
    let (status, delta) = window.join().expect("window");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&delta));
    wait_calls(136);
    let (status, whole) = http_get(jpd.http, &format!("/debug/pprof/jvm?pid={pid}&seconds=0"));
    assert_eq!(status, 200);
    let m = jpd.metrics();
    let bytecodes =
        metric(&m, "jp_jvm_bytecodes_total{main=\"FleetPaper\"}").expect("bytecodes series");
    assert_eq!(
        metric(&m, "jp_jvm_running{main=\"FleetPaper\"}"),
        Some(1),
        "{m}"
    );

    writeln!(java.stdin, "quit").expect("quit");
    let st = java.child.wait().expect("wait java");
    assert!(st.success());
    let agent = agent_totals(&out_file);

    let files = scratch.path();
    std::fs::write(files.join("delta.pb.gz"), &delta).unwrap();
    std::fs::write(files.join("whole.pb.gz"), &whole).unwrap();
    let d_calls = go_top(&files.join("delta.pb.gz"), "calls");
    let d_bytecodes = go_top(&files.join("delta.pb.gz"), "bytecodes");
    let w_calls = go_top(&files.join("whole.pb.gz"), "calls");
    let w_bytecodes = go_top(&files.join("whole.pb.gz"), "bytecodes");
    for (method, calls) in CALLS_PER_RUN {
        let (a_calls, a_bytecodes) = agent[method];
        assert_eq!(
            a_calls,
            2 * calls,
            "{method}: the agent's file counts two runs"
        );
        assert_eq!(
            w_calls.get(method),
            Some(&a_calls),
            "{method} calls, whole tree: {w_calls:?}"
        );
        assert_eq!(
            w_bytecodes.get(method),
            Some(&a_bytecodes),
            "{method} bytecodes, whole tree: {w_bytecodes:?}"
        );
        assert_eq!(
            d_calls.get(method),
            Some(&calls),
            "{method} calls in the window: {d_calls:?}"
        );
        assert_eq!(
            d_bytecodes.get(method).map(|b| 2 * b),
            Some(a_bytecodes),
            "{method}: the window holds one of two identical runs: {d_bytecodes:?}"
        );
    }
    // Every bytecode jpd counted is in the Prometheus counter (main's own only at exit).
    assert_eq!(bytecodes, w_bytecodes.values().sum::<u64>());
    jpd.stop();
}
