//! The entry table: what a call costs with today's method entry (the thread's state found
//! by a lookup on every call) against an entry handed the caller's context as an argument
//! (CCCP's idea), both instrumented by hand (`jvm-entry/jp/rt/EntryCost.java`) and timed
//! side by side in one JVM, so that the between-JVM spread that hides small effects in the
//! other tables does not enter the comparison. It measures a design, not the agent's
//! rewriting: the agent does not pass contexts yet.
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::{met, Jdk};
use crate::bench::report::median;
use crate::build::Deliverables;
use crate::cmd::root;
use crate::setup::JDK17;

/// (EntryCost's operation, what it is).
const OPS: [(&str, &str); 2] = [
    ("static", "tiny static call"),
    ("recursion", "call in fib(20)"),
];
const ARMS: [&str; 4] = ["none", "today", "passed", "kept"];
/// Warm-up rounds, then as many measured rounds, of each arm in each JVM.
const ROUNDS: u32 = 21;
/// JVMs per operation: the arms are compared inside each; the table pools their rounds.
const JVMS: usize = 3;

pub fn run(out: &Deliverables, dir: &Path, jdks: &[Jdk]) -> Result<String> {
    let classes = compile(out, dir)?;
    let mut sections = String::new();
    let mut verdict = String::new();
    for (label, java) in jdks {
        sections.push_str(&format!(
            "\n#### {label}\n\n| operation | none (ns) | today − none | passed − none | kept − none | today − none, per JVM | passed − none, per JVM | kept − none, per JVM |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        ));
        for (op, what) in OPS {
            // pooled[arm]: every measured round of every JVM; per_jvm[arm]: each JVM's median.
            let mut pooled: [Vec<f64>; 4] = Default::default();
            let mut per_jvm: [Vec<f64>; 4] = Default::default();
            for _ in 0..JVMS {
                let rounds = run_one(java, out, &classes, op)?;
                for (a, r) in rounds.into_iter().enumerate() {
                    per_jvm[a].push(median(&mut r.clone()));
                    pooled[a].extend(r);
                }
            }
            let m: Vec<f64> = pooled.iter_mut().map(|r| median(r)).collect();
            let extra = |arm: usize| -> String {
                let d: Vec<f64> = (0..JVMS).map(|j| per_jvm[arm][j] - per_jvm[0][j]).collect();
                let lo = d.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = d.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("{lo:+.2} … {hi:+.2}")
            };
            sections.push_str(&format!(
                "| {what} | {:.2} | {:+.2} | {:+.2} | {:+.2} | {} | {} | {} |\n",
                m[0],
                m[1] - m[0],
                m[2] - m[0],
                m[3] - m[0],
                extra(1),
                extra(2),
                extra(3)
            ));
            if op == "static" {
                verdict.push_str(&format!(
                    "- {label}: tiny static call at most 2 ns more than none: today's entry {} ({:+.2} ns); passed {} ({:+.2} ns); kept {} ({:+.2} ns).\n",
                    met(m[1] - m[0] <= 2.0),
                    m[1] - m[0],
                    met(m[2] - m[0] <= 2.0),
                    m[2] - m[0],
                    met(m[3] - m[0] <= 2.0),
                    m[3] - m[0]
                ));
            }
        }
        eprintln!("xtask: bench jvm entry {label} done");
    }
    Ok(format!(
        "### Method entry: today's against the caller's context passed (ns per call)\n\n\
`EntryCost` (in `xtask/bench-inputs/jvm-entry/`, package `jp.rt` on the boot class path, \
the agent loaded with a profiler that records nothing) holds each operation four times, \
instrumented by hand as the rewriter does with bba=default: *none* (not instrumented), \
*today* (`Rt.enter` finds the caller's context through the thread's state on every call, \
`Rt.exit` restores it) and *passed* (the caller hands its context to the callee as an \
argument, CCCP's design: no thread lookup, no current context to load, store or restore) \
and *kept* (passed, but the callee still makes its context the thread's current one and \
`Rt.exit` restores it, so that methods entered the usual way below it, by a virtual call \
or from code the agent did not rewrite, find their caller: the design that mixes safely \
with today's entry). The four arms run in rotating order inside one JVM: {ROUNDS} warm-up rounds each, then \
{ROUNDS} measured rounds of 2 M calls (recursion: 90 × fib(20)), CPU time of the working \
thread per call; {JVMS} JVMs per operation, medians over all their measured rounds, and \
each JVM's own difference to *none* as its range. This measures the design the agent's \
hot path would move to, not what the agent does today (the cost model above is that).\n\
{sections}\nGoal (the cost model's, for the design):\n{verdict}"
    ))
}

/// Compiles the harness against the runtime in `jp-agent.jar`; returns its class directory.
fn compile(out: &Deliverables, dir: &Path) -> Result<std::path::PathBuf> {
    let classes = dir.join("entry-classes");
    std::fs::create_dir_all(&classes)?;
    let src = root().join("xtask/bench-inputs/jvm-entry/jp/rt/EntryCost.java");
    crate::cmd::run(
        Command::new(Path::new(JDK17).join("bin/javac"))
            .args(["--release", "17", "-cp"])
            .arg(&out.agent_jar)
            .arg("-d")
            .arg(&classes)
            .arg(&src),
    )
    .context("compile EntryCost")?;
    Ok(classes)
}

/// One JVM's measured rounds of `op`, per arm (ns per call).
fn run_one(java: &Path, out: &Deliverables, classes: &Path, op: &str) -> Result<[Vec<f64>; 4]> {
    let o = Command::new(java)
        .arg(format!("-Xbootclasspath/a:{}", classes.display()))
        .arg(format!(
            "-agentpath:{}=profiler=jp.rt.EntryCost$Quiet",
            out.agent_lib.display()
        ))
        .args(["jp.rt.EntryCost", op, &ROUNDS.to_string()])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", java.display()))?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        bail!(
            "EntryCost {op} failed with {}:\n{stdout}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let mut arms: [Vec<f64>; 4] = Default::default();
    for line in stdout.lines() {
        if let ["entry", o, arm, ns] = line.split_whitespace().collect::<Vec<_>>()[..] {
            let a = ARMS
                .iter()
                .position(|x| *x == arm)
                .with_context(|| format!("EntryCost printed an unknown arm: {line}"))?;
            if o == op {
                arms[a].push(ns.parse()?);
            }
        }
    }
    if arms.iter().any(|r| r.len() != ROUNDS as usize) {
        bail!("EntryCost {op}: expected {ROUNDS} rounds per arm in:\n{stdout}");
    }
    Ok(arms)
}
