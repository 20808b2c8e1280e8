//! What the service answers depends on who calls, as the connection's tag says it:
//! anonymous TCP callers (no client certificate) see command lines cut to the
//! program's name; only root (or CAP_SYSLOG) on the Unix socket sees real kernel
//! addresses, everyone else offsets from `_stext`; Watch streams are capped per
//! caller and in all. The service is called directly with the tag in the request's
//! extensions, as tonic hands it over.

use std::net::SocketAddr;

use jp_daemon::server::caller::HostKallsyms;
use jp_daemon::server::tls::TlsPeer;
use jp_daemon::server::unix_peer::{Cred, UnixPeer};
use jp_daemon::server::watch_quota::{WatchLimits, WATCH_QUOTA};
use jp_daemon::server::{Api, JpService};
use jp_daemon::store::Sources;
use jp_proto::v1 as pb;
use jp_proto::v1::jp_server::Jp;
use tonic::Request;

use crate::server::{filled_store, jvm_store, JVM, STEXT};

/// The service over the test's stores, and the sender that keeps it running.
fn service(watch_limits: WatchLimits) -> (JpService, tokio::sync::watch::Sender<bool>) {
    let api = Api {
        sources: Sources {
            kernel: filled_store(),
            jvm: jvm_store(),
            windows: Default::default(),
        },
        windows: None,
        watch_limits,
        otlp_attributes: Default::default(),
    };
    let (running, stopping) = tokio::sync::watch::channel(false);
    (JpService::new(api, stopping), running)
}

fn tls(certified: bool) -> TlsPeer {
    TlsPeer {
        remote: "192.0.2.7:50000".parse::<SocketAddr>().unwrap(),
        client_names: Vec::new(),
        client_certificate: certified,
    }
}

fn unix(uid: u32) -> UnixPeer {
    UnixPeer {
        cred: Some(Cred {
            uid,
            gid: uid,
            // This test process: it runs as root, so a caller claiming another uid
            // with this pid is caught as a reused pid and gets no capability.
            pid: std::process::id() as i32,
        }),
        groups: Vec::new(),
    }
}

fn request<T, P: Clone + Send + Sync + 'static>(message: T, peer: P) -> Request<T> {
    let mut r = Request::new(message);
    r.extensions_mut().insert(peer);
    r
}

const FULL_COMMAND: &str = "java -agentpath:libjpagent.so Paper -verbose";

#[tokio::test]
async fn anonymous_tcp_callers_see_command_lines_cut_to_the_program() {
    let (jp, _running) = service(WatchLimits::default());
    let seen = |list: &pb::JvmList| -> Vec<(u32, String, String)> {
        list.jvms
            .iter()
            .map(|j| (j.pid, j.main.clone(), j.cmdline.clone()))
            .collect()
    };
    let anonymous = jp
        .list_jvms(request(pb::ListJvmsRequest::default(), tls(false)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(seen(&anonymous), [(JVM, "Paper".into(), "java".into())]);
    for peer_is_trusted in [
        request(pb::ListJvmsRequest::default(), tls(true)),
        request(pb::ListJvmsRequest::default(), unix(1000)),
    ] {
        let full = jp.list_jvms(peer_is_trusted).await.unwrap().into_inner();
        assert_eq!(seen(&full), [(JVM, "Paper".into(), FULL_COMMAND.into())]);
    }
    let profile = jp
        .get_jvm_profile(request(
            pb::GetJvmProfileRequest {
                pid: JVM,
                ..Default::default()
            },
            tls(false),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(profile.jvm.map(|j| j.cmdline), Some("java".into()));
    let top = jp
        .get_jvm_top(request(
            pb::GetJvmTopRequest {
                pid: JVM,
                ..Default::default()
            },
            tls(false),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(top.jvm.map(|j| j.cmdline), Some("java".into()));
    let mut watch = jp
        .watch(request(pb::WatchRequest { interval_ms: 100 }, tls(false)))
        .await
        .unwrap()
        .into_inner();
    let first = tokio_stream::StreamExt::next(&mut watch)
        .await
        .expect("an update")
        .expect("not an error");
    let announced: Vec<String> = first
        .jvm
        .expect("the JVM part")
        .new_jvms
        .into_iter()
        .map(|j| j.cmdline)
        .collect();
    assert_eq!(announced, ["java"]);
}

/// Every kernel address of `p` less `_stext`, as a caller without kallsyms rights
/// must see it.
fn as_offsets(mut p: pb::KernelProfile) -> pb::KernelProfile {
    let off = |a: u64| if a == 0 { 0 } else { a.wrapping_sub(STEXT) };
    p.text_start = off(p.text_start);
    p.text_end = off(p.text_end);
    p.functions
        .iter_mut()
        .for_each(|f| f.address = off(f.address));
    p.other_ips
        .iter_mut()
        .for_each(|o| o.address = off(o.address));
    p
}

#[tokio::test]
async fn kernel_addresses_only_to_those_who_may_read_kallsyms() {
    let (jp, _running) = service(WatchLimits::default());
    let req = pb::GetKernelProfileRequest {
        include_buckets: true,
        ..Default::default()
    };
    let root = jp
        .get_kernel_profile(request(req, unix(0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((root.text_start, root.text_end), (STEXT, STEXT + 0x200));
    assert!(root.functions.iter().all(|f| f.address >= STEXT));
    assert!(!root.other_ips.is_empty());
    // A user without CAP_SYSLOG reads real addresses only where the host shows
    // `/proc/kallsyms`' values to everyone (kptr_restrict 0, perf_event_paranoid ≤ 1).
    let open_to_all = HostKallsyms::read().shown_to_all();
    let for_a_user = if open_to_all {
        root.clone()
    } else {
        as_offsets(root.clone())
    };
    for (who, r, want) in [
        ("uid 1000", request(req, unix(1000)), for_a_user),
        (
            "TLS with a certificate",
            request(req, tls(true)),
            as_offsets(root.clone()),
        ),
        (
            "anonymous TLS",
            request(req, tls(false)),
            as_offsets(root.clone()),
        ),
    ] {
        let p = jp.get_kernel_profile(r).await.unwrap().into_inner();
        assert_eq!(p, want, "{who}");
    }
    let status = jp
        .get_status(request(pb::GetStatusRequest {}, unix(1000)))
        .await
        .unwrap()
        .into_inner()
        .kernel
        .expect("kernel status");
    let base = if open_to_all { STEXT } else { 0 };
    assert_eq!((status.text_start, status.text_end), (base, base + 0x200));
    let real = jp
        .get_irq_stats(request(pb::GetIrqStatsRequest {}, unix(0)))
        .await
        .unwrap()
        .into_inner();
    let offsets = jp
        .get_irq_stats(request(pb::GetIrqStatsRequest {}, tls(true)))
        .await
        .unwrap()
        .into_inner();
    let addresses =
        |s: &pb::IrqStats| -> Vec<u64> { s.irqs.iter().map(|h| h.function_address).collect() };
    assert_eq!(addresses(&real), [0xffff_ffff_c000_2000, STEXT + 0x100]);
    assert_eq!(addresses(&offsets), [0x3f00_2000, 0x100]);
    let mut watch = jp
        .watch(request(pb::WatchRequest { interval_ms: 100 }, unix(1000)))
        .await
        .unwrap()
        .into_inner();
    let first = tokio_stream::StreamExt::next(&mut watch)
        .await
        .expect("an update")
        .expect("not an error");
    let new_functions = first.kernel.expect("kernel part").new_functions;
    assert!(!new_functions.is_empty());
    assert!(
        new_functions
            .iter()
            .all(|f| (f.address < 0x1_0000_0000) != open_to_all),
        "{new_functions:?}"
    );
}

#[tokio::test]
async fn watch_streams_are_capped_per_caller_and_in_all() {
    let (jp, _running) = service(WatchLimits {
        per_caller: 2,
        total: 3,
    });
    let before = jp_daemon::refusals::get(WATCH_QUOTA);
    let open = |peer: UnixPeer| jp.watch(request(pb::WatchRequest { interval_ms: 1000 }, peer));
    let a1 = open(unix(1000)).await.unwrap();
    let _a2 = open(unix(1000)).await.unwrap();
    let e = open(unix(1000))
        .await
        .err()
        .expect("a third stream of uid 1000");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    let _b1 = open(unix(1001)).await.unwrap();
    let e = open(unix(1002))
        .await
        .err()
        .expect("a fourth stream in all");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert_eq!(jp_daemon::refusals::get(WATCH_QUOTA) - before, 2);
    // A stream that ends gives its place back (its task sees the client gone).
    drop(a1);
    let mut reopened = None;
    for _ in 0..100 {
        if let Ok(s) = open(unix(1000)).await {
            reopened = Some(s);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        reopened.is_some(),
        "the place of the dropped stream came back"
    );
}
