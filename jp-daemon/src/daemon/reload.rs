//! What a SIGHUP may change, and the reload: each part that can change at run time
//! is applied by a step of its own; a part whose new settings fail keeps the previous
//! ones. The keys that need a restart are declared by their sections
//! ([`Config::restart_needed`]) and only reported here.
use std::time::SystemTime;

use super::access::{apply_group, policy, tls_policy, tls_summary};
use crate::config::{Config, ConfigError, Source};
use crate::export::pyroscope::Pusher;
use crate::export::{self, Exporter};
use crate::kernel::KernelCollector;
use crate::restart::RestartNeeded;
use crate::server::{auth, tls};
use crate::store::jvm::idle::IdlePatterns;
use crate::windows::rotation::Rotation;
use crate::windows::Windows;

/// Everything SIGHUP may change, with what runs now.
pub(super) struct Running {
    pub(super) config: Config,
    pub(super) collector: KernelCollector,
    pub(super) exporter: Option<Exporter>,
    pub(super) pusher: Option<Pusher>,
    /// The OTLP exporter (`[otlp]`), the same kind of pusher.
    pub(super) otlp: Option<Pusher>,
    /// The credentials the pusher was started with, to see a rotated secret.
    pub(super) pusher_auth: Result<export::pyroscope::wire::Files, String>,
    pub(super) auth: auth::Authorizer,
    /// The TLS listener's certificates, when `server.tcp` is set.
    pub(super) tls: Option<tls::TlsSettings>,
    pub(super) sources: export::ExportState,
    /// The windows service: its settings reload.
    pub(super) windows: Windows,
    /// The fleet rotation (`[windows.rotation]`, reloaded with `[windows]`); taken at
    /// shutdown.
    pub(super) rotation: Option<Rotation>,
    pub(super) started: SystemTime,
}

impl Running {
    /// Applies what can change at run time from the configuration loaded anew; says
    /// what needs a restart. A file that does not load changes nothing.
    pub(super) async fn reload(&mut self, loaded: Result<(Config, Source), ConfigError>) {
        let new = match loaded {
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
        self.reload_frequency(&new);
        self.reload_exporter(&new).await;
        self.reload_pusher(&new).await;
        self.reload_otlp(&new).await;
        self.reload_access(&new);
        self.reload_windows(&new);
        self.reload_offcpu_idle(&new);
        // A new `server.tcp` needs a restart, and its certificates with it.
        if new.server.tcp == old.server.tcp {
            self.reload_tls(&new);
        }
        warn_restart_needed(&old.restart_needed(&new));
    }

    /// New idle patterns (`kernel.offcpu_idle`): the next view reads them.
    fn reload_offcpu_idle(&mut self, new: &Config) {
        if new.kernel.offcpu_idle != self.config.kernel.offcpu_idle {
            let patterns = IdlePatterns::with(&new.kernel.offcpu_idle);
            crate::lock::lock(&self.sources.stores.jvm).set_offcpu_idle(patterns);
            self.config.kernel.offcpu_idle = new.kernel.offcpu_idle.clone();
        }
    }

    /// A new `kernel.frequency_hz`: the running perf events take the new period.
    fn reload_frequency(&mut self, new: &Config) {
        let (was, now) = (self.config.kernel.frequency_hz, new.kernel.frequency_hz);
        if now == was {
            return;
        }
        match self.collector.set_frequency(now) {
            Ok(()) => {
                self.config.kernel.frequency_hz = now;
                log::info!(target: "jpd", "sampling at {now} Hz (was {was} Hz)");
            }
            Err(e) => {
                log::error!(target: "jpd", "cannot sample at {now} Hz, staying at {was} Hz: {e:#}")
            }
        }
    }

    /// A changed `[export]`: the exporters restart on the new settings, or on the
    /// previous ones when the new ones fail.
    async fn reload_exporter(&mut self, new: &Config) {
        let old = self.config.export.clone();
        if new.export == old {
            return;
        }
        if let Some(e) = self.exporter.take() {
            e.stop().await;
        }
        self.config.export = new.export.clone();
        if let Err(e) = self.start_exporter().await {
            log::error!(target: "jpd", "{e:#}; the previous [export] settings stay");
            self.config.export = old;
            if let Err(e) = self.start_exporter().await {
                log::error!(target: "jpd", "cannot restart the previous exporters either: {e:#}");
            }
        } else if !new.export.enabled {
            log::info!(target: "jpd", "exporters stopped");
        }
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
        self.config.pyroscope = new.pyroscope.clone();
        if !new.pyroscope.enabled {
            self.sources.pyroscope.disable();
            if old.enabled {
                log::info!(target: "jpd", "pyroscope: pushing stopped");
            }
            return;
        }
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

    /// A changed `[windows]`: the next windows use it (`keep` applies at once).
    fn reload_windows(&mut self, new: &Config) {
        if new.windows == self.config.windows {
            return;
        }
        self.config.windows = new.windows.clone();
        self.windows.set_config(new.windows.clone());
        if let Some(r) = &self.rotation {
            r.set_config(new.windows.rotation.clone());
        }
        log::info!(target: "jpd", "windows now: {:?}", new.windows);
    }

    /// New `server.group`, `allow_uids`, `allow_gids`, `admin_uids` or `admin_gids`: the
    /// socket's group and the access rule of new calls change.
    fn reload_access(&mut self, new: &Config) {
        let (s, old) = (&new.server, &self.config.server);
        let rule = |c: &crate::server::config::ServerConfig| {
            (
                c.group.clone(),
                c.allow_uids.clone(),
                c.allow_gids.clone(),
                c.admin_uids.clone(),
                c.admin_gids.clone(),
            )
        };
        if rule(s) == rule(old) {
            return;
        }
        self.config.server.group = s.group.clone();
        self.config.server.allow_uids = s.allow_uids.clone();
        self.config.server.allow_gids = s.allow_gids.clone();
        self.config.server.admin_uids = s.admin_uids.clone();
        self.config.server.admin_gids = s.admin_gids.clone();
        let (policy, gid) = policy(&self.config);
        apply_group(&self.config, &self.config.server.socket, gid);
        log::info!(target: "jpd", "access now: {policy:?}");
        self.auth.set(policy);
    }

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

/// The exporters and the pusher, started at start and again by a reload.
impl Running {
    pub(super) async fn start_exporter(&mut self) -> anyhow::Result<()> {
        if self.config.export.enabled {
            let e =
                Exporter::start(&self.config.export, self.sources.clone(), self.started).await?;
            log::info!(target: "jpd", "exporters on http://{}/metrics", e.local_addr());
            self.exporter = Some(e);
        }
        Ok(())
    }

    pub(super) fn start_pusher(&mut self) -> Result<(), String> {
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
}

/// The changed keys that only a restart applies: the running value stays.
fn warn_restart_needed(keys: &[RestartNeeded]) {
    for RestartNeeded { key, was, now } in keys {
        log::warn!(target: "jpd",
            "{key} changed ({was} → {now}) but cannot be reloaded: restart jpd to apply it"
        );
    }
}
