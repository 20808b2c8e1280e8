//! The `dormant` part: what a JVM pays for carrying the agent dormant, against the same
//! program without it. Steady state from pairs of `-Xbatch` SteadyBench JVMs (the jvm
//! bench's harness, CPU time of the working thread; `-Xbatch` so that both JVMs of a pair
//! compile the same methods from the same profiles, as the cpu bench pairs its arms), and
//! whole runs' CPU (all threads) from the jvm bench's whole-run commands.
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::{chosen, ratio_cell, verdict, Bench};
use crate::bench::harness::children_cpu_seconds;
use crate::bench::jvm::{rounds, Program};
use crate::bench::report::{median, Spread};

const STEADY_MEDIAN: f64 = 1.01;
const STEADY_ANY: f64 = 1.03;
const WHOLE_CPU: f64 = 1.02;

/// One program's sets: (no agent, dormant) ms a round, and whole runs' CPU seconds.
#[derive(Default)]
struct Sets {
    steady: Vec<[f64; 2]>,
    whole: Vec<[f64; 2]>,
}

/// Median of the measured rounds (ms) of one `-Xbatch` SteadyBench JVM.
fn steady(bench: &Bench, java: &std::path::Path, program: &Program, dormant: bool) -> Result<f64> {
    let mut args = vec![
        "-Xbatch".to_string(),
        format!("-Drounds.jitQuiet={}", rounds::JIT_QUIET_ROUNDS),
    ];
    if dormant {
        args.push(bench.dormant_arg(program));
    }
    let args = program.steady_command(args)?;
    let r = rounds::run(java, &bench.dir, &args)
        .with_context(|| format!("{} steady, dormant={dormant}", program.key))?;
    Ok(r.median() / 1e6)
}

/// CPU seconds (all the JVM's threads) of one whole run of the program.
fn whole(bench: &Bench, java: &std::path::Path, program: &Program, dormant: bool) -> Result<f64> {
    let mut c = Command::new(java);
    c.current_dir(&bench.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if dormant {
        c.arg(bench.dormant_arg(program));
    }
    c.args(&program.args);
    let cpu0 = children_cpu_seconds();
    let o = c.output().context("cannot run java")?;
    let cpu = children_cpu_seconds() - cpu0;
    if !o.status.success() {
        bail!(
            "{} whole run, dormant={dormant}: {}\n{}",
            program.key,
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(cpu)
}

pub(super) fn run(bench: &Bench) -> Result<String> {
    let sets = bench.size("DORMANT_SETS", 4, 1) as usize;
    let whole_pairs = bench.size("WHOLE_PAIRS", 3, 1) as usize;
    let programs = chosen(bench, &[]);
    let mut tables = String::new();
    let mut goals = String::new();
    for (j, (label, java)) in bench.jdks.iter().enumerate() {
        let mut all: Vec<Sets> = Vec::new();
        for (p, program) in programs.iter().enumerate() {
            let mut s = Sets::default();
            for set in 0..sets {
                eprintln!(
                    "xtask: bench windows dormant {label}: {} set {}/{sets}",
                    program.key,
                    set + 1
                );
                // The arm that runs first alternates from set to set.
                let first_dormant = (set + p + j) % 2 == 1;
                let mut ms = [0.0; 2];
                for dormant in [first_dormant, !first_dormant] {
                    ms[usize::from(dormant)] = steady(bench, java, program, dormant)?;
                }
                s.steady.push(ms);
                for _ in 0..whole_pairs {
                    let mut cpu = [0.0; 2];
                    for dormant in [first_dormant, !first_dormant] {
                        cpu[usize::from(dormant)] = whole(bench, java, program, dormant)?;
                    }
                    s.whole.push(cpu);
                }
            }
            all.push(s);
        }
        let (table, goal) = table(label, &programs, &all);
        tables.push_str(&table);
        goals.push_str(&goal);
    }
    Ok(format!(
        "### Dormant: the agent loaded, no window (what every JVM pays)\n\n\
Pairs of JVMs, one without the agent and one with `mode=dormant`, the order alternating \
from set to set. Steady state: the jvm bench's `SteadyBench` with `-Xbatch` (both JVMs of a \
pair compile the same methods from the same profiles), its warm-up until the JIT is quiet, \
then the median of {} measured rounds, CPU time of the working thread. Whole run: the jvm \
bench's whole-run command of the program, CPU time of the whole JVM (all threads, start-up \
included), {whole_pairs} pairs a set. {sets} sets a program. Ratio = dormant / no agent \
within a set (or pair); cells: median [min–max] over sets (pairs). The range is the noise: \
when it spans more than the distance of the median from 1, the noise is bigger than the \
effect.\n{tables}\n\
Goals: steady state dormant / no agent ≤ {STEADY_MEDIAN} at the median and no set above \
{STEADY_ANY}; whole-run CPU ≤ {WHOLE_CPU}× at the median.\n{goals}",
        rounds::MEASURED
    ))
}

/// The JDK's table and its goal lines.
fn table(label: &str, programs: &[&Program], all: &[Sets]) -> (String, String) {
    let mut s = format!(
        "\n#### {label}\n\n| program | round no agent (ms) | steady dormant / no agent | sets above {STEADY_ANY} | whole-run CPU no agent (s) | whole-run CPU dormant / no agent | noise vs effect |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n"
    );
    let mut goals = String::new();
    let (mut steady_all, mut whole_all) = (Vec::new(), Vec::new());
    for (program, sets) in programs.iter().zip(all) {
        let steady: Vec<f64> = sets.steady.iter().map(|r| r[1] / r[0]).collect();
        let whole: Vec<f64> = sets.whole.iter().map(|r| r[1] / r[0]).collect();
        let (st, wh) = (Spread::of(&steady), Spread::of(&whole));
        let over = steady.iter().filter(|r| **r > STEADY_ANY).count();
        let base_ms = median(&mut sets.steady.iter().map(|r| r[0]).collect::<Vec<_>>());
        let base_cpu = median(&mut sets.whole.iter().map(|r| r[0]).collect::<Vec<_>>());
        s.push_str(&format!(
            "| {} | {base_ms:.1} | {} | {over} of {} | {base_cpu:.2} | {} | {} |\n",
            program.name,
            ratio_cell(&st),
            steady.len(),
            ratio_cell(&wh),
            noise_note(&st, &wh),
        ));
        steady_all.extend(steady);
        whole_all.extend(whole);
    }
    let (st, wh) = (Spread::of(&steady_all), Spread::of(&whole_all));
    let over = steady_all.iter().filter(|r| **r > STEADY_ANY).count();
    goals.push_str(&format!(
        "- {label}: steady median {:.3} ≤ {STEADY_MEDIAN}: {}; sets above {STEADY_ANY}: {over} of {}: {}; whole-run CPU median {:.3} ≤ {WHOLE_CPU}: {} (all sets and pairs of all programs: steady {}, whole {}).\n",
        st.median,
        verdict(st.median <= STEADY_MEDIAN),
        steady_all.len(),
        verdict(over == 0),
        wh.median,
        verdict(wh.median <= WHOLE_CPU),
        ratio_cell(&st),
        ratio_cell(&wh),
    ));
    (s, goals)
}

/// Says when a figure's range (its noise) is wider than its distance from 1 (its effect).
fn noise_note(steady: &Spread, whole: &Spread) -> String {
    let noisy = |s: &Spread| (s.max - s.min) > (s.median - 1.0).abs();
    match (noisy(steady), noisy(whole)) {
        (true, true) => "noise > effect (both)".to_string(),
        (true, false) => "noise > effect (steady)".to_string(),
        (false, true) => "noise > effect (whole run)".to_string(),
        (false, false) => "effect > noise".to_string(),
    }
}
