//! Serving, and the one way out of it: requests to stop or reload, systemd's
//! watchdog, and the server ending on its own all arrive as one [`Event`]; whatever
//! ended the serving, [`Daemon::shutdown`] follows.
use std::time::Duration;

use tokio::sync::mpsc;

use super::start::Daemon;
use super::watchdog;
use super::{Control, Overrides};
use crate::notify::{self, Notifier};

enum Event {
    Control(Control),
    Watchdog,
    ServerEnded(anyhow::Result<()>),
}

impl Daemon {
    /// Serves until a stop request, or until the server ends (an error either way:
    /// jpd does not stop serving by itself).
    pub(super) async fn serve(
        &mut self,
        overrides: &Overrides,
        mut controls: mpsc::Receiver<Control>,
        notifier: &Notifier,
    ) -> anyhow::Result<()> {
        let timeout = notify::watchdog_timeout().filter(|_| notifier.enabled());
        if let Some(t) = timeout {
            watchdog::arm(t);
        }
        // A period long enough never to fire when there is no watchdog.
        let mut ticker =
            tokio::time::interval(timeout.map_or(Duration::from_secs(3600), watchdog::period));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                c = controls.recv() => Event::Control(c.unwrap_or(Control::Stop("the control channel closed"))),
                _ = ticker.tick(), if timeout.is_some() => Event::Watchdog,
                r = &mut self.server.task => Event::ServerEnded(
                    r.unwrap_or_else(|e| Err(anyhow::anyhow!("gRPC server task failed: {e}")))),
            };
            match event {
                Event::Control(Control::Stop(name)) => {
                    log::info!(target: "jpd", "{name}: shutting down");
                    notifier.notify("STOPPING=1");
                    return self.server.stop().await;
                }
                Event::ServerEnded(r) => {
                    notifier.notify("STOPPING=1");
                    return r.and_then(|()| Err(anyhow::anyhow!("the gRPC server stopped")));
                }
                Event::Control(Control::Reload) => {
                    notifier.notify(&notify::reloading());
                    self.running.reload(overrides.load()).await;
                    notifier.notify("READY=1\nSTATUS=configuration reloaded");
                }
                Event::Watchdog => watchdog::ping(notifier),
            }
        }
    }

    /// The one shutdown path, whatever ended the server: the rotation, exporters (the
    /// pusher sends what it has), collectors detached, socket unlinked.
    pub(super) fn shutdown(self, rt: &tokio::runtime::Runtime) {
        let Daemon {
            mut running,
            usdt,
            socket,
            ..
        } = self;
        // No new rotation windows; those open close at their deadline in the agent.
        if let Some(r) = running.rotation.take() {
            rt.block_on(r.stop());
        }
        if let Some(e) = running.exporter.take() {
            rt.block_on(e.stop());
        }
        if let Some(p) = running.pusher.take() {
            // The interval begun so far and the queue, within a few seconds at most.
            let deadline = Duration::from_secs(running.config.pyroscope.timeout_s.min(5));
            rt.block_on(p.finish(&running.sources.pyroscope, deadline));
        }
        rt.block_on(running.finish_otlp());
        if let Some(usdt) = usdt {
            usdt.shutdown();
        }
        running.collector.shutdown();
        drop(socket);
        log::info!(target: "jpd", "stopped");
    }
}
