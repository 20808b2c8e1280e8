//! A client that opens hundreds of Watch streams on one connection and never reads
//! them: jpd keeps at most `limits::MAX_CONCURRENT_STREAMS` of them open (the rest
//! wait in the client's own HTTP/2 stack), another client's GetStatus still
//! answers, and the server's memory stays bounded. The server runs in this process
//! on a temporary Unix socket, as in server_api.rs (no eBPF, no root).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use jp_daemon::server;
use jp_daemon::store::kernel::KernelStore;
use jp_proto::v1 as pb;
use jp_proto::v1::jp_client::JpClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Far more than any limit a host daemon should allow.
const FLOOD_STREAMS: usize = 2000;
/// The flood may grow the process by this much. Measured with the limits: about
/// 19 MiB, most of it the client's own queued calls. Without a stream limit every
/// one of the flood's streams is also a server task with its queue of updates and
/// HTTP/2 buffers: about 53 MiB.
const RSS_GROWTH_LIMIT_KIB: u64 = 36 * 1024;

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

/// This process's resident set (the server's and both clients').
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_flood_neither_starves_another_client_nor_grows_memory() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("jpd.sock");
    let (listener, _guard) = server::socket::bind(&socket).expect("bind");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, KernelStore::new(), async move {
        let _ = stopped.await;
    }));

    // Warm up allocator and connection so that the baseline is not the empty process.
    let flooder = connect(&socket).await;
    let mut warm = JpClient::new(flooder.clone())
        .watch(pb::WatchRequest { interval_ms: 100 })
        .await
        .expect("a first Watch")
        .into_inner();
    warm.message().await.expect("first update").expect("open");
    drop(warm);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let baseline = rss_kib();

    // The flood: every Watch at the fastest interval, none of them read, all kept.
    let opened = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::with_capacity(FLOOD_STREAMS);
    for _ in 0..FLOOD_STREAMS {
        let (channel, opened) = (flooder.clone(), Arc::clone(&opened));
        calls.push(tokio::spawn(async move {
            let stream = JpClient::new(channel)
                .watch(pb::WatchRequest { interval_ms: 100 })
                .await;
            if stream.is_ok() {
                opened.fetch_add(1, Ordering::SeqCst);
            }
            // Held, unread, until the test ends.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(stream);
        }));
    }
    // Long enough for every stream jpd accepts to open and fill its queues.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = rss_kib();
    let open = opened.load(Ordering::SeqCst);

    // Another client, on its own connection, is still served.
    let t0 = Instant::now();
    let other = connect(&socket).await;
    let status = tokio::time::timeout(
        Duration::from_secs(20),
        JpClient::new(other).get_status(pb::GetStatusRequest {}),
    )
    .await;
    let waited = t0.elapsed();
    let after = rss_kib();
    eprintln!(
        "{open} of {FLOOD_STREAMS} streams open; RSS {baseline} → {during} → {after} KiB; \
         GetStatus answered in {waited:?}"
    );
    // Every failed check at once, so that one run shows all that is wrong.
    let mut failed = Vec::new();
    if !matches!(status, Ok(Ok(_))) {
        failed.push(format!(
            "GetStatus from another client during the flood: {status:?} after {waited:?}"
        ));
    }
    if open == 0 {
        failed.push("not one Watch stream opened".to_string());
    }
    let limit = server::limits::MAX_CONCURRENT_STREAMS as usize;
    if open > limit {
        failed.push(format!(
            "{open} Watch streams open on one connection; the limit is {limit}"
        ));
    }
    let growth = during.max(after).saturating_sub(baseline);
    if growth > RSS_GROWTH_LIMIT_KIB {
        failed.push(format!(
            "the flood grew the process by {growth} KiB (limit {RSS_GROWTH_LIMIT_KIB} KiB)"
        ));
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));

    for c in calls {
        c.abort();
    }
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("the server stops")
        .expect("server task")
        .expect("server result");
}
