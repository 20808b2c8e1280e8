//! jpd exporting OTLP profiles (`[otlp]`, opentelemetry-proto v1.10.0) to a peer built
//! from the official definitions: `tests/fixtures/fleet_otlp/otlp_peer.py`, PyPI's
//! `opentelemetry-proto` with grpcio, which decodes every message with the official
//! classes (and checks the dictionary's rules) and hands it here as JSON.
//!
//! - a JVM under the agent, on JDK 17 and 25: the exported deltas add up, calling
//!   context by calling context, to the agent's `out=` tree, and so does `jpctl jvm
//!   export --format otlp`; the exported CPU, off-CPU and wall time (`kernel.offcpu`) add
//!   up to jpd's per context; every resource has its attributes, the file's too, and so
//!   does the file of an exact window opened in a dormant JVM of the same JDK (its
//!   `process.runtime.version` is the JVM's own, as a live JVM reports it);
//! - `jpctl kernel --format otlp`: the kernel's functions and their samples, between two
//!   readings of `jpctl kernel`, and the operator's resource attributes;
//! - a receiver down, then up: it gets every window queued meanwhile, contiguous; over
//!   HTTP/protobuf with a header;
//! - a receiver that answers garbage, then one that hangs: jpd keeps answering, counts
//!   the losses, and stops on time;
//! - gRPC and HTTP/protobuf over TLS with a CA made here (`tls_ca_file`) and an
//!   authorization header; another CA's certificate fails, counted;
//! - a receiver slow but within `timeout_s`, then slower than it, then quick again:
//!   jpd keeps answering, and every window reaches it but the ones the backlog's bound
//!   dropped (counted).
//!
//! Needs root (jpd loads eBPF), `JPD`, `JPCTL`, `JP_AGENT_LIB`, JDK 17 and 25, python3-venv
//! and PyPI (grpcio, opentelemetry-proto).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::grpc::venv;
use crate::support::fleet::{
    compile_fleet_paper, host_name as host, paper_over_intervals_on, wait_for,
};
use crate::support::jpd::{free_port, metric, Jpd};
use crate::support::tls::Ca;
use jp_testkit::jdk::Jdk;
use serde_json::Value;

const PEER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/fleet_otlp/otlp_peer.py"
);

/// The OTLP receiver: gRPC on `port`, HTTP/protobuf on `port + 1`.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
}

impl Peer {
    fn start(port: u16) -> Peer {
        Peer::spawn(port, None)
    }

    /// Both receivers over TLS, serving `cert` with `key` (PEM files).
    fn start_tls(port: u16, cert: &Path, key: &Path) -> Peer {
        Peer::spawn(port, Some((cert, key)))
    }

    fn spawn(port: u16, tls: Option<(&Path, &Path)>) -> Peer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut command = Command::new(venv());
        command
            .arg(PEER)
            .arg("receive")
            .arg(format!("127.0.0.1:{port}"))
            .arg(dir.path());
        if let Some((cert, key)) = tls {
            command.arg("--tls").arg(cert).arg(key);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the OTLP peer");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the peer");
        assert_eq!(line.trim(), "listening", "the OTLP peer did not start");
        Peer {
            stdin: child.stdin.take(),
            child,
            dir,
        }
    }

    /// From now on the receivers answer `seconds` after a request arrives.
    fn set_delay(&mut self, seconds: f64) {
        let stdin = self.stdin.as_mut().expect("the peer's stdin");
        writeln!(stdin, "delay {seconds}").expect("tell the peer its delay");
        stdin.flush().expect("flush");
    }

    /// Every request received so far, in arrival order.
    fn received(&self) -> Vec<Value> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .expect("read the peer's directory")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                serde_json::from_str(&std::fs::read_to_string(f).expect("read")).expect("JSON")
            })
            .collect()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A file jpctl wrote, decoded by the official classes.
fn decode(file: &Path) -> Value {
    let out = Command::new(venv())
        .arg(PEER)
        .arg("decode")
        .arg(file)
        .output()
        .expect("run the OTLP peer");
    assert!(
        out.status.success(),
        "the official classes cannot read {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The resources of `messages` whose `service.name` is `service`.
fn resources<'a>(messages: &'a [Value], service: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .flat_map(|m| m["resources"].as_array().expect("resources"))
        .filter(|r| r["attributes"]["service.name"] == service)
        .collect()
}

/// Root-first paths → summed value of the profiles of type `ty`.
fn by_stack(resources: &[&Value], ty: &str) -> BTreeMap<Vec<String>, i64> {
    let mut out: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    for r in resources {
        for p in r["profiles"].as_array().expect("profiles") {
            if p["type"] != ty {
                continue;
            }
            for s in p["samples"].as_array().expect("samples") {
                let path: Vec<String> = s[0]
                    .as_array()
                    .expect("stack")
                    .iter()
                    .map(|f| f.as_str().expect("frame").to_string())
                    .collect();
                *out.entry(path).or_default() += s[1].as_i64().expect("value");
            }
        }
    }
    out.retain(|_, v| *v != 0);
    out
}

/// Calls and bytecodes per context: paths → (calls, bytecodes), nonzero only.
fn tree(resources: &[&Value]) -> BTreeMap<Vec<String>, (u64, u64)> {
    let mut out: BTreeMap<Vec<String>, (u64, u64)> = BTreeMap::new();
    for (path, v) in by_stack(resources, "calls/count") {
        out.entry(path).or_default().0 += v as u64;
    }
    for (path, v) in by_stack(resources, "bytecodes/count") {
        out.entry(path).or_default().1 += v as u64;
    }
    out
}

/// The agent's `out=` tree: root-first method paths → (calls, bytecodes), nonzero only.
fn agent_tree(file: &Path) -> BTreeMap<Vec<String>, (u64, u64)> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("the agent's out= file"))
            .expect("JSON");
    let mut out = BTreeMap::new();
    let mut todo: Vec<(Vec<String>, &Value)> = vec![(vec![], &v["root"])];
    while let Some((path, n)) = todo.pop() {
        for ch in n["children"].as_array().into_iter().flatten() {
            let mut p = path.clone();
            p.push(ch["method"].as_str().expect("method").to_string());
            let (c, b) = (
                ch["calls"].as_u64().unwrap(),
                ch["bytecodes"].as_u64().unwrap(),
            );
            if c != 0 || b != 0 {
                let e: &mut (u64, u64) = out.entry(p.clone()).or_default();
                e.0 += c;
                e.1 += b;
            }
            todo.push((p, ch));
        }
    }
    out
}

/// /metrics and what the peer received at one moment (no export in between): the
/// profiles jpd counts as sent are exactly the ones received.
fn settled(jpd: &Jpd, peer: &Peer) -> (String, Vec<Value>) {
    let t0 = Instant::now();
    loop {
        let otlp = |m: &str| -> Vec<String> {
            m.lines()
                .filter(|l| l.starts_with("jp_otlp_"))
                .map(str::to_string)
                .collect()
        };
        let m = jpd.metrics();
        let messages = peer.received();
        if otlp(&jpd.metrics()) == otlp(&m) {
            assert_eq!(
                metric(&m, "jp_otlp_sent_profiles_total"),
                Some(profile_count(&messages)),
                "{m}"
            );
            return (m, messages);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "/metrics never settled"
        );
    }
}

/// No profile was dropped for any of `reasons`.
fn assert_nothing_dropped(m: &str, reasons: &[&str]) {
    for reason in reasons {
        let series = format!("jp_otlp_dropped_profiles_total{{reason=\"{reason}\"}}");
        assert_eq!(metric(m, &series), Some(0), "{series}");
    }
}

fn profile_count(messages: &[Value]) -> u64 {
    messages
        .iter()
        .flat_map(|m| m["resources"].as_array().expect("resources"))
        .map(|r| r["profiles"].as_array().expect("profiles").len() as u64)
        .sum()
}

fn attributes(r: &Value) -> BTreeMap<String, Value> {
    r["attributes"]
        .as_object()
        .expect("attributes")
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The kernel's windows, in export order: (start, duration) of its `samples/count`
/// profiles.
fn kernel_windows(messages: &[Value]) -> Vec<(u64, u64)> {
    resources(messages, "jp-kernel")
        .iter()
        .flat_map(|r| r["profiles"].as_array().expect("profiles"))
        .filter(|p| p["type"] == "samples/count")
        .map(|p| (p["time"].as_u64().unwrap(), p["duration"].as_u64().unwrap()))
        .collect()
}

fn assert_contiguous(windows: &[(u64, u64)]) {
    for w in windows.windows(2) {
        assert_eq!(
            w[0].0 + w[0].1,
            w[1].0,
            "a gap or an overlap between two exported windows: {windows:?}"
        );
    }
}

fn otlp_config(port: u16, extra: &str) -> String {
    format!(
        "[otlp]\nenabled = true\nendpoint = \"http://127.0.0.1:{port}\"\ninterval_s = 1\ntimeout_s = 1\n{extra}"
    )
}

// --- tests -----------------------------------------------------------------------

#[test]
fn exported_jvm_deltas_and_the_export_file_add_up_to_the_agents_tree_jdk17() {
    exported_jvm_deltas_and_the_export_file_add_up_to_the_agents_tree(Jdk::J17);
}

#[test]
fn exported_jvm_deltas_and_the_export_file_add_up_to_the_agents_tree_jdk25() {
    exported_jvm_deltas_and_the_export_file_add_up_to_the_agents_tree(Jdk::J25);
}

fn exported_jvm_deltas_and_the_export_file_add_up_to_the_agents_tree(jdk: Jdk) {
    let lib = jp_testkit::agent_lib();
    let scratch = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(scratch.path());
    let port = free_port();
    let peer = Peer::start(port);
    let _one = crate::support::exclusive();
    let jpd = Jpd::start(&format!(
        "offcpu = true\n[usdt]\nscan_interval_ms = 100\n\n{}",
        otlp_config(
            port,
            "resource_attributes = { \"deployment.environment.name\" = \"test\" }\n"
        )
    ));
    let (pid, out_file) = paper_over_intervals_on(jdk, &jpd, &lib, scratch.path());
    let agent = agent_tree(&out_file);
    assert!(!agent.is_empty(), "the agent's tree is empty");

    wait_for(
        "the exported deltas to add up to the agent's tree",
        Duration::from_secs(30),
        || {
            let got = tree(&resources(&peer.received(), "FleetPaper"));
            for (path, v) in &got {
                let a = agent.get(path).copied().unwrap_or_default();
                assert!(
                    v.0 <= a.0 && v.1 <= a.1,
                    "{path:?}: exported {v:?}, agent {a:?}"
                );
            }
            got == agent
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    let messages = peer.received();
    let jvm = resources(&messages, "FleetPaper");
    assert_eq!(tree(&jvm), agent, "context by context, after 3 more s");
    assert!(
        jvm.len() >= 3,
        "{} JVM exports: the runs span several intervals",
        jvm.len()
    );

    // The same tree in the file jpctl writes.
    let file = scratch.path().join("jvm.otlp");
    jpd.export_to(pid, "otlp", &file);
    let exported = decode(&file);
    let whole = resources(std::slice::from_ref(&exported), "FleetPaper");
    assert_eq!(whole.len(), 1, "one resource: {exported}");
    assert_eq!(tree(&whole), agent, "jpctl jvm export --format otlp");
    let version = whole[0]["attributes"]["process.runtime.version"].clone();
    assert!(
        version
            .as_str()
            .is_some_and(|v| v.split(['.', '+', '-']).next() == Some(jdk.feature())),
        "runtime version {version} on {}",
        jdk.name()
    );

    // Exported CPU, off-CPU and wall time (kernel.offcpu) add up to jpd's per context
    // (the export file's), once settled: the JVM has quit, its times are final. The
    // exporter sends idle threads' time too (a push is the whole record; a file leaves it
    // out unless asked with --all).
    let t0 = Instant::now();
    loop {
        let _ = std::fs::remove_file(&file);
        let pid_text = pid.to_string();
        let path = file.to_str().expect("UTF-8 path");
        jpd.jpctl_output(&[
            "jvm", "export", &pid_text, "--format", "otlp", "--all", "-o", path,
        ]);
        let exported = decode(&file);
        let times = |messages: &[Value], ty: &str| by_stack(&resources(messages, "FleetPaper"), ty);
        let types = ["cpu/nanoseconds", "offcpu/nanoseconds", "wall/nanoseconds"];
        let want = types.map(|ty| times(std::slice::from_ref(&exported), ty));
        let got = types.map(|ty| times(&peer.received(), ty));
        let spun: i64 = want[0].values().sum();
        if got == want && spun >= 100 * 1_003_009 && !want[1].is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "CPU, off-CPU, wall per context: exported {got:?}\njpd's {want:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let messages = peer.received();
    let h = host();
    let s = |v: &str| Value::String(v.to_string());
    let jvm_attributes: BTreeMap<String, Value> = [
        ("service.name", s("FleetPaper")),
        ("process.pid", Value::from(pid)),
        ("process.runtime.name", s("java")),
        ("process.runtime.version", version),
        ("host.name", s(&h)),
        ("deployment.environment.name", s("test")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let kernel_attributes: BTreeMap<String, Value> = [
        ("service.name", s("jp-kernel")),
        ("host.name", s(&h)),
        ("os.type", s("linux")),
        ("deployment.environment.name", s("test")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let kernel = resources(&messages, "jp-kernel");
    assert!(kernel.len() >= 5, "{} kernel exports", kernel.len());
    for (what, list, want, types) in [
        (
            "jvm",
            resources(&messages, "FleetPaper"),
            &jvm_attributes,
            "calls/count bytecodes/count",
        ),
        (
            "kernel",
            kernel,
            &kernel_attributes,
            "samples/count cpu/nanoseconds",
        ),
    ] {
        for r in &list {
            assert_eq!(&attributes(r), want, "{what} resource attributes");
            assert_eq!(r["scope"], "jp");
            let got: Vec<&str> = r["profiles"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["type"].as_str().unwrap())
                .collect();
            let got = got.join(" ");
            let joined = format!("{types} cpu/nanoseconds");
            let off = format!("{joined} offcpu/nanoseconds wall/nanoseconds");
            assert!(
                got == types || (what == "jvm" && (got == joined || got == off)),
                "{what}: types {got}"
            );
        }
    }
    assert_contiguous(&kernel_windows(&messages));
    // The file jpctl writes is the message the exporter sends: the same resource.
    assert_eq!(
        &attributes(whole[0]),
        &jvm_attributes,
        "jpctl jvm export --format otlp"
    );
    // A kept window's file names its JVM as a live JVM's does, its version included.
    let (dormant, window) = window_resource(jdk, &jpd, &lib, scratch.path());
    let mut want = jvm_attributes.clone();
    want.insert("process.pid".into(), Value::from(dormant));
    assert_eq!(window, want, "jpctl jvm profile --format otlp");
    let (m, messages) = settled(&jpd, &peer);
    assert_eq!(
        metric(&m, "jp_otlp_pushes_total{result=\"ok\"}"),
        Some(messages.len() as u64)
    );
    assert_eq!(
        metric(&m, "jp_otlp_pushes_total{result=\"error\"}"),
        Some(0)
    );
    jpd.stop();
}

/// FleetPaper on `jdk` with the agent dormant, a 1 s window opened in it with `jpctl jvm
/// profile --format otlp`: the JVM's pid and the window file's resource attributes.
fn window_resource(
    jdk: Jdk,
    jpd: &Jpd,
    lib: &Path,
    classes: &Path,
) -> (u32, BTreeMap<String, Value>) {
    let mut java = Command::new(jdk.java())
        .arg(format!("-agentpath:{}=mode=dormant", lib.display()))
        .arg("-cp")
        .arg(classes)
        .arg("FleetPaper")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start java");
    let mut line = String::new();
    BufReader::new(java.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the JVM's stdout");
    assert_eq!(line.trim_end(), "ready");
    let pid = java.id();
    let file = classes.join("window.otlp");
    let path = file.to_str().expect("UTF-8 path");
    let pid_text = pid.to_string();
    jpd.jpctl_output(&[
        "jvm",
        "profile",
        &pid_text,
        "--seconds",
        "1",
        "--format",
        "otlp",
        "-o",
        path,
    ]);
    drop(java.stdin.take());
    assert!(java.wait().expect("wait java").success());
    let exported = decode(&file);
    let r = resources(std::slice::from_ref(&exported), "FleetPaper");
    assert_eq!(r.len(), 1, "one resource: {exported}");
    (pid, attributes(r[0]))
}

/// Function → samples of `jpctl kernel --json` (modules as `name [module]`).
fn kernel_functions(v: &Value) -> BTreeMap<String, u64> {
    v["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| {
            let name = f["name"].as_str().expect("name");
            let name = match f["module"].as_str() {
                Some(m) => format!("{name} [{m}]"),
                None => name.to_string(),
            };
            (name, f["samples"].as_u64().expect("samples"))
        })
        .collect()
}

#[test]
fn jpctl_kernel_otlp_holds_the_kernel_profile() {
    let _one = crate::support::exclusive();
    // Not exporting, but the operator's resource attributes are in the file.
    let jpd = Jpd::start(
        "[usdt]\nenabled = false\n\n[otlp]\nresource_attributes = { \"deployment.environment.name\" = \"file\" }\n",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    crate::support::read_dev_zero(Duration::from_millis(1500));
    let file = dir.path().join("kernel.otlp");
    let before = jpd.jpctl_json(&["kernel", "--json"]);
    jpd.jpctl_output(&["kernel", "--format", "otlp", "-o", file.to_str().unwrap()]);
    let after = jpd.jpctl_json(&["kernel", "--json"]);
    let message = decode(&file);
    let kernel = resources(std::slice::from_ref(&message), "jp-kernel");
    assert_eq!(kernel.len(), 1, "{message}");
    let s = |v: &str| Value::String(v.to_string());
    let want: BTreeMap<String, Value> = [
        ("service.name", s("jp-kernel")),
        ("host.name", s(&host())),
        ("os.type", s("linux")),
        ("deployment.environment.name", s("file")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(attributes(kernel[0]), want, "jpctl kernel --format otlp");
    let samples = by_stack(&kernel, "samples/count");
    let (before, after) = (kernel_functions(&before), kernel_functions(&after));
    let mut seen = 0;
    for (path, n) in &samples {
        assert_eq!(path.len(), 1, "one frame per kernel sample: {path:?}");
        let name = &path[0];
        if ["[user]", "[idle]", "[unknown]"].contains(&name.as_str()) {
            continue;
        }
        let lo = before.get(name).copied().unwrap_or(0);
        let hi = after
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("{name} is in the OTLP profile, not in jpctl kernel's"));
        assert!(
            (lo..=hi).contains(&(*n as u64)),
            "{name}: {n} samples in the OTLP profile, {lo} before and {hi} after"
        );
        seen += 1;
    }
    // Every function jpctl kernel counted before is in the file.
    let named: Vec<&String> = samples.keys().map(|p| &p[0]).collect();
    for name in before.keys() {
        assert!(
            named.contains(&name),
            "{name} is missing from the OTLP profile"
        );
    }
    assert!(
        seen >= before.len(),
        "{seen} functions, jpctl kernel had {}",
        before.len()
    );
    // The same stacks carry CPU time, samples × the period.
    let cpu = by_stack(&kernel, "cpu/nanoseconds");
    assert_eq!(cpu.len(), samples.len());
    jpd.stop();
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn a_receiver_down_then_up_gets_every_window_queued() {
    let _one = crate::support::exclusive();
    let port = free_port();
    // HTTP/protobuf to port + 1, with an authorization header.
    let jpd = Jpd::start(&format!(
        "[usdt]\nenabled = false\n\n[otlp]\nenabled = true\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"http/protobuf\"\ninterval_s = 1\ntimeout_s = 1\njvms = false\nheaders = {{ authorization = \"Bearer t0ken\" }}\n",
        port + 1
    ));
    wait_for("3 exports queued", Duration::from_secs(30), || {
        metric(&jpd.metrics(), "jp_otlp_backlog_requests").is_some_and(|n| n >= 3)
    });
    assert!(
        jpd.jpctl_ok(&["status"]),
        "jpd answers while the receiver is down"
    );
    let down_until = now_ns();
    let peer = Peer::start(port);
    wait_for("the queue to drain", Duration::from_secs(30), || {
        let m = jpd.metrics();
        metric(&m, "jp_otlp_backlog_requests") == Some(0)
            && peer.received().iter().any(|r| {
                kernel_windows(std::slice::from_ref(r))
                    .iter()
                    .any(|w| w.0 > down_until)
            })
    });
    let messages = peer.received();
    for m in &messages {
        assert_eq!(m["transport"], "http:Bearer t0ken");
    }
    let windows = kernel_windows(&messages);
    assert_contiguous(&windows);
    let queued = windows.iter().filter(|w| w.0 + w.1 <= down_until).count();
    assert!(
        queued >= 3,
        "{queued} windows of the down time delivered: {windows:?}"
    );
    let (m, _) = settled(&jpd, &peer);
    assert_nothing_dropped(&m, &["backlog_full", "rejected", "disabled"]);
    jpd.stop();
}

/// A TCP peer that answers every connection with `answer` (and closes), or with
/// nothing at all (`None`: holds the connection open).
fn bad_peer(answer: Option<&'static [u8]>) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut s in l.incoming().flatten() {
            match answer {
                Some(a) => {
                    let mut buf = [0u8; 4096];
                    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                    let _ = s.read(&mut buf);
                    let _ = s.write_all(a);
                }
                None => held.push(s),
            }
        }
    });
    port
}

/// Waits (30 s at most) until 2 more exports than now have failed.
fn two_more_failures(jpd: &Jpd, what: &str) {
    let before = failures(&jpd.metrics());
    wait_for(&format!("2 {what}"), Duration::from_secs(30), || {
        failures(&jpd.metrics()) >= before + 2
    });
}

fn failures(m: &str) -> u64 {
    metric(m, "jp_otlp_pushes_total{result=\"error\"}").unwrap_or(0)
        + metric(m, "jp_otlp_pushes_total{result=\"rejected\"}").unwrap_or(0)
}

#[test]
fn garbage_and_hanging_receivers_never_block_jpd_and_losses_are_counted() {
    let _one = crate::support::exclusive();
    let garbage = bad_peer(Some(b"\x00\x01garbage, not HTTP/2\r\n\r\n\xff\xfe"));
    let hang = bad_peer(None);
    let jpd = Jpd::start(&format!(
        "[usdt]\nenabled = false\n\n{}jvms = false\nmax_backlog = 2\n",
        otlp_config(garbage, "")
    ));
    wait_for(
        "3 failed exports to the garbage peer",
        Duration::from_secs(30),
        || failures(&jpd.metrics()) >= 3,
    );
    assert!(jpd.jpctl_ok(&["status"]), "jpd answers gRPC");
    let m = jpd.metrics();
    // Every export that did not go through is counted: refused, or queued and dropped
    // (two profiles each, whole exports).
    let rejected = metric(&m, "jp_otlp_pushes_total{result=\"rejected\"}").unwrap();
    let dropped_rejected =
        metric(&m, "jp_otlp_dropped_profiles_total{reason=\"rejected\"}").unwrap();
    assert_eq!(dropped_rejected, 2 * rejected, "{m}");
    assert_eq!(metric(&m, "jp_otlp_sent_profiles_total"), Some(0));

    // Retargeted to a peer that never answers: the same.
    reconfigure(
        &jpd,
        &format!("127.0.0.1:{garbage}"),
        &format!("127.0.0.1:{hang}"),
    );
    two_more_failures(&jpd, "timed-out exports to the hanging peer");
    assert!(jpd.jpctl_ok(&["status"]), "jpd answers gRPC");
    let m = jpd.metrics();
    let full = metric(
        &m,
        "jp_otlp_dropped_profiles_total{reason=\"backlog_full\"}",
    )
    .unwrap();
    assert_eq!(full % 2, 0, "whole exports are dropped: {m}");
    assert!(metric(&m, "jp_otlp_backlog_requests").unwrap() <= 2, "{m}");
    // SIGTERM with a receiver that hangs: jpd still exits within its deadline.
    jpd.stop();
}

/// jpd's gRPC API and /metrics answer within a bound far below the slow receiver's
/// delay: a request waiting on the receiver would show as a hang, not as slowness.
fn answers_promptly(jpd: &Jpd) {
    let bound = Duration::from_secs(8);
    let t0 = Instant::now();
    assert!(jpd.jpctl_ok(&["status"]), "jpctl status");
    assert!(t0.elapsed() < bound, "jpctl status took {:?}", t0.elapsed());
    let t0 = Instant::now();
    assert!(metric(&jpd.metrics(), "jp_otlp_backlog_requests").is_some());
    assert!(t0.elapsed() < bound, "/metrics took {:?}", t0.elapsed());
}

/// The distinct kernel windows received, in time order (a request the receiver kept
/// after the client gave up on it arrives again: the same window twice).
fn distinct_kernel_windows(messages: &[Value]) -> Vec<(u64, u64)> {
    let mut w = kernel_windows(messages);
    w.sort();
    w.dedup();
    w
}

fn otlp_tls_config(endpoint: &str, protocol: &str, ca: &Path) -> String {
    format!(
        "[usdt]\nenabled = false\n\n[otlp]\nenabled = true\nendpoint = \"{endpoint}\"\nprotocol = \"{protocol}\"\ninterval_s = 1\ntimeout_s = 2\njvms = false\ntls_ca_file = {:?}\nheaders = {{ authorization = \"Bearer t0ken\" }}\n",
        ca.display().to_string()
    )
}

/// Replaces `from` by `to` in jpd's configuration and reloads it.
fn reconfigure(jpd: &Jpd, from: &str, to: &str) {
    let text = std::fs::read_to_string(&jpd.config).expect("read jpd's configuration");
    assert!(text.contains(from), "{from} is not in {text}");
    std::fs::write(&jpd.config, text.replace(from, to)).expect("write jpd's configuration");
    jpd.signal(libc::SIGHUP);
}

fn received_over(peer: &Peer, transport: &str) -> usize {
    peer.received()
        .iter()
        .filter(|m| m["transport"] == transport)
        .count()
}

#[test]
fn grpc_and_http_over_tls_trust_the_configured_ca_and_send_the_headers() {
    let _one = crate::support::exclusive();
    let files = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("jp OTLP test CA");
    let ca_file = ca.write(files.path(), "ca.pem");
    let other_ca = Ca::new("another CA").write(files.path(), "other.pem");
    let (cert, key) = ca.server().write(files.path(), "receiver");
    let port = free_port();
    let peer = Peer::start_tls(port, &cert, &key);
    let grpc = format!("https://127.0.0.1:{port}");
    let jpd = Jpd::start(&otlp_tls_config(&grpc, "grpc", &ca_file));
    wait_for(
        "3 exports over gRPC with TLS",
        Duration::from_secs(30),
        || received_over(&peer, "grpc:Bearer t0ken") >= 3,
    );

    // Another CA: every export fails, counted; jpd keeps answering.
    reconfigure(
        &jpd,
        &otlp_tls_config(&grpc, "grpc", &ca_file),
        &otlp_tls_config(&grpc, "grpc", &other_ca),
    );
    two_more_failures(&jpd, "failed exports to a receiver of another CA");
    assert!(jpd.jpctl_ok(&["status"]), "jpd answers gRPC");
    let m = jpd.metrics();
    assert_eq!(
        metric(&m, "jp_otlp_pushes_total{result=\"rejected\"}"),
        Some(0),
        "a certificate jpd does not trust is retried, not dropped: {m}"
    );
    assert!(
        jpd.log_text().contains("otlp: push failed"),
        "the failure is logged"
    );

    // HTTP/protobuf over TLS, the right CA again: what queued meanwhile arrives too.
    let http = format!("https://127.0.0.1:{}", port + 1);
    reconfigure(
        &jpd,
        &otlp_tls_config(&grpc, "grpc", &other_ca),
        &otlp_tls_config(&http, "http/protobuf", &ca_file),
    );
    wait_for(
        "the queue to drain over HTTPS",
        Duration::from_secs(60),
        || {
            metric(&jpd.metrics(), "jp_otlp_backlog_requests") == Some(0)
                && received_over(&peer, "http:Bearer t0ken") >= 2
        },
    );
    let (m, messages) = settled(&jpd, &peer);
    for msg in &messages {
        let t = msg["transport"].as_str().expect("transport");
        assert!(
            ["grpc:Bearer t0ken", "http:Bearer t0ken"].contains(&t),
            "{t}"
        );
        for r in resources(std::slice::from_ref(msg), "jp-kernel") {
            assert_eq!(r["attributes"]["os.type"], "linux");
            let types: Vec<&Value> = r["profiles"]
                .as_array()
                .expect("profiles")
                .iter()
                .map(|p| &p["type"])
                .collect();
            assert_eq!(types, ["samples/count", "cpu/nanoseconds"]);
        }
    }
    // Nothing lost: one window after the other, including the failed ones'.
    assert_contiguous(&kernel_windows(&messages));
    assert_nothing_dropped(&m, &["backlog_full", "rejected", "disabled"]);
    jpd.stop();
}

#[test]
fn a_slow_receiver_never_blocks_jpd_and_only_the_bound_drops_windows() {
    let _one = crate::support::exclusive();
    let port = free_port();
    let mut peer = Peer::start(port);
    let interval = Duration::from_secs(2);
    let jpd = Jpd::start(&format!(
        "[usdt]\nenabled = false\n\n[otlp]\nenabled = true\nendpoint = \"http://127.0.0.1:{port}\"\ninterval_s = {}\ntimeout_s = 3\njvms = false\nmax_backlog = 2\n",
        interval.as_secs()
    ));

    // Slow but within timeout_s: every export arrives, none fails.
    peer.set_delay(1.5);
    wait_for("3 slow exports", Duration::from_secs(30), || {
        peer.received().len() >= 3
    });
    answers_promptly(&jpd);
    assert_eq!(failures(&jpd.metrics()), 0, "{}", jpd.metrics());

    // Slower than timeout_s: exports time out, the backlog fills and drops its oldest.
    peer.set_delay(30.0);
    wait_for(
        "2 timed-out exports, 2 exports dropped from the full backlog",
        Duration::from_secs(60),
        || {
            let m = jpd.metrics();
            answers_promptly(&jpd);
            let backlog = metric(&m, "jp_otlp_backlog_requests").expect("backlog");
            assert!(backlog <= 2, "the backlog is over its bound: {m}");
            metric(&m, "jp_otlp_pushes_total{result=\"error\"}").is_some_and(|n| n >= 2)
                && metric(
                    &m,
                    "jp_otlp_dropped_profiles_total{reason=\"backlog_full\"}",
                )
                .is_some_and(|n| n >= 4)
        },
    );

    // Quick again: the backlog drains.
    peer.set_delay(0.0);
    let quick_from = now_ns();
    wait_for("the backlog to drain", Duration::from_secs(90), || {
        metric(&jpd.metrics(), "jp_otlp_backlog_requests") == Some(0)
            && distinct_kernel_windows(&peer.received())
                .iter()
                .any(|w| w.0 > quick_from)
    });
    let (m, messages) = settled(&jpd, &peer);
    let windows = distinct_kernel_windows(&messages);
    assert_eq!(
        windows.len(),
        kernel_windows(&messages).len(),
        "a window the receiver answered too late for was kept: {windows:?}"
    );
    // Every gap between two received windows is windows the bound dropped, whole
    // intervals each; together exactly the exports counted as dropped (two profiles
    // each).
    let dropped = metric(
        &m,
        "jp_otlp_dropped_profiles_total{reason=\"backlog_full\"}",
    )
    .expect("dropped");
    assert_eq!(dropped % 2, 0, "whole exports are dropped: {m}");
    let mut missing = 0;
    for w in windows.windows(2) {
        let gap = w[1].0 - (w[0].0 + w[0].1);
        missing += (gap as f64 / interval.as_nanos() as f64).round() as u64;
    }
    assert_eq!(
        missing,
        dropped / 2,
        "windows missing at the receiver vs exports dropped: {windows:?}\n{m}"
    );
    assert_nothing_dropped(&m, &["rejected", "disabled"]);
    jpd.stop();
}
