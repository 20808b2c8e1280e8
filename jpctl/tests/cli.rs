//! The jpctl binary against a stand-in jpd (a fake `jp.v1.Jp` on a temp socket):
//! exact outputs of every command, `--socket` and `JP_SOCKET`, and the error when
//! nothing listens.

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
    Command::new(env!("CARGO_BIN_EXE_jpctl"))
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
    let o = Command::new(env!("CARGO_BIN_EXE_jpctl"))
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
