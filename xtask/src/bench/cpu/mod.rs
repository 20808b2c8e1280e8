//! `cargo xtask bench cpu`: what CPU per exact context costs, in its three
//! places. Each part writes its own subsection of BENCHMARKS.md's `cpu` section.
//!
//! - `sampler`: `jp_sample`'s ns per sample from the kernel's BPF run-time statistics,
//!   with and without the join, under the same load (CpuLoad threads spinning). Arms, in
//!   rotating order every round, each with a jpd of its own: the JVM with the agent
//!   (`profiler=usdt`) joined, its threads publishing on the heap (the default) or in
//!   slots (`publish=slot`); the same JVM with jpd's `kernel.jvm_contexts = false` (the
//!   one JP_JVM_PIDS lookup, a miss); the same program without the agent (a miss too); no
//!   JVM at all (the floor: mostly idle samples, which return before the lookup).
//! - `agent`: CostModel's ns per operation (the jvm bench's harness) with `profiler=usdt`
//!   under a joined jpd and `publish=false` (reports sent, nothing published), with
//!   `profiler=usdt` and no jpd (no tracer, so threads do not publish: only the tests on
//!   each change), and under a joined jpd publishing, on the heap (the default) and in
//!   slots (`publish=slot`), read by the sampler, reports sent.
//! - `programs`: real programs at steady state (the jvm bench's SteadyBench: rhino, jython,
//!   Xalan, Lucene), `profiler=usdt` joined by a jpd, `publish=false` against the default
//!   (the heap) and `publish=slot`, in `-Xbatch` sets of three JVMs: what publishing costs
//!   where a service pays it.
//! - `jpd`: jpd's own CPU and memory with JVMS JVMs × THREADS threads of light periodic
//!   work (calls, then a sleep), the join on against the join off, jpd restarted between
//!   windows while the JVMs keep running; then the same JVMs without the agent.
//!
//! Sizes from the environment: `JP_CPU_ROUNDS` (sampler rounds, 6), `JP_CPU_WINDOW_S`
//! (sampler window, 10), `JP_CPU_AGENT_ROUNDS` (8), `JP_CPU_JVMS` (20), `JP_CPU_THREADS`
//! (50), `JP_CPU_JPD_WINDOW_S` (30), `JP_CPU_JPD_ROUNDS` (2 per arm), `JP_CPU_PROGRAM_PAIRS`
//! (4 sets), `JP_CPU_PROGRAMS` (e.g. `jython,rhino`: only those; all four by default).
mod agent;
pub(super) mod jpd;
pub(super) mod jvms;
mod programs;
mod sampler;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Result;
use clap::ValueEnum;

use super::report::{median, write_section_after};
use crate::build::Deliverables;
use crate::cmd::root;
use crate::setup::JDK17;

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    Sampler,
    Agent,
    Programs,
    Jpd,
}

/// The feature's goal: publishing costs at most 5 % over the agent without it.
const GOAL_RATIO: f64 = 1.05;

pub fn run(out: &Deliverables, parts: &[Part]) -> Result<()> {
    let parts: Vec<Part> = if parts.is_empty() {
        Part::value_variants().to_vec()
    } else {
        parts.to_vec()
    };
    let dir = prepare()?;
    write_section_after(
        "cpu",
        None,
        "## CPU per exact context: `cargo xtask bench cpu`\n\n\
What CPU per exact context's join costs where it runs: in the kernel sampler (`jp_sample`), in the agent \
(publishing the current context, in a loop and in real programs), in jpd (20 JVMs × 50 \
threads joined). Each subsection is \
written by its part (`cargo xtask bench cpu sampler|agent|programs|jpd`, all by default); arms side by \
side in one run, in rotating order, with their spread (min–max over rounds). This 2-core VM is \
shared with other builds and tests while the bench runs: only differences measured in the \
same run mean something.",
    )?;
    for part in parts {
        let t0 = Instant::now();
        let (name, body) = match part {
            Part::Sampler => ("cpu-sampler", sampler::run(out, &dir)?),
            Part::Agent => ("cpu-agent", agent::run(out, &dir)?),
            Part::Programs => ("cpu-programs", programs::run(out)?),
            Part::Jpd => ("cpu-jpd", jpd::run(out, &dir)?),
        };
        let body = format!(
            "{body}\n_Measured {} (`date -u`); this part took {:.0} s._",
            today(),
            t0.elapsed().as_secs_f64()
        );
        write_section_after(name, Some("cpu"), &body)?;
    }
    Ok(())
}

pub(super) fn today() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A scratch directory with CpuLoad and the jvm bench's CostModel compiled.
pub(super) fn prepare() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("jp-bench-cpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let javac = Path::new(JDK17).join("bin/javac");
    let jvm = root().join("xtask/bench-inputs/jvm");
    crate::cmd::run(
        Command::new(javac)
            .args(["--release", "17", "-d"])
            .arg(&dir)
            .arg(root().join("xtask/bench-inputs/cpu/CpuLoad.java"))
            .arg(jvm.join("CostModel.java"))
            .arg(jvm.join("Rounds.java")),
    )?;
    Ok(dir)
}

fn java() -> PathBuf {
    Path::new(JDK17).join("bin/java")
}

pub(super) fn min_max(v: &[f64]) -> (f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// `median [min–max]` with `digits` decimals.
pub(super) fn spread_cell(v: &[f64], digits: usize) -> String {
    let (lo, hi) = min_max(v);
    format!(
        "{:.digits$} [{lo:.digits$}–{hi:.digits$}]",
        median(&mut v.to_vec())
    )
}
