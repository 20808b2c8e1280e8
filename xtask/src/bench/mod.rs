//! `cargo xtask bench …`: measurements written to BENCHMARKS.md. Each benchmark
//! measures jp and its baseline side by side in one run and reports medians and
//! ratios; absolute times on shared machines are noise.
use anyhow::Result;
use clap::Subcommand;

mod cgroups;
mod fleet;
mod floor;
mod jvm;
mod kernel;
mod report;
mod usdt;

#[derive(Subcommand, Clone, Copy)]
pub enum Which {
    /// jp's kernel sampling cost against `perf record -e cpu-clock -a`.
    Kernel,
    /// The JVM agent's slowdown on real programs, both JDKs and BBAs; class rewriting speed.
    Jvm,
    /// The live JVM view: report-point cost with and without jpd, jpd's ingestion speed
    /// and memory per node, delay from a report to `jpctl jvm top`.
    Usdt,
    /// jpd on a loaded fleet host: many JVMs reporting, kernel sampling, kill -9 and
    /// restart; jpd's CPU and memory over time, scrape and query latency.
    Fleet,
}

pub fn run(which: Which) -> Result<()> {
    crate::setup::run()?;
    let out = crate::build::run()?;
    match which {
        Which::Kernel => kernel::run(&out),
        Which::Jvm => jvm::run(&out),
        Which::Usdt => usdt::run(&out),
        Which::Fleet => fleet::run(&out),
    }
}
