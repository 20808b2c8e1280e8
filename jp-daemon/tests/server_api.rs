//! The gRPC server for real, on a temporary Unix socket, over a store filled with
//! synthetic counts and symbols (no eBPF, no root): every RPC through the generated
//! client, plus health and reflection as a generic client (grpcurl) uses them.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper_util::rt::TokioIo;
use jp_daemon::kernel::symbols::Symbols;
use jp_daemon::server;
use jp_daemon::store::{
    CollectorStatus, IrqHandlerCounts, KernelCounts, ModeCounts, ProgramStats, SoftirqCounts, Store,
};
use jp_proto::v1 as pb;
use jp_proto::v1::jp_client::JpClient;
use prost::Message;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

const STEXT: u64 = 0xffff_ffff_8100_0000;

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
    }
}

fn filled_store() -> Arc<Store> {
    let store = Store::new();
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

async fn start(store: Arc<Store>) -> Running {
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
        }),
    };
    assert_eq!(st, expected);

    // GetKernelProfile: all functions, sorted by samples; idle is in no function.
    let req = pb::GetKernelProfileRequest {
        top_n: 0,
        include_buckets: false,
        source: 0,
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
    };
    assert_eq!(p, expected);
    assert_eq!(p.functions[0].load, 0.78125);

    // top_n and raw buckets.
    let req = pb::GetKernelProfileRequest {
        top_n: 2,
        include_buckets: true,
        source: 0,
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
                                "Watch"
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
