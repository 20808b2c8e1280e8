//! The whole-run table: each program's JVM timed from start to exit, instrumented against
//! uninstrumented: what a short-lived JVM pays (start-up, class rewriting, the run, writing
//! the profile).
//!
//! Each round runs every program in every mode (no agent, bba=default,
//! bba=precise) in rotating order, so that drifts of a shared machine hit all
//! modes alike; the table holds medians over rounds and their ratios.
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{agent_arg, Jdk, Mode, Program, MODES};
use crate::bench::harness::children_cpu_seconds;
use crate::bench::report::median;
use crate::build::Deliverables;

const ROUNDS: usize = 3;

/// Start-up rewriting, as the agent's `stats=true` line reports it.
#[derive(Default, Clone)]
struct RewriteStats {
    classes: f64,
    rewrite_ms: f64,
    classes_per_s: f64,
}

#[derive(Default)]
struct Cell {
    seconds: Vec<f64>,
    /// CPU time of the JVM process (all threads: JIT compilers and GC included).
    cpu_seconds: Vec<f64>,
    rewrites: Vec<RewriteStats>,
}

/// The whole-run section of BENCHMARKS.md (its body), after running it on both JDKs.
pub fn run(out: &Deliverables, dir: &Path, jdks: &[Jdk], programs: &[Program]) -> Result<String> {
    let mut sections = String::new();
    for (label, java) in jdks {
        let mut cells: BTreeMap<(usize, Mode), Cell> = BTreeMap::new();
        for round in 0..ROUNDS {
            for (p, program) in programs.iter().enumerate() {
                for i in 0..MODES.len() {
                    let mode = MODES[(i + round + p) % MODES.len()];
                    let (secs, cpu, stats) = run_once(java, out, dir, program, mode)?;
                    let cell = cells.entry((p, mode)).or_default();
                    cell.seconds.push(secs);
                    cell.cpu_seconds.push(cpu);
                    cell.rewrites.extend(stats);
                }
            }
            eprintln!(
                "xtask: bench jvm whole {label}: round {}/{ROUNDS} done",
                round + 1
            );
        }
        sections.push_str(&table(label, programs, &mut cells));
    }
    Ok(format!(
        "### Whole run (what a short-lived JVM pays)\n\n\
Each program run once per JVM without \
the agent and with `-agentpath:libjpagent.so=bba=…,stats=true` writing a JSON profile at exit (javac is JDK code, so its run adds \
`include=com.sun.tools.javac`); \
{ROUNDS} rounds, modes in rotating order within a round; wall time and CPU time (all the \
JVM's threads, JIT compilers and GC included) of the whole JVM run (start-up, class \
rewriting, the run, writing the profile), medians over rounds. Slowdown = median with the \
agent / median without; CPU time is the steadier of the two on a shared machine.\n{sections}"
    ))
}

fn table(label: &str, programs: &[Program], cells: &mut BTreeMap<(usize, Mode), Cell>) -> String {
    let mut s = format!(
        "\n#### {label}\n\n| program | wall no agent (s) | wall default | wall precise | CPU no agent (s) | CPU default | CPU precise | classes rewritten | rewrite at start-up (ms) | classes/s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    // Sums of log slowdowns: wall default, wall precise, CPU default, CPU precise.
    let mut logs = [0.0f64; 4];
    for (p, program) in programs.iter().enumerate() {
        let mut med = |m: Mode, cpu: bool| {
            cells
                .get_mut(&(p, m))
                .map(|c| {
                    median(if cpu {
                        &mut c.cpu_seconds
                    } else {
                        &mut c.seconds
                    })
                })
                .unwrap_or(f64::NAN)
        };
        let (off, d, pr) = (
            med(Mode::Off, false),
            med(Mode::Default, false),
            med(Mode::Precise, false),
        );
        let (coff, cd, cpr) = (
            med(Mode::Off, true),
            med(Mode::Default, true),
            med(Mode::Precise, true),
        );
        let rw = cells
            .get(&(p, Mode::Default))
            .map(|c| c.rewrites.clone())
            .unwrap_or_default();
        let mut classes: Vec<f64> = rw.iter().map(|r| r.classes).collect();
        let mut ms: Vec<f64> = rw.iter().map(|r| r.rewrite_ms).collect();
        let mut cps: Vec<f64> = rw.iter().map(|r| r.classes_per_s).collect();
        for (i, r) in [d / off, pr / off, cd / coff, cpr / coff]
            .into_iter()
            .enumerate()
        {
            logs[i] += r.ln();
        }
        s.push_str(&format!(
            "| {} | {off:.2} | {:.2}× | {:.2}× | {coff:.2} | {:.2}× | {:.2}× | {:.0} | {:.0} | {:.0} |\n",
            program.name,
            d / off,
            pr / off,
            cd / coff,
            cpr / coff,
            median(&mut classes),
            median(&mut ms),
            median(&mut cps),
        ));
    }
    let g = |i: usize| (logs[i] / programs.len() as f64).exp();
    s.push_str(&format!(
        "| **geometric mean** | | **{:.2}×** | **{:.2}×** | | **{:.2}×** | **{:.2}×** | | | |\n",
        g(0),
        g(1),
        g(2),
        g(3)
    ));
    s
}

fn run_once(
    java: &Path,
    out: &Deliverables,
    dir: &Path,
    p: &Program,
    mode: Mode,
) -> Result<(f64, f64, Option<RewriteStats>)> {
    let mut c = Command::new(java);
    c.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let bba = mode.bba();
    if let Some(bba) = bba {
        let profile = dir.join(format!("{}-{bba}.json", p.key));
        c.arg(agent_arg(
            out,
            bba,
            &profile,
            &format!(",stats=true{}", p.agent_options),
        ));
    }
    c.args(&p.args);
    let cpu0 = children_cpu_seconds();
    let t0 = Instant::now();
    let o = c
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", java.display()))?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = children_cpu_seconds() - cpu0;
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        bail!("{} ({mode:?}) failed with {}:\n{stderr}", p.name, o.status);
    }
    Ok((secs, cpu, bba.and_then(|_| parse_stats(&stderr))))
}

fn parse_stats(stderr: &str) -> Option<RewriteStats> {
    let line = stderr.lines().find(|l| l.contains("rewrite_ms="))?;
    let get = |k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse::<f64>().ok())
    };
    Some(RewriteStats {
        classes: get("classes_rewritten")?,
        rewrite_ms: get("rewrite_ms")?,
        classes_per_s: get("classes_per_s")?,
    })
}
