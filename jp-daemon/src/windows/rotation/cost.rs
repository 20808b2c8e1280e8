//! What a window costs a JVM, measured: its CPU rate while the window was open against its
//! rate in the minutes before, from jpd's per-process CPU readings, smoothed per JVM.
//! Pure: the caller hands in readings (time in seconds on a monotonic clock, cumulative
//! CPU in ns) and the window's open and close times.
use std::collections::VecDeque;

use super::plan::PRIOR_COST;

/// How far back the rate outside windows is taken.
pub const BASELINE_SECONDS: f64 = 120.0;
/// The shortest stretch outside windows a baseline may be measured over.
pub const MIN_BASELINE_SECONDS: f64 = 10.0;
/// Below this CPU rate (cores) outside windows a ratio says nothing: an idle JVM's
/// window is all extra; its estimate stays where it was.
pub const MIN_BASELINE_CORES: f64 = 0.02;
/// A measured cost is clamped to this: one window stalled by something else must not
/// starve a JVM of windows for hours.
pub const MAX_COST: f64 = 50.0;
/// Weight of a new measurement in the smoothed estimate (after the first, which replaces
/// the prior).
pub const SMOOTHING: f64 = 0.3;
/// Readings kept per JVM (at one a second, a little more than the baseline).
const MAX_READINGS: usize = 256;

/// Where a reading came from: readings of different sources are never subtracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuSource {
    /// jpd's kernel sampler, through the JVM store (a JVM with the agent).
    Sampler,
    /// The kernel's process accounting (/proc/PID/stat), for a JVM jpd does not sample.
    Proc,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub at: f64,
    pub cpu_ns: u64,
    pub source: CpuSource,
}

/// A JVM's readings, oldest first, all of one source (a new source starts it again).
#[derive(Clone, Debug, Default)]
pub struct CpuHistory {
    readings: VecDeque<Reading>,
}

impl CpuHistory {
    pub fn push(&mut self, r: Reading) {
        if self.readings.back().is_some_and(|b| b.source != r.source) {
            self.readings.clear();
        }
        if self.readings.len() == MAX_READINGS {
            self.readings.pop_front();
        }
        self.readings.push_back(r);
    }

    /// The last reading at or before `t`.
    pub fn at_or_before(&self, t: f64) -> Option<Reading> {
        self.readings.iter().rev().find(|r| r.at <= t).copied()
    }

    /// The first reading at or after `t`.
    pub fn at_or_after(&self, t: f64) -> Option<Reading> {
        self.readings.iter().find(|r| r.at >= t).copied()
    }

    /// CPU rate (cores) between `from` and `to`, over the readings nearest inside them;
    /// None when they span less than [`MIN_BASELINE_SECONDS`].
    pub fn rate_between(&self, from: f64, to: f64) -> Option<f64> {
        let a = self.at_or_after(from)?;
        let b = self.at_or_before(to)?;
        let span = b.at - a.at;
        (span >= MIN_BASELINE_SECONDS)
            .then(|| b.cpu_ns.saturating_sub(a.cpu_ns) as f64 / 1e9 / span)
    }
}

/// A window as the measurement needs it: the JVM's rate outside windows before it, and
/// the readings around it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowCpu {
    /// CPU rate (cores) outside windows before the window.
    pub baseline_cores: f64,
    /// The readings bracketing the window: at or before its opening, and at or after its
    /// close (plus the sampler's lag).
    pub before: Reading,
    pub after: Reading,
    /// How long the window was open (s).
    pub open_seconds: f64,
}

impl WindowCpu {
    /// The JVM's CPU while the window was open (s): the bracket's CPU less the baseline's
    /// share of the bracket's time outside the window.
    pub fn cpu_seconds(&self) -> f64 {
        let bracket = (self.after.at - self.before.at).max(self.open_seconds);
        let all = self.after.cpu_ns.saturating_sub(self.before.cpu_ns) as f64 / 1e9;
        (all - self.baseline_cores * (bracket - self.open_seconds)).max(0.0)
    }

    /// The window's extra CPU relative to the baseline (`rate in window / rate outside −
    /// 1`, clamped to 0..=[`MAX_COST`]); None when the baseline is too small to divide by
    /// or the readings are of two sources.
    pub fn cost(&self) -> Option<f64> {
        if self.baseline_cores < MIN_BASELINE_CORES
            || self.before.source != self.after.source
            || self.open_seconds <= 0.0
        {
            return None;
        }
        let extra = self.cpu_seconds() - self.baseline_cores * self.open_seconds;
        Some((extra / (self.baseline_cores * self.open_seconds)).clamp(0.0, MAX_COST))
    }
}

/// A JVM's estimated cost of a window, and how many windows it was measured on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub cost: f64,
    pub measured: u32,
}

impl Default for Estimate {
    fn default() -> Self {
        Estimate {
            cost: PRIOR_COST,
            measured: 0,
        }
    }
}

impl Estimate {
    /// The estimate after one more measured window: the first replaces the prior, later
    /// ones are averaged in with weight [`SMOOTHING`].
    pub fn with(self, cost: f64) -> Estimate {
        let cost = if self.measured == 0 {
            cost
        } else {
            self.cost + SMOOTHING * (cost - self.cost)
        };
        Estimate {
            cost,
            measured: self.measured + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(at: f64, cpu_s: f64) -> Reading {
        Reading {
            at,
            cpu_ns: (cpu_s * 1e9) as u64,
            source: CpuSource::Proc,
        }
    }

    #[test]
    fn a_window_that_doubles_the_rate_costs_one() {
        // 0.5 cores outside; in a 10 s window 1.0 core; brackets 2 s wider on each side.
        let w = WindowCpu {
            baseline_cores: 0.5,
            before: r(98.0, 49.0),
            after: r(112.0, 49.0 + 2.0 * 0.5 + 10.0 + 2.0 * 0.5),
            open_seconds: 10.0,
        };
        assert!((w.cpu_seconds() - 10.0).abs() < 1e-9, "{}", w.cpu_seconds());
        assert!((w.cost().unwrap() - 1.0).abs() < 1e-9);
        // As cheap as outside: 0; cheaper (noise) is 0 too.
        let free = WindowCpu {
            after: r(112.0, 49.0 + 7.0),
            ..w
        };
        assert_eq!(free.cost(), Some(0.0));
        let cheaper = WindowCpu {
            after: r(112.0, 49.0 + 1.0),
            ..w
        };
        assert_eq!(cheaper.cost(), Some(0.0));
    }

    #[test]
    fn no_cost_from_an_idle_baseline_or_mixed_sources() {
        let idle = WindowCpu {
            baseline_cores: 0.001,
            before: r(0.0, 0.0),
            after: r(10.0, 5.0),
            open_seconds: 10.0,
        };
        assert_eq!(idle.cost(), None);
        let mixed = WindowCpu {
            baseline_cores: 1.0,
            after: Reading {
                source: CpuSource::Sampler,
                ..r(10.0, 20.0)
            },
            ..idle
        };
        assert_eq!(mixed.cost(), None);
    }

    #[test]
    fn the_prior_is_replaced_then_smoothed() {
        let e = Estimate::default();
        assert_eq!(e.cost, PRIOR_COST);
        let e = e.with(1.0);
        assert_eq!(
            e,
            Estimate {
                cost: 1.0,
                measured: 1
            }
        );
        let e = e.with(2.0);
        assert!((e.cost - 1.3).abs() < 1e-12);
        assert_eq!(e.measured, 2);
    }

    #[test]
    fn history_rates_and_brackets() {
        let mut h = CpuHistory::default();
        for i in 0..=30 {
            h.push(r(f64::from(i), f64::from(i) * 0.25));
        }
        assert!((h.rate_between(0.0, 30.0).unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(h.rate_between(25.0, 30.0), None);
        assert_eq!(h.at_or_before(10.5).unwrap().at, 10.0);
        assert_eq!(h.at_or_after(10.5).unwrap().at, 11.0);
        // Another source starts the history again.
        h.push(Reading {
            source: CpuSource::Sampler,
            ..r(31.0, 0.0)
        });
        assert_eq!(h.at_or_before(30.0), None);
    }
}
