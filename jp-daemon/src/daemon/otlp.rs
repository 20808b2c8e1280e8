//! The OTLP exporter's start, reload and stop: as the Pyroscope pusher's, a changed
//! `[otlp]` restarts the tasks and keeps the queue and baselines; disabling drops them
//! (counted).

use std::time::Duration;

use super::reload::Running;
use crate::config::Config;
use crate::export::otlp::push;

impl Running {
    pub(super) fn start_otlp(&mut self) -> Result<(), String> {
        let c = &self.config.otlp;
        self.sources.otlp_attributes.set(&c.resource_attributes);
        if c.enabled {
            self.otlp = Some(push::start(c, self.sources.clone())?);
            log::info!(target: "jpd",
                "exporting OTLP profiles to {} ({:?}) every {} s",
                c.endpoint,
                c.protocol,
                c.interval_s
            );
        }
        Ok(())
    }

    /// A changed `[otlp]`: the tasks restart with the new settings; the queue and
    /// baselines stay unless it was disabled.
    pub(super) async fn reload_otlp(&mut self, new: &Config) {
        let old = self.config.otlp.clone();
        if new.otlp == old {
            return;
        }
        if let Some(p) = self.otlp.take() {
            p.stop().await;
        }
        self.config.otlp = new.otlp.clone();
        if !new.otlp.enabled {
            self.sources
                .otlp_attributes
                .set(&new.otlp.resource_attributes);
            self.sources.otlp.disable();
            if old.enabled {
                log::info!(target: "jpd", "otlp: exporting stopped");
            }
            return;
        }
        if let Err(e) = self.start_otlp() {
            log::error!(target: "jpd", "{e}; the previous [otlp] settings stay");
            self.config.otlp = old;
            if let Err(e) = self.start_otlp() {
                log::error!(target: "jpd", "cannot restart the previous OTLP exporter either: {e}");
            }
        }
    }

    /// jpd is stopping: the interval begun and the queue, within a few seconds at most.
    pub(super) async fn finish_otlp(&mut self) {
        if let Some(p) = self.otlp.take() {
            let deadline = Duration::from_secs(self.config.otlp.timeout_s.min(5));
            p.finish(&self.sources.otlp, deadline).await;
        }
    }
}
