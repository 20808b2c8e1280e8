//! The real JVM's throughput beside each attack, seen by jpd against the same attack
//! unseen (the `hostile` suite's `throughput` test plays the arms; see its module doc).
//! Per arm: the mean wall time and the mean JVM CPU time of the workload's rounds inside
//! the arm's window. Per pair: the seen arm's throughput over the unseen arm's, less one
//! (per wall second and per CPU second of the JVM). Noise: the same ratio between the
//! unseen arms of adjacent pairs, which differ in nothing but time.
//!
//! The verdict on the 5 % goal, per figure: the median change over the pairs, with a
//! margin of 2.5 standard errors of that median (1.25 × the pairs' standard deviation
//! over √pairs, times 2). Met when the median less the margin stays above −5 %, not met
//! when the median plus the margin is below −5 %, not decidable otherwise. The row is
//! met when both figures are, not met when either is not. When only the wall figure
//! cannot tell (the noise of a shared machine), the row is still met if the CPU figure
//! is met and jpd's extra CPU in the seen arms, over the JVM's own CPU rate, is within
//! 5 %: the JVM's work then costs it no more CPU, and even if every extra cycle of jpd
//! were taken from the JVM it would lose at most that share of its CPU.
use serde_json::Value;

use super::super::report::{median, Spread};

/// The real JVM may lose this much of its throughput at most.
pub const MAX_SLOWDOWN: f64 = 0.05;

/// One arm as the test measured it.
struct Arm {
    seen: bool,
    /// Mean wall ms and mean JVM CPU ms per round (`None` without a whole round).
    wall_ms: Option<f64>,
    cpu_ms: Option<f64>,
    /// jpd's CPU over the window, in cores.
    jpd_cpu: f64,
    /// The attack's processes' CPU over the window, in cores.
    attackers_cpu: f64,
}

impl Arm {
    fn of(v: &Value) -> Arm {
        let rounds: Vec<(f64, f64)> = v["rounds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r[0].as_f64()?, r[1].as_f64()?)))
            .collect();
        let n = rounds.len() as f64;
        let mean = |f: fn(&(f64, f64)) -> f64| {
            (!rounds.is_empty()).then(|| rounds.iter().map(f).sum::<f64>() / n)
        };
        let window = v["window_s"].as_f64().unwrap_or(0.0);
        let per_window = |key: &str| {
            if window > 0.0 {
                v[key].as_f64().unwrap_or(0.0) / window
            } else {
                0.0
            }
        };
        Arm {
            seen: v["seen"].as_bool().unwrap_or(false),
            wall_ms: mean(|r| r.0),
            cpu_ms: mean(|r| r.1),
            jpd_cpu: per_window("jpd_cpu_s"),
            attackers_cpu: per_window("attackers_cpu_s"),
        }
    }
}

/// Throughput change (seen over unseen, less one) per pair, and the noise (unseen
/// over the previous pair's unseen, less one), for one figure.
struct Figure {
    changes: Vec<f64>,
    noise: Vec<f64>,
}

impl Figure {
    fn of(arms: &[Arm], ms: fn(&Arm) -> Option<f64>) -> Figure {
        let mut changes = Vec::new();
        let mut unseen = Vec::new();
        for pair in arms.chunks(2) {
            let seen = pair.iter().find(|a| a.seen).and_then(ms);
            let base = pair.iter().find(|a| !a.seen).and_then(ms);
            if let (Some(s), Some(u)) = (seen, base) {
                // Time per round is the inverse of throughput.
                changes.push(u / s - 1.0);
            }
            unseen.push(base);
        }
        let noise = unseen
            .windows(2)
            .filter_map(|w| Some(w[0]? / w[1]? - 1.0))
            .collect();
        Figure { changes, noise }
    }

    fn median_change(&self) -> f64 {
        median(&mut self.changes.clone())
    }

    /// 2.5 standard errors of the median change (infinite under two pairs).
    fn margin(&self) -> f64 {
        let n = self.changes.len();
        if n < 2 {
            return f64::INFINITY;
        }
        let mean = self.changes.iter().sum::<f64>() / n as f64;
        let var = self.changes.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        2.0 * 1.25 * var.sqrt() / (n as f64).sqrt()
    }

    fn verdict(&self) -> Verdict {
        let (m, e) = (self.median_change(), self.margin());
        if m - e >= -MAX_SLOWDOWN {
            Verdict::Met
        } else if m + e < -MAX_SLOWDOWN {
            Verdict::NotMet
        } else {
            Verdict::Undecided
        }
    }

    /// `median (min … max) ±margin`, in %.
    fn cell(&self) -> String {
        if self.changes.is_empty() {
            return "not measured".into();
        }
        let s = Spread::of(&self.changes);
        let margin = self.margin();
        let margin = if margin.is_finite() {
            format!(" ±{:.1}", 100.0 * margin)
        } else {
            String::new()
        };
        format!(
            "{:+.1} % ({:+.1} … {:+.1}){margin}",
            100.0 * s.median,
            100.0 * s.min,
            100.0 * s.max
        )
    }

    /// The median size of the noise and its range, in %.
    fn noise_cell(&self) -> String {
        if self.noise.is_empty() {
            return "—".into();
        }
        let abs: Vec<f64> = self.noise.iter().map(|n| n.abs()).collect();
        let s = Spread::of(&self.noise);
        format!(
            "{:.1} % ({:+.1} … {:+.1})",
            100.0 * median(&mut abs.clone()),
            100.0 * s.min,
            100.0 * s.max
        )
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Verdict {
    Met,
    /// Not told by the wall figure, but the JVM's work costs it no more CPU and jpd's
    /// extra CPU, all taken from the JVM, would cost it at most the goal.
    MetByBound,
    NotMet,
    Undecided,
}

impl Verdict {
    /// The row's verdict from the wall figure's, the CPU figure's and the bound (jpd's
    /// extra CPU over the JVM's CPU rate).
    fn of(wall: Verdict, cpu: Verdict, bound: Option<f64>) -> Verdict {
        match (wall, cpu) {
            (Verdict::NotMet, _) | (_, Verdict::NotMet) => Verdict::NotMet,
            (Verdict::Met, Verdict::Met) => Verdict::Met,
            (_, Verdict::Met) if bound.is_some_and(|b| b <= MAX_SLOWDOWN) => Verdict::MetByBound,
            _ => Verdict::Undecided,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Verdict::Met => "**met**",
            Verdict::MetByBound => "**met** (by the CPU figure and the bound)",
            Verdict::NotMet => "**not met**",
            Verdict::Undecided => "not decidable",
        }
    }
}

/// One attack's row from its measure line, and its verdict.
pub fn row(label: &str, line: &Value) -> (String, Option<bool>) {
    let arms: Vec<Arm> = line["arms"]
        .as_array()
        .into_iter()
        .flatten()
        .map(Arm::of)
        .collect();
    let pairs = arms.len() / 2;
    let wall = Figure::of(&arms, |a| a.wall_ms);
    let cpu = Figure::of(&arms, |a| a.cpu_ms);
    let cores = |seen: bool, of: fn(&Arm) -> f64| {
        let mut v: Vec<f64> = arms.iter().filter(|a| a.seen == seen).map(of).collect();
        100.0 * median(&mut v)
    };
    let jpd = |seen: bool| cores(seen, |a| a.jpd_cpu);
    let attackers = |seen: bool| cores(seen, |a| a.attackers_cpu);
    let rounds = |a: &Arm| a.wall_ms.is_some();
    // The JVM's CPU rate in the seen arms (cores): what jpd's extra CPU is set against.
    let jvm_cores: Vec<f64> = arms
        .iter()
        .filter(|a| a.seen)
        .filter_map(|a| Some(a.cpu_ms? / a.wall_ms?))
        .collect();
    let extra = (jpd(true) - jpd(false)).max(0.0);
    let cores = (!jvm_cores.is_empty()).then(|| median(&mut jvm_cores.clone()));
    let bound = cores.map(|c| extra / 100.0 / c);
    let bound_cell = match (bound, cores) {
        (Some(b), Some(c)) => format!("{:.1} % (of {c:.2} cores)", 100.0 * b),
        _ => "—".into(),
    };
    let verdict = Verdict::of(wall.verdict(), cpu.verdict(), bound);
    let cell = format!(
        "| {label} | {pairs} ({}) | {} | {} | {} | {} | {:.0} % / {:.0} % | {:.1} % / {:.1} % | {bound_cell} | {} |\n",
        arms.iter().filter(|a| rounds(a)).count(),
        wall.cell(),
        wall.noise_cell(),
        cpu.cell(),
        cpu.noise_cell(),
        attackers(true),
        attackers(false),
        jpd(true),
        jpd(false),
        verdict.text()
    );
    let judged = match verdict {
        Verdict::Met | Verdict::MetByBound => Some(true),
        Verdict::NotMet => Some(false),
        Verdict::Undecided => None,
    };
    (cell, judged)
}

/// The table's head.
pub fn head() -> &'static str {
    "| attack | pairs (arms with rounds) | throughput per wall s, seen vs unseen | noise per wall s (unseen vs unseen) | throughput per JVM CPU s, seen vs unseen | noise per CPU s | attackers' CPU seen / unseen | jpd CPU seen / unseen | jpd's extra CPU over the JVM's | 5 % goal |\n\
     | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arms of `pairs` as (seen ms, unseen ms) per round, alternating which goes first.
    fn arms(pairs: &[(f64, f64)]) -> Vec<Arm> {
        let arm = |seen: bool, ms: f64| Arm {
            seen,
            wall_ms: Some(ms),
            cpu_ms: Some(ms),
            jpd_cpu: 0.0,
            attackers_cpu: 0.0,
        };
        pairs
            .iter()
            .enumerate()
            .flat_map(|(i, &(s, u))| {
                let (a, b) = (arm(true, s), arm(false, u));
                if i % 2 == 0 {
                    [a, b]
                } else {
                    [b, a]
                }
            })
            .collect()
    }

    fn verdict(pairs: &[(f64, f64)]) -> Verdict {
        Figure::of(&arms(pairs), |a| a.wall_ms).verdict()
    }

    #[test]
    fn the_goal_is_judged_from_the_pairs_and_their_spread() {
        // Seen as fast as unseen, pair after pair: met.
        let same = [
            (100.0, 101.0),
            (99.0, 100.0),
            (100.0, 100.0),
            (101.0, 100.0),
        ];
        assert!(verdict(&same) == Verdict::Met);
        // Seen 20 % slower every time: not met.
        let slower = [
            (120.0, 100.0),
            (121.0, 100.0),
            (119.0, 99.0),
            (120.0, 101.0),
        ];
        assert!(verdict(&slower) == Verdict::NotMet);
        // Pairs that disagree by more than the goal: not decidable.
        let noisy = [(130.0, 100.0), (80.0, 100.0), (100.0, 130.0), (100.0, 95.0)];
        assert!(verdict(&noisy) == Verdict::Undecided);
        // One pair has no spread to judge by.
        assert!(verdict(&[(100.0, 100.0)]) == Verdict::Undecided);
    }

    #[test]
    fn noise_compares_the_unseen_arms_of_adjacent_pairs() {
        let f = Figure::of(&arms(&[(100.0, 100.0), (100.0, 125.0)]), |a| a.wall_ms);
        // The second unseen arm took 25 % longer per round: 20 % less throughput.
        assert_eq!(f.noise.len(), 1);
        assert!(
            (f.noise[0] - (100.0 / 125.0 - 1.0)).abs() < 1e-9,
            "{:?}",
            f.noise
        );
        assert!((f.changes[1] - 0.25).abs() < 1e-9, "{:?}", f.changes);
    }
}
