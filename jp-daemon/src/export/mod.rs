//! The HTTP exporters (opt-in, `[export]`): Prometheus `/metrics` and pprof profiles at
//! `/debug/pprof/profile?seconds=N`, the pull model of Grafana Alloy's
//! `pyroscope.scrape`. Served by axum, which tonic builds anyway.
//!
//! A profile with `seconds=N` is the difference of two readings of the store's totals
//! N seconds apart; `seconds=0` is everything since jpd started. Without the
//! parameter N is 30, as with Go's `net/http/pprof`.

pub mod metrics;
pub mod pprof;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::ExportConfig;
use crate::store::Store;

/// Go's default profile duration.
pub const DEFAULT_PROFILE_SECONDS: u64 = 30;

#[derive(Clone)]
struct Ctx {
    store: Arc<Store>,
    started: SystemTime,
    max_seconds: u64,
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
        store: Arc<Store>,
        started: SystemTime,
    ) -> anyhow::Result<Exporter> {
        let listener = tokio::net::TcpListener::bind(&cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {} for [export]", cfg.listen))?;
        let addr = listener.local_addr().context("exporter address")?;
        let app = router(Ctx {
            store,
            started,
            max_seconds: cfg.max_profile_seconds,
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                log::error!("HTTP exporter failed: {e}");
            }
        });
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

fn router(ctx: Ctx) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics_handler))
        .route("/debug/pprof/profile", get(kernel_profile))
        .with_state(ctx)
}

async fn index() -> &'static str {
    "jpd exporters:\n  /metrics                              Prometheus metrics\n  /debug/pprof/profile?seconds=N        kernel profile of the next N s (pprof, gzipped)\n"
}

async fn metrics_handler(State(ctx): State<Ctx>) -> Response {
    let text = metrics::render(
        &ctx.store.kernel_totals(),
        &metrics::Process {
            version: env!("CARGO_PKG_VERSION"),
            started: ctx.started,
        },
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `seconds` from a query string; `Err` is the message for a 400.
fn seconds_param(query: Option<&str>, max: u64) -> Result<u64, String> {
    let mut seconds = DEFAULT_PROFILE_SECONDS.min(max);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "seconds" {
            seconds = v
                .parse::<u64>()
                .map_err(|_| format!("seconds={v:?} is not a whole number of seconds"))?;
            if seconds > max {
                return Err(format!(
                    "seconds={seconds} is more than export.max_profile_seconds = {max}"
                ));
            }
        }
    }
    Ok(seconds)
}

fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

async fn kernel_profile(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> Response {
    let seconds = match seconds_param(query.as_deref(), ctx.max_seconds) {
        Ok(s) => s,
        Err(msg) => return (StatusCode::BAD_REQUEST, msg + "\n").into_response(),
    };
    let (window, symbols, status, start) = if seconds == 0 {
        let t = ctx.store.kernel_totals();
        (t.counts, t.symbols, t.status, ctx.started)
    } else {
        let before = ctx.store.kernel_totals();
        let start = SystemTime::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let after = ctx.store.kernel_totals();
        (
            pprof::window_counts(&after.counts, &before.counts),
            after.symbols,
            after.status,
            start,
        )
    };
    let Some(symbols) = symbols else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "kernel symbols are not loaded yet\n",
        )
            .into_response();
    };
    let duration = SystemTime::now().duration_since(start).unwrap_or_default();
    let w = pprof::KernelWindow {
        modes: window.modes,
        buckets: &window.buckets,
        other_ips: &window.other_ips,
        shift: status.shift,
        frequency_hz: status.frequency_hz,
        time_nanos: unix_nanos(start),
        duration_nanos: i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX),
    };
    match pprof::gzip(&pprof::kernel_profile(&w, &symbols)) {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"kernel.pb.gz\"",
                ),
            ],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parameter() {
        assert_eq!(seconds_param(None, 300), Ok(30));
        assert_eq!(seconds_param(Some("seconds=5"), 300), Ok(5));
        assert_eq!(seconds_param(Some("debug=1&seconds=0"), 300), Ok(0));
        assert_eq!(seconds_param(None, 10), Ok(10));
        assert_eq!(
            seconds_param(Some("seconds=500"), 300),
            Err("seconds=500 is more than export.max_profile_seconds = 300".into())
        );
        assert_eq!(
            seconds_param(Some("seconds=-1"), 300),
            Err("seconds=\"-1\" is not a whole number of seconds".into())
        );
    }

    #[tokio::test]
    async fn serves_metrics_and_rejects_bad_profiles_over_http() {
        let store = Store::new();
        let cfg = ExportConfig {
            enabled: true,
            listen: "127.0.0.1:0".into(),
            max_profile_seconds: 10,
        };
        let e = Exporter::start(&cfg, store, SystemTime::now())
            .await
            .unwrap();
        let addr = e.local_addr();
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
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
        e.stop().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
