//! `cargo xtask bench …`: measurements written to BENCHMARKS.md. Each benchmark
//! measures jp and its baseline side by side in one run and reports medians and
//! ratios; absolute times on shared machines are noise.
use anyhow::{Context, Result};
use clap::Subcommand;

mod cgroups;
mod cpu;
mod fleet;
mod floor;
mod harness;
mod hostile;
mod jvm;
mod kernel;
mod offcpu;
mod report;
mod usdt;
mod windows;

#[derive(Subcommand, Clone)]
pub enum Which {
    /// jp's kernel sampling cost against `perf record -e cpu-clock -a`.
    Kernel {
        /// Parts to run (all by default): events, idle, workload.
        #[arg(value_enum)]
        parts: Vec<kernel::Part>,
    },
    /// The JVM agent's cost, both JDKs and BBAs: real programs whole and at steady state,
    /// C2 compile time, ns per operation, memory and time per calling context.
    Jvm {
        /// Parts to run (all by default): whole, steady, cost, contexts.
        #[arg(value_enum)]
        parts: Vec<jvm::Part>,
        /// Only this JDK (17 or 25); repeat for both, which is the default.
        #[arg(long, value_parser = clap::value_parser!(u32).range(17..=25))]
        jdk: Vec<u32>,
    },
    /// The live JVM view: report-point cost with and without jpd, jpd's ingestion speed
    /// and memory per node, delay from a report to `jpctl jvm top`.
    Usdt,
    /// jpd on a loaded fleet host: many JVMs reporting, kernel sampling, kill -9 and
    /// restart; jpd's CPU and memory over time, scrape and query latency. And the fleet
    /// rotation's cost: dormant JVMs with the rotation on and off in turns.
    Fleet {
        /// Parts to run (all by default): load, rotation.
        #[arg(value_enum)]
        parts: Vec<fleet::Part>,
    },
    /// CPU per exact context: the sampler's ns per sample with and without the
    /// join, the agent's cost of publishing its contexts, jpd's CPU with 20 JVMs joined.
    Cpu {
        /// Parts to run (all by default): sampler, agent, programs, jpd.
        #[arg(value_enum)]
        parts: Vec<cpu::Part>,
    },
    /// Off-CPU time: the scheduler program's ns per context switch above an empty program
    /// at the same attach point, tracked and untracked; jpd's CPU with a fleet, off-CPU on/off.
    Offcpu {
        /// Parts to run (all by default): switch, jpd.
        #[arg(value_enum)]
        parts: Vec<offcpu::Part>,
    },
    /// Hostile load: each attack of the `hostile` suite beside a real JVM; jpd's peak
    /// memory and CPU, the real JVM's rounds during the attack against before it.
    Hostile {
        /// One run per attack instead of three.
        #[arg(long)]
        quick: bool,
    },
    /// Exact windows: a dormant agent's cost, opening and closing a window (wall,
    /// safepoints, JIT), the program inside a window, repeated windows, attach to counting.
    Windows {
        /// Parts to run (all by default): dormant, switching, repeats, attach.
        #[arg(value_enum)]
        parts: Vec<windows::Part>,
        /// Only this JDK (17 or 25); repeat for both, which is the default.
        #[arg(long, value_parser = clap::value_parser!(u32).range(17..=25))]
        jdk: Vec<u32>,
        /// A smoke run: rhino only, few rounds and cycles, short windows; its tables go to
        /// stdout, not to BENCHMARKS.md.
        #[arg(long)]
        quick: bool,
        /// The agent library to measure (no build): the one `cargo xtask build` made
        /// otherwise.
        #[arg(long)]
        agent: Option<std::path::PathBuf>,
    },
}

/// `clock_gettime(clock)` in ns.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the one we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn run(which: Which) -> Result<()> {
    match which {
        Which::Kernel { parts } => kernel::run(&everything()?, &parts),
        Which::Jvm { parts, jdk } => jvm::run(&everything()?, &parts, &jdk),
        Which::Usdt => usdt::run(&everything()?),
        Which::Fleet { parts } => fleet::run(&everything()?, &parts),
        Which::Cpu { parts } => cpu::run(&everything()?, &parts),
        Which::Offcpu { parts } => offcpu::run(&everything()?, &parts),
        Which::Hostile { quick } => hostile::run(&everything()?, quick),
        Which::Windows {
            parts,
            jdk,
            quick,
            agent,
        } => {
            // It runs only the agent: built alone, or handed over (as its test does).
            let lib = match agent {
                Some(lib) => lib,
                None => {
                    crate::setup::run()?;
                    let agent = [
                        crate::build::Deliverable::AgentLib,
                        crate::build::Deliverable::AgentJar,
                    ];
                    let built = crate::build::build(&agent)?;
                    built
                        .into_iter()
                        .next()
                        .context("the agent was not built")?
                }
            };
            windows::run(&lib, &parts, &jdk, quick)
        }
    }
}

/// Set-up and every deliverable built.
fn everything() -> Result<crate::build::Deliverables> {
    crate::setup::run()?;
    crate::build::run()
}
