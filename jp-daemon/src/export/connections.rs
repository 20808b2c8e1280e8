//! The exporter's listener, bounded. axum's own `serve` takes every connection and
//! keeps it as long as the client likes; a local user could hold thousands of idle
//! sockets (each a task and buffers in jpd), or trickle headers forever. Here:
//! - at most `max_connections` at once. At the cap a new client takes the place of
//!   the connection idle the longest (one with no request in progress), so idle
//!   sockets cannot lock a scraper out; when every connection is in a request the
//!   new one is closed at once. Either way `http/too_many_connections` counts it.
//! - a request's headers must be complete within `header_timeout` of the
//!   connection's start or of its previous answer (hyper's timer): this also closes
//!   kept-alive connections that stay silent,
//! - a connection with no request in progress for `idle_timeout` is closed
//!   whatever it does meanwhile (trickling bytes, not reading its answer), counted
//!   `http/idle_timeout`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use crate::lock::lock;
use crate::refusals::{self, Refusal};

pub const TOO_MANY_CONNECTIONS: Refusal = Refusal::new("http", "too_many_connections");
pub const IDLE_TIMEOUT: Refusal = Refusal::new("http", "idle_timeout");

/// How often a connection checks whether it has been idle too long.
const IDLE_CHECK: Duration = Duration::from_millis(250);

/// The bounds of the listener.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// One open connection, as the registry sees it.
struct Conn {
    id: u64,
    /// Requests in progress on it.
    requests: AtomicUsize,
    /// When its last request ended (or it was accepted), in ms since the registry's start.
    idle_since_ms: AtomicU64,
    /// Told to close (it lost its place to a new client).
    evicted: Notify,
}

/// The open connections.
struct Registry {
    start: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A place for a new connection, evicting the one idle the longest at the cap;
    /// `None` when every connection is in a request.
    fn admit(&self, max: usize) -> Option<Arc<Conn>> {
        let mut open = lock(&self.open);
        if open.len() >= max {
            refusals::count(TOO_MANY_CONNECTIONS, 1);
            let idlest = open
                .values()
                .filter(|c| c.requests.load(Ordering::Acquire) == 0)
                .min_by_key(|c| (c.idle_since_ms.load(Ordering::Acquire), c.id))
                .map(|c| c.id)?;
            if let Some(c) = open.remove(&idlest) {
                c.evicted.notify_one();
            }
        }
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            requests: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            evicted: Notify::new(),
        });
        open.insert(conn.id, Arc::clone(&conn));
        Some(conn)
    }

    fn remove(&self, id: u64) {
        lock(&self.open).remove(&id);
    }
}

/// Serves `app` on `listener` within `limits` until `stop` completes; connections
/// then finish their requests (the caller bounds how long it waits).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    let registry = Arc::new(Registry {
        start: Instant::now(),
        next_id: AtomicU64::new(0),
        open: Mutex::new(HashMap::new()),
    });
    let (closing, closing_rx) = watch::channel(false);
    let mut stop = pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            a = listener.accept() => a,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                log::warn!("HTTP exporter: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(conn) = registry.admit(limits.max_connections) else {
            drop(tcp);
            continue;
        };
        let (registry, app, closing) = (Arc::clone(&registry), app.clone(), closing_rx.clone());
        tokio::spawn(async move {
            let id = conn.id;
            serve_connection(tcp, app, conn, &registry, limits, closing).await;
            registry.remove(id);
        });
    }
    let _ = closing.send(true);
}

async fn serve_connection(
    tcp: TcpStream,
    app: Router,
    conn: Arc<Conn>,
    registry: &Arc<Registry>,
    limits: Limits,
    mut closing: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let service = TowerToHyperService::new(Counted {
        app,
        conn: Arc::clone(&conn),
        registry: Arc::clone(registry),
    });
    let mut served = pin!(builder.serve_connection(TokioIo::new(tcp), service));
    let mut check = tokio::time::interval(IDLE_CHECK);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            r = served.as_mut() => {
                if let Err(e) = r {
                    log::debug!("HTTP exporter connection ended: {e}");
                }
                return;
            }
            () = conn.evicted.notified() => return,
            r = closing.wait_for(|c| *c), if !shutting_down => {
                shutting_down = true;
                if r.is_ok() {
                    served.as_mut().graceful_shutdown();
                }
            }
            _ = check.tick() => {
                let idle_ms = registry
                    .now_ms()
                    .saturating_sub(conn.idle_since_ms.load(Ordering::Acquire));
                if conn.requests.load(Ordering::Acquire) == 0
                    && Duration::from_millis(idle_ms) >= limits.idle_timeout
                {
                    refusals::count(IDLE_TIMEOUT, 1);
                    return;
                }
            }
        }
    }
}

/// The router, counting the requests in progress on its connection.
#[derive(Clone)]
struct Counted {
    app: Router,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

/// A request in progress; its end makes the connection idle from then on.
struct InRequest {
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl Drop for InRequest {
    fn drop(&mut self) {
        self.conn
            .idle_since_ms
            .store(self.registry.now_ms(), Ordering::Release);
        self.conn.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<B> tower::Service<axum::http::Request<B>> for Counted
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        self.conn.requests.fetch_add(1, Ordering::AcqRel);
        let in_request = InRequest {
            conn: Arc::clone(&self.conn),
            registry: Arc::clone(&self.registry),
        };
        let answer = tower::Service::call(&mut self.app, req);
        Box::pin(async move {
            let r = answer.await;
            drop(in_request);
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::Semaphore;

    /// Serves `app` within `limits` on a free loopback port.
    async fn start(app: Router, limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, app, limits, std::future::pending()));
        addr
    }

    fn limits(max_connections: usize, header_timeout: u64, idle_timeout: u64) -> Limits {
        Limits {
            max_connections,
            header_timeout: Duration::from_secs(header_timeout),
            idle_timeout: Duration::from_secs(idle_timeout),
        }
    }

    /// The whole answer to `GET path` on a new connection ("" when closed unanswered).
    async fn get_path(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let _ = s.write_all(req.as_bytes()).await;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Waits until `kind` has been counted `n` times since `before`.
    async fn counted(kind: Refusal, before: u64, n: u64) {
        for _ in 0..1000 {
            if refusals::get(kind) - before >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(refusals::get(kind) - before, n, "{kind:?}");
    }

    /// Reads until the server closes (Ok) or 5 s pass (Err).
    async fn closed_by_server(s: &mut TcpStream) -> Result<Vec<u8>, ()> {
        let mut out = Vec::new();
        match tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await {
            Ok(_) => Ok(out),
            Err(_) => Err(()),
        }
    }

    #[tokio::test]
    async fn idle_connections_make_way_for_a_scrape() {
        let app = Router::new().route("/metrics", get(|| async { "up" }));
        let addr = start(app, limits(4, 600, 600)).await;
        let before = refusals::get(TOO_MANY_CONNECTIONS);
        let mut idle = Vec::new();
        for _ in 0..10 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // 6 of the 10 lost their place to newer ones, the oldest first.
        counted(TOO_MANY_CONNECTIONS, before, 6).await;
        for s in &mut idle[..6] {
            assert_eq!(closed_by_server(s).await, Ok(Vec::new()));
        }
        let answer = get_path(addr, "/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nup"), "{answer}");
        assert_eq!(refusals::get(TOO_MANY_CONNECTIONS) - before, 7);
        // The newest idle ones kept theirs but one, which the scrape took.
        assert_eq!(closed_by_server(&mut idle[6]).await, Ok(Vec::new()));
    }

    #[tokio::test]
    async fn connections_all_in_requests_refuse_the_next_one() {
        let gate = Arc::new(Semaphore::new(0));
        let g = Arc::clone(&gate);
        let app = Router::new().route(
            "/slow",
            get(move || {
                let g = Arc::clone(&g);
                async move {
                    let _ = g.acquire().await.map(|p| p.forget());
                    "done"
                }
            }),
        );
        let addr = start(app, limits(2, 600, 600)).await;
        let slow = [
            tokio::spawn(get_path(addr, "/slow")),
            tokio::spawn(get_path(addr, "/slow")),
        ];
        // Both are in their request once the server holds two connections in it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = refusals::get(TOO_MANY_CONNECTIONS);
        assert_eq!(get_path(addr, "/slow").await, "", "closed unanswered");
        assert_eq!(refusals::get(TOO_MANY_CONNECTIONS) - before, 1);
        gate.add_permits(2);
        for s in slow {
            assert!(s.await.unwrap().ends_with("\r\n\r\ndone"));
        }
    }

    #[tokio::test]
    async fn silent_and_idle_connections_are_closed() {
        let app = Router::new().route("/", get(|| async { "root" }));
        let addr = start(app.clone(), limits(8, 1, 600)).await;
        // Headers never finished: hyper's header timeout (1 s) closes it.
        let mut trickle = TcpStream::connect(addr).await.unwrap();
        trickle.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
        let answer = closed_by_server(&mut trickle).await.expect("closed");
        assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"),
            "{answer:?}"
        );
        // A kept-alive connection after its request: closed once idle for 1 s.
        let addr = start(app, limits(8, 600, 1)).await;
        let before = refusals::get(IDLE_TIMEOUT);
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let answer = closed_by_server(&mut kept).await.expect("closed");
        assert!(answer.ends_with(b"\r\n\r\nroot"), "{answer:?}");
        assert_eq!(refusals::get(IDLE_TIMEOUT) - before, 1);
    }
}
