//! The HTTP exporters (opt-in, `[export]`): Prometheus `/metrics` and pprof profiles —
//! the kernel's at `/debug/pprof/profile?seconds=N`, a JVM's Method Call Tree at
//! `/debug/pprof/jvm?pid=P&seconds=N` — the pull model of Grafana Alloy's
//! `pyroscope.scrape`. Served by axum, which tonic builds anyway.
//!
//! A profile with `seconds=N` is the difference of two readings N seconds apart;
//! `seconds=0` is everything so far (since jpd started, or the JVM's whole tree).
//! A JVM whose agent is dormant (or absent) gets an exact window of N seconds
//! instead, when `export.open_windows` allows it ([`windows`]).
//! Without the parameter N is 30, as with Go's `net/http/pprof`.

mod blocking;
pub mod config;
pub mod connections;
pub mod flame_page;
pub mod host;
mod inflight;
pub mod jvm_metrics;
pub mod kernel_metrics;
pub mod kernel_pprof;
pub mod label;
pub mod mct_pprof;
pub mod operator_attributes;
pub mod otlp;
mod prometheus;
pub mod pyroscope;
mod query;
pub mod rotation;
pub mod windows;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::lock::lock;
use crate::store::read::{self, KernelSince, ReadJvm};
use crate::store::Sources;
use crate::windows::Windows;
use config::ExportConfig;

/// What the exporters read: the stores, and what the exporters keep of their own. Built
/// once per jpd, so that an exporter restarted by a reload keeps the JVM counters'
/// history (they must never go down).
#[derive(Clone)]
pub struct ExportState {
    pub stores: Sources,
    pub jvm_totals: Arc<Mutex<jvm_metrics::JvmTotals>>,
    /// The Pyroscope pusher's queue and counters (they outlive a reload).
    pub pyroscope: Arc<pyroscope::Shared>,
    /// The OTLP exporter's queue, counters and baselines (the same kind as Pyroscope's).
    pub otlp: Arc<pyroscope::Shared>,
    /// `[otlp] resource_attributes`, shared with the API's OTLP files.
    pub otlp_attributes: operator_attributes::OperatorAttributes,
    /// The windows service, when jpd runs one: its counters, and windows opened for
    /// `/debug/pprof/jvm` (`export.open_windows`).
    pub windows: Option<Windows>,
    /// What the fleet rotation reports (it writes, `/metrics` reads).
    pub rotation: crate::windows::rotation::SharedRotationStats,
}

impl ExportState {
    pub fn new(stores: Sources) -> ExportState {
        ExportState {
            stores,
            jvm_totals: Arc::default(),
            pyroscope: Arc::default(),
            otlp: Arc::default(),
            otlp_attributes: Default::default(),
            windows: None,
            rotation: Arc::default(),
        }
    }

    pub fn with_windows(self, windows: Windows) -> ExportState {
        ExportState {
            windows: Some(windows),
            ..self
        }
    }
}

/// Go's default profile duration.
pub const DEFAULT_PROFILE_SECONDS: u64 = 30;

#[derive(Clone)]
struct Ctx {
    sources: ExportState,
    started: SystemTime,
    max_seconds: u64,
    open_windows: bool,
    /// Real kernel addresses in the kernel pprof (`export.real_kernel_addresses`);
    /// otherwise offsets from `_stext`.
    real_kernel_addresses: bool,
}

/// A running exporter; [`Exporter::stop`] ends it.
pub struct Exporter {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Exporter {
    /// Binds `cfg.listen` and serves (inside a tokio runtime). Fails when the address
    /// cannot be bound, so that a typo is an error at start or reload.
    pub async fn start(
        cfg: &ExportConfig,
        sources: ExportState,
        started: SystemTime,
    ) -> anyhow::Result<Exporter> {
        let listener = tokio::net::TcpListener::bind(&cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {} for [export]", cfg.listen))?;
        let addr = listener.local_addr().context("exporter address")?;
        let app = router(
            Ctx {
                sources,
                started,
                max_seconds: cfg.max_profile_seconds,
                open_windows: cfg.open_windows,
                real_kernel_addresses: cfg.real_kernel_addresses,
            },
            cfg,
        );
        let limits = connections::Limits {
            max_connections: usize::try_from(cfg.max_connections).unwrap_or(usize::MAX),
            header_timeout: Duration::from_secs(cfg.header_timeout_seconds),
            idle_timeout: Duration::from_secs(cfg.idle_timeout_seconds),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(connections::serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        Ok(Exporter {
            addr,
            stop: Some(stop),
            task,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits briefly for requests in flight (a profile request
    /// may be sleeping through its window: it is cut after 2 s).
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if tokio::time::timeout(Duration::from_secs(2), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

/// The routes: profiles and flame graphs (which build trees, or sleep through a
/// window) within `export.max_inflight`; every request within the Host allow-list.
fn router(ctx: Ctx, cfg: &ExportConfig) -> Router {
    // The live flame graph pages (flame_page.rs) have their own routes and state.
    let flame = flame_page::router(ctx.sources.clone());
    let heavy = Router::new()
        .route("/debug/pprof/profile", get(serve_kernel_pprof))
        .route("/debug/pprof/jvm", get(serve_jvm_pprof))
        .with_state(ctx.clone())
        .merge(flame)
        .route_layer(axum::middleware::from_fn_with_state(
            inflight::Inflight::new(cfg.max_inflight),
            inflight::limit,
        ));
    let allowed = Arc::new(host::AllowedHosts::of_machine(&cfg.allowed_hosts));
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics_handler))
        .with_state(ctx)
        .merge(heavy)
        .layer(axum::middleware::from_fn_with_state(
            allowed,
            host::check_host,
        ))
}

async fn index() -> &'static str {
    "jpd exporters:\n  /metrics                              Prometheus metrics\n  /debug/pprof/profile?seconds=N        kernel profile of the next N s (pprof, gzipped)\n  /debug/pprof/jvm?pid=P&seconds=N      JVM P's method call tree of the next N s (pprof, gzipped)\n  /flame                                live flame graphs of the JVMs, kernel hotspots (HTML)\n"
}

async fn metrics_handler(State(ctx): State<Ctx>) -> Response {
    let mut text = kernel_metrics::render(
        &ctx.sources.stores.kernel.kernel_totals(),
        &kernel_metrics::Process {
            version: env!("CARGO_PKG_VERSION"),
            started: ctx.started,
        },
    );
    let (list, stats) = ctx.sources.stores.jvm.list_and_stats();
    let symbols = ctx.sources.stores.kernel.symbols();
    let offcpu_kind = |reason: u64| {
        let name = |addr| crate::store::kernel::symbols::function_name(symbols.as_deref(), addr);
        let function = crate::store::jvm::offcpu::reason_function(reason, &name);
        crate::store::jvm::offcpu::reason_kind(reason, &function)
    };
    // Kinds are named from the kernel's symbols: none until they are loaded.
    let offcpu_kind = symbols
        .is_some()
        .then_some(&offcpu_kind as jvm_metrics::OffcpuKindOf);
    let per_main = lock(&ctx.sources.jvm_totals).update(&list, offcpu_kind);
    jvm_metrics::render(&mut text, &per_main, &stats);
    if let Some(w) = &ctx.sources.windows {
        windows::render(&mut text, &w.counters(), w.open_count());
    }
    let rotation_stats = lock(&ctx.sources.rotation).clone();
    rotation::render(&mut text, &rotation_stats);
    pyroscope::render(&mut text, &ctx.sources.pyroscope.stats);
    pyroscope::render_named(
        &mut text,
        &ctx.sources.otlp.stats,
        "otlp",
        "the OTLP receiver",
    );
    prometheus::render_refusals(&mut text, &crate::refusals::snapshot());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

async fn serve_kernel_pprof(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> Response {
    let seconds = match query::seconds(query.as_deref(), DEFAULT_PROFILE_SECONDS, ctx.max_seconds) {
        Ok(s) => s,
        Err(msg) => return (StatusCode::BAD_REQUEST, msg + "\n").into_response(),
    };
    let store = &ctx.sources.stores.kernel;
    let (window, symbols, status, start) = if seconds == 0 {
        let t = store.kernel_totals();
        (t.counts, t.symbols, t.status, ctx.started)
    } else {
        let before = KernelSince::open(store);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let after = store.kernel_totals();
        let (window, start) = before.window(&after.counts);
        (window, after.symbols, after.status, start)
    };
    let Some(symbols) = symbols else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "kernel symbols are not loaded yet\n",
        )
            .into_response();
    };
    let duration = SystemTime::now().duration_since(start).unwrap_or_default();
    blocking::off_runtime(move || {
        let w = kernel_pprof::KernelWindow {
            address_base: if ctx.real_kernel_addresses {
                0
            } else {
                symbols.text_start
            },
            modes: window.modes,
            buckets: &window.buckets,
            other_ips: &window.other_ips,
            shift: status.shift,
            frequency_hz: status.frequency_hz,
            time_nanos: unix_nanos(start),
            duration_nanos: i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX),
        };
        gzipped_profile(
            jp_mct::pprof::gzip(&kernel_pprof::kernel_pprof(&w, &symbols)),
            "kernel.pb.gz",
        )
    })
    .await
}

fn gzipped_profile(body: std::io::Result<Vec<u8>>, filename: &str) -> Response {
    match body {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                (
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{filename}\""),
                ),
            ],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// A JVM's Method Call Tree, whole (`seconds=0`) or over the next N seconds.
async fn serve_jvm_pprof(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> Response {
    let q = query.as_deref();
    let (pid, seconds) = match (
        query::pid(q),
        query::seconds(q, DEFAULT_PROFILE_SECONDS, ctx.max_seconds),
    ) {
        (Ok(p), Ok(s)) => (p, s),
        (Err(m), _) | (_, Err(m)) => return (StatusCode::BAD_REQUEST, m + "\n").into_response(),
    };
    let jvm = &ctx.sources.stores.jvm;
    let held = |pids: Vec<u32>| {
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        if pids.is_empty() {
            "jpd holds no JVM".to_string()
        } else {
            format!("jpd holds JVMs {}", pids.join(", "))
        }
    };
    let Some(pid) = pid else {
        return (
            StatusCode::BAD_REQUEST,
            format!("pid=P is required; {}\n", held(jvm.pids())),
        )
            .into_response();
    };
    // A JVM not profiled from start: an exact window, when HTTP may open one.
    if let (Some(w), true) = (&ctx.sources.windows, seconds > 0) {
        if let Some(r) = windows::jvm_pprof(w, pid, seconds, ctx.open_windows).await {
            return r;
        }
    }
    // Snapshots (frozen, see `store::read`); the trees are built from them off the
    // runtime (a frozen snapshot gives the same tree whenever it is built).
    let before = match jvm.snapshot(pid) {
        Ok(before) => before,
        Err(pids) => {
            return (
                StatusCode::NOT_FOUND,
                format!("no JVM with pid {pid}; {}\n", held(pids)),
            )
                .into_response()
        }
    };
    let after = if seconds == 0 {
        None
    } else {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        match jvm.snapshot(pid) {
            Ok(after) => Some(after),
            Err(_) => {
                return (
                    StatusCode::NOT_FOUND,
                    format!("JVM {pid} left jpd's store during the profile\n"),
                )
                    .into_response()
            }
        }
    };
    let symbols = ctx.sources.stores.kernel.symbols();
    blocking::off_runtime(move || {
        let (tree, cpu) = match &after {
            None => {
                let tree = before.mct();
                let cpu = before.cpu().map(|c| c.mct_cpu(&tree, symbols.as_deref()));
                (tree, cpu)
            }
            Some(after) => {
                let before_tree = before.mct();
                read::tree_since(Some(&before_tree), before.cpu(), after, symbols.as_deref())
            }
        };
        let options = jp_mct::PprofOptions {
            cpu: cpu.as_ref(),
            time: None,
        };
        let mut out = Vec::new();
        let written = mct_pprof::write_pprof(&tree, options, &mut out).map(|()| out);
        gzipped_profile(written, &format!("jvm-{pid}.pb.gz"))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_metrics_and_rejects_bad_profiles_over_http() {
        let store = ExportState::new(Sources::from(crate::store::kernel::KernelStore::new()));
        let cfg = ExportConfig {
            enabled: true,
            listen: "127.0.0.1:0".into(),
            max_profile_seconds: 10,
            ..ExportConfig::default()
        };
        let e = Exporter::start(&cfg, store, SystemTime::now())
            .await
            .unwrap();
        let addr = e.local_addr();
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let m = get("/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(m.contains("content-type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(m.contains("\r\n\r\n# HELP jp_build_info "), "{m}");
        let p = get("/debug/pprof/profile?seconds=11").await;
        assert!(p.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{p}");
        assert!(p.ends_with("seconds=11 is more than export.max_profile_seconds = 10\n"));
        let p = get("/debug/pprof/profile?seconds=0").await;
        assert!(p.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{p}");
        let p = get("/debug/pprof/jvm?seconds=0").await;
        assert!(p.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{p}");
        assert!(p.ends_with("pid=P is required; jpd holds no JVM\n"), "{p}");
        let p = get("/debug/pprof/jvm?pid=77&seconds=0").await;
        assert!(p.starts_with("HTTP/1.1 404 Not Found\r\n"), "{p}");
        assert!(p.ends_with("no JVM with pid 77; jpd holds no JVM\n"), "{p}");
        assert!(m.contains("\njp_jvms{state=\"running\"} 0\n"), "{m}");
        e.stop().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    /// The answer to `GET path` with `Host: host` on a new connection.
    async fn get_with_host(addr: SocketAddr, path: &str, host: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    async fn exporter(cfg: ExportConfig) -> Exporter {
        let store = ExportState::new(Sources::from(crate::store::kernel::KernelStore::new()));
        Exporter::start(&cfg, store, SystemTime::now())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_foreign_host_is_refused_and_counted() {
        let e = exporter(ExportConfig {
            listen: "127.0.0.1:0".into(),
            allowed_hosts: vec!["prom.example".into()],
            ..ExportConfig::default()
        })
        .await;
        let addr = e.local_addr();
        let before = crate::refusals::get(host::HOST_NOT_ALLOWED);
        for path in ["/metrics", "/debug/pprof/profile?seconds=0", "/flame"] {
            let r = get_with_host(addr, path, "rebind.attacker.example:9464").await;
            assert!(r.starts_with("HTTP/1.1 421 Misdirected Request\r\n"), "{r}");
            assert!(
                r.ends_with("jpd: Host \"rebind.attacker.example:9464\" is not one this exporter answers for: add it to export.allowed_hosts\n"),
                "{r}"
            );
        }
        assert_eq!(crate::refusals::get(host::HOST_NOT_ALLOWED) - before, 3);
        for host in ["localhost:1", "prom.example", &addr.to_string()] {
            let r = get_with_host(addr, "/metrics", host).await;
            assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{host}: {r}");
        }
        assert_eq!(crate::refusals::get(host::HOST_NOT_ALLOWED) - before, 3);
        e.stop().await;
    }

    #[tokio::test]
    async fn profile_requests_over_the_cap_are_refused_and_scrapes_still_answer() {
        let e = exporter(ExportConfig {
            listen: "127.0.0.1:0".into(),
            max_inflight: 2,
            ..ExportConfig::default()
        })
        .await;
        let addr = e.local_addr();
        let before = crate::refusals::get(inflight::TOO_MANY_REQUESTS);
        // Each sleeps through its 2 s window (then finds no kernel symbols: 503).
        let long: Vec<_> = (0..6)
            .map(|_| {
                tokio::spawn(get_with_host(
                    addr,
                    "/debug/pprof/profile?seconds=2",
                    "localhost",
                ))
            })
            .collect();
        let mut refused = 0;
        while crate::refusals::get(inflight::TOO_MANY_REQUESTS) - before < 4 && refused < 500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            refused += 1;
        }
        let m = get_with_host(addr, "/metrics", "localhost").await;
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(
            m.contains("\njp_refusals_total{subsystem=\"http\",reason=\"too_many_requests\"} "),
            "{m}"
        );
        let mut answers = Vec::new();
        for r in long {
            answers.push(r.await.unwrap());
        }
        let served = answers
            .iter()
            .filter(|a| a.ends_with("kernel symbols are not loaded yet\n"))
            .count();
        let busy = answers
            .iter()
            .filter(|a| {
                a.starts_with("HTTP/1.1 503 Service Unavailable\r\n")
                    && a.contains("\r\nretry-after: 1\r\n")
                    && a.ends_with("jpd: 2 profile requests are in progress (export.max_inflight); try again later\n")
            })
            .count();
        assert_eq!((served, busy), (2, 4), "{answers:?}");
        assert_eq!(
            crate::refusals::get(inflight::TOO_MANY_REQUESTS) - before,
            4
        );
        e.stop().await;
    }
}
