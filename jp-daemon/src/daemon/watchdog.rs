//! systemd's watchdog, fed only while every running part of jpd makes progress: the
//! kernel reader, the USDT manager and the ring reader beat their heartbeats
//! ([`crate::liveness`]); when one is stuck or gone this stops feeding, says which
//! and why, and systemd restarts jpd at the end of `WatchdogSec`. A stuck async
//! runtime never gets here at all, which starves the watchdog the same way.
use std::time::Duration;

use crate::liveness::{self, Health};
use crate::notify::Notifier;

/// The pinger's period for systemd's `timeout`: half of it, as `sd_watchdog_enabled(3)`
/// advises. It is also the grace the parts are judged with, so that a stuck part is
/// seen before systemd's own timer runs out.
pub(super) fn period(timeout: Duration) -> Duration {
    (timeout / 2).max(Duration::from_millis(1))
}

/// Judges every part with `timeout`'s grace from now on (also for `jpctl status`).
pub(super) fn arm(timeout: Duration) {
    liveness::set_grace(period(timeout));
}

/// One ping: `WATCHDOG=1` when no part is stuck; else an error naming the stuck parts,
/// which also becomes systemd's status line.
pub(super) fn ping(notifier: &Notifier) {
    match verdict(&liveness::check()) {
        Ok(()) => notifier.notify("WATCHDOG=1"),
        Err(why) => {
            log::error!(target: "jpd", "{why}: not feeding the watchdog");
            notifier.notify(&format!("STATUS={why}"));
        }
    }
}

/// `Ok` when no part is stuck; otherwise which are, and why.
pub(super) fn verdict(parts: &[Health]) -> Result<(), String> {
    let stuck: Vec<String> = parts
        .iter()
        .filter(|h| h.stuck)
        .map(|h| format!("{} stuck ({})", h.part.0, h.detail))
        .collect();
    if stuck.is_empty() {
        Ok(())
    } else {
        Err(stuck.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveness::{judge, KERNEL_READER, RING_READER, USDT_MANAGER};

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_watchdog_is_fed_only_while_every_part_makes_progress() {
        // WatchdogSec=6s: pings every 3 s, and 3 s of grace.
        assert_eq!(period(S * 6), S * 3);
        let grace = period(S * 6);
        let kernel = judge(KERNEL_READER, S, grace, S, None);
        let ring = judge(RING_READER, S, grace, S * 2, None);
        let manager = judge(USDT_MANAGER, S, grace, S * 4, None);
        assert_eq!(verdict(&[kernel.clone(), ring.clone(), manager]), Ok(()));
        // No parts (nothing registered yet) starve nothing.
        assert_eq!(verdict(&[]), Ok(()));

        let stalled = judge(USDT_MANAGER, S, grace, S * 7, None);
        assert_eq!(
            verdict(&[kernel.clone(), ring, stalled.clone()]),
            Err("usdt_manager stuck (no progress for 7.0 s (allowed 5.0 s))".into())
        );
        let dead = judge(RING_READER, S, grace, S, Some("it ended".into()));
        assert_eq!(
            verdict(&[kernel, dead, stalled]),
            Err("ring_reader stuck (ended: it ended); \
                 usdt_manager stuck (no progress for 7.0 s (allowed 5.0 s))"
                .into())
        );
    }
}
