//! The jpctl binary (`cargo xtask build`'s: `$JPCTL`, else `target/jp/jpctl`) against a
//! stand-in jpd (a fake `jp.v1.Jp` on a temp socket): exact outputs of every command,
//! `-o FILE` where a command writes a file, `--socket` and `JP_SOCKET`, and the error when
//! nothing listens; the flame graph pages of `jpctl kernel` and `jpctl jvm export` in a
//! real browser.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use jp_proto::v1 as pb;
use jp_proto::v1::jp_server::{Jp, JpServer};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

#[derive(Default)]
struct Fake {
    /// top_n of every GetKernelProfile call.
    top_n: Mutex<Vec<u32>>,
    resets: Mutex<u32>,
    sources: Mutex<Vec<i32>>,
    /// (pid, max_depth, min_share) of every GetJvmProfile call.
    profiles: Mutex<Vec<(u32, u32, f64)>>,
    /// (pid, order, limit) of every GetJvmTop call.
    tops: Mutex<Vec<(u32, i32, u32)>>,
    /// List the hostile JVM too (its names carry terminal escapes).
    list_hostile: std::sync::atomic::AtomicBool,
}

fn function(
    name: &str,
    module: Option<&str>,
    address: u64,
    size: u64,
    samples: u64,
) -> pb::KernelFunction {
    pb::KernelFunction {
        name: name.into(),
        module: module.map(Into::into),
        address,
        size,
        samples,
        load: samples as f64 / size as f64,
    }
}

fn profile(top_n: u32) -> pb::KernelProfile {
    let mut functions = vec![
        function("read_zero", None, 0xffff_ffff_8180_0000, 208, 951),
        function("clear_user_rep_good", None, 0xffff_ffff_8170_0000, 32, 300),
        function(
            "vring_interrupt",
            Some("virtio_ring"),
            0xffff_ffff_c000_1000,
            256,
            12,
        ),
    ];
    if top_n > 0 {
        functions.truncate(top_n as usize);
    }
    pb::KernelProfile {
        source: 0,
        samples: Some(pb::ModeSamples {
            total: 4000,
            kernel: 1300,
            user: 700,
            idle: 2000,
        }),
        shift: 4,
        text_start: 0xffff_ffff_8100_0000,
        text_end: 0xffff_ffff_8200_0000,
        functions,
        unknown_samples: 2,
        buckets: vec![],
        other_ips: vec![],
        otlp: vec![],
    }
}

/// The service; `Fake` stays readable from the test.
struct FakeSvc(Arc<Fake>);

#[tonic::async_trait]
impl Jp for FakeSvc {
    async fn get_status(
        &self,
        _: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::Status>, Status> {
        Ok(Response::new(pb::Status {
            version: "9.9.9".into(),
            uptime_ms: 3_723_000,
            kernel: Some(pb::KernelStatus {
                attached: true,
                cpus: vec![0, 1],
                frequency_hz: 997,
                shift: 4,
                ..Default::default()
            }),
            jvm: Some(pb::JvmStatus {
                jvms_attached: 1,
                jvms_exited: 1,
                records: 120,
                bytes: 54_321,
                malformed: 2,
                malformed_by_reason: vec![pb::JvmMalformed {
                    reason: "bad magic".into(),
                    records: 2,
                }],
                lost: 3,
                ring_full: 3,
                fired: 125,
                nodes: 12,
                memory_bytes: 4096,
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
    async fn get_kernel_profile(
        &self,
        r: Request<pb::GetKernelProfileRequest>,
    ) -> Result<Response<pb::KernelProfile>, Status> {
        let r = r.into_inner();
        let top_n = r.top_n;
        self.0.top_n.lock().unwrap().push(top_n);
        self.0.sources.lock().unwrap().push(r.source);
        Ok(Response::new(profile(top_n)))
    }
    async fn get_irq_stats(
        &self,
        _: Request<pb::GetIrqStatsRequest>,
    ) -> Result<Response<pb::IrqStats>, Status> {
        Ok(Response::new(pb::IrqStats {
            irqs: vec![pb::IrqHandler {
                irq: 36,
                handler: "virtio1-req.0".into(),
                function: "vring_interrupt".into(),
                function_address: 0xffff_ffff_8160_0000,
                count: 321,
                time_ns: 1_855_353,
                function_module: None,
                unhandled: 0,
            }],
            softirqs: vec![
                pb::Softirq {
                    name: "TIMER".into(),
                    vector: 1,
                    count: 361,
                    time_ns: 1_500_000,
                },
                pb::Softirq {
                    name: "NET_RX".into(),
                    vector: 3,
                    count: 0,
                    time_ns: 0,
                },
            ],
        }))
    }
    async fn reset(
        &self,
        _: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        *self.0.resets.lock().unwrap() += 1;
        Ok(Response::new(pb::ResetResponse { reset_unix_ms: 1 }))
    }
    type WatchStream = tokio_stream::Empty<Result<pb::WatchUpdate, Status>>;
    async fn watch(
        &self,
        _: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Ok(Response::new(tokio_stream::empty()))
    }
    async fn list_jvms(
        &self,
        _: Request<pb::ListJvmsRequest>,
    ) -> Result<Response<pb::JvmList>, Status> {
        let mut jvms = vec![paper_jvm(), broken_jvm()];
        if self
            .0
            .list_hostile
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            jvms.push(hostile_jvm());
        }
        Ok(Response::new(pb::JvmList { jvms }))
    }
    async fn get_jvm_profile(
        &self,
        r: Request<pb::GetJvmProfileRequest>,
    ) -> Result<Response<pb::JvmProfile>, Status> {
        let r = r.into_inner();
        known(r.pid)?;
        self.0
            .profiles
            .lock()
            .unwrap()
            .push((r.pid, r.max_depth, r.min_share));
        let mut p = if r.pid == JOINED_PID {
            joined_profile()
        } else if r.pid == HOSTILE_PID {
            hostile_profile()
        } else {
            paper_profile()
        };
        if r.pid == HUGE_PID {
            // Above jpctl's 64 MiB limit for one answer.
            p.methods[0].name = "x".repeat(65 << 20);
        }
        Ok(Response::new(p))
    }
    async fn get_jvm_top(
        &self,
        r: Request<pb::GetJvmTopRequest>,
    ) -> Result<Response<pb::JvmTop>, Status> {
        let r = r.into_inner();
        known(r.pid)?;
        self.0.tops.lock().unwrap().push((r.pid, r.order, r.limit));
        let mut top = paper_top(r.order);
        if r.pid == HOSTILE_PID {
            top.jvm = Some(hostile_jvm());
            top.methods[0].name = HOSTILE_METHOD.into();
        }
        Ok(Response::new(top))
    }
    type ExportJvmProfileStream =
        tokio_stream::Iter<std::vec::IntoIter<Result<pb::JvmExportChunk, Status>>>;
    async fn export_jvm_profile(
        &self,
        r: Request<pb::ExportJvmProfileRequest>,
    ) -> Result<Response<Self::ExportJvmProfileStream>, Status> {
        let r = r.into_inner();
        known(r.pid)?;
        let name = pb::JvmExportFormat::try_from(r.format)
            .unwrap()
            .as_str_name()
            .to_string();
        let chunks = if r.pid == SHORT_PID {
            // Claims more than it sends: jpctl must not write a file.
            vec![Ok(pb::JvmExportChunk {
                data: b"partial".to_vec(),
                total_bytes: 100,
                last: true,
                ..Default::default()
            })]
        } else {
            let data = if r.pid == PAPER_PID && r.format == pb::JvmExportFormat::Json as i32 {
                paper_json()
            } else {
                format!("{name} of {}\nsecond chunk\n", r.pid).into_bytes()
            };
            // Two chunks, the size announced in the last.
            let (first, second) = data.split_at(data.len() / 2);
            vec![
                Ok(pb::JvmExportChunk {
                    data: first.to_vec(),
                    total_bytes: 0,
                    last: false,
                    ..Default::default()
                }),
                Ok(pb::JvmExportChunk {
                    data: second.to_vec(),
                    total_bytes: data.len() as u64,
                    last: true,
                    ..Default::default()
                }),
            ]
        };
        Ok(Response::new(tokio_stream::iter(chunks)))
    }

    type ProfileJvmStream =
        tokio_stream::Iter<std::vec::IntoIter<Result<pb::JvmWindowProfile, Status>>>;

    /// PAPER_PID gets a window (its file: the format's name), any other pid the refusal
    /// of a JVM profiled from start.
    async fn profile_jvm(
        &self,
        r: Request<pb::ProfileJvmRequest>,
    ) -> Result<Response<Self::ProfileJvmStream>, Status> {
        let r = r.into_inner();
        if r.pid != PAPER_PID {
            return Err(Status::failed_precondition(format!(
                "JVM {0} is profiled from start: its live tree is already exact: jpctl jvm tree {0}",
                r.pid
            )));
        }
        let name = pb::JvmExportFormat::try_from(r.format.unwrap_or(0))
            .unwrap()
            .as_str_name()
            .to_string();
        let data = format!(
            "{name} of window 77, {} s, include {:?}\n",
            r.seconds, r.include
        );
        let messages = vec![
            Ok(pb::JvmWindowProfile {
                window: Some(paper_window()),
                ..Default::default()
            }),
            Ok(pb::JvmWindowProfile {
                chunk: Some(pb::JvmExportChunk {
                    total_bytes: data.len() as u64,
                    data: data.into_bytes(),
                    last: true,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        ];
        Ok(Response::new(tokio_stream::iter(messages)))
    }

    async fn list_jvm_windows(
        &self,
        _: Request<pb::ListJvmWindowsRequest>,
    ) -> Result<Response<pb::JvmWindowList>, Status> {
        Ok(Response::new(pb::JvmWindowList {
            windows: vec![paper_window()],
        }))
    }

    type GetJvmWindowStream = Self::ProfileJvmStream;

    async fn get_jvm_window(
        &self,
        r: Request<pb::GetJvmWindowRequest>,
    ) -> Result<Response<Self::GetJvmWindowStream>, Status> {
        let r = r.into_inner();
        Err(Status::not_found(format!(
            "jpd keeps no window {} of JVM {}",
            r.id, r.pid
        )))
    }
}

fn paper_window() -> pb::JvmWindow {
    pb::JvmWindow {
        id: 77,
        pid: PAPER_PID,
        main: "Paper".into(),
        scope: "include=Paper".into(),
        seconds: 2,
        opened_unix_ms: 1_796_588_043_000,
        closed_unix_ms: 1_796_588_045_000,
        closed_by: "deadline".into(),
        bba: "default".into(),
        contexts: 3,
        calls: 40,
        bytecodes: 400,
        origin: pb::JvmWindowOrigin::Request as i32,
        jdk_version: "17.0.15".into(),
        ..Default::default()
    }
}

const PAPER_PID: u32 = 4242;
const SHORT_PID: u32 = 77;
const HUGE_PID: u32 = 88;
const JOINED_PID: u32 = 4343;
/// A JVM (or a fake agent) that chose names to attack the terminal of whoever runs jpctl.
const HOSTILE_PID: u32 = 6666;
const HOSTILE_METHOD: &str = "Evil.\u{1b}[2J\u{202e}gnp.f\r\u{9b}31m()V";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn known(pid: u32) -> Result<(), Status> {
    if [PAPER_PID, SHORT_PID, HUGE_PID, JOINED_PID, HOSTILE_PID].contains(&pid) {
        Ok(())
    } else {
        Err(Status::not_found(format!(
            "no JVM with pid {pid}: jpd holds JVM pids 4242, 5151 (see `jpctl jvm list`)"
        )))
    }
}

fn paper_jvm() -> pb::JvmSummary {
    pb::JvmSummary {
        pid: PAPER_PID,
        ns_pid: None,
        main: "Paper".into(),
        jdk_version: "17.0.9+9".into(),
        bba: "precise".into(),
        threads_live: 1,
        threads_total: 2,
        calls: 78,
        bytecodes: 624,
        attached_since_unix_ms: now_ms() - 3_600_000,
        exited_unix_ms: now_ms() - 65_000,
        complete: true,
        nodes: 6,
        ..Default::default()
    }
}

/// A main class that retitles the terminal, then 3000 characters.
fn hostile_main() -> String {
    format!("\x1b]0;pwned\x07{}", "A".repeat(3000))
}

fn hostile_jvm() -> pb::JvmSummary {
    pb::JvmSummary {
        pid: HOSTILE_PID,
        main: hostile_main(),
        jdk_version: "17\x1b[31m".into(),
        bba: "precise".into(),
        ..paper_jvm()
    }
}

fn hostile_profile() -> pb::JvmProfile {
    let mut p = paper_profile();
    p.jvm = Some(hostile_jvm());
    p.methods[2].name = HOSTILE_METHOD.into();
    p
}

fn broken_jvm() -> pb::JvmSummary {
    pb::JvmSummary {
        pid: 5151,
        ns_pid: Some(7),
        main: "app.jar".into(),
        jdk_version: "25+36".into(),
        bba: "default".into(),
        threads_live: 12,
        threads_total: 40,
        calls: 1_000_000,
        bytecodes: 987_654_321,
        attached_since_unix_ms: now_ms() - 90_061_000,
        exited_unix_ms: 0,
        complete: false,
        incomplete_reason: "1 thread waiting for a re-send".into(),
        records_lost: 3,
        records_malformed: 0,
        ring_rate_limited: 40,
        ring_full: 2,
        nodes: 5000,
        ..Default::default()
    }
}

fn method(id: u32, name: &str) -> pb::JvmMethod {
    pb::JvmMethod {
        id,
        name: name.into(),
        file: Some("Paper.java".into()),
    }
}

fn node(method_id: u32, depth: u32, calls: u64, bytecodes: u64, inclusive: u64) -> pb::JvmNode {
    pb::JvmNode {
        method_id,
        depth,
        calls,
        bytecodes,
        inclusive_bytecodes: inclusive,
        cut: None,
        cpu_ns: 0,
        inclusive_cpu_ns: 0,
        ..Default::default()
    }
}

/// The paper's tree at depth 2: f's two children are cut.
fn paper_profile() -> pb::JvmProfile {
    let mut f = node(2, 1, 1, 106, 616);
    f.cut = Some(pb::JvmCut {
        subtrees: 2,
        nodes: 3,
        calls: 75,
        bytecodes: 510,
        cpu_ns: 0,
        ..Default::default()
    });
    pb::JvmProfile {
        jvm: Some(paper_jvm()),
        methods: vec![
            method(0, "Paper.main([Ljava/lang/String;)V"),
            method(1, "Paper.<init>()V"),
            method(2, "Paper.f()V"),
        ],
        nodes: vec![node(0, 0, 1, 5, 624), node(1, 1, 1, 3, 3), f],
        root_cut: None,
        total_nodes: 6,
        cut_nodes: 3,
        max_depth: 2,
        min_share: 0.0,
        ..Default::default()
    }
}

/// `paper_profile` from a jpd whose sampler is joined to the JVM: 60 ms of CPU, 51 ms
/// of it the app's (0.3 ms at the root, outside any method), 40 ms under f's cut
/// children.
fn joined_profile() -> pb::JvmProfile {
    let mut p = paper_profile();
    let kind = |kind: &str, user_ns, kernel_ns| pb::JvmCpuKind {
        kind: kind.into(),
        user_ns,
        kernel_ns,
    };
    p.jvm = Some(pb::JvmSummary {
        pid: JOINED_PID,
        cpu: vec![
            kind("app", 48_000_000, 3_000_000),
            kind("jit", 9_000_000, 0),
        ],
        cpu_contexts_ns: 50_700_000,
        publishing_threads: 1,
        ..paper_jvm()
    });
    for (n, cpu) in p.nodes.iter_mut().zip([
        [500_000, 50_700_000],
        [200_000, 200_000],
        [10_000_000, 50_000_000],
    ]) {
        (n.cpu_ns, n.inclusive_cpu_ns) = (cpu[0], cpu[1]);
    }
    if let Some(c) = p.nodes[2].cut.as_mut() {
        c.cpu_ns = 40_000_000;
    }
    p
}

/// The paper's whole tree (the one `paper_profile` cuts at depth 2) as jpd exports it:
/// jp-mct/1 JSON.
fn paper_json() -> Vec<u8> {
    let mut t = jp_mct::Mct::new("precise");
    let info = |n: &str| jp_mct::MethodInfo {
        name: n.into(),
        file: Some("Paper.java".into()),
    };
    let main = t.add(0, info("Paper.main([Ljava/lang/String;)V"), 1, 5);
    t.add(main, info("Paper.<init>()V"), 1, 3);
    let f = t.add(main, info("Paper.f()V"), 1, 106);
    let g = t.add(f, info("Paper.g(I)V"), 10, 445);
    t.add(g, info("Paper.h()V"), 55, 55);
    t.add(f, info("Paper.h()V"), 10, 10);
    let mut out = Vec::new();
    jp_mct::write_json(&t, &mut out).expect("write jp-mct/1");
    out
}

fn paper_top(order: i32) -> pb::JvmTop {
    let m = |name: &str, calls, bytecodes, inclusive| pb::JvmMethodTotals {
        name: name.into(),
        file: Some("Paper.java".into()),
        calls,
        bytecodes,
        inclusive_bytecodes: inclusive,
        cpu_ns: 0,
        inclusive_cpu_ns: 0,
        ..Default::default()
    };
    pb::JvmTop {
        jvm: Some(paper_jvm()),
        order,
        methods: vec![m("Paper.g(I)V", 10, 445, 500), m("Paper.f()V", 1, 106, 616)],
        total_methods: 5,
        ..Default::default()
    }
}

struct FakeJpd {
    socket: PathBuf,
    fake: Arc<Fake>,
    rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn fake_jpd() -> FakeJpd {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("jpd.sock");
    let fake = Arc::new(Fake::default());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = {
        let _g = rt.enter();
        tokio::net::UnixListener::bind(&socket).unwrap()
    };
    let svc = JpServer::new(FakeSvc(Arc::clone(&fake)));
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    FakeJpd {
        socket,
        fake,
        rt,
        _dir: dir,
    }
}

fn jpctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(jp_testkit::jpctl())
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env_remove("JP_SOCKET")
        .output()
        .unwrap()
}

fn stdout_ok(socket: &Path, args: &[&str]) -> String {
    let o = jpctl(socket, args);
    assert!(
        o.status.success(),
        "jpctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn kernel_json_is_exact_and_top_is_passed_on() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["kernel", "--json", "--top", "2"]);
    let expected = r#"{
  "samples": {
    "total": 4000,
    "kernel": 1300,
    "user": 700,
    "idle": 2000
  },
  "shift": 4,
  "functions": [
    {
      "name": "read_zero",
      "module": null,
      "samples": 951,
      "load": 4.572115384615385
    },
    {
      "name": "clear_user_rep_good",
      "module": null,
      "samples": 300,
      "load": 9.375
    }
  ]
}
"#;
    assert_eq!(out, expected);
    stdout_ok(&d.socket, &["kernel"]);
    stdout_ok(&d.socket, &["kernel", "--source", "irq-entry"]);
    assert_eq!(*d.fake.top_n.lock().unwrap(), [2, 0, 0]);
    let irq_entry = pb::ProfileSource::IrqEntry as i32;
    assert_eq!(*d.fake.sources.lock().unwrap(), [0, 0, irq_entry]);
    drop(d.rt);
}

#[test]
fn readprofile_format_is_exact() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["kernel", "--format", "readprofile"]);
    let expected = concat!(
        "   300 clear_user_rep_good                        9.3750\n",
        "   951 read_zero                                  4.5721\n",
        "    12 vring_interrupt [virtio_ring]              0.0469\n",
        "     2 *unknown*\n",
        "  1263 total                                      0.0001\n",
    );
    assert_eq!(out, expected);
}

#[test]
fn kernel_table_irq_status_and_reset() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["kernel"]);
    let expected = concat!(
        "samples 4000 (kernel 32.5%, user 17.5%, idle 50.0%), shift 4\n",
        "  samples  share      load  function\n",
        "      951  47.5%    4.5721  read_zero\n",
        "      300  15.0%    9.3750  clear_user_rep_good\n",
        "       12   0.6%    0.0469  vring_interrupt [virtio_ring]\n",
        "        2   0.1%         -  *unknown*\n",
    );
    assert_eq!(out, expected);

    let out = stdout_ok(&d.socket, &["irq", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "irqs": [{"irq": 36, "handler": "virtio1-req.0", "function": "vring_interrupt", "count": 321, "time_ns": 1855353}],
            "softirqs": [{"name": "TIMER", "count": 361, "time_ns": 1500000}, {"name": "NET_RX", "count": 0, "time_ns": 0}],
        })
    );
    let out = stdout_ok(&d.socket, &["irq"]);
    assert!(out.starts_with(" irq  handler              function                          count       time       avg\n  36  virtio1-req.0        vring_interrupt                     321    1.86 ms    5.8 us\n"), "{out}");
    assert!(
        out.contains("\nTIMER             361    1.50 ms    4.2 us\n"),
        "{out}"
    );

    let out = stdout_ok(&d.socket, &["status"]);
    assert!(out.starts_with("jpd 9.9.9, up 1h 2m 3s\nkernel: 2 CPUs (0-1), cpu-clock at 997 Hz, shift 4 (16-byte buckets)\n"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&stdout_ok(&d.socket, &["status", "--json"])).unwrap();
    assert_eq!(v["version"], "9.9.9");
    assert_eq!(v["kernel"]["cpus"], serde_json::json!([0, 1]));

    assert_eq!(
        stdout_ok(&d.socket, &["reset"]),
        "counts reset: jpd counts from zero for every client\n"
    );
    assert_eq!(*d.fake.resets.lock().unwrap(), 1);
}

#[test]
fn jp_socket_environment_variable() {
    let d = fake_jpd();
    let o = Command::new(jp_testkit::jpctl())
        .args(["kernel", "--json"])
        .env("JP_SOCKET", &d.socket)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn clear_error_when_jpd_is_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nothing.sock");
    for args in [
        &["status"][..],
        &["kernel", "--json"],
        &["irq"],
        &["reset"],
        &["top"],
        &["jvm", "list"],
        &["jvm", "export", "1", "--format", "json", "-o", "x"],
    ] {
        let o = jpctl(&socket, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(o.stdout.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            format!(
                "jpctl: cannot connect to jpd at {}: No such file or directory (os error 2) (is jpd running? start it with `cargo xtask run` or `systemctl start jpd`)\n",
                socket.display()
            ),
            "{args:?}"
        );
    }
}

#[test]
fn jvm_list_table_and_json_are_exact() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["jvm", "list"]);
    let expected = concat!(
        "    pid  jdk          bba      threads        calls       bytecodes     nodes  state                main\n",
        "   4242  17.0.9+9     precise      1/2           78             624         6  exited 1m 5s ago     Paper\n",
        "  5151*  25+36        default    12/40      1000000       987654321      5000  attached 1d 1h ago   app.jar [pid 7 in its namespace]\n",
        "* pid 5151: incomplete: 1 thread waiting for a re-send (3 records lost, 0 malformed; of its own records 40 were over its rate, 2 lost to a full ring)\n",
    );
    assert_eq!(out, expected);
    let v: serde_json::Value =
        serde_json::from_str(&stdout_ok(&d.socket, &["jvm", "list", "--json"])).unwrap();
    let attached = v["jvms"][1]["attached_since_unix_ms"].as_u64().unwrap();
    let exited = v["jvms"][0]["exited_unix_ms"].as_u64().unwrap();
    assert_eq!(
        v,
        serde_json::json!({"jvms": [
            {"pid": 4242, "ns_pid": null, "main": "Paper", "jdk_version": "17.0.9+9",
             "bba": "precise", "threads": {"live": 1, "total": 2}, "calls": 78,
             "bytecodes": 624, "nodes": 6,
             "attached_since_unix_ms": v["jvms"][0]["attached_since_unix_ms"],
             "exited_unix_ms": exited, "complete": true, "incomplete_reason": null,
             "records_lost": 0, "records_malformed": 0,
             "records_rate_limited": 0, "records_ring_full": 0},
            {"pid": 5151, "ns_pid": 7, "main": "app.jar", "jdk_version": "25+36",
             "bba": "default", "threads": {"live": 12, "total": 40}, "calls": 1000000,
             "bytecodes": 987654321u64, "nodes": 5000,
             "attached_since_unix_ms": attached, "exited_unix_ms": null,
             "complete": false, "incomplete_reason": "1 thread waiting for a re-send",
             "records_lost": 3, "records_malformed": 0,
             "records_rate_limited": 40, "records_ring_full": 2},
        ]})
    );
}

#[test]
fn jvm_top_passes_order_and_limit_and_prints_exactly() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["jvm", "top", "4242"]);
    let expected = concat!(
        "pid 4242 Paper (jdk 17.0.9+9, bba precise): 78 calls, 624 bytecodes\n",
        "2 of 5 methods by exclusive bytecodes\n",
        "      bytecodes  share        calls       inclusive  incl%  method\n",
        "            445  71.3%           10             500  80.1%  Paper.g(I)V\n",
        "            106  17.0%            1             616  98.7%  Paper.f()V\n",
    );
    assert_eq!(out, expected);
    let out = stdout_ok(
        &d.socket,
        &["jvm", "top", "4242", "--json", "--by", "calls", "-n", "2"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["order"], "calls");
    assert_eq!(v["total_methods"], 5);
    assert_eq!(
        v["methods"],
        serde_json::json!([
            {"method": "Paper.g(I)V", "file": "Paper.java", "calls": 10, "bytecodes": 445, "inclusive_bytecodes": 500},
            {"method": "Paper.f()V", "file": "Paper.java", "calls": 1, "bytecodes": 106, "inclusive_bytecodes": 616},
        ])
    );
    assert_eq!(v["jvm"]["pid"], 4242);
    stdout_ok(
        &d.socket,
        &["jvm", "top", "4242", "--by", "inclusive", "--limit", "0"],
    );
    let (b, c, i) = (
        pb::JvmTopOrder::Bytecodes as i32,
        pb::JvmTopOrder::Calls as i32,
        pb::JvmTopOrder::Inclusive as i32,
    );
    assert_eq!(
        *d.fake.tops.lock().unwrap(),
        [(4242, b, 20), (4242, c, 2), (4242, i, 0)]
    );
}

#[test]
fn jvm_tree_shows_cuts_and_passes_limits() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["jvm", "tree", "4242", "--depth", "2"]);
    let expected = concat!(
        "pid 4242 Paper (bba precise): 78 calls, 624 bytecodes; 6 nodes, 3 shown, 3 cut (depth 2)\n",
        "         calls       inclusive       exclusive  share  method\n",
        "             1             624               5 100.0%  Paper.main([Ljava/lang/String;)V\n",
        "             1               3               3   0.5%    Paper.<init>()V\n",
        "             1             616             106  98.7%    Paper.f()V\n",
        "            75             510               -  81.7%      [cut: 2 subtrees, 3 nodes]\n",
    );
    assert_eq!(out, expected);
    let out = stdout_ok(
        &d.socket,
        &["jvm", "tree", "4242", "--json", "--min-share", "1.5%"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["total_nodes"].as_u64(), v["cut_nodes"].as_u64()),
        (Some(6), Some(3))
    );
    assert_eq!(v["root_cut"], serde_json::Value::Null);
    assert_eq!(
        v["nodes"][2],
        serde_json::json!({"depth": 1, "method": "Paper.f()V", "file": "Paper.java",
            "calls": 1, "bytecodes": 106, "inclusive_bytecodes": 616,
            "cut": {"subtrees": 2, "nodes": 3, "calls": 75, "bytecodes": 510}})
    );
    assert_eq!(v["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(
        *d.fake.profiles.lock().unwrap(),
        [(4242, 2, 0.0), (4242, 0, 0.015)]
    );
    let o = jpctl(&d.socket, &["jvm", "tree", "4242", "--min-share", "101"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "invalid value '101' for '--min-share <P>': 101 is not a percentage between 0 and 100"
        ),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn jvm_tree_of_a_joined_jvm_shows_cpu_columns_and_json_fields() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["jvm", "tree", "4343", "--depth", "2"]);
    let expected = concat!(
        "pid 4343 Paper (bba precise): 78 calls, 624 bytecodes; 6 nodes, 3 shown, 3 cut (depth 2)\n",
        "cpu 0.06 s: app 85.0 % (on contexts 84.5 %), jit 15.0 %\n",
        "    cpu ms    incl ms          calls       inclusive       exclusive  share  method\n",
        "       0.5       50.7              1             624               5 100.0%  Paper.main([Ljava/lang/String;)V\n",
        "       0.2        0.2              1               3               3   0.5%    Paper.<init>()V\n",
        "      10.0       50.0              1             616             106  98.7%    Paper.f()V\n",
        "         -       40.0             75             510               -  81.7%      [cut: 2 subtrees, 3 nodes]\n",
    );
    assert_eq!(out, expected);
    let out = stdout_ok(&d.socket, &["jvm", "tree", "4343", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["nodes"],
        serde_json::json!([
            {"depth": 0, "method": "Paper.main([Ljava/lang/String;)V", "file": "Paper.java",
             "calls": 1, "bytecodes": 5, "inclusive_bytecodes": 624, "cut": null,
             "cpu_ns": 500_000, "inclusive_cpu_ns": 50_700_000},
            {"depth": 1, "method": "Paper.<init>()V", "file": "Paper.java",
             "calls": 1, "bytecodes": 3, "inclusive_bytecodes": 3, "cut": null,
             "cpu_ns": 200_000, "inclusive_cpu_ns": 200_000},
            {"depth": 1, "method": "Paper.f()V", "file": "Paper.java",
             "calls": 1, "bytecodes": 106, "inclusive_bytecodes": 616,
             "cut": {"subtrees": 2, "nodes": 3, "calls": 75, "bytecodes": 510,
                     "cpu_ns": 40_000_000},
             "cpu_ns": 10_000_000, "inclusive_cpu_ns": 50_000_000},
        ])
    );
    assert_eq!(v["jvm"]["cpu"]["total_ns"], 60_000_000);
}

/// `jpctl jvm export 4242 --format FORMAT -o FILE`'s output.
fn export_to(socket: &Path, format: &str, file: &Path) -> String {
    let file = file.to_str().expect("a UTF-8 path");
    stdout_ok(
        socket,
        &["jvm", "export", "4242", "--format", format, "-o", file],
    )
}

#[test]
fn jvm_export_writes_the_streamed_file() {
    let d = fake_jpd();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("paper.pb.gz");
    let out = export_to(&d.socket, "pprof", &file);
    assert_eq!(
        out,
        format!(
            "wrote 45 bytes (gzipped pprof) of pid 4242 to {}\n",
            file.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "JVM_EXPORT_FORMAT_PPROF of 4242\nsecond chunk\n"
    );
    let out = stdout_ok(
        &d.socket,
        &["jvm", "export", "4242", "--format", "folded", "-o", "-"],
    );
    assert_eq!(out, "JVM_EXPORT_FORMAT_FOLDED of 4242\nsecond chunk\n");
    // A transfer shorter than announced leaves no file.
    let short = dir.path().join("short.json");
    let o = jpctl(
        &d.socket,
        &[
            "jvm",
            "export",
            "77",
            "--format",
            "json",
            "-o",
            short.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "jpctl: jpd sent 7 bytes of a 100-byte profile; nothing written\n"
    );
    assert!(!short.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temp file left"
    );
}

/// `jpctl kernel -o FILE` writes what stdout would show, in every format; `-o -` is stdout;
/// a file that cannot be written is a clear error and leaves nothing behind.
#[test]
fn kernel_writes_to_the_file_of_o() {
    let d = fake_jpd();
    let dir = tempfile::tempdir().unwrap();
    for (args, what) in [
        (&["--format", "html"][..], "(HTML flame graph)"),
        (&["--json"], "(kernel profile JSON)"),
        (&["--format", "readprofile"], "(readprofile format)"),
        (&[], "(kernel profile table)"),
    ] {
        let mut plain = vec!["kernel"];
        plain.extend_from_slice(args);
        let expected = stdout_ok(&d.socket, &plain);
        let file = dir.path().join("kernel.out");
        let file_arg = file.to_str().unwrap();
        let mut to_file = plain.clone();
        to_file.extend_from_slice(&["-o", file_arg]);
        let out = stdout_ok(&d.socket, &to_file);
        assert_eq!(
            out,
            format!("wrote {} bytes {what} to {file_arg}\n", expected.len())
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            expected,
            "{args:?}"
        );
        let mut to_stdout = plain.clone();
        to_stdout.extend_from_slice(&["--output", "-"]);
        assert_eq!(stdout_ok(&d.socket, &to_stdout), expected, "{args:?}");
    }
    let bad = dir.path().join("no such dir").join("k.html");
    let o = jpctl(
        &d.socket,
        &["kernel", "--format", "html", "-o", bad.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with(&format!("jpctl: cannot write {}: ", bad.display())),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temp file left"
    );
}

#[test]
fn jvm_tree_too_big_for_one_answer_says_how_to_cut_it() {
    let d = fake_jpd();
    let o = jpctl(&d.socket, &["jvm", "tree", "88"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("jpctl: jpd answered "), "{err}");
    assert!(
        err.ends_with("the limit is: 67108864 bytes (the tree is too big for one answer: cut it with --depth or --min-share, or use `jpctl jvm export`)\n"),
        "{err}"
    );
}

#[test]
fn jvm_unknown_pid_is_a_clear_error() {
    let d = fake_jpd();
    for args in [
        &["jvm", "top", "1"][..],
        &["jvm", "tree", "1"],
        &["jvm", "export", "1", "--format", "json", "-o", "-"],
    ] {
        let o = jpctl(&d.socket, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(o.stdout.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            "jpctl: jpd answered NotFound: no JVM with pid 1: jpd holds JVM pids 4242, 5151 (see `jpctl jvm list`)\n",
            "{args:?}"
        );
    }
}

#[test]
fn status_shows_jvm_ingestion() {
    let d = fake_jpd();
    let out = stdout_ok(&d.socket, &["status"]);
    assert!(
        out.ends_with(concat!(
            "jvm: 1 attached, 1 exited and kept\n",
            "  records  120 (54321 bytes), 3 lost (sequence gaps), 2 malformed\n",
            "    malformed: 2 bad magic\n",
            "  probes   125 fired, 3 ring buffer full, 0 faults, 0 too long\n",
            "  nodes    12 (4096 bytes of memory)\n",
            // The fake jpd reports no USDT collector.
            "  usdt     no collector (usdt.enabled = false)\n",
        )),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&stdout_ok(&d.socket, &["status", "--json"])).unwrap();
    assert_eq!(
        v["jvm"],
        serde_json::json!({"jvms_attached": 1, "jvms_exited": 1, "records": 120,
            "bytes": 54321, "lost": 3, "malformed": 2,
            "malformed_by_reason": [{"reason": "bad magic", "records": 2}],
            "fired": 125, "ring_full": 3, "faults": 0, "too_long": 0, "nodes": 12,
            "memory_bytes": 4096, "collector": null,
            // The fake jpd does not measure time off CPU.
            "offcpu_dropped": null})
    );
}

#[path = "../../jp-mct/tests/browser/mod.rs"]
mod browser;

/// `jpctl kernel --format html` in Chromium: module → function, widths in samples (of
/// 1263: read_zero 951 and clear_user_rep_good 300 in vmlinux, vring_interrupt 12 in
/// virtio_ring), search, a click zooming into a function, the tooltip's exact samples.
#[test]
fn kernel_flame_graph_in_a_real_browser() {
    let d = fake_jpd();
    let page = stdout_ok(&d.socket, &["kernel", "--format", "html"]);
    let r = browser::drive_page(
        &page,
        serde_json::json!([
            {"do": "frames"},
            {"do": "hover", "frame": "read_zero"},
            {"do": "screenshot", "name": "flame-kernel"},
            {"do": "search", "text": "vring"},
            {"do": "click", "frame": "read_zero"},
            {"do": "reset"},
        ]),
    );
    let all = [
        "virtio_ring",
        "vring_interrupt",
        "vmlinux",
        "clear_user_rep_good",
        "read_zero",
    ];
    assert_eq!(browser::labels(&r[1]), all);
    // 1180 pixels: vmlinux 1251/1263 of them, virtio_ring 12/1263, clear_user 300/1263.
    let widths: Vec<i64> = ["vmlinux", "virtio_ring", "clear_user_rep_good"]
        .iter()
        .map(|l| browser::width_of(&r[1], l))
        .collect();
    assert_eq!(widths, [1169, 11, 280]);
    assert_eq!(
        browser::tooltip(&r[2]),
        "read_zero\ninclusive samples: 951\nexclusive samples: 951\nshare: 75.297% of all"
    );
    assert_eq!(browser::flagged(&r[4], "match"), ["vring_interrupt"]);
    assert_eq!(
        r[4]["status"], "1 matching subtrees, 0.950% of samples",
        "{}",
        r[4]
    );
    // Zoomed into read_zero: it spans the graph under its module, drawn as an ancestor.
    assert_eq!(browser::labels(&r[5]), ["vmlinux", "read_zero"]);
    assert_eq!(browser::flagged(&r[5], "ancestor"), ["vmlinux"]);
    assert_eq!(browser::width_of(&r[5], "read_zero"), 1180);
    assert_eq!(browser::labels(&r[6]), all);
}

/// `jpctl jvm export --format html` in Chromium: jpctl turns jpd's jp-mct/1 export into the
/// flame graph (the paper's tree: 624 bytecodes, f 616 of them, g 500).
#[test]
fn jvm_export_flame_graph_in_a_real_browser() {
    let d = fake_jpd();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("paper.html");
    let out = export_to(&d.socket, "html", &file);
    assert!(out.contains("(HTML flame graph) of pid 4242"), "{out}");
    let r = browser::drive(serde_json::json!([
        {"do": "goto", "url": browser::file_url(&file)},
        {"do": "frames"},
        {"do": "eval", "js": "document.getElementById('title').textContent + ' | ' + document.getElementById('subtitle').textContent"},
        {"do": "hover", "frame": "Paper.g(int)"},
        {"do": "search", "text": "Paper\\.h"},
        {"do": "screenshot", "name": "flame-jvm-export"},
        {"do": "click", "frame": "Paper.f()"},
        {"do": "reset"},
    ]));
    let (main, f, g, h) = (
        "Paper.main(java.lang.String[])",
        "Paper.f()",
        "Paper.g(int)",
        "Paper.h()",
    );
    let all = [main, "Paper.<init>()", f, g, h, h];
    assert_eq!(browser::labels(&r[1]), all);
    assert_eq!(browser::width_of(&r[1], main), 1180);
    assert_eq!(browser::width_of(&r[1], f), 1165);
    assert_eq!(
        r[2]["value"],
        "jp method call tree of pid 4242 | bba=precise · 6 calling contexts · from jpd"
    );
    assert_eq!(
        browser::tooltip(&r[3]),
        "Paper.g(int)\ncalls: 10\ninclusive bytecodes: 500\nexclusive bytecodes: 445\nshare: 80.128% of all"
    );
    // h in two contexts: under g (55) and under f (10).
    assert_eq!(browser::flagged(&r[4], "match"), [h, h]);
    assert_eq!(
        r[4]["status"], "2 matching subtrees, 10.417% of bytecodes",
        "{}",
        r[4]
    );
    assert_eq!(browser::labels(&r[6]), [main, f, g, h, h]);
    assert_eq!(browser::flagged(&r[6], "ancestor"), [main]);
    assert_eq!(browser::width_of(&r[6], f), 1180);
    assert_eq!(browser::labels(&r[7]), all);
}

/// Control characters (C0, DEL, C1) and bidi overrides a JVM chose never reach the
/// terminal raw: each is printed as a visible escape.
#[test]
fn hostile_names_reach_the_terminal_escaped() {
    let j = fake_jpd();
    j.fake
        .list_hostile
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let pid = HOSTILE_PID.to_string();
    for args in [
        vec!["jvm", "list"],
        vec!["jvm", "top", &pid],
        vec!["jvm", "tree", &pid],
    ] {
        let out = stdout_ok(&j.socket, &args);
        let raw: Vec<char> = out
            .chars()
            .filter(|&c| {
                (c.is_control() && c != '\n')
                    || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            })
            .collect();
        assert!(raw.is_empty(), "jpctl {args:?} printed raw {raw:?}");
        // Lines are the table's own: no name breaks one.
        assert!(!out.contains('\r'), "{args:?}");
        let expect = if args[1] == "list" {
            "\\x1b]0;pwned\\x07AAA"
        } else {
            "Evil.\\x1b[2J\\u{202e}gnp.f\\x0d\\x9b31m()V"
        };
        assert!(out.contains(expect), "jpctl {args:?}: {out}");
    }
}

/// `jpctl jvm profile`: the window's header line above its tree, the file with `-o`,
/// the refusal's one line and a non-zero exit; `jpctl jvm windows`.
#[test]
fn jvm_profile_and_windows() {
    let jpd = fake_jpd();
    let pid = PAPER_PID.to_string();
    let header = "# window 77 of JVM 4242 (Paper), origin request, scope include=Paper, 2 s, closed by deadline: contexts with 0 calls were running when the window opened: their own calls and bytecodes are not counted\n";
    let out = stdout_ok(
        &jpd.socket,
        &[
            "jvm",
            "profile",
            &pid,
            "--seconds",
            "2",
            "--include",
            "Paper",
        ],
    );
    assert_eq!(
        out,
        format!("{header}JVM_EXPORT_FORMAT_TREE of window 77, 2 s, include [\"Paper\"]\n")
    );
    let file = jpd._dir.path().join("w.pb.gz");
    let out = stdout_ok(
        &jpd.socket,
        &[
            "jvm",
            "profile",
            &pid,
            "--seconds",
            "2",
            "--format",
            "pprof",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out,
        format!(
            "{header}wrote 54 bytes (gzipped pprof) of window 77 to {}\n",
            file.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "JVM_EXPORT_FORMAT_PPROF of window 77, 2 s, include []\n"
    );
    let refused = jpctl(&jpd.socket, &["jvm", "profile", "9", "--seconds", "2"]);
    assert!(!refused.status.success());
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "jpctl: JVM 9 is profiled from start: its live tree is already exact: jpctl jvm tree 9\n"
    );
    let list = stdout_ok(&jpd.socket, &["jvm", "windows"]);
    assert_eq!(
        list,
        "    PID            WINDOW  ORIGIN    MAIN                  SECONDS  OPENED (UTC)         CLOSED BY  CONTEXTS         CALLS       BYTECODES  SCOPE\n   4242                77  request   Paper                       2  2026-12-06 20:14:03  deadline          3            40             400  include=Paper\n"
    );
    let json = stdout_ok(&jpd.socket, &["jvm", "windows", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["windows"][0]["origin"], "request");
    assert_eq!(json["windows"][0]["jdk_version"], "17.0.15");
}
