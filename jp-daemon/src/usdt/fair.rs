//! Fair sharing of the one USDT ring buffer between the processes on the host: what
//! jpd configures in the program's maps (each process's rate and burst, the uid and
//! cgroup allow-lists, see `jp_common::ring`), the per-process losses it reads back
//! and charges to that process alone, and how often one process is asked to re-send.
//!
//! Without these, one process firing faster than jpd reads filled the ring, every
//! running JVM was marked lossy, and each was asked to re-send its whole state, again
//! at every new overflow: a flooding process kept every other user's JVM serializing
//! its whole tree.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use jp_common::ring::{allow, ProcessRing, RingLimits};

use crate::refusals::Refusal;

/// Events a process fired over its rate, dropped in the kernel.
pub const RATE_LIMITED: Refusal = Refusal::new("ring", "rate_limited");
/// Events lost because the ring was full.
pub const RING_FULL: Refusal = Refusal::new("ring", "ring_full");
/// Events of processes outside `[usdt] allow_uids` / `allow_cgroups`, dropped in the
/// kernel.
pub const NOT_ALLOWED: Refusal = Refusal::new("ring", "not_allowed");
/// Processes the scan found with the library but outside the allow-lists (each counted
/// once): not attached for, not listed, never written to.
pub const PROCESS_NOT_ALLOWED: Refusal = Refusal::new("ring", "process_not_allowed");
/// Re-send requests held back by a JVM's backoff.
pub const RESEND_DEFERRED: Refusal = Refusal::new("ring", "resend_deferred");

/// Where cgroup v2 is mounted: an `allow_cgroups` path is relative to it.
pub const CGROUP2_ROOT: &str = "/sys/fs/cgroup";

/// The ring's share per process and who may use it at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingShare {
    /// Events (records) per second one process may put in the ring, on average; 0: no
    /// limit.
    pub records_per_second: u32,
    /// Events one process may put in the ring at once, above its rate.
    pub burst_records: u32,
    /// Real uids whose processes are listened to; empty: every uid.
    pub allow_uids: Vec<u32>,
    /// cgroup v2 paths (relative to [`CGROUP2_ROOT`], such as
    /// `/system.slice/app.service`) whose processes, and those of the cgroups below, are
    /// listened to; empty: every cgroup.
    pub allow_cgroups: Vec<String>,
}

impl Default for RingShare {
    fn default() -> RingShare {
        RingShare {
            records_per_second: 20_000,
            burst_records: 4096,
            allow_uids: Vec::new(),
            allow_cgroups: Vec::new(),
        }
    }
}

impl RingShare {
    /// No rate limit and no allow-list (tests that measure the ring itself).
    pub fn unlimited() -> RingShare {
        RingShare {
            records_per_second: 0,
            ..RingShare::default()
        }
    }

    /// The program's `JP_USDT_LIMITS` entry.
    pub fn limits(&self) -> RingLimits {
        let event_cost_ns = match self.records_per_second {
            0 => 0,
            r => (1_000_000_000 / u64::from(r)).max(1),
        };
        let mut bits = 0;
        if !self.allow_uids.is_empty() {
            bits |= allow::UIDS;
        }
        if !self.allow_cgroups.is_empty() {
            bits |= allow::CGROUPS;
        }
        RingLimits {
            event_cost_ns,
            burst_ns: event_cost_ns.saturating_mul(u64::from(self.burst_records.max(1))),
            allow: bits,
            _pad: 0,
        }
    }
}

/// The cgroup v2 id of a cgroup path (the inode number of its directory, which is what
/// `bpf_get_current_cgroup_id` returns).
pub fn cgroup_id(path: &str) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let full = format!("{CGROUP2_ROOT}/{}", path.trim_start_matches('/'));
    Ok(std::fs::metadata(full)?.ino())
}

/// Whether a process is inside the allow-lists, from its real uid and its cgroup v2
/// path (`/proc/PID/cgroup`'s `0::` line); the scan leaves the others alone.
pub fn process_allowed(share: &RingShare, uid: u32, cgroup: &str) -> bool {
    let uid_ok = share.allow_uids.is_empty() || share.allow_uids.contains(&uid);
    let cgroup_ok = share.allow_cgroups.is_empty()
        || share.allow_cgroups.iter().any(|allowed| {
            let allowed = allowed.trim_end_matches('/');
            cgroup == allowed
                || allowed.is_empty()
                || cgroup
                    .strip_prefix(allowed)
                    .is_some_and(|rest| rest.starts_with('/'))
        });
    uid_ok && cgroup_ok
}

/// A process's real uid and cgroup v2 path, from `/proc`; `None` if it has exited.
pub fn process_identity(pid: u32) -> Option<(u32, String)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let cgroup = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("")
        .to_owned();
    Some((uid, cgroup))
}

/// What one process lost since the last look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessLosses {
    /// Events dropped for being over its rate.
    pub rate_limited: u64,
    /// Events lost to a full ring.
    pub ring_full: u64,
}

impl ProcessLosses {
    pub fn any(&self) -> bool {
        self.rate_limited != 0 || self.ring_full != 0
    }
}

/// The last counts seen per process, to charge each process only its new losses.
#[derive(Debug, Default)]
pub struct LossLedger {
    seen: HashMap<u32, ProcessRing>,
}

impl LossLedger {
    /// The losses of `tgid` since the last call, given its entry now. An entry that
    /// restarted from zero (evicted and created again) counts from zero.
    pub fn update(&mut self, tgid: u32, now: ProcessRing) -> ProcessLosses {
        let before = self.seen.insert(tgid, now).unwrap_or_default();
        let grown = |new: u64, old: u64| if new >= old { new - old } else { new };
        ProcessLosses {
            rate_limited: grown(now.rate_limited, before.rate_limited),
            ring_full: grown(now.ring_full, before.ring_full),
        }
    }

    pub fn forget(&mut self, tgid: u32) {
        self.seen.remove(&tgid);
    }
}

/// Shortest spacing of two re-sends of one JVM; it doubles with each further re-send.
pub const RESEND_MIN_SPACING: Duration = Duration::from_secs(1);
/// Longest spacing: a JVM that keeps losing records re-sends at most this often.
pub const RESEND_MAX_SPACING: Duration = Duration::from_secs(60);

/// Per JVM, exponential backoff of re-send requests, on the monotonic clock: a
/// wall-clock step neither holds re-sends back (a step back) nor lets them all through
/// (a step forward). A new generation does not reset it: the spacing grows with every
/// re-send and falls back to [`RESEND_MIN_SPACING`] only once the JVM went
/// [`RESEND_MAX_SPACING`] past its last allowed time without asking.
#[derive(Debug, Default)]
pub struct ResendBackoff {
    jvms: HashMap<u32, Spacing>,
}

#[derive(Clone, Copy, Debug)]
struct Spacing {
    /// Earliest time of the next re-send.
    next: Instant,
    /// The spacing after the last re-send.
    spacing: Duration,
    /// A request arrived before `next`: it is served then.
    pending: bool,
}

impl ResendBackoff {
    /// A re-send of `pid` is asked for at `now`: true if it may be written now; else
    /// it is kept and returned by [`ResendBackoff::due`] once its time has come.
    pub fn request(&mut self, pid: u32, now: Instant) -> bool {
        let Some(s) = self.jvms.get_mut(&pid) else {
            self.jvms.insert(
                pid,
                Spacing {
                    next: now + RESEND_MIN_SPACING,
                    spacing: RESEND_MIN_SPACING,
                    pending: false,
                },
            );
            return true;
        };
        if now < s.next {
            s.pending = true;
            return false;
        }
        s.spacing = if now.duration_since(s.next) >= RESEND_MAX_SPACING {
            RESEND_MIN_SPACING
        } else {
            (s.spacing * 2).min(RESEND_MAX_SPACING)
        };
        s.next = now + s.spacing;
        s.pending = false;
        true
    }

    /// JVMs with a held-back request whose time has come (each then spaced further).
    pub fn due(&mut self, now: Instant) -> Vec<u32> {
        let ready: Vec<u32> = self
            .jvms
            .iter()
            .filter(|(_, s)| s.pending && now >= s.next)
            .map(|(&pid, _)| pid)
            .collect();
        ready
            .into_iter()
            .filter(|&pid| self.request(pid, now))
            .collect()
    }

    /// The process is gone.
    pub fn forget(&mut self, pid: u32) {
        self.jvms.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Re-sends granted to one JVM that asks every `every` for `total`.
    fn granted(b: &mut ResendBackoff, t0: Instant, every: Duration, total: Duration) -> u32 {
        let mut n = 0;
        let mut t = Duration::ZERO;
        while t <= total {
            if b.request(7, t0 + t) {
                n += 1;
            }
            n += b.due(t0 + t).len() as u32;
            t += every;
        }
        n
    }

    #[test]
    fn resends_back_off_exponentially_and_are_capped() {
        let mut b = ResendBackoff::default();
        let t0 = Instant::now();
        // Asked every 10 ms for 10 s (an overflow at every tick): granted at 0, 1, 3 and
        // 7 s, not 1000 times.
        assert_eq!(
            granted(
                &mut b,
                t0,
                Duration::from_millis(10),
                Duration::from_secs(10)
            ),
            4
        );
        // The spacing goes on doubling up to the cap: 8, 16, 32, 60, 60… s.
        let mut b = ResendBackoff::default();
        let hour = Duration::from_secs(3600);
        let n = granted(&mut b, t0, Duration::from_millis(100), hour);
        // 0, 1, 3, 7, 15, 31, 63, then every 60 s up to 3600 s: 7 + 58.
        assert_eq!(n, 7 + 58);
    }

    #[test]
    fn a_held_back_request_is_served_when_due_once() {
        let mut b = ResendBackoff::default();
        let t0 = Instant::now();
        assert!(b.request(1, t0));
        assert!(!b.request(1, t0 + Duration::from_millis(10)));
        assert!(!b.request(1, t0 + Duration::from_millis(20)));
        assert_eq!(b.due(t0 + Duration::from_millis(999)), Vec::<u32>::new());
        assert_eq!(b.due(t0 + Duration::from_secs(1)), vec![1]);
        assert_eq!(b.due(t0 + Duration::from_secs(30)), Vec::<u32>::new());
        // Another JVM is spaced on its own.
        assert!(b.request(2, t0 + Duration::from_millis(10)));
    }

    #[test]
    fn a_quiet_jvm_starts_again_at_the_shortest_spacing() {
        let mut b = ResendBackoff::default();
        let t0 = Instant::now();
        for s in [0, 1, 3, 7] {
            assert!(b.request(1, t0 + Duration::from_secs(s)), "{s}");
        }
        // Next allowed at 15 s; quiet until 15 + 60 s: back to 1 s spacing.
        let late = t0 + Duration::from_secs(75);
        assert!(b.request(1, late));
        assert!(!b.request(1, late + Duration::from_millis(900)));
        assert!(b.request(1, late + Duration::from_secs(1)));
        b.forget(1);
        assert!(b.request(1, late + Duration::from_millis(1001)));
    }

    #[test]
    fn losses_are_what_grew_since_the_last_look() {
        let mut l = LossLedger::default();
        let entry = |rate_limited, ring_full| ProcessRing {
            rate_limited,
            ring_full,
            ..ProcessRing::default()
        };
        assert_eq!(
            l.update(5, entry(3, 1)),
            ProcessLosses {
                rate_limited: 3,
                ring_full: 1
            }
        );
        assert!(!l.update(5, entry(3, 1)).any());
        assert_eq!(l.update(5, entry(10, 1)).rate_limited, 7);
        // Evicted and created again: counted from zero.
        assert_eq!(l.update(5, entry(2, 0)).rate_limited, 2);
        l.forget(5);
        assert_eq!(l.update(5, entry(2, 0)).rate_limited, 2);
    }

    #[test]
    fn limits_and_allow_lists() {
        let s = RingShare::default();
        let l = s.limits();
        assert_eq!(
            (l.event_cost_ns, l.burst_ns, l.allow),
            (50_000, 50_000 * 4096, 0)
        );
        assert_eq!(RingShare::unlimited().limits().event_cost_ns, 0);
        let s = RingShare {
            allow_uids: vec![1000],
            allow_cgroups: vec!["/system.slice/app.service".into()],
            ..RingShare::default()
        };
        assert_eq!(s.limits().allow, allow::UIDS | allow::CGROUPS);
        assert!(process_allowed(&s, 1000, "/system.slice/app.service"));
        assert!(process_allowed(&s, 1000, "/system.slice/app.service/sub"));
        assert!(!process_allowed(&s, 1000, "/system.slice/app.service2"));
        assert!(!process_allowed(&s, 0, "/system.slice/app.service"));
        assert!(process_allowed(&RingShare::default(), 0, "/"));
    }
}
