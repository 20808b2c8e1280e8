//! The start: listeners bound and collectors attached before systemd hears READY=1,
//! so that a bad TLS file, a busy port or a refused program fails the start instead
//! of leaving a half-served jpd. What a step started is dropped again (detached,
//! unlinked) when a later step fails.
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context;
use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::access::{apply_group, open_tcp_warning, policy, tls_policy, tls_summary};
use super::contexts::JvmContexts;
use super::reload::Running;
use crate::config::{Config, Source};
use crate::export;
use crate::kernel::KernelCollector;
use crate::notify::Notifier;
use crate::server::socket::SocketGuard;
use crate::server::{self, auth, tls};
use crate::store::jvm::idle::IdlePatterns;
use crate::store::jvm::JvmStore;
use crate::store::kernel::KernelStore;
use crate::store::read::JvmJoin;
use crate::store::Sources;
use crate::usdt::collector::UsdtCollector;
use crate::windows::rotation::host::HostFleet;
use crate::windows::rotation::{Rotation, RotationPorts};
use crate::windows::{HotspotAttach, Timing, Windows};

/// A started daemon: what its life serves, reloads and at last shuts down.
pub(super) struct Daemon {
    pub(super) running: Running,
    pub(super) usdt: Option<UsdtCollector>,
    pub(super) server: Server,
    /// Unlinks the socket when dropped, the last step of the shutdown.
    pub(super) socket: SocketGuard,
    /// What was attached and where jpd listens, for the log and systemd's status.
    summary: String,
}

/// The gRPC server's task and the one request that stops it.
pub(super) struct Server {
    pub(super) task: JoinHandle<anyhow::Result<()>>,
    stop: Option<oneshot::Sender<()>>,
}

impl Daemon {
    /// Binds, attaches and starts everything, in the order that lets a failure leave
    /// nothing behind; the server is spawned last.
    pub(super) fn start(
        rt: &tokio::runtime::Runtime,
        config: Config,
        source: &Source,
    ) -> anyhow::Result<Daemon> {
        let started = SystemTime::now();
        let tcp = bind_tcp(&config)?;
        let (collector, usdt, stores) = start_collectors(&config)?;
        let (listener, socket) = server::socket::bind(&config.server.socket)?;
        let authorizer = authorize(&config, socket.path());
        let tcp_addr = tcp.as_ref().and_then(|(t, _)| t.local_addr().ok());
        let (tcp, tls) = tcp.unzip();
        let windows = Windows::new(
            config.windows.clone(),
            Arc::clone(&stores.windows),
            Arc::new(HotspotAttach),
            Timing::default(),
        );
        let mut running = Running {
            pusher_auth: export::pyroscope::wire::Files::read(&config.pyroscope),
            config,
            collector,
            exporter: None,
            pusher: None,
            otlp: None,
            auth: authorizer.clone(),
            tls,
            sources: export::ExportState::new(stores.clone()).with_windows(windows.clone()),
            windows: windows.clone(),
            rotation: None,
            started,
        };
        running.rotation = Some(start_rotation(&running, &stores));
        rt.block_on(running.start_exporter())?;
        rt.block_on(async { running.start_pusher() })
            .map_err(anyhow::Error::msg)?;
        rt.block_on(async { running.start_otlp() })
            .map_err(anyhow::Error::msg)?;
        let summary = summary(&running, socket.path(), tcp_addr);
        log::info!(target: "jpd",
            "jpd {}: config from {source}; {summary}",
            env!("CARGO_PKG_VERSION")
        );
        let api = server::Api {
            sources: stores,
            windows: Some(windows),
            watch_limits: (&running.config.server).into(),
            otlp_attributes: running.sources.otlp_attributes.clone(),
        };
        let server = Server::spawn(rt, listener, tcp, api, authorizer);
        Ok(Daemon {
            running,
            usdt,
            server,
            socket,
            summary,
        })
    }

    /// The readiness signal, sent once the programs are attached and the socket accepts
    /// connections: one line on stdout, and `READY=1` to systemd (`Type=notify`).
    pub(super) fn announce_ready(&self, notifier: &Notifier) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {}", self.socket.path().display());
        let _ = out.flush();
        notifier.notify(&format!(
            "READY=1\nSTATUS={}\nMAINPID={}",
            self.summary,
            std::process::id()
        ));
    }
}

/// The TLS listener, when `server.tcp` is set, with its certificates (a reload
/// replaces them).
fn bind_tcp(config: &Config) -> anyhow::Result<Option<(tls::TlsListener, tls::TlsSettings)>> {
    if config.server.tcp.is_empty() {
        return Ok(None);
    }
    let settings = tls::TlsSettings::new(tls::load(&config.server)?);
    let listener = tls::TlsListener::bind(&config.server.tcp, settings.clone())?;
    if config.server.tls_client_ca.as_os_str().is_empty() {
        log::warn!(target: "jpd", "{}", open_tcp_warning(config));
    }
    Ok(Some((listener, settings)))
}

/// The kernel sampler, the USDT collector and the stores they fill, joined for CPU
/// per exact context when `kernel.jvm_contexts` is on.
fn start_collectors(
    config: &Config,
) -> anyhow::Result<(KernelCollector, Option<UsdtCollector>, Sources)> {
    let store = KernelStore::new();
    let collector = KernelCollector::start(config.kernel.options(), store.clone())
        .context("cannot start the kernel collector")?;
    let mut jvm = JvmStore::new(config.usdt.limits());
    jvm.set_offcpu_idle(IdlePatterns::with(&config.kernel.offcpu_idle));
    jvm.set_offcpu_measured(config.kernel.offcpu);
    let jvm_store = Arc::new(Mutex::new(jvm));
    let usdt = crate::usdt::start_from_config(
        &config.usdt,
        config.kernel.bpf_stats,
        Arc::clone(&jvm_store),
    )?;
    // Off, the sampler never learns a JVM: JP_JVM_PIDS stays empty (the bench's
    // "without the join" arm, and a way out should the join misbehave on a host).
    if config.kernel.jvm_contexts {
        collector.set_context_join(Arc::new(JvmContexts(Arc::clone(&jvm_store))));
        // Threads join the sampler as they announce themselves, not at its next pass.
        if let Some(waker) = collector.join_waker() {
            jvm_store.on_context_threads_change(Box::new(move || waker.wake()));
        }
    }
    let stores = Sources {
        kernel: store,
        jvm: jvm_store,
        windows: Arc::default(),
    };
    Ok((collector, usdt, stores))
}

/// The fleet rotation, over this host's JVMs and the windows service; it reports into
/// the exporters' state.
fn start_rotation(running: &Running, stores: &Sources) -> Rotation {
    Rotation::start(
        running.config.windows.rotation.clone(),
        RotationPorts {
            fleet: HostFleet::of_host(Arc::clone(&stores.jvm)),
            opener: Arc::new(running.windows.clone()),
            stats: Arc::clone(&running.sources.rotation),
        },
    )
}

/// The access rule of the API, and the socket's group.
fn authorize(config: &Config, socket: &std::path::Path) -> auth::Authorizer {
    let (policy, gid) = policy(config);
    apply_group(config, socket, gid);
    let authorizer = auth::Authorizer::new(policy);
    authorizer.set_tls(tls_policy(config));
    authorizer
}

/// The start's log line and systemd status: what is attached, where jpd listens.
fn summary(running: &Running, socket: &std::path::Path, tcp: Option<SocketAddr>) -> String {
    let status = running.collector.status();
    let programs: Vec<&str> = status.programs.iter().map(|p| p.name.as_str()).collect();
    let summary = format!(
        "attached {} on {} CPUs (cpu-clock {} Hz, shift {}); listening on {}",
        if programs.is_empty() {
            "nothing".to_string()
        } else {
            programs.join(", ")
        },
        status.cpus.len(),
        running.config.kernel.frequency_hz,
        running.config.kernel.shift,
        socket.display()
    );
    match tcp {
        Some(addr) => format!(
            "{summary} and https://{addr} ({})",
            tls_summary(&running.config)
        ),
        None => summary,
    }
}

impl Server {
    fn spawn(
        rt: &tokio::runtime::Runtime,
        listener: UnixListener,
        tcp: Option<tls::TlsListener>,
        api: server::Api,
        authorizer: auth::Authorizer,
    ) -> Server {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = rt.spawn(server::serve_on(listener, tcp, api, shutdown, authorizer));
        Server {
            task,
            stop: Some(stop),
        }
    }

    /// Asks the server to stop and waits for it to end.
    pub(super) async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("gRPC server task failed: {e}")))
    }
}
