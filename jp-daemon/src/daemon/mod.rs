//! The daemon's life, as four named steps: `Daemon::start` binds the listeners, starts
//! the collectors and stores, the exporters and the gRPC server; `Daemon::serve` turns
//! SIGHUP into a reload of what can change at run time (sampling frequency,
//! exporters, pusher, access rules, TLS certificates: `Running::reload`), feeds
//! systemd's watchdog while every collector makes progress (`watchdog`), and ends at
//! SIGINT/SIGTERM or when the server ends;
//! `Daemon::shutdown` is the one shutdown path, whatever ended the life. `main.rs`
//! only parses flags and calls [`run`]; [`run_with`] takes the stop and reload
//! requests from a channel instead of signals, so a test can drive a whole life
//! in-process.
//!
//! Its log lines keep the target `jpd` they had when this code was the binary's:
//! operators and the journal tests look for `[… jpd] stopped` and the like.

mod access;
mod contexts;
mod otlp;
mod reload;
mod serve;
mod start;
mod watchdog;

use std::path::PathBuf;

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::config::{Config, ConfigError, Source};
use crate::notify::Notifier;

pub use access::open_tcp_warning;
pub use contexts::JvmContexts;
use start::Daemon;

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

/// Start, serve, shut down. A start that fails drops what it had started (the
/// collectors detach, the socket is unlinked) and returns its error.
fn life(
    rt: &tokio::runtime::Runtime,
    overrides: &Overrides,
    config: Config,
    source: &Source,
    controls: mpsc::Receiver<Control>,
) -> anyhow::Result<()> {
    let _enter = rt.enter();
    let notifier = Notifier::from_env();
    crate::liveness::fault::announce()?;
    let mut daemon = Daemon::start(rt, config, source)?;
    daemon.announce_ready(&notifier);
    let served = rt.block_on(daemon.serve(overrides, controls, &notifier));
    daemon.shutdown(rt);
    served
}
