//! The gRPC server for real, on a temporary Unix socket, over a store filled with
//! synthetic counts and symbols (no eBPF, no root): every RPC through the generated
//! client, plus health and reflection as a generic client (grpcurl) uses them.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper_util::rt::TokioIo;
use jp_daemon::server;
use jp_daemon::store::kernel::symbols::Symbols;
use jp_daemon::store::kernel::{
    CollectorStatus, IrqHandlerCounts, KernelCounts, KernelStore, ModeCounts, ProgramStats,
    SoftirqCounts,
};
use jp_proto::v1 as pb;
use jp_proto::v1::jp_client::JpClient;
use prost::Message;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

pub(crate) const STEXT: u64 = 0xffff_ffff_8100_0000;

const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T read_iter_zero
ffffffff81000040 T iov_iter_zero
ffffffff810000c0 T clear_user_rep_good
ffffffff81000100 T vring_interrupt
ffffffff81000200 T _etext
ffffffffc0002000 t virtblk_done\t[virtio_blk]
ffffffffc0002100 t virtblk_poll\t[virtio_blk]
";

fn counts() -> KernelCounts {
    let buckets: HashMap<u64, u64> = [
        (0x0, 30), // read_iter_zero
        (0x1, 10), // read_iter_zero
        (0x4, 25), // iov_iter_zero
        (0xc, 50), // clear_user_rep_good
        (0x10, 5), // vring_interrupt
    ]
    .into();
    let other_ips: HashMap<u64, u64> = [
        (0xffff_ffff_c000_2010, 7), // virtblk_done [virtio_blk]
        (0xffff_ffff_a000_0000, 3), // no symbol
    ]
    .into();
    let mut irqs = HashMap::new();
    irqs.insert(
        (11, "virtio1-req.0".to_string()),
        IrqHandlerCounts {
            count: 120,
            unhandled: 1,
            time_ns: 360_000,
            function_addr: 0xffff_ffff_c000_2000,
        },
    );
    irqs.insert(
        (10, "virtio0-input.0".to_string()),
        IrqHandlerCounts {
            count: 5,
            unhandled: 0,
            time_ns: 5_000,
            function_addr: STEXT + 0x100,
        },
    );
    let softirqs: HashMap<u32, SoftirqCounts> = [
        (
            1,
            SoftirqCounts {
                count: 250,
                time_ns: 50_000,
            },
        ),
        (
            3,
            SoftirqCounts {
                count: 7,
                time_ns: 700,
            },
        ),
        (
            9,
            SoftirqCounts {
                count: 40,
                time_ns: 9_000,
            },
        ),
    ]
    .into();
    KernelCounts {
        modes: ModeCounts {
            kernel: 130,
            user: 20,
            idle: 850,
        },
        buckets,
        other_ips,
        irq_buckets: [(0xc, 4)].into(),
        irq_other_ips: HashMap::new(),
        irq_modes: ModeCounts {
            kernel: 4,
            user: 2,
            idle: 6,
        },
        irqs,
        softirqs,
        irq_entries: 12,
        irq_ip_sampled: 12,
    }
}

fn last_read() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
}

fn status() -> CollectorStatus {
    CollectorStatus {
        programs: vec![ProgramStats {
            name: "jp_sample".into(),
            attached_to: "perf_event cpu-clock on 2 CPUs".into(),
            run_count: 1000,
            run_time_ns: 123_456,
        }],
        cpus: vec![0, 1],
        frequency_hz: 997,
        shift: 4,
        text_start: STEXT,
        text_end: STEXT + 0x200,
        events_lost: 2,
        last_read: Some(last_read()),
        bpf_stats_enabled: false,
        irq_ip_samples_per_second: 0,
    }
}

pub(crate) fn filled_store() -> Arc<KernelStore> {
    let store = KernelStore::new();
    store.publish_symbols(Arc::new(Symbols::parse(KALLSYMS).unwrap()));
    store.publish(counts(), status());
    store
}

async fn connect(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::from_static("http://jpd.sock")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .expect("connect to the test server")
}

struct Running {
    socket: PathBuf,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    guard: server::socket::SocketGuard,
    _dir: tempfile::TempDir,
}

async fn start(store: Arc<KernelStore>) -> Running {
    let dir = tempfile::tempdir().unwrap();
    // A parent directory that does not exist yet, as /run/jp on a fresh boot.
    let socket = dir.path().join("run/jp/jpd.sock");
    let (listener, guard) = server::socket::bind(&socket).expect("bind");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, store, async move {
        let _ = stopped.await;
    }));
    Running {
        socket,
        stop,
        task,
        guard,
        _dir: dir,
    }
}

fn f(
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

fn all_functions() -> Vec<pb::KernelFunction> {
    vec![
        f("clear_user_rep_good", None, STEXT + 0xc0, 0x40, 50),
        f("read_iter_zero", None, STEXT, 0x40, 40),
        f("iov_iter_zero", None, STEXT + 0x40, 0x80, 25),
        f(
            "virtblk_done",
            Some("virtio_blk"),
            0xffff_ffff_c000_2000,
            0x100,
            7,
        ),
        f("vring_interrupt", None, STEXT + 0x100, 0x100, 5),
    ]
}

#[tokio::test]
async fn every_rpc_health_reflection_socket_mode_and_removal() {
    let store = filled_store();
    let run = start(Arc::clone(&store)).await;

    // Socket: created with its parent directory, mode 0660.
    let meta = std::fs::metadata(&run.socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    let channel = connect(&run.socket).await;
    let mut jp = JpClient::new(channel.clone());

    // GetStatus.
    let mut st = jp
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(st.uptime_ms < 60_000, "uptime {} ms", st.uptime_ms);
    st.uptime_ms = 0;
    let expected = pb::Status {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_ms: 0,
        kernel: Some(pb::KernelStatus {
            attached: true,
            programs: vec![pb::ProgramStats {
                name: "jp_sample".into(),
                attached_to: "perf_event cpu-clock on 2 CPUs".into(),
                run_count: 1000,
                run_time_ns: 123_456,
            }],
            cpus: vec![0, 1],
            frequency_hz: 997,
            shift: 4,
            text_start: STEXT,
            text_end: STEXT + 0x200,
            samples: Some(pb::ModeSamples {
                total: 1000,
                kernel: 130,
                user: 20,
                idle: 850,
            }),
            events_lost: 2,
            last_read_unix_ms: 1_700_000_000_123,
            reset_unix_ms: 0,
            bpf_stats_enabled: false,
            irq_ip_samples_per_second: 0,
        }),
        // No USDT collector feeds the JVM store here: all zero.
        jvm: Some(pb::JvmStatus::default()),
        // The refusal counts are process-wide and other tests of this binary count
        // theirs: each listed kind must carry the registry's count (below).
        refusals: st.refusals.clone(),
        // No watchdog runs in this server.
        subsystems: vec![],
    };
    assert_eq!(st, expected);
    for r in &st.refusals {
        assert!(
            r.count > 0 && !r.subsystem.is_empty() && !r.reason.is_empty(),
            "{r:?}"
        );
    }

    // GetKernelProfile: all functions, sorted by samples; idle is in no function.
    let req = pb::GetKernelProfileRequest {
        top_n: 0,
        include_buckets: false,
        source: 0,
        otlp: false,
    };
    let p = jp.get_kernel_profile(req).await.unwrap().into_inner();
    let expected = pb::KernelProfile {
        source: pb::ProfileSource::Timer as i32,
        samples: Some(pb::ModeSamples {
            total: 1000,
            kernel: 130,
            user: 20,
            idle: 850,
        }),
        shift: 4,
        text_start: STEXT,
        text_end: STEXT + 0x200,
        functions: all_functions(),
        unknown_samples: 3,
        buckets: vec![],
        other_ips: vec![],
        otlp: vec![],
    };
    assert_eq!(p, expected);
    assert_eq!(p.functions[0].load, 0.78125);

    // top_n and raw buckets.
    let req = pb::GetKernelProfileRequest {
        top_n: 2,
        include_buckets: true,
        source: 0,
        otlp: false,
    };
    let p = jp.get_kernel_profile(req).await.unwrap().into_inner();
    let names: Vec<&str> = p.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["clear_user_rep_good", "read_iter_zero"]);
    let buckets: Vec<(u64, u64)> = p.buckets.iter().map(|b| (b.index, b.samples)).collect();
    assert_eq!(
        buckets,
        [(0x0, 30), (0x1, 10), (0x4, 25), (0xc, 50), (0x10, 5)]
    );
    let others: Vec<(u64, u64)> = p.other_ips.iter().map(|a| (a.address, a.samples)).collect();
    assert_eq!(
        others,
        [(0xffff_ffff_a000_0000, 3), (0xffff_ffff_c000_2010, 7)]
    );

    // The interrupted-IP histogram at IRQ entry.
    let req = pb::GetKernelProfileRequest {
        top_n: 0,
        include_buckets: false,
        source: pb::ProfileSource::IrqEntry as i32,
        otlp: false,
    };
    let p = jp.get_kernel_profile(req).await.unwrap().into_inner();
    assert_eq!(
        p.samples,
        Some(pb::ModeSamples {
            total: 12,
            kernel: 4,
            user: 2,
            idle: 6
        })
    );
    assert_eq!(
        p.functions,
        vec![f("clear_user_rep_good", None, STEXT + 0xc0, 0x40, 4)]
    );
    let bad = pb::GetKernelProfileRequest {
        source: 99,
        ..Default::default()
    };
    let e = jp.get_kernel_profile(bad).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    // GetIrqStats: handlers symbolized from their function address; softirqs by vector.
    let irq = jp
        .get_irq_stats(pb::GetIrqStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    let expected = pb::IrqStats {
        irqs: vec![
            pb::IrqHandler {
                irq: 11,
                handler: "virtio1-req.0".into(),
                function: "virtblk_done".into(),
                function_address: 0xffff_ffff_c000_2000,
                count: 120,
                time_ns: 360_000,
                function_module: Some("virtio_blk".into()),
                unhandled: 1,
            },
            pb::IrqHandler {
                irq: 10,
                handler: "virtio0-input.0".into(),
                function: "vring_interrupt".into(),
                function_address: STEXT + 0x100,
                count: 5,
                time_ns: 5_000,
                function_module: None,
                unhandled: 0,
            },
        ],
        softirqs: vec![
            pb::Softirq {
                name: "TIMER".into(),
                vector: 1,
                count: 250,
                time_ns: 50_000,
            },
            pb::Softirq {
                name: "NET_RX".into(),
                vector: 3,
                count: 7,
                time_ns: 700,
            },
            pb::Softirq {
                name: "RCU".into(),
                vector: 9,
                count: 40,
                time_ns: 9_000,
            },
        ],
    };
    assert_eq!(irq, expected);

    // Watch: names once, then deltas; a Reset shows as `reset` with counts from it.
    let mut watch = jp
        .watch(pb::WatchRequest { interval_ms: 100 })
        .await
        .unwrap()
        .into_inner();
    let u0 = watch.message().await.unwrap().unwrap();
    assert_eq!((u0.seq, u0.reset), (0, false));
    let k0 = u0.kernel.unwrap();
    assert_eq!(k0.new_functions.len(), 5);
    assert_eq!(k0.functions.iter().map(|d| d.samples).sum::<u64>(), 127);
    assert_eq!(k0.new_irqs.len(), 2);
    let mut more = counts();
    *more.buckets.get_mut(&0x4).unwrap() += 9; // iov_iter_zero
    more.modes.kernel += 9;
    store.publish(more.clone(), status());
    let u1 = watch.message().await.unwrap().unwrap();
    assert_eq!((u1.seq, u1.reset), (1, false));
    assert!(
        u1.elapsed_ns >= 50_000_000,
        "interval honoured: {} ns",
        u1.elapsed_ns
    );
    let k1 = u1.kernel.unwrap();
    assert!(
        k1.new_functions.is_empty() && k1.new_irqs.is_empty(),
        "names are sent once"
    );
    let iov = k0
        .new_functions
        .iter()
        .find(|f| f.name == "iov_iter_zero")
        .unwrap()
        .id;
    assert_eq!(
        k1.functions,
        vec![pb::FunctionDelta {
            id: iov,
            samples: 9
        }]
    );
    assert_eq!(
        k1.samples,
        Some(pb::ModeSamples {
            total: 9,
            kernel: 9,
            user: 0,
            idle: 0
        })
    );

    let r = jp.reset(pb::ResetRequest {}).await.unwrap().into_inner();
    assert!(r.reset_unix_ms > 1_700_000_000_000);
    let p = jp
        .get_kernel_profile(pb::GetKernelProfileRequest::default())
        .await
        .unwrap();
    let p = p.into_inner();
    assert_eq!(p.samples, Some(pb::ModeSamples::default()));
    assert!(p.functions.is_empty());
    let st = jp
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.kernel.unwrap().reset_unix_ms, r.reset_unix_ms);
    *more.buckets.get_mut(&0x0).unwrap() += 4; // read_iter_zero
    more.modes.kernel += 4;
    store.publish(more, status());
    let k = loop {
        let u = watch.message().await.unwrap().unwrap();
        if u.reset {
            break u.kernel.unwrap();
        }
    };
    let rz = k0
        .new_functions
        .iter()
        .find(|f| f.name == "read_iter_zero")
        .unwrap()
        .id;
    assert_eq!(k.functions, vec![pb::FunctionDelta { id: rz, samples: 4 }]);

    // Health, as `grpc_health_probe` asks it.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["", "jp.v1.Jp"] {
        let req = tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        };
        let r = health.check(req).await.unwrap().into_inner();
        assert_eq!(
            r.status(),
            tonic_health::pb::health_check_response::ServingStatus::Serving
        );
    }

    // Reflection v1 and v1alpha: list services, fetch jp.v1's descriptors.
    let services_v1 = reflection_v1(channel.clone()).await;
    for s in [
        "jp.v1.Jp",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            services_v1.0.contains(&s.to_string()),
            "{s} not listed: {:?}",
            services_v1.0
        );
    }
    assert_eq!(services_v1.1, ["jp/v1/jp.proto"]);
    let services = reflection_v1alpha(channel.clone()).await;
    assert!(services.contains(&"jp.v1.Jp".to_string()), "{services:?}");

    // Shutdown with a Watch stream still open: it ends, the server returns.
    let Running {
        socket,
        stop,
        task,
        guard,
        _dir,
    } = run;
    stop.send(()).unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), task).await;
    served.expect("server stopped within 5 s").unwrap().unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match watch.message().await {
                Ok(Some(_)) => continue,
                other => break other.map(|_| ()),
            }
        }
    })
    .await
    .expect("the Watch stream ended");
    let _ = end;
    assert!(
        socket.exists(),
        "the guard, not the server, removes the socket"
    );
    assert_eq!(guard.path(), socket.as_path());
    drop(guard);
    assert!(!socket.exists(), "socket removed on shutdown");
}

/// (services listed, file names for the symbol jp.v1.Jp) via reflection v1.
async fn reflection_v1(channel: Channel) -> (Vec<String>, Vec<String>) {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let mut c = ServerReflectionClient::new(channel);
    let reqs = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol("jp.v1.Jp".into())),
        },
    ];
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(reqs))
        .await
        .unwrap()
        .into_inner();
    let mut services = Vec::new();
    let mut files = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        match r.message_response.unwrap() {
            MessageResponse::ListServicesResponse(l) => {
                services.extend(l.service.into_iter().map(|s| s.name))
            }
            MessageResponse::FileDescriptorResponse(f) => {
                for bytes in f.file_descriptor_proto {
                    let fd = prost_types::FileDescriptorProto::decode(bytes.as_slice()).unwrap();
                    // The file must describe the service for generic clients.
                    if fd.name() == "jp/v1/jp.proto" {
                        let svc = &fd.service[0];
                        let methods: Vec<&str> = svc.method.iter().map(|m| m.name()).collect();
                        assert_eq!(
                            methods,
                            [
                                "GetStatus",
                                "GetKernelProfile",
                                "GetIrqStats",
                                "Reset",
                                "Watch",
                                "ListJvms",
                                "GetJvmProfile",
                                "GetJvmTop",
                                "ExportJvmProfile",
                                "ProfileJvm",
                                "ListJvmWindows",
                                "GetJvmWindow"
                            ]
                        );
                    }
                    files.push(fd.name().to_string());
                }
            }
            other => panic!("unexpected reflection answer {other:?}"),
        }
    }
    files.retain(|f| f == "jp/v1/jp.proto");
    (services, files)
}

async fn reflection_v1alpha(channel: Channel) -> Vec<String> {
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    let mut c = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let mut services = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        if let Some(MessageResponse::ListServicesResponse(l)) = r.message_response {
            services.extend(l.service.into_iter().map(|s| s.name));
        }
    }
    services
}

#[tokio::test]
async fn bind_replaces_a_stale_socket_but_never_a_live_one_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jpd.sock");
    // A socket file left by a dead process: nobody listens on it.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let (listener, guard) = server::socket::bind(&path).expect("stale socket replaced");
    // Now it is live: a second jpd must not take it over.
    let e = server::socket::bind(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} is in use: another jpd is running (stop it, or pass --socket)",
            path.display()
        )
    );
    drop(listener);
    drop(guard);
    assert!(!path.exists());
    std::fs::write(&path, "not a socket").unwrap();
    let e = server::socket::bind(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} exists and is not a socket; not touching it",
            path.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
}

// --- JVM profiles -------------------------------------------------------------------
// A real JvmStore, filled through its ingest API with records built by the wire
// format's own encoder: the paper's example tree in thread 1, one more method in
// thread 2.

use jp_common::wire::{self, EventHeader, MethodDef, TreeEntry, Writer};
use jp_daemon::server::jvm_watch::JvmWatch;
use jp_daemon::store::jvm::SharedJvmStore;
use jp_daemon::store::jvm::{JvmLimits, JvmStore, ProcessInfo};
use jp_daemon::store::Sources;
use jp_mct::{Mct, MethodInfo};
use std::sync::Mutex;

pub(crate) const JVM: u32 = 4242;
const GENERATION: u64 = 5;

fn attached() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_700_000_000_000)
}

fn record(kind: u16, stream: u64, seq: u32, flags: u32, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(kind, 7, GENERATION, stream, seq, flags);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    body(&mut w);
    w.finish().to_vec()
}

fn ingest(store: &mut JvmStore, bytes: &[u8]) {
    let event = EventHeader {
        tgid: JVM,
        tid: JVM,
        ktime_ns: 1,
        len: bytes.len() as u32,
        status: wire::EVENT_OK,
    };
    store.ingest(&event, bytes, attached());
}

/// (mid, name, descriptor) of Paper's methods.
const METHODS: [(u32, &str, &str); 5] = [
    (0, "main", "([Ljava/lang/String;)V"),
    (1, "<init>", "()V"),
    (2, "f", "()V"),
    (3, "g", "(I)V"),
    (4, "h", "()V"),
];

fn def(node: u32, parent: u32, mid: u32, calls: u64, bytecodes: u64) -> TreeEntry {
    TreeEntry {
        node,
        definition: Some((parent, mid)),
        calls,
        bytecodes,
    }
}

fn tree_record(stream: u64, seq: u32, flags: u32, name: &str, entries: &[TreeEntry]) -> Vec<u8> {
    record(wire::KIND_TREE, stream, seq, flags, |w| {
        w.string(name.as_bytes()).unwrap();
        w.begin_entries().unwrap();
        for e in entries {
            w.tree_entry(e).unwrap();
        }
    })
}

/// Bytes of every record `jvm_store` ingests (for the status check).
fn paper_records() -> Vec<Vec<u8>> {
    let full = wire::FLAG_RESYNC | wire::FLAG_ABSOLUTE;
    let hello = record(wire::KIND_HELLO, 0, 0, full, |w| {
        for v in [1_699_999_999_000u64, 1, 1, 2] {
            w.varint(v).unwrap(); // start, granularity, bba precise, live threads
        }
        w.string(b"17.0.9+9").unwrap();
        w.string(b"Paper -verbose").unwrap();
        w.string(b"0.1.0").unwrap();
    });
    let methods = record(wire::KIND_METHODS, 0, 1, 0, |w| {
        w.begin_entries().unwrap();
        for (mid, name, descriptor) in METHODS {
            w.method(&MethodDef {
                mid,
                class: b"Paper",
                name: name.as_bytes(),
                descriptor: descriptor.as_bytes(),
                source_file: b"Paper.java",
            })
            .unwrap();
        }
    });
    let main = tree_record(
        1,
        0,
        full,
        "main",
        &[
            def(1, 0, 0, 1, 5),
            def(2, 1, 1, 1, 3),
            def(3, 1, 2, 1, 106),
            def(4, 3, 3, 10, 445),
            def(5, 4, 4, 55, 55),
            def(6, 3, 4, 10, 10),
        ],
    );
    let worker = tree_record(2, 0, full, "worker", &[def(1, 0, 4, 2, 2)]);
    vec![hello, methods, main, worker]
}

pub(crate) fn jvm_store() -> SharedJvmStore {
    let mut store = JvmStore::new(JvmLimits {
        retention: Duration::from_secs(60),
        ..JvmLimits::default()
    });
    let info = ProcessInfo {
        start_time_ticks: 1234,
        ns_pid: None,
        cmdline: "java -agentpath:libjpagent.so Paper -verbose".into(),
        exe: "/usr/bin/java".into(),
        uid: None,
    };
    store.process_found(JVM, info, attached());
    store.generation_written(JVM, GENERATION);
    for r in paper_records() {
        ingest(&mut store, &r);
    }
    Arc::new(Mutex::new(store))
}

/// Thread 1's next report: h under g ran 5 more times (a delta).
fn paper_delta() -> Vec<u8> {
    tree_record(
        1,
        1,
        0,
        "",
        &[TreeEntry {
            node: 5,
            definition: None,
            calls: 5,
            bytecodes: 5,
        }],
    )
}

/// The same merged tree built by hand, as the agent's writer would get it.
fn expected_mct() -> Mct {
    let mut t = Mct::new("precise");
    let m = |name: &str, desc: &str| MethodInfo {
        name: format!("Paper.{name}{desc}").into(),
        file: Some("Paper.java".into()),
    };
    let main = t.add(0, m("main", "([Ljava/lang/String;)V"), 1, 5);
    t.add(main, m("<init>", "()V"), 1, 3);
    let f = t.add(main, m("f", "()V"), 1, 106);
    let g = t.add(f, m("g", "(I)V"), 10, 445);
    t.add(g, m("h", "()V"), 55, 55);
    t.add(f, m("h", "()V"), 10, 10);
    t.add(0, m("h", "()V"), 2, 2);
    t
}

async fn start_with(sources: Sources) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("jpd.sock");
    let (listener, guard) = server::socket::bind(&socket).expect("bind");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, sources, async move {
        let _ = stopped.await;
    }));
    Running {
        socket,
        stop,
        task,
        guard,
        _dir: dir,
    }
}

fn pm(id: u32, name: &str) -> pb::JvmMethod {
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

fn cut(subtrees: u32, nodes: u64, calls: u64, bytecodes: u64) -> Option<pb::JvmCut> {
    Some(pb::JvmCut {
        subtrees,
        nodes,
        calls,
        bytecodes,
        cpu_ns: 0,
        ..Default::default()
    })
}

#[tokio::test]
async fn jvm_list_profile_top_export_and_status() {
    let jvm = jvm_store();
    let kernel = filled_store();
    let run = start_with(Sources {
        kernel,
        jvm: Arc::clone(&jvm),
        windows: Default::default(),
    })
    .await;
    let mut jp = JpClient::new(connect(&run.socket).await);

    // ListJvms: the summary, field for field.
    let list = jp
        .list_jvms(pb::ListJvmsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let memory = jp_daemon::lock::lock(&jvm)
        .summary(JVM)
        .unwrap()
        .memory_bytes;
    assert!(memory > 0);
    let summary = pb::JvmSummary {
        pid: JVM,
        ns_pid: Some(7),
        main: "Paper".into(),
        jdk_version: "17.0.9+9".into(),
        bba: "precise".into(),
        threads_live: 2,
        threads_total: 2,
        calls: 80,
        bytecodes: 626,
        attached_since_unix_ms: 1_700_000_000_000,
        exited_unix_ms: 0,
        complete: true,
        incomplete_reason: String::new(),
        records_lost: 0,
        records_malformed: 0,
        nodes: 7,
        methods: 5,
        records: 4,
        limit_drops: 0,
        finished: false,
        agent_version: "0.1.0".into(),
        jvm_start_unix_ms: 1_699_999_999_000,
        cmdline: "java -agentpath:libjpagent.so Paper -verbose".into(),
        memory_bytes: memory,
        ..Default::default()
    };
    assert_eq!(list.jvms, std::slice::from_ref(&summary));

    // GetJvmProfile, whole tree: pre-order in jp-mct's order (children by name),
    // methods numbered by first use.
    let req = |max_depth, min_share| pb::GetJvmProfileRequest {
        pid: JVM,
        max_depth,
        min_share,
        ..Default::default()
    };
    let p = jp.get_jvm_profile(req(0, 0.0)).await.unwrap().into_inner();
    let methods = vec![
        pm(0, "Paper.h()V"),
        pm(1, "Paper.main([Ljava/lang/String;)V"),
        pm(2, "Paper.<init>()V"),
        pm(3, "Paper.f()V"),
        pm(4, "Paper.g(I)V"),
    ];
    assert_eq!(
        p,
        pb::JvmProfile {
            jvm: Some(summary.clone()),
            methods: methods.clone(),
            nodes: vec![
                node(0, 0, 2, 2, 2),
                node(1, 0, 1, 5, 624),
                node(2, 1, 1, 3, 3),
                node(3, 1, 1, 106, 616),
                node(4, 2, 10, 445, 500),
                node(0, 3, 55, 55, 55),
                node(0, 2, 10, 10, 10),
            ],
            root_cut: None,
            total_nodes: 7,
            cut_nodes: 0,
            max_depth: 0,
            min_share: 0.0,
            offcpu_idle_hidden_ns: 0,
        }
    );

    // Depth 2: f's subtrees (g with its h, and h) are summed on f.
    let p = jp.get_jvm_profile(req(2, 0.0)).await.unwrap().into_inner();
    let mut f = node(3, 1, 1, 106, 616);
    f.cut = cut(2, 3, 75, 510);
    assert_eq!(
        (p.nodes, p.root_cut, p.total_nodes, p.cut_nodes, p.max_depth),
        (
            vec![
                node(0, 0, 2, 2, 2),
                node(1, 0, 1, 5, 624),
                node(2, 1, 1, 3, 3),
                f
            ],
            None,
            7,
            3,
            2
        )
    );
    assert_eq!(p.methods, methods[..4]);

    // 10 % of 626 bytecodes = 62.6: the top-level h (2), <init> (3) and both
    // leaves h (55, 10) are cut; their sums land on their parents (and the root).
    let p = jp.get_jvm_profile(req(0, 0.1)).await.unwrap().into_inner();
    let mut main = node(0, 0, 1, 5, 624);
    main.cut = cut(1, 1, 1, 3);
    let mut f = node(1, 1, 1, 106, 616);
    f.cut = cut(1, 1, 10, 10);
    let mut g = node(2, 2, 10, 445, 500);
    g.cut = cut(1, 1, 55, 55);
    assert_eq!(
        (p.nodes, p.root_cut, p.cut_nodes, p.min_share),
        (vec![main, f, g], cut(1, 1, 2, 2), 4, 0.1)
    );
    assert_eq!(
        p.methods,
        [
            pm(0, "Paper.main([Ljava/lang/String;)V"),
            pm(1, "Paper.f()V"),
            pm(2, "Paper.g(I)V"),
        ]
    );
    // min_share is a fraction.
    let e = jp.get_jvm_profile(req(0, 1.5)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "min_share must be a fraction in [0, 1], got 1.5"
    );

    // GetJvmTop by each order; recursion-free inclusive counts; limit.
    let top = |order: pb::JvmTopOrder, limit| pb::GetJvmTopRequest {
        pid: JVM,
        order: order as i32,
        limit,
        ..Default::default()
    };
    let mt = |name: &str, calls, bytecodes, inclusive| pb::JvmMethodTotals {
        name: format!("Paper.{name}"),
        file: Some("Paper.java".into()),
        calls,
        bytecodes,
        inclusive_bytecodes: inclusive,
        cpu_ns: 0,
        inclusive_cpu_ns: 0,
        ..Default::default()
    };
    let t = jp
        .get_jvm_top(top(pb::JvmTopOrder::Bytecodes, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        t,
        pb::JvmTop {
            jvm: Some(summary.clone()),
            order: pb::JvmTopOrder::Bytecodes as i32,
            methods: vec![
                mt("g(I)V", 10, 445, 500),
                mt("f()V", 1, 106, 616),
                mt("h()V", 67, 67, 67),
                mt("main([Ljava/lang/String;)V", 1, 5, 624),
                mt("<init>()V", 1, 3, 3),
            ],
            total_methods: 5,
            ..Default::default()
        }
    );
    let t = jp
        .get_jvm_top(top(pb::JvmTopOrder::Calls, 3))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<(&str, u64)> = t
        .methods
        .iter()
        .map(|m| (m.name.as_str(), m.calls))
        .collect();
    assert_eq!(
        names,
        [
            ("Paper.h()V", 67),
            ("Paper.g(I)V", 10),
            ("Paper.<init>()V", 1)
        ]
    );
    assert_eq!(t.total_methods, 5);
    let t = jp
        .get_jvm_top(top(pb::JvmTopOrder::Inclusive, 2))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<(&str, u64)> = t
        .methods
        .iter()
        .map(|m| (m.name.as_str(), m.inclusive_bytecodes))
        .collect();
    assert_eq!(
        names,
        [
            ("Paper.main([Ljava/lang/String;)V", 624),
            ("Paper.f()V", 616)
        ]
    );

    // ExportJvmProfile: the bytes jp-mct's writers make of the same tree; JSON is
    // exactly the agent's jp-mct/1.
    let expected = expected_mct();
    assert_eq!(jp_daemon::lock::lock(&jvm).mct(JVM).unwrap(), expected);
    for (format, writer) in [
        (
            pb::JvmExportFormat::Json,
            jp_mct::write_json as fn(&Mct, &mut dyn std::io::Write) -> std::io::Result<()>,
        ),
        (pb::JvmExportFormat::Pprof, |t, w| {
            jp_mct::write_pprof(t, jp_mct::PprofOptions::default(), w)
        }),
        (pb::JvmExportFormat::Folded, jp_mct::write_folded),
        (pb::JvmExportFormat::Tree, jp_mct::write_tree),
    ] {
        let mut want = Vec::new();
        writer(&expected, &mut want).unwrap();
        let mut stream = jp
            .export_jvm_profile(pb::ExportJvmProfileRequest {
                pid: JVM,
                format: format as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut got = Vec::new();
        let mut chunks = Vec::new();
        while let Some(c) = stream.message().await.unwrap() {
            got.extend_from_slice(&c.data);
            chunks.push((c.last, c.total_bytes));
        }
        assert_eq!(got, want, "{format:?}");
        assert_eq!(chunks, [(true, want.len() as u64)], "{format:?}");
    }
    let json = {
        let mut v = Vec::new();
        jp_mct::write_json(&expected, &mut v).unwrap();
        String::from_utf8(v).unwrap()
    };
    assert!(json.starts_with("{\"format\": \"jp-mct/1\", \"bba\": \"precise\", \"root\": {\"children\": [\n{\"method\": \"Paper.h()V\", \"calls\": 2, \"bytecodes\": 2, \"children\": []},\n"), "{json}");

    // Unknown pid: NOT_FOUND naming what jpd holds, for every JVM call.
    let nf = "no JVM with pid 99: jpd holds JVM pids 4242 (see `jpctl jvm list`)";
    let e = jp
        .get_jvm_profile(pb::GetJvmProfileRequest {
            pid: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!((e.code(), e.message()), (tonic::Code::NotFound, nf));
    let e = jp
        .get_jvm_top(pb::GetJvmTopRequest {
            pid: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!((e.code(), e.message()), (tonic::Code::NotFound, nf));
    let e = jp
        .export_jvm_profile(pb::ExportJvmProfileRequest {
            pid: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!((e.code(), e.message()), (tonic::Code::NotFound, nf));
    let e = jp
        .get_jvm_top(pb::GetJvmTopRequest {
            pid: JVM,
            order: 9,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (tonic::Code::InvalidArgument, "unknown order 9")
    );

    // Status: ingestion counters, including a malformed record.
    ingest(
        &mut jp_daemon::lock::lock(&jvm),
        b"JPW0 this is not a record: bad magic, 48 bytes..",
    );
    // What the USDT collector last published (it feeds the store every tick).
    {
        use jp_daemon::store::jvm::sink::{FileStatus, RefusedFile, UsdtStatus};
        jp_daemon::lock::lock(&jvm).set_collector_status(UsdtStatus {
            files: vec![FileStatus {
                path: "/opt/jp/lib/jp/libjpagent.so".into(),
                dev: (8, 1),
                inode: 42,
                sites: 1,
                users: vec![],
                idle: true,
            }],
            refused: vec![RefusedFile {
                path: "/tmp/libjpagent.so".into(),
                reason: "no USDT probe jp:record".into(),
            }],
            processes: vec![7, 8],
            scans: 3,
            last_scan: std::time::Duration::from_micros(1500),
            generations_written: 2,
            errors: 1,
            last_error: "process 9: control block not found".into(),
            ..Default::default()
        });
    }
    let st = jp
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let bytes: u64 = paper_records().iter().map(|r| r.len() as u64).sum::<u64>() + 48;
    let stats = jp_daemon::lock::lock(&jvm).stats();
    assert_eq!(
        st.jvm,
        Some(pb::JvmStatus {
            jvms_attached: 1,
            jvms_exited: 0,
            records: 4,
            bytes,
            malformed: 1,
            malformed_by_reason: vec![pb::JvmMalformed {
                reason: "bad magic".into(),
                records: 1
            }],
            lost: 0,
            ring_full: 0,
            faults: 0,
            too_long: 0,
            fired: 0,
            nodes: 7,
            memory_bytes: stats.memory_bytes,
            gaps: 0,
            resync_requests: 0,
            limit_drops: 0,
            jvm_limit_drops: 0,
            events: 5,
            thread_nodes: stats.thread_nodes,
            collector: Some(pb::UsdtCollector {
                files: vec![pb::UsdtFile {
                    path: "/opt/jp/lib/jp/libjpagent.so".into(),
                    probe_sites: 1,
                    processes: 0,
                    idle: true,
                }],
                refused: vec![pb::UsdtRefusedFile {
                    path: "/tmp/libjpagent.so".into(),
                    reason: "no USDT probe jp:record".into(),
                }],
                processes: 2,
                scans: 3,
                last_scan_us: 1500,
                generations_written: 2,
                errors: 1,
                last_error: "process 9: control block not found".into(),
            }),
            // Off-CPU time is not measured here: no counters.
            offcpu_dropped: None,
        })
    );

    let _ = run.stop.send(());
    run.task.await.unwrap().unwrap();
    drop(run.guard);
}

#[test]
fn jvm_watch_sends_names_once_then_deltas_exits_and_removals() {
    let jvm = jvm_store();
    let lock = || jp_daemon::lock::lock(&jvm);
    let mut w = JvmWatch::default();
    let t0 = Instant::now();
    let d0 = w.next(&lock(), t0).unwrap();
    assert_eq!(d0.new_jvms.len(), 1);
    assert_eq!(
        (d0.new_jvms[0].pid, d0.new_jvms[0].main.as_str()),
        (JVM, "Paper")
    );
    // Methods in the store's top order (exclusive bytecodes), ids from 0.
    let names: Vec<(u32, &str)> = d0
        .new_methods
        .iter()
        .map(|m| (m.id, m.name.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            (0, "Paper.g(I)V"),
            (1, "Paper.f()V"),
            (2, "Paper.h()V"),
            (3, "Paper.main([Ljava/lang/String;)V"),
            (4, "Paper.<init>()V"),
        ]
    );
    let md = |id, calls, bytecodes| pb::JvmMethodDelta {
        id,
        calls,
        bytecodes,
        cpu_ns: 0,
        offcpu_ns: 0,
    };
    // The JVM's history: its first method deltas cover no known time (0).
    assert_eq!(
        d0.jvms,
        [pb::JvmActivity {
            pid: JVM,
            calls: 80,
            bytecodes: 626,
            methods: vec![
                md(0, 10, 445),
                md(1, 1, 106),
                md(2, 67, 67),
                md(3, 1, 5),
                md(4, 1, 3)
            ],
            methods_elapsed_ns: 0,
            cpu_ns: 0,
        }]
    );
    assert!(d0.exited.is_empty() && d0.removed.is_empty());

    // Nothing changed: no JVM part at all.
    assert_eq!(w.next(&lock(), t0 + Duration::from_millis(500)), None);

    // A delta record, at once: the totals travel, but the method totals were just
    // computed (no time since them is 10x their cost): not yet.
    ingest(&mut lock(), &paper_delta());
    let activity = |calls, bytecodes, methods, ns| pb::JvmDelta {
        jvms: vec![pb::JvmActivity {
            pid: JVM,
            calls,
            bytecodes,
            methods,
            methods_elapsed_ns: ns,
            cpu_ns: 0,
        }],
        ..Default::default()
    };
    assert_eq!(w.next(&lock(), t0), Some(activity(5, 5, vec![], 0)));
    // A second later they are due: only h's change, no names again, with the time
    // since the previous method deltas.
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(
        w.next(&lock(), t1),
        Some(activity(0, 0, vec![md(2, 5, 5)], 1_000_000_000))
    );
    assert_eq!(w.next(&lock(), t1 + Duration::from_secs(1)), None);

    // Exit, then retention over.
    let gone = attached() + Duration::from_secs(1);
    lock().process_gone(JVM, gone);
    let d2 = w.next(&lock(), t1 + Duration::from_secs(2)).unwrap();
    assert_eq!(d2.exited, [JVM]);
    assert!(d2.jvms.is_empty() && d2.new_jvms.is_empty() && d2.removed.is_empty());
    lock().expire(gone + Duration::from_secs(61));
    let d3 = w.next(&lock(), t1 + Duration::from_secs(3)).unwrap();
    assert_eq!(
        d3,
        pb::JvmDelta {
            removed: vec![JVM],
            ..Default::default()
        }
    );

    // A second stream starts from scratch: everything is new again.
    let mut w2 = JvmWatch::default();
    assert_eq!(w2.next(&lock(), t1), None, "no JVM left");
}

#[tokio::test]
async fn watch_stream_carries_jvm_deltas() {
    let jvm = jvm_store();
    let run = start_with(Sources {
        kernel: filled_store(),
        jvm: Arc::clone(&jvm),
        windows: Default::default(),
    })
    .await;
    let mut jp = JpClient::new(connect(&run.socket).await);
    let mut watch = jp
        .watch(pb::WatchRequest { interval_ms: 100 })
        .await
        .unwrap()
        .into_inner();
    let u0 = watch.message().await.unwrap().unwrap();
    let j = u0.jvm.expect("the first message names the JVM");
    assert_eq!(j.new_jvms[0].pid, JVM);
    assert_eq!((j.jvms[0].calls, j.jvms[0].bytecodes), (80, 626));
    let u1 = watch.message().await.unwrap().unwrap();
    assert_eq!(u1.jvm, None, "nothing changed");
    ingest(&mut jp_daemon::lock::lock(&jvm), &paper_delta());
    let u2 = watch.message().await.unwrap().unwrap();
    let j = u2.jvm.expect("the delta");
    assert_eq!((j.jvms[0].calls, j.jvms[0].bytecodes), (5, 5));
    // Since the first message's method totals: two 100 ms ticks.
    let ns = j.jvms[0].methods_elapsed_ns;
    assert!((150_000_000..1_000_000_000).contains(&ns), "{ns} ns");
    assert_eq!(
        j.jvms[0].methods,
        [pb::JvmMethodDelta {
            id: 2,
            calls: 5,
            bytecodes: 5,
            cpu_ns: 0,
            offcpu_ns: 0,
        }]
    );
    let _ = run.stop.send(());
    run.task.await.unwrap().unwrap();
}

#[test]
fn jvm_watch_reports_a_reused_pid_as_removed_then_new() {
    let jvm = jvm_store();
    let mut w = JvmWatch::default();
    w.next(&jp_daemon::lock::lock(&jvm), Instant::now())
        .unwrap();
    // Another process now has the pid (another start time): the store replaces it.
    let later = attached() + Duration::from_secs(5);
    let info = ProcessInfo {
        start_time_ticks: 9999,
        ns_pid: None,
        cmdline: "java Other".into(),
        exe: "/usr/bin/java".into(),
        uid: None,
    };
    jp_daemon::lock::lock(&jvm).process_found(JVM, info, later);
    let d = w
        .next(&jp_daemon::lock::lock(&jvm), Instant::now())
        .unwrap();
    assert_eq!(d.removed, [JVM]);
    assert_eq!(d.new_jvms.len(), 1);
    let s = &d.new_jvms[0];
    assert_eq!(
        (
            s.pid,
            s.main.as_str(),
            s.bytecodes,
            s.attached_since_unix_ms
        ),
        (JVM, "java Other", 0, 1_700_000_005_000)
    );
    assert!(d.jvms.is_empty() && d.new_methods.is_empty() && d.exited.is_empty());
}

/// One millisecond per sample: the CPU below reads as whole milliseconds.
const PERIOD_NS: u64 = 1_000_000;

/// Kernel-sampler samples of `jvm_store`'s JVM: (kind, stream, wire id, samples).
/// Thread 1 (stream 1) in g (wire 4): 30 user, 5 kernel; in f (3): 10; in h under g
/// (5): 3; the worker (stream 2) in its h (1): 2; a GC thread without a slot: 7.
fn paper_cpu(store: &mut JvmStore, samples: &[(u32, u64, u64, u64)]) {
    use jp_common::{ctx_kind, CtxKey};
    let keys: Vec<(CtxKey, u64)> = samples
        .iter()
        .map(|&(kind, stream, id, n)| {
            let key = CtxKey {
                tgid: JVM,
                kind,
                stream,
                id,
                kip: if kind == ctx_kind::KERNEL {
                    STEXT + 0x40
                } else {
                    0
                },
            };
            (key, n)
        })
        .collect();
    store.add_cpu_samples(PERIOD_NS, &keys, attached());
}

fn paper_samples() -> Vec<(u32, u64, u64, u64)> {
    use jp_common::ctx_kind::{KERNEL, THREAD_USER, USER};
    let gc = u64::from_le_bytes(*b"GC Threa");
    let gc_rest = u64::from_le_bytes(*b"d#0\0\0\0\0\0");
    vec![
        (USER, 1, 4, 30),
        (KERNEL, 1, 4, 5),
        (USER, 1, 3, 10),
        (USER, 1, 5, 3),
        (USER, 2, 1, 2),
        (THREAD_USER, gc, gc_rest, 7),
    ]
}

fn with_cpu(mut n: pb::JvmNode, own_ms: u64, inclusive_ms: u64) -> pb::JvmNode {
    (n.cpu_ns, n.inclusive_cpu_ns) = (own_ms * PERIOD_NS, inclusive_ms * PERIOD_NS);
    n
}

fn cut_cpu(c: Option<pb::JvmCut>, ms: u64) -> Option<pb::JvmCut> {
    c.map(|c| pb::JvmCut {
        cpu_ns: ms * PERIOD_NS,
        ..c
    })
}

/// GetJvmProfile with the sampler joined: each context's own CPU, its subtree's, and
/// the cut subtrees' CPU on their parents, so that a parent's inclusive CPU is its own
/// plus its shown children's plus its cut's, at every limit.
#[tokio::test]
async fn jvm_profile_carries_cpu_per_context_and_in_cuts() {
    let jvm = jvm_store();
    paper_cpu(&mut jp_daemon::lock::lock(&jvm), &paper_samples());
    let run = start_with(Sources {
        kernel: filled_store(),
        jvm: Arc::clone(&jvm),
        windows: Default::default(),
    })
    .await;
    let mut jp = JpClient::new(connect(&run.socket).await);
    let req = |max_depth, min_share| pb::GetJvmProfileRequest {
        pid: JVM,
        max_depth,
        min_share,
        ..Default::default()
    };
    let p = jp.get_jvm_profile(req(0, 0.0)).await.unwrap().into_inner();
    let kinds: Vec<(&str, u64, u64)> = p
        .jvm
        .as_ref()
        .unwrap()
        .cpu
        .iter()
        .map(|k| (k.kind.as_str(), k.user_ns, k.kernel_ns))
        .collect();
    assert_eq!(
        kinds,
        [("app", 45_000_000, 5_000_000), ("gc", 7_000_000, 0)]
    );
    assert_eq!(
        p.nodes,
        [
            with_cpu(node(0, 0, 2, 2, 2), 2, 2),
            with_cpu(node(1, 0, 1, 5, 624), 0, 48),
            node(2, 1, 1, 3, 3),
            with_cpu(node(3, 1, 1, 106, 616), 10, 48),
            with_cpu(node(4, 2, 10, 445, 500), 35, 38),
            with_cpu(node(0, 3, 55, 55, 55), 3, 3),
            node(0, 2, 10, 10, 10),
        ]
    );

    // Depth 2: g's subtree (38 ms) and the idle h are cut below f.
    let p = jp.get_jvm_profile(req(2, 0.0)).await.unwrap().into_inner();
    let mut f = with_cpu(node(3, 1, 1, 106, 616), 10, 48);
    f.cut = cut_cpu(cut(2, 3, 75, 510), 38);
    assert_eq!(
        p.nodes,
        [
            with_cpu(node(0, 0, 2, 2, 2), 2, 2),
            with_cpu(node(1, 0, 1, 5, 624), 0, 48),
            node(2, 1, 1, 3, 3),
            f
        ]
    );

    // 10 % of the bytecodes, whatever the CPU: the top-level h (2 bytecodes, 2 ms) is
    // cut at the root, g's h (3 ms) below g.
    let p = jp.get_jvm_profile(req(0, 0.1)).await.unwrap().into_inner();
    let mut main = with_cpu(node(0, 0, 1, 5, 624), 0, 48);
    main.cut = cut(1, 1, 1, 3);
    let mut f = with_cpu(node(1, 1, 1, 106, 616), 10, 48);
    f.cut = cut(1, 1, 10, 10);
    let mut g = with_cpu(node(2, 2, 10, 445, 500), 35, 38);
    g.cut = cut_cpu(cut(1, 1, 55, 55), 3);
    assert_eq!(
        (p.nodes, p.root_cut),
        (vec![main, f, g], cut_cpu(cut(1, 1, 2, 2), 2))
    );
    let _ = run.stop.send(());
    run.task.await.unwrap().unwrap();
}

/// Watch with the sampler joined: CPU alone makes a JVM active; its CPU change and each
/// method's own CPU change travel, once.
#[test]
fn jvm_watch_carries_cpu_deltas_per_jvm_and_method() {
    use jp_common::ctx_kind::USER;
    let jvm = jvm_store();
    let lock = || jp_daemon::lock::lock(&jvm);
    let mut w = JvmWatch::default();
    let t0 = Instant::now();
    let d0 = w.next(&lock(), t0).unwrap();
    assert_eq!(d0.jvms[0].cpu_ns, 0, "not joined yet");
    assert!(d0.new_jvms[0].cpu.is_empty());
    paper_cpu(&mut lock(), &paper_samples());
    let md = |id, cpu_ms: u64| pb::JvmMethodDelta {
        id,
        calls: 0,
        bytecodes: 0,
        cpu_ns: cpu_ms * PERIOD_NS,
        offcpu_ns: 0,
    };
    let activity = |cpu_ms: u64, methods, ns| pb::JvmDelta {
        jvms: vec![pb::JvmActivity {
            pid: JVM,
            calls: 0,
            bytecodes: 0,
            methods,
            methods_elapsed_ns: ns,
            cpu_ns: cpu_ms * PERIOD_NS,
        }],
        ..Default::default()
    };
    // Ids as the first message numbered them: g 0, f 1, h 2 (h: 3 ms + the worker's 2).
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(
        w.next(&lock(), t1),
        Some(activity(
            57,
            vec![md(0, 35), md(1, 10), md(2, 5)],
            1_000_000_000
        ))
    );
    assert_eq!(w.next(&lock(), t1 + Duration::from_secs(1)), None);
    paper_cpu(&mut lock(), &[(USER, 1, 4, 10)]);
    let t2 = t1 + Duration::from_secs(2);
    assert_eq!(
        w.next(&lock(), t2),
        Some(activity(10, vec![md(0, 10)], 2_000_000_000))
    );
}
