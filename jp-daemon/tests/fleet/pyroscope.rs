//! jpd pushing to Pyroscope (`[pyroscope]`): an in-test receiver implements the server
//! side of `push.v1.PusherService/Push` over the Connect protocol as Pyroscope does —
//! binary protobuf `PushRequest` (messages declared here from api/push/v1/push.proto and
//! api/types/v1/types.proto), each `raw_profile` a gzipped pprof (declared here from
//! google/pprof's profile.proto), Pyroscope's label rules — and keeps what arrives.
//!
//! - a JVM under the agent: the pushed `jvm_mct` deltas add up, calling context by
//!   calling context, to the agent's own `out=` tree; kernel windows are contiguous;
//!   every profile parses with `go tool pprof -raw`;
//! - a receiver that fails (500) then hangs: jpd keeps answering /metrics and gRPC,
//!   counts the failures, and once the receiver recovers delivers every window,
//!   contiguous; basic auth and X-Scope-OrgID on every request;
//! - SIGHUP: enabling, retargeting (bearer token) and disabling the pusher; no window is
//!   lost or pushed twice across a retarget;
//! - SIGTERM pushes the interval begun;
//! - https (rustls): a certificate from an unknown CA is refused, `tls_ca_file` trusts it;
//! - `--check-config` names the `[pyroscope]` key at fault.
//!
//! Needs root (jpd loads eBPF), `JPD`, `JPCTL`, `JP_AGENT_LIB`, a JDK 17, golang-go and
//! openssl (test certificates).

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::fleet::{
    compile_fleet_paper, host_name as host, paper_over_intervals, tool, wait_for,
};
use crate::support::jpd::Jpd;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;
use serde_json::Value;

// --- push.v1 / types.v1 -------------------------------------------------------------

#[derive(Clone, PartialEq, prost::Message)]
struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    series: Vec<RawProfileSeries>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<RawSample>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct LabelPair {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}
#[derive(Clone, PartialEq, prost::Message)]
struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    id: String,
}

// --- perftools.profiles -------------------------------------------------------------

#[derive(Clone, PartialEq, prost::Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
}
#[derive(Clone, PartialEq, prost::Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
}

impl Profile {
    fn string(&self, i: i64) -> &str {
        &self.string_table[usize::try_from(i).expect("string index")]
    }
    fn sample_types(&self) -> Vec<String> {
        self.sample_type
            .iter()
            .map(|t| format!("{}/{}", self.string(t.r#type), self.string(t.unit)))
            .collect()
    }
    /// Root-first paths of `system_name`s → summed values.
    fn by_stack(&self) -> BTreeMap<Vec<String>, Vec<i64>> {
        let mut out: BTreeMap<Vec<String>, Vec<i64>> = BTreeMap::new();
        for s in &self.sample {
            let mut path: Vec<String> = s
                .location_id
                .iter()
                .map(|&id| {
                    let loc = self.location.iter().find(|l| l.id == id).expect("location");
                    let f = self
                        .function
                        .iter()
                        .find(|f| f.id == loc.line[0].function_id)
                        .expect("function");
                    self.string(f.system_name).to_string()
                })
                .collect();
            path.reverse();
            let e = out.entry(path).or_insert_with(|| vec![0; s.value.len()]);
            for (a, v) in e.iter_mut().zip(&s.value) {
                *a += v;
            }
        }
        out
    }
}

// --- the receiver -------------------------------------------------------------------

const OK: u8 = 0;
const FAIL: u8 = 1;
const HANG: u8 = 2;

#[derive(Clone)]
struct Pushed {
    labels: BTreeMap<String, String>,
    gz: Vec<u8>,
    profile: Profile,
}

#[derive(Default)]
struct Inbox {
    mode: AtomicU8,
    attempts: AtomicU64,
    pushed: Mutex<Vec<Pushed>>,
    headers: Mutex<Vec<HeaderMap>>,
}

struct Receiver {
    addr: SocketAddr,
    inbox: Arc<Inbox>,
    rt: tokio::runtime::Runtime,
}

fn connect_error(status: StatusCode, code: &str, msg: &str) -> Response {
    (
        status,
        [("content-type", "application/json")],
        format!("{{\"code\":\"{code}\",\"message\":{msg:?}}}"),
    )
        .into_response()
}

/// Pyroscope's checks of a series' labels (pkg/validation): names are Prometheus-like
/// (Pyroscope also allows dots), unique, at most 30; values non-empty; `__name__`
/// names the profile.
fn validate_labels(labels: &[LabelPair]) -> Result<BTreeMap<String, String>, String> {
    let mut m = BTreeMap::new();
    if labels.len() > 30 {
        return Err(format!("{} labels", labels.len()));
    }
    for l in labels {
        let ok = l.name.chars().enumerate().all(|(i, c)| {
            c == '_' || c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || c == '.'))
        });
        if l.name.is_empty() || !ok {
            return Err(format!("invalid label name {:?}", l.name));
        }
        if l.value.is_empty() || l.value.len() > 2048 {
            return Err(format!("invalid value of {:?}", l.name));
        }
        if m.insert(l.name.clone(), l.value.clone()).is_some() {
            return Err(format!("duplicate label {:?}", l.name));
        }
    }
    if !m.contains_key("__name__") {
        return Err("no __name__".into());
    }
    Ok(m)
}

async fn push(State(inbox): State<Arc<Inbox>>, headers: HeaderMap, body: Bytes) -> Response {
    inbox.attempts.fetch_add(1, Ordering::Relaxed);
    match inbox.mode.load(Ordering::Relaxed) {
        FAIL => {
            return connect_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "test: failing",
            )
        }
        HANG => std::future::pending::<()>().await,
        _ => {}
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/proto") {
        return connect_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unknown",
            "not application/proto",
        );
    }
    let req = match PushRequest::decode(body.as_ref()) {
        Ok(r) => r,
        Err(e) => {
            return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", &e.to_string())
        }
    };
    let mut got = Vec::new();
    for s in &req.series {
        let labels = match validate_labels(&s.labels) {
            Ok(l) => l,
            Err(e) => return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", &e),
        };
        for raw in &s.samples {
            // Pyroscope takes gzipped or plain pprof; jpd sends gzip.
            let mut plain = Vec::new();
            if !raw.raw_profile.starts_with(&[0x1f, 0x8b])
                || flate2::read::GzDecoder::new(raw.raw_profile.as_slice())
                    .read_to_end(&mut plain)
                    .is_err()
            {
                return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "not gzip");
            }
            let profile = match Profile::decode(plain.as_slice()) {
                Ok(p) => p,
                Err(e) => {
                    return connect_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_argument",
                        &e.to_string(),
                    )
                }
            };
            if raw.id.len() != 36 {
                return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "bad id");
            }
            got.push(Pushed {
                labels: labels.clone(),
                gz: raw.raw_profile.clone(),
                profile,
            });
        }
    }
    inbox.pushed.lock().unwrap().extend(got);
    inbox.headers.lock().unwrap().push(headers);
    (
        StatusCode::OK,
        [("content-type", "application/proto")],
        Vec::<u8>::new(),
    )
        .into_response()
}

impl Receiver {
    fn start() -> Receiver {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let inbox = Arc::new(Inbox::default());
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/push.v1.PusherService/Push", axum::routing::post(push))
            .with_state(Arc::clone(&inbox));
        rt.spawn(async move { axum::serve(listener, app).await });
        Receiver { addr, inbox, rt }
    }
    /// An https front of this receiver (TLS ends here, the bytes go on to the plain
    /// receiver), with the certificate of `make_certs`; counts failed handshakes.
    fn tls_front(&self, dir: &Path) -> (String, Arc<AtomicU64>) {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join("server.pem"))
                .unwrap()
                .map(|c| c.unwrap())
                .collect();
        let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = self
            .rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let plain = self.addr;
        let failures = Arc::new(AtomicU64::new(0));
        let failed = Arc::clone(&failures);
        self.rt.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, failed) = (acceptor.clone(), Arc::clone(&failed));
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(mut tls) => {
                            if let Ok(mut up) = tokio::net::TcpStream::connect(plain).await {
                                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                            }
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        (format!("https://{addr}"), failures)
    }
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    fn set_mode(&self, m: u8) {
        self.inbox.mode.store(m, Ordering::Relaxed);
    }
    fn pushed(&self) -> Vec<Pushed> {
        self.inbox.pushed.lock().unwrap().clone()
    }
    fn of(&self, service: &str) -> Vec<Pushed> {
        self.pushed()
            .into_iter()
            .filter(|p| p.labels["service_name"] == service)
            .collect()
    }
}

// --- helpers ------------------------------------------------------------------------

fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
        .map(|v| v as u64)
}

/// Windows of one series, in push order: each starts where the previous ended.
fn assert_contiguous(what: &str, profiles: &[Pushed]) {
    for w in profiles.windows(2) {
        let (a, b) = (&w[0].profile, &w[1].profile);
        assert_eq!(
            a.time_nanos + a.duration_nanos,
            b.time_nanos,
            "{what}: a gap or an overlap between two pushed windows"
        );
    }
}

/// `go tool pprof -raw` parses the profile; its header shows the sample types (the
/// default one marked `[dflt]`) and the profile's time.
fn go_raw(dir: &Path, i: usize, p: &Pushed) {
    let file = dir.join(format!("p{i}.pb.gz"));
    std::fs::write(&file, &p.gz).unwrap();
    let out = Command::new(tool("go", "golang-go"))
        .args(["tool", "pprof", "-raw"])
        .arg(&file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof -raw {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let types = p.profile.sample_types().join(" ");
    assert!(
        text.lines()
            .any(|l| l.replace("[dflt]", "").trim() == types),
        "-raw shows the sample types {types}:\n{text}"
    );
    assert!(text.contains("\nTime: "), "-raw shows the time:\n{text}");
}

/// The agent's `out=` tree: root-first method paths → (calls, bytecodes), nonzero only.
fn agent_tree(file: &Path) -> BTreeMap<Vec<String>, (u64, u64)> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("the agent's out= file"))
            .expect("JSON");
    let mut out = BTreeMap::new();
    let mut stack: Vec<(Vec<String>, &Value)> = v["root"]["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|n| (vec![], n))
        .collect();
    while let Some((mut path, n)) = stack.pop() {
        path.push(n["method"].as_str().expect("method").to_string());
        let c = n["calls"].as_u64().expect("calls");
        let b = n["bytecodes"].as_u64().expect("bytecodes");
        if c != 0 || b != 0 {
            let e: &mut (u64, u64) = out.entry(path.clone()).or_default();
            e.0 += c;
            e.1 += b;
        }
        for ch in n["children"].as_array().into_iter().flatten() {
            stack.push((path.clone(), ch));
        }
    }
    out
}

/// The sum of every pushed delta: paths → (calls, bytecodes), nonzero only.
fn pushed_sum(profiles: &[Pushed]) -> BTreeMap<Vec<String>, (u64, u64)> {
    let mut out: BTreeMap<Vec<String>, (u64, u64)> = BTreeMap::new();
    for p in profiles {
        for (path, v) in p.profile.by_stack() {
            let e = out.entry(path).or_default();
            e.0 += v[0] as u64;
            e.1 += v[1] as u64;
        }
    }
    out.retain(|_, v| *v != (0, 0));
    out
}

const JVM_TYPES: &str = "calls/count bytecodes/count";

/// The sum of every pushed delta's CPU (third value): paths → ns, nonzero only.
fn pushed_cpu(profiles: &[Pushed]) -> BTreeMap<Vec<String>, i64> {
    pushed_at(profiles, 2)
}

/// The sum of every pushed delta's value at `index` (its sample type's): paths → value,
/// nonzero only.
fn pushed_at(profiles: &[Pushed], index: usize) -> BTreeMap<Vec<String>, i64> {
    let mut out: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    for p in profiles {
        for (path, v) in p.profile.by_stack() {
            *out.entry(path).or_default() += v.get(index).copied().unwrap_or(0);
        }
    }
    out.retain(|_, v| *v != 0);
    out
}

/// The CPU per context of jpd's whole-tree pprof of `pid` (`jpctl jvm export`).
fn exported_cpu(jpd: &Jpd, pid: u32, dir: &Path) -> BTreeMap<Vec<String>, i64> {
    exported_at(jpd, pid, dir, 2)
}

/// The value at `index` per stack of jpd's whole-tree pprof of `pid`, idle threads'
/// off-CPU time included (`--all`): a push carries everything, a file leaves idle
/// waits out unless asked (a thread preempted at its root is idle).
fn exported_at(jpd: &Jpd, pid: u32, dir: &Path, index: usize) -> BTreeMap<Vec<String>, i64> {
    let file = dir.join("exported.pb.gz");
    let _ = std::fs::remove_file(&file);
    let pid_text = pid.to_string();
    let path = file.to_str().expect("UTF-8 path");
    jpd.jpctl_output(&[
        "jvm", "export", &pid_text, "--format", "pprof", "--all", "-o", path,
    ]);
    let gz = std::fs::read(&file).expect("read the export");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut raw)
        .expect("gunzip the export");
    let profile = Profile::decode(raw.as_slice()).expect("decode the export");
    pushed_at(
        &[Pushed {
            labels: BTreeMap::new(),
            profile,
            gz,
        }],
        index,
    )
}

fn unix_nanos_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// `ca.pem` (a test CA) and `server.pem`/`server.key` (127.0.0.1, signed by it) in `dir`.
fn make_certs(dir: &Path) {
    let openssl = tool("openssl", "openssl");
    let run = |args: &[&str]| {
        let out = Command::new(&openssl)
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=jp test CA",
    ]);
    run(&ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run(&csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
}

// --- tests -----------------------------------------------------------------------

/// For the tests without a JVM: jpd attaches to no JVM on this host (other test runs').
const NO_USDT: &str = "[usdt]\nenabled = false\n\n";

#[test]
fn pushed_jvm_deltas_add_up_to_the_agents_tree() {
    let lib = jp_testkit::agent_lib();
    let scratch = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(scratch.path());
    let recv = Receiver::start();
    let _one = crate::support::exclusive();
    let t_start = unix_nanos_now();
    let jpd = Jpd::start(&format!(
        "[usdt]\nscan_interval_ms = 100\n\n[pyroscope]\nenabled = true\nurl = \"{}\"\ninterval_s = 1\nlabels = {{ env = \"test\", cluster = \"c1\" }}\n",
        recv.url()
    ));
    let (pid, out_file) = paper_over_intervals(&jpd, &lib, scratch.path());
    let agent = agent_tree(&out_file);
    assert!(!agent.is_empty(), "the agent's tree is empty");

    // The JVM's last counts (main's own arrive at exit) reach the receiver within a few
    // intervals; the sum never goes past the agent's tree.
    wait_for(
        "the pushed deltas to add up to the agent's tree",
        Duration::from_secs(30),
        || {
            let sum = pushed_sum(&recv.of("FleetPaper"));
            for (path, v) in &sum {
                let a = agent.get(path).copied().unwrap_or_default();
                assert!(
                    v.0 <= a.0 && v.1 <= a.1,
                    "{path:?}: pushed {v:?}, more than the agent's {a:?}"
                );
            }
            sum == agent
        },
    );
    // And stays there: nothing is pushed twice.
    std::thread::sleep(Duration::from_secs(3));
    let jvm = recv.of("FleetPaper");
    assert_eq!(
        pushed_sum(&jvm),
        agent,
        "context by context, after 3 more s"
    );
    assert!(
        jvm.len() >= 3,
        "{} jvm_mct pushes: the runs should span several intervals",
        jvm.len()
    );

    assert!(
        jvm.iter()
            .any(|p| p.profile.sample_types().join(" ") == format!("{JVM_TYPES} cpu/nanoseconds")),
        "no jvm_mct push carried CPU: jpd's sampler never joined the JVM"
    );
    // The pushed CPU adds up to what jpd holds for the JVM's contexts (its exported
    // profile), context by context. (Samples waiting for their context's definition
    // may still resolve: a few intervals for both to settle.) 0.8 s of spinning is
    // hundreds of samples.
    let t0 = Instant::now();
    loop {
        let exported = exported_cpu(&jpd, pid, scratch.path());
        let pushed = pushed_cpu(&recv.of("FleetPaper"));
        let spun: i64 = exported.values().sum();
        if pushed == exported && spun >= 100 * 1_003_009 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "CPU per context (at least 100 samples expected): pushed {pushed:?}\nexported {exported:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let kernel = recv.of("jp-kernel");
    assert!(kernel.len() >= 5, "{} kernel pushes", kernel.len());
    let h = host();
    for (what, list, name, types) in [
        (
            "kernel",
            &kernel,
            "process_cpu",
            "samples/count cpu/nanoseconds",
        ),
        ("jvm", &jvm, "jvm_mct", JVM_TYPES),
    ] {
        for p in list.iter() {
            let l = &p.labels;
            let want: BTreeMap<String, String> = [
                ("__delta__", "false"),
                ("__name__", name),
                ("cluster", "c1"),
                ("env", "test"),
                ("host", h.as_str()),
                ("service_name", l["service_name"].as_str()),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            assert_eq!(l, &want, "{what} labels");
            let got = p.profile.sample_types().join(" ");
            // CPU per context is a third type once jpd's sampler has joined the JVM
            // (its first push may come before).
            let joined = format!("{types} cpu/nanoseconds");
            assert!(
                got == types || (what == "jvm" && got == joined),
                "{what}: sample types {got}, {types} expected"
            );
            let (t, d) = (p.profile.time_nanos, p.profile.duration_nanos);
            assert!(
                t >= t_start && t + d <= unix_nanos_now(),
                "{what}: window {t}+{d}"
            );
            assert!(d > 0, "{what}: empty window");
        }
        assert_contiguous(what, list);
    }
    // Kernel windows last one interval (1 s, give or take scheduling).
    for p in &kernel[1..] {
        let d = p.profile.duration_nanos;
        assert!(
            (800_000_000..=2_500_000_000).contains(&d),
            "kernel window of {d} ns for interval_s = 1"
        );
    }
    let files = tempfile::tempdir().unwrap();
    for (i, p) in kernel.iter().take(3).chain(jvm.iter()).enumerate() {
        go_raw(files.path(), i, p);
    }
    let m = jpd.metrics();
    let sent = metric(&m, "jp_pyroscope_sent_profiles_total").unwrap();
    assert_eq!(sent, recv.pushed().len() as u64, "{m}");
    assert_eq!(
        metric(&m, "jp_pyroscope_pushes_total{result=\"error\"}"),
        Some(0)
    );
    jpd.stop();
}

/// With `kernel.offcpu`, the pushed `jvm_mct` deltas carry `offcpu` and `wall` too
/// (FleetPaper's main thread waits on stdin between runs, under main's context), and they
/// add up, stack by stack, to what jpd's whole-tree pprof holds for the JVM.
#[test]
fn pushed_jvm_deltas_carry_off_cpu_and_wall_time() {
    let lib = jp_testkit::agent_lib();
    let scratch = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(scratch.path());
    let recv = Receiver::start();
    let _one = crate::support::exclusive();
    let jpd = Jpd::start(&format!(
        "offcpu = true\n\n[usdt]\nscan_interval_ms = 100\n\n[pyroscope]\nenabled = true\nurl = \"{}\"\ninterval_s = 1\n",
        recv.url()
    ));
    let (pid, _) = paper_over_intervals(&jpd, &lib, scratch.path());
    let types = format!("{JVM_TYPES} cpu/nanoseconds offcpu/nanoseconds wall/nanoseconds");
    let t0 = Instant::now();
    loop {
        let pushed = recv.of("FleetPaper");
        let with_offcpu = pushed
            .iter()
            .any(|p| p.profile.sample_types().join(" ") == types);
        let (off, wall) = (pushed_at(&pushed, 3), pushed_at(&pushed, 4));
        let exported = (
            exported_at(&jpd, pid, scratch.path(), 3),
            exported_at(&jpd, pid, scratch.path(), 4),
        );
        let blocked: i64 = exported.0.values().sum();
        if with_offcpu && blocked > 0 && (&off, &wall) == (&exported.0, &exported.1) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "with {types}: {with_offcpu}; off CPU pushed {off:?}\nexported {:?}\nwall pushed {wall:?}\nexported {:?}",
            exported.0,
            exported.1
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    jpd.stop();
}

#[test]
fn a_failing_then_hanging_server_never_blocks_jpd_and_gets_everything_later() {
    let recv = Receiver::start();
    recv.set_mode(FAIL);
    let _one = crate::support::exclusive();
    let secrets = tempfile::tempdir().unwrap();
    let pw = secrets.path().join("password");
    std::fs::write(&pw, "glc_s3cret\n").unwrap();
    let jpd = Jpd::start(&format!(
        "{NO_USDT}[pyroscope]\nenabled = true\nurl = \"{}/\"\ninterval_s = 1\ntimeout_s = 2\njvms = false\nbasic_auth_user = \"123456\"\nbasic_auth_password_file = \"{}\"\ntenant_id = \"team-a\"\n",
        recv.url(),
        pw.display()
    ));
    let responsive = |what: &str| {
        let t0 = Instant::now();
        let m = jpd.metrics();
        let status = jpd.jpctl().arg("status").output().expect("run jpctl");
        assert!(
            status.status.success(),
            "{what}: jpctl status failed: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{what}: /metrics and gRPC took {took:?}"
        );
        m
    };
    wait_for("3 failed pushes", Duration::from_secs(20), || {
        metric(
            &jpd.metrics(),
            "jp_pyroscope_pushes_total{result=\"error\"}",
        )
        .unwrap_or(0)
            >= 3
    });
    let m = responsive("failing receiver");
    assert!(
        metric(&m, "jp_pyroscope_backlog_requests").unwrap() >= 1,
        "{m}"
    );
    assert_eq!(
        metric(&m, "jp_pyroscope_pushes_total{result=\"ok\"}"),
        Some(0)
    );

    recv.set_mode(HANG);
    let before = recv.inbox.attempts.load(Ordering::Relaxed);
    let errors = metric(&m, "jp_pyroscope_pushes_total{result=\"error\"}").unwrap();
    // Attempts that time out after timeout_s = 2 count as errors; collection goes on.
    wait_for("a timed-out push", Duration::from_secs(30), || {
        metric(
            &jpd.metrics(),
            "jp_pyroscope_pushes_total{result=\"error\"}",
        )
        .unwrap()
            > errors
            && recv.inbox.attempts.load(Ordering::Relaxed) > before
    });
    for i in 0..3 {
        responsive(&format!("hanging receiver, check {i}"));
        std::thread::sleep(Duration::from_millis(700));
    }
    let m = jpd.metrics();
    let queued = metric(&m, "jp_pyroscope_backlog_requests").unwrap();
    assert!(queued >= 5, "pushes queue up while the server hangs: {m}");
    assert!(recv.pushed().is_empty());

    recv.set_mode(OK);
    // Back-off is at most 60 s; then the whole backlog drains.
    wait_for("the backlog to drain", Duration::from_secs(90), || {
        metric(&jpd.metrics(), "jp_pyroscope_backlog_requests") == Some(0)
            && recv.pushed().len() as u64 > queued
    });
    let m = jpd.metrics();
    let kernel = recv.of("jp-kernel");
    assert_eq!(
        metric(
            &m,
            "jp_pyroscope_dropped_profiles_total{reason=\"backlog_full\"}"
        ),
        Some(0)
    );
    assert_eq!(
        metric(&m, "jp_pyroscope_sent_profiles_total"),
        Some(recv.pushed().len() as u64),
        "{m}"
    );
    // Every window since the pusher started, none lost, none twice.
    assert_contiguous("kernel", &kernel);
    let first = kernel.first().unwrap().profile.time_nanos;
    let last = kernel.last().unwrap();
    let covered = last.profile.time_nanos + last.profile.duration_nanos - first;
    assert!(
        covered as u64 >= queued * 900_000_000,
        "{} windows cover {covered} ns",
        kernel.len()
    );
    let want_auth = format!("Basic {}", base64(b"123456:glc_s3cret"));
    for h in recv.inbox.headers.lock().unwrap().iter() {
        assert_eq!(h["authorization"].to_str().unwrap(), want_auth);
        assert_eq!(h["x-scope-orgid"].to_str().unwrap(), "team-a");
        assert_eq!(h["connect-protocol-version"].to_str().unwrap(), "1");
        assert!(h["user-agent"].to_str().unwrap().starts_with("jpd/"));
    }
    jpd.stop();
}

#[test]
fn sighup_enables_retargets_and_disables_without_losing_windows() {
    let a = Receiver::start();
    let b = Receiver::start();
    let _one = crate::support::exclusive();
    let jpd = Jpd::start(NO_USDT);
    let config = std::fs::read_to_string(&jpd.config).unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, "tok-123\n").unwrap();
    let reload = |extra: &str| {
        std::fs::write(&jpd.config, format!("{config}\n{extra}")).unwrap();
        jpd.signal(libc::SIGHUP);
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(a.pushed().is_empty() && b.pushed().is_empty());

    reload(&format!(
        "[pyroscope]\nenabled = true\nurl = \"{}\"\ninterval_s = 1\njvms = false\n",
        a.url()
    ));
    wait_for("pushes to a", Duration::from_secs(20), || {
        a.pushed().len() >= 3
    });
    reload(&format!(
        "[pyroscope]\nenabled = true\nurl = \"{}\"\ninterval_s = 1\njvms = false\nbearer_token_file = \"{}\"\n",
        b.url(),
        token.display()
    ));
    wait_for("pushes to b", Duration::from_secs(20), || {
        b.pushed().len() >= 3
    });
    let a_count = a.pushed().len();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        a.pushed().len(),
        a_count,
        "a gets nothing after the retarget"
    );
    // Across the retarget the windows continue: a's last ends where b's first starts.
    let mut all = a.of("jp-kernel");
    all.extend(b.of("jp-kernel"));
    assert_contiguous("kernel across the retarget", &all);
    for h in b.inbox.headers.lock().unwrap().iter() {
        assert_eq!(h["authorization"].to_str().unwrap(), "Bearer tok-123");
    }
    assert!(a
        .inbox
        .headers
        .lock()
        .unwrap()
        .iter()
        .all(|h| h.get("authorization").is_none()));

    // A reload that fails (unreadable token) keeps pushing with the running settings.
    reload(&format!(
        "[pyroscope]\nenabled = true\nurl = \"{}\"\ninterval_s = 1\njvms = false\nbearer_token_file = \"{}\"\n",
        a.url(),
        secrets.path().join("missing").display()
    ));
    let n = b.pushed().len();
    wait_for("b to keep getting pushes", Duration::from_secs(10), || {
        b.pushed().len() >= n + 2
    });
    assert!(
        jpd.log_text().contains("bearer_token_file"),
        "the log names the key:\n{}",
        jpd.log_text()
    );

    reload("[pyroscope]\nenabled = false\n");
    std::thread::sleep(Duration::from_millis(1500));
    let n = b.pushed().len();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(b.pushed().len(), n, "disabled: no more pushes");
    let m = jpd.metrics();
    assert_eq!(metric(&m, "jp_pyroscope_backlog_requests"), Some(0), "{m}");
    jpd.stop();
}

#[test]
fn https_checks_the_certificate_and_trusts_a_configured_ca() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let recv = Receiver::start();
    let (url, failed_handshakes) = recv.tls_front(certs.path());
    let _one = crate::support::exclusive();
    // Mozilla's roots do not know the test CA: every handshake fails, pushes wait.
    let jpd = Jpd::start(&format!(
        "{NO_USDT}[pyroscope]\nenabled = true\nurl = \"{url}\"\ninterval_s = 1\njvms = false\n"
    ));
    wait_for("a refused certificate", Duration::from_secs(20), || {
        failed_handshakes.load(Ordering::Relaxed) >= 2
            && metric(
                &jpd.metrics(),
                "jp_pyroscope_pushes_total{result=\"error\"}",
            )
            .unwrap()
                >= 2
    });
    assert!(recv.pushed().is_empty());
    assert!(
        jpd.log_text().contains("certificate"),
        "the log says why:\n{}",
        jpd.log_text()
    );
    // Trusting the test CA (SIGHUP): the queued windows and the next ones arrive.
    let config = std::fs::read_to_string(&jpd.config).unwrap();
    std::fs::write(
        &jpd.config,
        format!(
            "{config}tls_ca_file = \"{}\"\n",
            certs.path().join("ca.pem").display()
        ),
    )
    .unwrap();
    jpd.signal(libc::SIGHUP);
    wait_for("pushes over https", Duration::from_secs(90), || {
        recv.pushed().len() >= 4
            && metric(&jpd.metrics(), "jp_pyroscope_backlog_requests") == Some(0)
    });
    let kernel = recv.of("jp-kernel");
    assert_contiguous("kernel over https", &kernel);
    let m = jpd.metrics();
    assert_eq!(
        metric(
            &m,
            "jp_pyroscope_dropped_profiles_total{reason=\"backlog_full\"}"
        ),
        Some(0)
    );
    jpd.stop();
}

#[test]
fn stopping_jpd_pushes_the_interval_begun() {
    let recv = Receiver::start();
    let _one = crate::support::exclusive();
    let jpd = Jpd::start(&format!(
        "{NO_USDT}[pyroscope]\nenabled = true\nurl = \"{}\"\ninterval_s = 3600\njvms = false\n",
        recv.url()
    ));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        recv.pushed().is_empty(),
        "no push before the first interval"
    );
    let t_stop = unix_nanos_now();
    jpd.stop();
    let kernel = recv.of("jp-kernel");
    assert_eq!(kernel.len(), 1, "one push at SIGTERM");
    let p = &kernel[0].profile;
    assert!(
        p.duration_nanos >= 2_000_000_000 && p.time_nanos + p.duration_nanos >= t_stop,
        "the window runs from the start to the stop: {} + {} ns, stopped at {t_stop}",
        p.time_nanos,
        p.duration_nanos
    );
    let samples: i64 = p.sample.iter().map(|s| s.value[0]).sum();
    assert!(samples > 0, "the window holds the samples taken");
}

#[test]
fn check_config_names_the_pyroscope_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        let out = Command::new(jp_testkit::jpd())
            .arg("--check-config")
            .arg(&f)
            .output()
            .expect("run jpd");
        (
            out.status.code(),
            // Without the fix-it warnings about this host (a missing group `jp`).
            String::from_utf8_lossy(&out.stderr)
                .replace(&f.display().to_string(), "F")
                .lines()
                .filter(|l| !l.starts_with("jpd: warning: "))
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
        )
    };
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "x\n").unwrap();
    let (code, err) = run(
        "good.toml",
        &format!("[pyroscope]\nenabled = true\nurl = \"https://profiles.example.net\"\nbasic_auth_user = \"1\"\nbasic_auth_password_file = \"{}\"\n[pyroscope.labels]\nenv = \"prod\"\n", pw.display()),
    );
    assert_eq!((code, err.as_str()), (Some(0), ""));
    for (text, want) in [
        (
            "[pyroscope]\nenabled = true\n",
            "jpd: invalid config F, line 2, column 1: enabled = true needs url (e.g. \"http://pyroscope:4040\")\n",
        ),
        (
            "[pyroscope]\nurl = \"pyroscope:4040\"\n",
            "jpd: invalid config F, line 2, column 7: url = \"pyroscope:4040\" must start with http:// or https://\n",
        ),
        (
            "[pyroscope]\ninterval_s = 0\n",
            "jpd: invalid config F, line 2, column 14: interval_s = 0 is out of range 1..=3600\n",
        ),
        (
            "[pyroscope]\nlabels = { \"bad-name\" = \"x\" }\n",
            "jpd: invalid config F, line 2, column 10: labels: \"bad-name\" is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)\n",
        ),
        (
            "[pyroscope]\nurl = \"http://p:4040\"\ntls_ca_file = \"/etc/ssl/ca.pem\"\n",
            "jpd: invalid config F, line 3, column 1: tls_ca_file is set but url is not https://\n",
        ),
        (
            "[pyroscope]\nenabled = true\nurl = \"https://p:4040\"\ntls_ca_file = \"/etc/hostname\"\n",
            "jpd: F: pyroscope.tls_ca_file = \"/etc/hostname\": holds no certificate\n",
        ),
        (
            "[pyroscope]\nurl = \"http://p:4040\"\nbasic_auth_user = \"u\"\n",
            "jpd: invalid config F, line 3, column 1: basic_auth_user needs basic_auth_password_file\n",
        ),
        (
            "[pyroscope]\nenabled = true\nurl = \"http://p:4040\"\nbearer_token_file = \"/nonexistent/token\"\n",
            "jpd: F: pyroscope.bearer_token_file = \"/nonexistent/token\": cannot read it: No such file or directory (os error 2)\n",
        ),
    ] {
        let (code, err) = run("bad.toml", text);
        assert_eq!((code, err.as_str()), (Some(1), want), "{text}");
    }
}

fn base64(data: &[u8]) -> String {
    // Independent of jpd's encoder: the standard alphabet, padded.
    let abc = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = String::new();
    for b in data {
        bits.push_str(&format!("{b:08b}"));
    }
    while !bits.len().is_multiple_of(6) {
        bits.push('0');
    }
    let mut out: String = bits
        .as_bytes()
        .chunks(6)
        .map(|c| abc[usize::from_str_radix(std::str::from_utf8(c).unwrap(), 2).unwrap()] as char)
        .collect();
    while !out.len().is_multiple_of(4) {
        out.push('=');
    }
    out
}
