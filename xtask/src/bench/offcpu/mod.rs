//! `cargo xtask bench offcpu`: what off-CPU time costs. Each part writes its own
//! subsection of BENCHMARKS.md's `offcpu` section.
//!
//! - `switch`: `jp_offcpu`'s ns per context switch above an EMPTY program the bench
//!   attaches itself to the same raw tracepoint (`sched_switch`), both read through the
//!   kernel's BPF run-time statistics over the same windows (the same switches), under a
//!   paced load of ~`JP_OFFCPU_SWITCHES` (20000) switches per second: a pipe ping-pong of
//!   this process (untracked: jpd does not track it) and a park/unpark ping-pong of a
//!   joined JVM (tracked), in alternating order, `JP_OFFCPU_ROUNDS` (6) rounds of
//!   `JP_OFFCPU_WINDOW_S` (10) s (`JP_OFFCPU_ARMS`, e.g. `untracked,tracked`, runs only
//!   those loads: for comparing program variants; the table then lacks the others). An empty `tp_btf` program on the same tracepoint is read
//!   beside them, when the kernel takes it.
//! - `jpd`: jpd's own CPU with `JP_CPU_JVMS` (20) JVMs × `JP_CPU_THREADS` (50) threads of
//!   light periodic work (the cpu bench's fleet), off-CPU on against off, alternating,
//!   `JP_OFFCPU_JPD_ROUNDS` (2) rounds of `JP_CPU_JPD_WINDOW_S` (30) s.
mod btf;
mod fleet;
mod load;
mod pingpong;
mod programs;
mod report;
mod switch;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::ValueEnum;

use super::cpu::today;
use super::harness::{env_num, Jpd};
use super::report::write_section_after;
use crate::build::Deliverables;
use crate::cmd::root;
use crate::setup::JDK17;
use switch::Setting;

/// The agent's file name in the `switch` part.
const AGENT_NAME: &str = "libjpagent-offcpu-bench.so";

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    Switch,
    Jpd,
}

pub fn run(out: &Deliverables, parts: &[Part]) -> Result<()> {
    let parts: Vec<Part> = if parts.is_empty() {
        Part::value_variants().to_vec()
    } else {
        parts.to_vec()
    };
    let dir = super::cpu::prepare()?;
    compile_switches(&dir)?;
    write_section_after(
        "offcpu",
        None,
        "## Off-CPU time: `cargo xtask bench offcpu`\n\n\
What the scheduler program of off-CPU time (`jp_offcpu`, on every context switch of the host) \
costs per switch, tracked and untracked, against an empty program at the same attach point; \
and jpd's own CPU with a fleet of JVMs, off-CPU on against off. Each subsection is written by \
its part (`cargo xtask bench offcpu switch|jpd`, both by default); arms side by side in one \
run, alternating, with their spread (min–max over rounds). This 2-core VM is shared with other \
builds and tests while the bench runs: only differences measured in the same run mean something.",
    )?;
    for part in parts {
        let t0 = Instant::now();
        let (name, body) = match part {
            Part::Switch => ("offcpu-switch", switch_part(out, &dir)?),
            Part::Jpd => ("offcpu-jpd", fleet::run(out, &dir)?),
        };
        let body = format!(
            "{body}\n_Measured {} (`date -u`); machine load average (1 min) {}; this part \
took {:.0} s._",
            today(),
            load_average(),
            t0.elapsed().as_secs_f64()
        );
        write_section_after(name, Some("offcpu"), &body)?;
    }
    Ok(())
}

fn switch_part(out: &Deliverables, dir: &Path) -> Result<String> {
    let rounds = env_num("JP_OFFCPU_ROUNDS", 6) as usize;
    let window = Duration::from_secs(env_num("JP_OFFCPU_WINDOW_S", 10));
    let socket = dir.join("jpd-offcpu.sock");
    let config = dir.join("jpd-offcpu.toml");
    // The agent under a name of the bench's own, which this jpd alone looks for: other
    // people's JVMs with the agent (tests on this shared machine) are not joined, so their
    // switches stay untracked in every arm.
    let agent_lib = dir.join(AGENT_NAME);
    std::fs::copy(&out.agent_lib, &agent_lib)?;
    // The cap raised out of the way: every tracked switch takes the whole path.
    std::fs::write(
        &config,
        format!(
            "[kernel]\noffcpu = true\noffcpu_max_switches_per_cpu_per_second = 1000000\n\n\
[usdt]\nscan_interval_ms = 500\nlibrary = \"{AGENT_NAME}\"\n"
        ),
    )?;
    let jpd = Jpd::start_with(out, &socket, Some(&config))?;
    let probes = switch::probes(&jpd)?;
    let setting = Setting {
        out,
        agent_lib: &agent_lib,
        dir,
        socket: &socket,
        window,
        round_trips: switch::round_trips(),
    };
    let load_before = load_average();
    let arms = switch::arms_chosen()?;
    let mut windows = Vec::new();
    for round in 0..rounds {
        // Rotating order: a drift of the machine hits every arm alike.
        for i in 0..arms.len() {
            let arm = arms[(i + round) % arms.len()];
            eprintln!(
                "xtask: bench offcpu switch: round {}/{rounds}, {}",
                round + 1,
                arm.label()
            );
            let w = switch::window(&setting, &probes, arm)?;
            eprintln!(
                "xtask: bench offcpu switch: {:?}: jp_offcpu − empty {:.0} ns/run, load share {:.0} %",
                arm,
                w.delta(),
                100.0 * w.load_share()
            );
            windows.push(w);
        }
    }
    drop(jpd);
    Ok(report::switch(&windows, &setting, &probes, &load_before))
}

/// The first field of /proc/loadavg.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

fn compile_switches(dir: &Path) -> Result<()> {
    let javac: PathBuf = Path::new(JDK17).join("bin/javac");
    crate::cmd::run(
        Command::new(javac)
            .args(["--release", "17", "-d"])
            .arg(dir)
            .arg(root().join("xtask/bench-inputs/offcpu/Switches.java")),
    )
}
