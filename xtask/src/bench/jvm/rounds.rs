//! Running one harness JVM (`Rounds.java` prints a line per round) and summing up its
//! measured rounds: the median, the spread (the noise) and whether the rounds had settled.
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::bench::report::{median, Spread};

/// Warm-up of every harness: at least this many rounds and this long, before `MEASURED`.
pub const WARMUP_ROUNDS: u32 = 10;
pub const WARMUP_MS: u32 = 2000;
pub const MEASURED: u32 = 8;

/// The measured (last) rounds of one harness JVM, and what else it printed.
pub struct Rounds {
    /// CPU time of the working thread per measured round, in ns.
    pub cpu_ns: Vec<f64>,
    pub warmup: usize,
    /// The JIT was quiet when the warm-up ended (`-Drounds.jitQuiet`); None if not asked.
    pub jit_quiet: Option<bool>,
    pub stdout: String,
}

impl Rounds {
    pub fn median(&self) -> f64 {
        median(&mut self.cpu_ns.clone())
    }

    /// (max − min) / median of the measured rounds: the run-to-run noise.
    pub fn spread(&self) -> f64 {
        let max = self.cpu_ns.iter().cloned().fold(f64::NAN, f64::max);
        let min = self.cpu_ns.iter().cloned().fold(f64::NAN, f64::min);
        (max - min) / self.median()
    }

    /// Median of the second half of the measured rounds over that of the first, minus 1:
    /// near 0 when the rounds had settled, clearly negative while still warming up.
    pub fn drift(&self) -> f64 {
        let half = self.cpu_ns.len() / 2;
        let first = median(&mut self.cpu_ns[..half].to_vec());
        let second = median(&mut self.cpu_ns[half..].to_vec());
        second / first - 1.0
    }
}

/// Runs `java ARGS` in `dir` and parses its rounds; fails if the JVM fails.
pub fn run(java: &Path, dir: &Path, args: &[String]) -> Result<Rounds> {
    let o = Command::new(java)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", java.display()))?;
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    if !o.status.success() {
        bail!(
            "{} {} failed with {}:\n{stdout}\n{}",
            java.display(),
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let mut all = Vec::new();
    let mut summary = None;
    let mut jit_quiet = None;
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["round", _, "cpu_ns", cpu, "wall_ns", _] => all.push(cpu.parse::<f64>()?),
            ["rounds", "warmup", warm, "measured", measured, rest @ ..] => {
                summary = Some((warm.parse::<usize>()?, measured.parse::<usize>()?));
                if let Some(i) = rest.iter().position(|x| *x == "jit_quiet") {
                    jit_quiet = rest.get(i + 1).map(|v| *v == "true");
                }
            }
            _ => {}
        }
    }
    let Some((warmup, measured)) = summary else {
        bail!("{}: no `rounds` summary line in:\n{stdout}", args.join(" "));
    };
    if all.len() != warmup + measured || measured < 2 {
        bail!(
            "{}: {} rounds printed, expected {warmup} + {measured}",
            args.join(" "),
            all.len()
        );
    }
    Ok(Rounds {
        cpu_ns: all.split_off(warmup),
        warmup,
        jit_quiet,
        stdout,
    })
}

/// Rounds in a row with the JIT quiet that end the steady-state warm-up (Rounds.java).
pub const JIT_QUIET_ROUNDS: u32 = 3;

/// The harness's fixed arguments: warm-up rounds, warm-up ms, measured rounds.
pub fn schedule() -> [String; 3] {
    [
        WARMUP_ROUNDS.to_string(),
        WARMUP_MS.to_string(),
        MEASURED.to_string(),
    ]
}

/// Ratio with its noise: `4.21× ±6%`, ± half the range of the measured rounds (the larger
/// of the two runs').
pub fn ratio_cell(with: &Rounds, without: &Rounds) -> String {
    format!(
        "{:.2}× ±{:.0}%",
        with.median() / without.median(),
        50.0 * with.spread().max(without.spread())
    )
}

/// One arm's figures over its JVMs: the median and the range.
pub type Jvms = Spread;

impl Jvms {
    /// `self − other`: the medians' difference, with the widest range the JVMs allow.
    pub fn minus(&self, other: &Jvms) -> Jvms {
        Jvms {
            median: self.median - other.median,
            min: self.min - other.max,
            max: self.max - other.min,
        }
    }

    /// `self / without`: the medians' ratio, with the widest range the JVMs allow (fastest
    /// with over slowest without, slowest with over fastest without).
    pub fn over(&self, without: &Jvms) -> Jvms {
        Jvms {
            median: self.median / without.median,
            min: self.min / without.max,
            max: self.max / without.min,
        }
    }

    pub fn cell(&self) -> String {
        format!("{:.2} [{:.2}–{:.2}]", self.median, self.min, self.max)
    }

    /// `1.37× [0.90–2.10]`: a ratio (see [`Jvms::over`]).
    pub fn cell_ratio(&self) -> String {
        format!("{:.2}× [{:.2}–{:.2}]", self.median, self.min, self.max)
    }

    pub fn cell_signed(&self) -> String {
        format!("{:+.2} [{:+.2}…{:+.2}]", self.median, self.min, self.max)
    }

    /// The verdict on "at most `limit`": met or not only when the whole range says so.
    pub fn at_most(&self, limit: f64) -> String {
        let what = if self.max <= limit {
            "met"
        } else if self.min > limit {
            "**not met**"
        } else if self.median <= limit {
            "met at the median, not over the JVMs' whole range"
        } else {
            "**not met** at the median, not over the JVMs' whole range"
        };
        format!("{what} ({})", self.cell_signed().replace(" [", " ns ["))
    }
}
