//! `jpctl diff BASE NEW`: compares two profiles read from files, without jpd.
//!
//! JVM profiles (jp-mct/1 JSON) are compared exactly: per calling context (the path of
//! methods from a thread's root) and per method, calls and bytecodes before and after. Two
//! runs of a deterministic program give the same counts, so any difference is a change of
//! the code or of its input; a CI can gate on it (`--fail-above`). Kernel profiles
//! (`jpctl kernel --json`) are samples, so they are compared by share.
//!
//! This module compares ([`jvm`], [`kernel`]) and reads the files; what the comparison
//! prints is [`crate::output::diff`]'s, the command line [`crate::cmd::diff`]'s.

pub mod jvm;
pub mod kernel;

use anyhow::{bail, Context};
use jp_mct::Mct;
use regex::Regex;
use serde::Serialize;

use kernel::{KernelFunction, KernelProfileIn};

/// What the gate checks and what the report leaves out.
#[derive(Clone, Debug, Default)]
pub struct DiffOptions {
    /// Fail when the whole tree's bytecodes, or a method's inclusive bytecodes, grew by more
    /// than this percentage (kernel: a function's share grew by more percentage points).
    pub fail_above: Option<f64>,
    /// Gate only methods (kernel: functions) whose name matches.
    pub method: Option<Regex>,
    /// Contexts and methods under this many inclusive bytecodes on both sides are ignored.
    pub min_bytecodes: u64,
    /// Fail when NEW has a calling context (kernel: a function) that BASE has not.
    pub fail_on_new: bool,
    /// Leave out subtrees whose root method matches (on both sides).
    pub ignore: Option<Regex>,
    /// Rows per table in the text report (0: all).
    pub limit: usize,
}

/// `[base, new]` pairs, as the JSON report shows them.
pub type Pair = [u64; 2];

#[derive(Serialize, Debug)]
pub struct Gate {
    pub passed: bool,
    pub causes: Vec<String>,
}

pub(crate) fn change(p: Pair) -> i128 {
    i128::from(p[1]) - i128::from(p[0])
}

pub(crate) fn growth_percent(p: Pair) -> Option<f64> {
    (p[0] > 0).then(|| (p[1] as f64 - p[0] as f64) / p[0] as f64 * 100.0)
}

// ---- reading the files ----

/// A profile file, by what it holds.
pub enum Profile {
    Jvm(Mct),
    Kernel(Vec<KernelFunction>),
}

/// Reads BASE or NEW: jp-mct/1 JSON, or a `jpctl kernel --json` snapshot. `label` names the
/// side in messages.
pub fn read_profile(path: &std::path::Path, label: &str) -> anyhow::Result<Profile> {
    let text =
        std::fs::read(path).with_context(|| format!("cannot read {label} {}", path.display()))?;
    let head = &text[..text.len().min(512)];
    let is_jvm = head.windows(b"jp-mct/1".len()).any(|w| w == b"jp-mct/1");
    if !is_jvm {
        if let Ok(k) = serde_json::from_slice::<KernelProfileIn>(&text) {
            if k.functions.is_empty() {
                bail!(
                    "{label} {} is an empty kernel profile (no functions sampled)",
                    path.display()
                );
            }
            return Ok(Profile::Kernel(
                k.functions
                    .into_iter()
                    .map(|f| KernelFunction {
                        name: f.name,
                        module: f.module,
                        samples: f.samples,
                    })
                    .collect(),
            ));
        }
    }
    let t = jp_mct::read_json(&text).map_err(|e| {
        anyhow::anyhow!(
            "{label} {}: {e} (jpctl diff reads jp-mct/1 JSON, as the agent's out= or `jpctl jvm export --format json` write, or `jpctl kernel --json`)",
            path.display()
        )
    })?;
    if t.nodes.len() < 2 {
        bail!(
            "{label} {} is an empty profile (no calling contexts: did the program run any profiled code? see the agent's include=/exclude=)",
            path.display()
        );
    }
    Ok(Profile::Jvm(t))
}

/// Refuses trees of different basic-block algorithms: their bytecode counts measure
/// different things, so every context would "change".
pub fn check_same_bba(base: &Mct, new: &Mct) -> anyhow::Result<()> {
    if base.bba != new.bba {
        bail!(
            "BASE was counted with bba={} and NEW with bba={}: their bytecode counts are not comparable; profile both runs with the same bba= agent option",
            base.bba,
            new.bba
        );
    }
    Ok(())
}
