//! Fair sharing of the USDT ring buffer between processes: what jpd configures
//! (`JP_USDT_LIMITS`, `JP_USDT_ALLOW_UIDS`, `JP_USDT_ALLOW_CGROUPS`) and what the
//! program keeps per process (`JP_USDT_PROCS`). One ring serves every process on the
//! host; without a share per process, one process firing faster than jpd reads fills
//! it, and every other process's records are lost with its own.

/// The limits jpd writes into `JP_USDT_LIMITS` (one entry) before it attaches anything.
/// All zero (an object loaded without them): no rate limit, every process allowed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingLimits {
    /// Nanoseconds of a process's budget that one event costs (10^9 / events per
    /// second); 0: no rate limit.
    pub event_cost_ns: u64,
    /// How far ahead of its rate a process may run: its burst, in events, times
    /// `event_cost_ns`.
    pub burst_ns: u64,
    /// Which allow-lists apply ([`allow`] bits); 0: every process.
    pub allow: u32,
    pub _pad: u32,
}

/// [`RingLimits::allow`] bits.
pub mod allow {
    /// Only processes whose real uid is a key of `JP_USDT_ALLOW_UIDS`.
    pub const UIDS: u32 = 1;
    /// Only processes in a cgroup (v2) that is, or is below, a key of
    /// `JP_USDT_ALLOW_CGROUPS`.
    pub const CGROUPS: u32 = 2;
}

/// Deepest cgroup level the program compares against `JP_USDT_ALLOW_CGROUPS` (the
/// root is level 0; systemd and Kubernetes nest a few levels deep).
pub const MAX_CGROUP_LEVELS: u32 = 16;

/// A process's share of the ring (`JP_USDT_PROCS`, keyed by tgid, least recently
/// used entries evicted). Its counts only grow while the entry lives: jpd charges
/// their growth to that process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessRing {
    /// The token bucket as a virtual clock (GCRA): the time at which the process has
    /// used up its rate so far. An event at `now` is allowed when
    /// `max(next_ns, now) + event_cost_ns - now <= burst_ns`, and then moves it there.
    pub next_ns: u64,
    /// Events refused for being over the process's rate.
    pub rate_limited: u64,
    /// Events lost because the ring was full.
    pub ring_full: u64,
    /// Events written to the ring.
    pub sent: u64,
}

impl ProcessRing {
    /// The bucket's verdict for an event at `now_ns`: the new `next_ns` if the
    /// event is within the rate, else `None`. Shared by the program and the tests.
    #[inline(always)]
    pub fn admit(next_ns: u64, now_ns: u64, limits: &RingLimits) -> Option<u64> {
        if limits.event_cost_ns == 0 {
            return Some(next_ns);
        }
        let start = if next_ns > now_ns { next_ns } else { now_ns };
        let next = start.saturating_add(limits.event_cost_ns);
        if next - now_ns <= limits.burst_ns {
            Some(next)
        } else {
            None
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), integers only, no implicit padding: every bit pattern is valid.
    unsafe impl aya::Pod for super::RingLimits {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ProcessRing {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_second: u64, burst: u64) -> RingLimits {
        let cost = 1_000_000_000 / per_second;
        RingLimits {
            event_cost_ns: cost,
            burst_ns: burst * cost,
            allow: 0,
            _pad: 0,
        }
    }

    /// Runs `n` events at `now`, returning how many were admitted.
    fn fire(next: &mut u64, now: u64, n: u64, l: &RingLimits) -> u64 {
        let mut admitted = 0;
        for _ in 0..n {
            if let Some(t) = ProcessRing::admit(*next, now, l) {
                *next = t;
                admitted += 1;
            }
        }
        admitted
    }

    #[test]
    fn a_burst_then_the_rate() {
        let l = limits(1000, 10);
        let mut next = 0;
        let t0 = 5_000_000_000;
        // An idle process may send its burst at once, and no more.
        assert_eq!(fire(&mut next, t0, 100, &l), 10);
        // 5 ms later: 5 events' worth at 1000/s.
        assert_eq!(fire(&mut next, t0 + 5_000_000, 100, &l), 5);
        // Long idle: the burst again, not more.
        assert_eq!(fire(&mut next, t0 + 10_000_000_000, 100, &l), 10);
    }

    #[test]
    fn no_limit_admits_everything() {
        let l = RingLimits::default();
        let mut next = 7;
        assert_eq!(fire(&mut next, 1, 100_000, &l), 100_000);
        assert_eq!(next, 7);
    }

    #[test]
    fn shared_types_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<RingLimits>(), 24);
        assert_eq!(core::mem::size_of::<ProcessRing>(), 32);
    }
}
