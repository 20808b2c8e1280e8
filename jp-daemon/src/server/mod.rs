//! jpd's gRPC server: `jp.v1.Jp`, the standard health service and reflection
//! (v1 and v1alpha), on a Unix socket and, when configured, on TCP with TLS
//! ([`tls`]): the same services and the same authorization layer on both.
//!
//! Shutdown has one path: the future given to [`serve`] completes (or one of the
//! listeners fails) → Watch streams end, health says NOT_SERVING, every listener
//! stops accepting and drains; the caller then stops the collector and drops the
//! [`socket::SocketGuard`].

pub mod auth;
pub mod caller;
pub mod cert_names;
pub mod config;
pub mod conn;
pub mod heavy;
pub mod jvm;
pub mod jvm_hotspot;
pub mod jvm_watch;
pub mod kernel;
pub mod kernel_watch;
pub mod limits;
mod service;
pub mod socket;
pub mod tls;
pub mod unix_peer;
pub mod watch_quota;
pub mod windows;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use jp_proto::v1::jp_server::JpServer;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt as _;

pub use service::JpService;

use crate::store::Sources;
use crate::windows::Windows;

/// What the server serves: the stores, and the windows service when jpd runs one
/// (without it, `ProfileJvm` is UNAVAILABLE; the kept windows are still read).
#[derive(Clone)]
pub struct Api {
    pub sources: Sources,
    pub windows: Option<Windows>,
    /// The caps on Watch streams (`server.max_watch_streams_per_uid`, `max_watch_streams`).
    pub watch_limits: watch_quota::WatchLimits,
    /// `[otlp] resource_attributes`, for `jpctl jvm export` / `jpctl kernel` in OTLP.
    pub otlp_attributes: crate::export::operator_attributes::OperatorAttributes,
}

impl From<Sources> for Api {
    fn from(sources: Sources) -> Api {
        Api {
            sources,
            windows: None,
            watch_limits: watch_quota::WatchLimits::default(),
            otlp_attributes: Default::default(),
        }
    }
}

impl From<Arc<crate::store::kernel::KernelStore>> for Api {
    fn from(kernel: Arc<crate::store::kernel::KernelStore>) -> Api {
        Api::from(Sources::from(kernel))
    }
}

/// Serves until `shutdown` completes, then returns once in-flight calls are done.
/// Only root and jpd's own user may call (see [`serve_with`]).
pub async fn serve(
    listener: UnixListener,
    store: impl Into<Api>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_with(listener, store, shutdown, auth::Authorizer::default()).await
}

/// As [`serve`], every request authorized by `auth` (see [`auth`]).
pub async fn serve_with(
    listener: UnixListener,
    store: impl Into<Api>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    auth: auth::Authorizer,
) -> anyhow::Result<()> {
    serve_on(listener, None, store, shutdown, auth).await
}

/// As [`serve_with`], also on `tcp` when given. Both listeners stop together: on
/// `shutdown`, or as soon as either of them fails.
pub async fn serve_on(
    listener: UnixListener,
    tcp: Option<tls::TlsListener>,
    store: impl Into<Api>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    auth: auth::Authorizer,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<JpServer<JpService>>().await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(jp_proto::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("cannot build the reflection service (v1)")?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(jp_proto::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .context("cannot build the reflection service (v1alpha)")?;
    // Set once, by the shutdown future or by a listener that ended; every listener
    // and the signal below wait for it.
    let down = Arc::new(tokio::sync::watch::Sender::new(false));
    let until_down = |down: &Arc<tokio::sync::watch::Sender<bool>>| {
        let mut rx = down.subscribe();
        async move {
            let _ = rx.wait_for(|d| *d).await;
        }
    };
    let signal = {
        let down = Arc::clone(&down);
        let ended = until_down(&down);
        async move {
            tokio::select! {
                () = shutdown => {}
                () = ended => {}
            }
            health.set_not_serving::<JpServer<JpService>>().await;
            // Ends every Watch stream; graceful shutdown would otherwise wait for them.
            let _ = stop_tx.send(true);
            down.send_replace(true);
        }
    };
    let router = limits::builder()
        .layer(auth::AuthLayer::new(auth))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(JpServer::new(JpService::new(store.into(), stop_rx)));
    let unix = {
        let (router, down, stopped) = (router.clone(), Arc::clone(&down), until_down(&down));
        let drained = drain_limit(until_down(&down), "Unix socket");
        async move {
            let r = bounded(
                router.serve_with_incoming_shutdown(
                    UnixListenerStream::new(listener).map(|r| r.map(unix_peer::tag)),
                    stopped,
                ),
                drained,
            )
            .await;
            down.send_replace(true);
            r.context("gRPC server on the Unix socket failed")
        }
    };
    let tcp = {
        let (down, stopped) = (Arc::clone(&down), until_down(&down));
        let drained = drain_limit(until_down(&down), "TCP");
        async move {
            let Some(tcp) = tcp else {
                return Ok(());
            };
            let r = bounded(
                router.serve_with_incoming_shutdown(tcp.incoming(), stopped),
                drained,
            )
            .await;
            down.send_replace(true);
            r.context("gRPC server on TCP failed")
        }
    };
    let ((), unix, tcp) = tokio::join!(signal, unix, tcp);
    unix.and(tcp)
}

/// How long a stopping server waits for its clients to hang up. A client that holds
/// a connection open without speaking (over TCP: anyone who completed a handshake)
/// would otherwise hold up jpd's exit until the service manager kills it.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Completes [`DRAIN_LIMIT`] after `stopped`.
async fn drain_limit(stopped: impl Future<Output = ()>, what: &'static str) -> &'static str {
    stopped.await;
    tokio::time::sleep(DRAIN_LIMIT).await;
    what
}

/// `serve`, given up (its remaining connections left to the runtime's end) once
/// `drained` completes.
async fn bounded<E>(
    serve: impl Future<Output = Result<(), E>>,
    drained: impl Future<Output = &'static str>,
) -> Result<(), E> {
    tokio::select! {
        r = serve => r,
        what = drained => {
            log::warn!(
                "{what}: clients still connected {} s after shutdown began; closing without them",
                DRAIN_LIMIT.as_secs()
            );
            Ok(())
        }
    }
}
