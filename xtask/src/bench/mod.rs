//! `cargo xtask bench …`: measurements written to BENCHMARKS.md. Each benchmark
//! measures jp and its baseline side by side in one run and reports medians and
//! ratios; absolute times on shared machines are noise.
use anyhow::Result;
use clap::Subcommand;

mod jvm;
mod kernel;
mod report;

#[derive(Subcommand, Clone, Copy)]
pub enum Which {
    /// jp's kernel sampling cost against `perf record -e cpu-clock -a`.
    Kernel,
    /// The JVM agent's slowdown on real programs, both JDKs and BBAs; class rewriting speed.
    Jvm,
}

pub fn run(which: Which) -> Result<()> {
    crate::setup::run()?;
    let out = crate::build::run()?;
    match which {
        Which::Kernel => kernel::run(&out),
        Which::Jvm => jvm::run(&out),
    }
}
