//! A real Prometheus (Debian's `prometheus`) scrapes jpd's /metrics while a JVM with
//! jp's agent runs; `promtool check metrics` accepts the exposition; every query of the
//! Grafana dashboard
//! (deploy/grafana/jp.json) runs on that Prometheus and returns series, and every
//! metric the dashboard names is one jpd exports.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::fleet::{compile_fleet_paper, tool, urlencode, Java};
use crate::support::jpd::{free_port, http_get, Jpd};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../../deploy/grafana/jp.json");

/// `jp_…` names in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("jp_") {
        let start = i + at;
        let boundary =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        if boundary {
            out.insert(expr[start..end].to_string());
        }
        i = end;
    }
    out
}

/// Every `expr` of the dashboard's panels.
fn dashboard_queries() -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(DASHBOARD).expect("deploy/grafana/jp.json is JSON");
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?").to_string();
            out.push((title, t["expr"].as_str().expect("expr").to_string()));
        }
    }
    out
}

fn exported_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

struct Prometheus {
    child: std::process::Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let bin = tool("prometheus", "prometheus");
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: jp\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).expect("log"))
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            addr,
            _dir: dir,
        }
    }

    /// An instant query: the `result` array (Prometheus must answer "success").
    fn query(&self, q: &str) -> Vec<Value> {
        let (status, body) = http_get(self.addr, &format!("/api/v1/query?query={}", urlencode(q)));
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "query {q:?}: HTTP {status}: {text}");
        let v: Value = serde_json::from_str(&text).expect("query answer is JSON");
        assert_eq!(v["status"], "success", "query {q:?}: {text}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    fn value(r: &Value) -> f64 {
        r["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN)
    }
}

#[test]
fn promtool_accepts_the_exposition() {
    let promtool = tool("promtool", "prometheus");
    let _one = crate::support::exclusive();
    let jpd = Jpd::start("");
    let text = jpd.metrics();
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {}\n{said}\n{text}",
        out.status
    );
    jpd.stop();
}

#[test]
fn prometheus_scrapes_jpd_and_every_dashboard_query_has_data() {
    let lib = jp_testkit::agent_lib();
    let classes = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(classes.path());
    let _one = crate::support::exclusive();
    // bpf_stats: the dashboard's per-program cost panels read the run-time
    // statistics, which are off unless asked for.
    let jpd = Jpd::start("bpf_stats = true\n[usdt]\nscan_interval_ms = 100\n");
    // A JVM for the JVM panels, with a first run counted.
    let mut java = Java::start(&jpd, &lib, classes.path(), "bba=precise");
    java.run_once();
    let prom = Prometheus::start(jpd.http);

    // Up, and enough scrapes for rate() over the dashboard's window.
    let t0 = Instant::now();
    loop {
        let up = if http_get(prom.addr, "/-/ready").0 == 200 {
            prom.query("up{job=\"jp\"}")
        } else {
            Vec::new()
        };
        if up.first().map(Prometheus::value) == Some(1.0) {
            let n = prom.query("count_over_time(jp_build_info[1m])");
            if n.first().map(Prometheus::value).is_some_and(|n| n >= 4.0) {
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "Prometheus did not scrape jpd 4 times within 60 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let info = prom.query("jp_build_info");
    assert_eq!(info.len(), 1);
    assert_eq!(info[0]["metric"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(info[0]["metric"]["job"], "jp");
    let modes = prom.query("jp_kernel_samples_total");
    let names: BTreeSet<&str> = modes
        .iter()
        .filter_map(|r| r["metric"]["mode"].as_str())
        .collect();
    assert_eq!(names, BTreeSet::from(["idle", "kernel", "user"]));
    assert!(
        modes.iter().map(Prometheus::value).sum::<f64>() > 0.0,
        "no samples: {modes:?}"
    );
    let timer = prom.query("jp_softirqs_total{vector=\"TIMER\"}");
    assert_eq!(timer.len(), 1, "the TIMER softirq series");
    assert!(Prometheus::value(&timer[0]) > 0.0);
    assert_eq!(
        prom.query("jp_kernel_sampling_frequency_hertz")
            .first()
            .map(Prometheus::value),
        Some(997.0)
    );
    let programs = prom.query("jp_bpf_program_runs_total > 0");
    let programs: BTreeSet<&str> = programs
        .iter()
        .filter_map(|r| r["metric"]["program"].as_str())
        .collect();
    assert!(
        programs.contains("jp_sample") && programs.contains("jp_sirq_entry"),
        "{programs:?}"
    );

    let exported = exported_names(&jpd.metrics());
    let queries = dashboard_queries();
    assert!(
        queries.len() >= 10,
        "the dashboard has its panels: {queries:?}"
    );
    for (title, expr) in &queries {
        for name in metric_names(expr) {
            assert!(
                exported.contains(&name),
                "panel {title:?} uses {name}, which /metrics does not export"
            );
        }
        let q = expr
            .replace("$__rate_interval", "15s")
            .replace("$instance", ".*");
        let result = prom.query(&q);
        assert!(!result.is_empty(), "panel {title:?}: {q} returned nothing");
    }
    // Another run while Prometheus watches: the JVM's counter moved by one run.
    let before = prom.query("jp_jvm_calls_total{main=\"FleetPaper\"}");
    java.run_once();
    let t0 = Instant::now();
    loop {
        let now = prom.query("jp_jvm_calls_total{main=\"FleetPaper\"}");
        if now.first().map(Prometheus::value) == Some(136.0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "FleetPaper's calls went from {before:?} to {now:?}, not 136"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        before.first().map(Prometheus::value),
        Some(68.0),
        "one run is 68 calls"
    );
    drop(java);
    drop(prom);
    jpd.stop();
}

#[test]
fn metric_names_of_expressions() {
    let n = metric_names("sum by (x) (rate(jp_a_total{m=\"jp_no\"}[1m])) / on (i) jp_b + xjp_c");
    assert_eq!(
        n.into_iter().collect::<Vec<_>>(),
        ["jp_a_total", "jp_b", "jp_no"]
    );
}
