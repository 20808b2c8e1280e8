//! The daemon's life, from start to the one shutdown path: the runtime, the
//! collectors and stores, the gRPC server and exporters, then the loop that turns
//! SIGINT/SIGTERM into a shutdown, SIGHUP into a reload of what can change at run
//! time (sampling frequency, exporters, pusher, access rules, TLS certificates) and
//! keeps systemd's watchdog fed. `main.rs` only parses flags and calls [`run`];
//! [`run_with`] takes the stop and reload requests from a channel instead of
//! signals, so a test can drive a whole life in-process.
//!
//! Its log lines keep the target `jpd` they had when this code was the binary's:
//! operators and the journal tests look for `[… jpd] stopped` and the like.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::config::{Config, ConfigError, Source};
use crate::export::pyroscope::Pusher;
use crate::export::{self, Exporter};
use crate::kernel::KernelCollector;
use crate::notify::{self, Notifier};
use crate::server::{self, auth, tls};
use crate::store::jvm::JvmStore;
use crate::store::kernel::Store;
use crate::store::read::JvmJoin;

/// The command-line settings that win over the configuration file, also after every
/// reload.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// The configuration file; `None`: `/etc/jp/jpd.toml` when it exists, else the
    /// built-in defaults.
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub frequency: Option<u64>,
    pub shift: Option<u32>,
}

impl Overrides {
    /// The configuration with the overrides applied.
    pub fn load(&self) -> Result<(Config, Source), ConfigError> {
        let (mut config, source) = Config::load(self.config.as_deref())?;
        config.override_with(self.socket.clone(), self.frequency, self.shift)?;
        Ok((config, source))
    }
}

/// What ends or changes a running daemon: signals in [`run`], messages in [`run_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Shut down; the name says why in the log.
    Stop(&'static str),
    /// Reload the configuration.
    Reload,
}

enum Event {
    Control(Control),
    Watchdog,
    ServerEnded(anyhow::Result<()>),
}

/// The warning for TCP without client certificates (also `--check-config`'s).
pub fn open_tcp_warning(config: &Config) -> String {
    format!(
        "server.tcp = {:?} without server.tls_client_ca: any client that reaches this port over TLS may read the API (all but Reset); set tls_client_ca to require client certificates",
        config.server.tcp
    )
}

/// The access rule from the configuration; the socket's group is one of the allowed
/// groups when it exists.
fn policy(config: &Config) -> (auth::Policy, Option<u32>) {
    let s = &config.server;
    let gid = (!s.group.is_empty())
        .then(|| auth::group_id(&s.group))
        .flatten();
    let mut gids = s.allow_gids.clone();
    gids.extend(gid);
    let policy = auth::Policy {
        uids: s.allow_uids.clone(),
        gids,
        group_name: gid.map(|_| s.group.clone()),
    };
    (policy, gid)
}

fn apply_group(config: &Config, socket: &Path, gid: Option<u32>) {
    let group = &config.server.group;
    match gid {
        Some(gid) => match auth::chgrp(socket, gid) {
            Ok(()) => log::debug!(target: "jpd", "socket group {group} ({gid})"),
            Err(e) => {
                log::warn!(target: "jpd", "cannot give {} to group {group}: {e}", socket.display())
            }
        },
        None if group.is_empty() => {}
        None => log::warn!(target: "jpd",
            "group {group:?} does not exist: only root may use {} (create it with `groupadd --system {group}`)",
            socket.display()
        ),
    }
}

/// Everything SIGHUP may change, with what runs now.
struct Running {
    config: Config,
    collector: KernelCollector,
    exporter: Option<Exporter>,
    pusher: Option<Pusher>,
    /// The credentials the pusher was started with, to see a rotated secret.
    pusher_auth: Result<export::pyroscope::wire::Files, String>,
    auth: auth::Authorizer,
    /// The TLS listener's certificates, when `server.tcp` is set.
    tls: Option<tls::TlsSettings>,
    sources: export::ExportState,
    started: SystemTime,
}

impl Running {
    async fn start_exporter(&mut self) -> anyhow::Result<()> {
        if self.config.export.enabled {
            let e =
                Exporter::start(&self.config.export, self.sources.clone(), self.started).await?;
            log::info!(target: "jpd", "exporters on http://{}/metrics", e.local_addr());
            self.exporter = Some(e);
        }
        Ok(())
    }

    fn start_pusher(&mut self) -> Result<(), String> {
        let c = &self.config.pyroscope;
        if c.enabled {
            self.pusher = Some(Pusher::start(c, self.sources.clone())?);
            log::info!(target: "jpd",
                "pushing profiles to {} every {} s",
                c.endpoint(),
                c.interval_s
            );
        }
        Ok(())
    }

    /// A changed `[pyroscope]`: the tasks restart with the new settings; the queue and
    /// baselines stay unless it was disabled.
    async fn reload_pusher(&mut self, new: &Config) {
        let old = self.config.pyroscope.clone();
        // Secret and CA files are re-read on every SIGHUP (a rotated token applies).
        let secrets = export::pyroscope::wire::Files::read(&new.pyroscope);
        if new.pyroscope == old && secrets == self.pusher_auth {
            return;
        }
        if let Some(p) = self.pusher.take() {
            p.stop().await;
        }
        if !new.pyroscope.enabled {
            self.sources.pyroscope.disable();
            self.config.pyroscope = new.pyroscope.clone();
            if old.enabled {
                log::info!(target: "jpd", "pyroscope: pushing stopped");
            }
            return;
        }
        self.config.pyroscope = new.pyroscope.clone();
        match self.start_pusher() {
            Ok(()) => self.pusher_auth = secrets,
            Err(e) => {
                log::error!(target: "jpd", "{e}; the previous [pyroscope] settings stay");
                self.config.pyroscope = old;
                if let Err(e) = self.start_pusher() {
                    log::error!(target: "jpd", "cannot restart the previous pusher either: {e}");
                }
            }
        }
    }

    /// Applies what can change at run time; says what needs a restart. A file that
    /// does not load changes nothing.
    async fn reload(&mut self, overrides: &Overrides) {
        let new = match overrides.load() {
            Ok((c, source)) => {
                log::info!(target: "jpd", "SIGHUP: reloading the configuration from {source}");
                c
            }
            Err(e) => {
                log::error!(target: "jpd", "SIGHUP: {e}; keeping the running configuration");
                return;
            }
        };
        let old = self.config.clone();
        if new.kernel.frequency_hz != old.kernel.frequency_hz {
            match self.collector.set_frequency(new.kernel.frequency_hz) {
                Ok(()) => {
                    self.config.kernel.frequency_hz = new.kernel.frequency_hz;
                    log::info!(target: "jpd",
                        "sampling at {} Hz (was {} Hz)",
                        new.kernel.frequency_hz,
                        old.kernel.frequency_hz
                    );
                }
                Err(e) => log::error!(target: "jpd",
                    "cannot sample at {} Hz, staying at {} Hz: {e:#}",
                    new.kernel.frequency_hz,
                    old.kernel.frequency_hz
                ),
            }
        }
        if new.export != old.export {
            if let Some(e) = self.exporter.take() {
                e.stop().await;
            }
            self.config.export = new.export.clone();
            if let Err(e) = self.start_exporter().await {
                log::error!(target: "jpd", "{e:#}; the previous [export] settings stay");
                self.config.export = old.export.clone();
                if let Err(e) = self.start_exporter().await {
                    log::error!(target: "jpd", "cannot restart the previous exporters either: {e:#}");
                }
            } else if !new.export.enabled {
                log::info!(target: "jpd", "exporters stopped");
            }
        }
        self.reload_pusher(&new).await;
        let s = &new.server;
        if (&s.group, &s.allow_uids, &s.allow_gids)
            != (
                &old.server.group,
                &old.server.allow_uids,
                &old.server.allow_gids,
            )
        {
            self.config.server.group = s.group.clone();
            self.config.server.allow_uids = s.allow_uids.clone();
            self.config.server.allow_gids = s.allow_gids.clone();
            let (policy, gid) = policy(&self.config);
            apply_group(&self.config, &self.config.server.socket, gid);
            log::info!(target: "jpd", "access now: {policy:?}");
            self.auth.set(policy);
        }
        if s.tcp == old.server.tcp {
            self.reload_tls(&new);
        }
        let fixed = [
            (
                "server.socket",
                s.socket.display().to_string(),
                old.server.socket.display().to_string(),
            ),
            ("server.tcp", s.tcp.clone(), old.server.tcp.clone()),
            (
                "kernel.shift",
                new.kernel.shift.to_string(),
                old.kernel.shift.to_string(),
            ),
            (
                "kernel.irq_ip_sample_every",
                new.kernel.irq_ip_sample_every.to_string(),
                old.kernel.irq_ip_sample_every.to_string(),
            ),
            (
                "kernel.irq_ip_samples_per_second",
                new.kernel.irq_ip_samples_per_second.to_string(),
                old.kernel.irq_ip_samples_per_second.to_string(),
            ),
            (
                "kernel.bpf_stats",
                new.kernel.bpf_stats.to_string(),
                old.kernel.bpf_stats.to_string(),
            ),
            (
                "kernel.read_interval_ms",
                new.kernel.read_interval_ms.to_string(),
                old.kernel.read_interval_ms.to_string(),
            ),
            (
                "kernel.jvm_contexts",
                new.kernel.jvm_contexts.to_string(),
                old.kernel.jvm_contexts.to_string(),
            ),
            ("log.level", new.log.level.clone(), old.log.level.clone()),
            ("usdt", format!("{:?}", new.usdt), format!("{:?}", old.usdt)),
        ];
        for (key, now, was) in fixed {
            if now != was {
                log::warn!(target: "jpd",
                    "{key} changed ({was} → {now}) but cannot be reloaded: restart jpd to apply it"
                );
            }
        }
    }
}

impl Running {
    /// Re-reads the TLS files (rotated certificates keep their paths, so always):
    /// new handshakes use them. Any file that does not load keeps all the previous
    /// TLS settings, the client names included.
    fn reload_tls(&mut self, new: &Config) {
        let Some(settings) = &self.tls else {
            return;
        };
        match tls::load(&new.server) {
            Ok(c) => {
                settings.set(c);
                let s = &mut self.config.server;
                s.tls_cert = new.server.tls_cert.clone();
                s.tls_key = new.server.tls_key.clone();
                s.tls_client_ca = new.server.tls_client_ca.clone();
                s.tls_client_names = new.server.tls_client_names.clone();
                self.auth.set_tls(tls_policy(&self.config));
                log::info!(target: "jpd", "TLS certificates reloaded: {}", tls_summary(&self.config));
            }
            Err(e) => {
                log::error!(target: "jpd", "SIGHUP: {e}; keeping the previous TLS certificates and settings")
            }
        }
    }
}

fn tls_policy(config: &Config) -> auth::TlsPolicy {
    auth::TlsPolicy {
        client_names: config.server.tls_client_names.clone(),
    }
}

fn tls_summary(config: &Config) -> String {
    let s = &config.server;
    let clients = if s.tls_client_ca.as_os_str().is_empty() {
        "no client certificates asked for".to_string()
    } else if s.tls_client_names.is_empty() {
        format!(
            "client certificates signed by {}",
            s.tls_client_ca.display()
        )
    } else {
        format!(
            "client certificates signed by {} naming {}",
            s.tls_client_ca.display(),
            s.tls_client_names.join(", ")
        )
    };
    format!("certificate {}, {clients}", s.tls_cert.display())
}

/// Runs jpd until SIGINT or SIGTERM; SIGHUP reloads. The handlers are installed
/// before anything is attached, so that a signal during start-up still takes the
/// one shutdown path.
pub fn run(overrides: &Overrides, config: Config, source: &Source) -> anyhow::Result<()> {
    let rt = runtime()?;
    let controls = {
        let _enter = rt.enter();
        signal_controls()?
    };
    life(&rt, overrides, config, source, controls)
}

/// Runs jpd until a [`Control::Stop`] arrives on `controls` (or the sender is
/// dropped); [`Control::Reload`] reloads from `overrides`, like SIGHUP.
pub fn run_with(
    overrides: &Overrides,
    config: Config,
    source: &Source,
    controls: mpsc::Receiver<Control>,
) -> anyhow::Result<()> {
    life(&runtime()?, overrides, config, source, controls)
}

/// Two workers: jpd's async work is small (RPCs, HTTP, ring reading); anything heavy
/// goes to the blocking pool.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("jpd-rt")
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// SIGTERM, SIGINT and SIGHUP as [`Control`]s (needs a runtime entered).
fn signal_controls() -> anyhow::Result<mpsc::Receiver<Control>> {
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let control = tokio::select! {
                _ = term.recv() => Control::Stop("SIGTERM"),
                _ = int.recv() => Control::Stop("SIGINT"),
                _ = hup.recv() => Control::Reload,
            };
            if tx.send(control).await.is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

fn life(
    rt: &tokio::runtime::Runtime,
    overrides: &Overrides,
    config: Config,
    source: &Source,
    mut controls: mpsc::Receiver<Control>,
) -> anyhow::Result<()> {
    let _enter = rt.enter();
    let notifier = Notifier::from_env();
    let started = SystemTime::now();

    // TCP is bound before anything is attached and before READY=1, like the socket:
    // a bad TLS file or a busy port fails the start instead of leaving a
    // half-served jpd.
    let (tcp, tls_settings) = if config.server.tcp.is_empty() {
        (None, None)
    } else {
        let settings = tls::TlsSettings::new(tls::load(&config.server)?);
        let listener = tls::TlsListener::bind(&config.server.tcp, settings.clone())?;
        if config.server.tls_client_ca.as_os_str().is_empty() {
            log::warn!(target: "jpd", "{}", open_tcp_warning(&config));
        }
        (Some(listener), Some(settings))
    };

    let store = Store::new();
    let collector = KernelCollector::start(config.kernel.options(), store.clone())
        .context("cannot start the kernel collector")?;
    let jvm_store = Arc::new(Mutex::new(JvmStore::new(config.usdt.limits())));
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
    let socket = config.server.socket.clone();
    let (listener, socket_guard) = server::socket::bind(&socket)?;
    let (policy, gid) = policy(&config);
    apply_group(&config, &socket, gid);
    let authorizer = auth::Authorizer::new(policy);
    authorizer.set_tls(tls_policy(&config));
    let tcp_addr = tcp.as_ref().and_then(|t| t.local_addr().ok());
    let stores = crate::store::Sources {
        kernel: store,
        jvm: jvm_store,
    };

    let pusher_auth = export::pyroscope::wire::Files::read(&config.pyroscope);
    let mut running = Running {
        config,
        collector,
        exporter: None,
        pusher: None,
        pusher_auth,
        auth: authorizer.clone(),
        tls: tls_settings,
        sources: export::ExportState::new(stores.clone()),
        started,
    };
    rt.block_on(running.start_exporter())?;
    rt.block_on(async { running.start_pusher() })
        .map_err(anyhow::Error::msg)?;

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
    let summary = match tcp_addr {
        Some(addr) => format!(
            "{summary} and https://{addr} ({})",
            tls_summary(&running.config)
        ),
        None => summary,
    };
    log::info!(target: "jpd",
        "jpd {}: config from {source}; {summary}",
        env!("CARGO_PKG_VERSION")
    );

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server_task = rt.spawn(server::serve_on(
        listener,
        tcp,
        stores,
        async move {
            let _ = stop_rx.await;
        },
        authorizer,
    ));
    announce_ready(&socket, &notifier, &summary);

    let watchdog = notify::watchdog_timeout().filter(|_| notifier.enabled());
    let read_interval = Duration::from_millis(running.config.kernel.read_interval_ms);
    let served = rt.block_on(async {
        // A period long enough never to fire when there is no watchdog.
        let mut ticker = tokio::time::interval(watchdog.map_or(Duration::from_secs(3600), |t| {
            (t / 2).max(Duration::from_millis(1))
        }));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                c = controls.recv() => Event::Control(c.unwrap_or(Control::Stop("the control channel closed"))),
                _ = ticker.tick(), if watchdog.is_some() => Event::Watchdog,
                r = &mut server_task => Event::ServerEnded(
                    r.unwrap_or_else(|e| Err(anyhow::anyhow!("gRPC server task failed: {e}")))),
            };
            match event {
                Event::Control(Control::Stop(name)) => {
                    log::info!(target: "jpd", "{name}: shutting down");
                    notifier.notify("STOPPING=1");
                    let _ = stop_tx.send(());
                    break server_task
                        .await
                        .unwrap_or_else(|e| Err(anyhow::anyhow!("gRPC server task failed: {e}")));
                }
                Event::ServerEnded(r) => {
                    notifier.notify("STOPPING=1");
                    break r.and_then(|()| Err(anyhow::anyhow!("the gRPC server stopped")));
                }
                Event::Control(Control::Reload) => {
                    notifier.notify(&notify::reloading());
                    running.reload(overrides).await;
                    notifier.notify("READY=1\nSTATUS=configuration reloaded");
                }
                Event::Watchdog => {
                    if let Some(t) = watchdog {
                        watchdog_ping(&notifier, &running.sources.stores.kernel, t, read_interval);
                    }
                }
            }
        }
    });
    // The one shutdown path, whatever ended the server: exporters, detach, unlink.
    if let Some(e) = running.exporter.take() {
        rt.block_on(e.stop());
    }
    if let Some(p) = running.pusher.take() {
        // The interval begun so far and the queue, within a few seconds at most.
        let deadline = Duration::from_secs(running.config.pyroscope.timeout_s.min(5));
        rt.block_on(p.finish(&running.sources.pyroscope, deadline));
    }
    if let Some(usdt) = usdt {
        usdt.shutdown();
    }
    running.collector.shutdown();
    drop(socket_guard);
    log::info!(target: "jpd", "stopped");
    served
}

/// Keeps systemd's watchdog fed only while the kernel reader publishes: a stuck reader
/// (or a stuck runtime, which never gets here) lets systemd restart jpd.
fn watchdog_ping(notifier: &Notifier, store: &Store, timeout: Duration, read_interval: Duration) {
    let last = store.kernel_totals().status.last_read;
    let age = last
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or(Duration::MAX);
    if age <= read_interval * 2 + timeout / 2 {
        notifier.notify("WATCHDOG=1");
    } else {
        log::error!(target: "jpd",
            "the kernel reader has not published for {:.1} s: not feeding the watchdog",
            age.as_secs_f64()
        );
    }
}

/// The readiness signal, sent once the programs are attached and the socket accepts
/// connections: one line on stdout, and `READY=1` to systemd (`Type=notify`).
fn announce_ready(socket: &Path, notifier: &Notifier, summary: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {}", socket.display());
    let _ = out.flush();
    notifier.notify(&format!(
        "READY=1\nSTATUS={summary}\nMAINPID={}",
        std::process::id()
    ));
}

/// The kernel sampler's join (CPU per exact context) connected to the JVM store: the
/// threads the agents announced go to the sampler, its samples under their contexts
/// come back. The daemon wires the two ([`crate::kernel::join::ContextJoin`] and the
/// store's [`JvmJoin`]); neither knows the other.
pub struct JvmContexts(pub crate::store::jvm::SharedJvmStore);

impl crate::kernel::join::ContextJoin for JvmContexts {
    fn joined(&self, version: Option<u64>) -> Option<crate::kernel::join::Joined> {
        let announced = self.0.context_threads_since(version)?;
        let threads = announced
            .threads
            .into_iter()
            .map(|(tgid, slot, stream)| crate::kernel::join::SlotThread {
                tgid,
                tid: slot.os_tid,
                slot: slot.slot,
                heap: slot.heap,
                stream,
            })
            .collect();
        Some(crate::kernel::join::Joined {
            version: announced.version,
            threads,
            pids: announced.pids,
        })
    }

    fn refuse(&self, t: &crate::kernel::join::SlotThread) {
        log::debug!(
            "jvm {}: thread {} announced a context slot for task {}, which is not the process's: refused",
            t.tgid,
            t.stream,
            t.tid
        );
        self.0.refuse_context_slot(t.tgid, t.stream);
    }

    fn samples(&self, period_ns: u64, samples: &[(jp_common::CtxKey, u64)]) {
        self.0.add_cpu_samples(period_ns, samples);
    }
}
