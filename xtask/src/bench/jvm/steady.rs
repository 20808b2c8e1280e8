//! The steady-state table: each real program's work in rounds inside one JVM
//! (`SteadyBench.java`), timed on the working thread after warm-up, as a long-running
//! service runs it; and from the same JVMs (`-XX:+CITime`), C2's compile time and code size.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::rounds::{self, Jvms, Rounds};
use super::{agent_arg, by_mode, geomean, met, Jdk, Mode, Program, MODES};
use crate::bench::report::median;
use crate::build::Deliverables;

/// Steady-state geometric means per JDK label: (bba=default, bba=precise).
pub type Geomeans = BTreeMap<&'static str, (f64, f64)>;

/// C2's totals as `-XX:+CITime` prints them at exit.
#[derive(Clone, Copy)]
struct C2 {
    seconds: f64,
    code_bytes: f64,
}

struct Run {
    rounds: Rounds,
    c2: Option<C2>,
    /// With the agent: the calls its profile counted over the whole run, per round.
    calls_per_round: Option<f64>,
}

/// JVMs per program and mode. JVMs of one configuration differ by more than the rounds of
/// one JVM do (C2 compiles what its profile happened to see): with one JVM per mode, the
/// same program without the agent measured 30 ms a round in one run and 68 ms in the next.
const JVMS: usize = 3;

/// The drift farthest from 0, sign kept.
fn worst_drift(drifts: impl Iterator<Item = f64>) -> f64 {
    drifts.fold(0.0, |a, b| if b.abs() > a.abs() { b } else { a })
}

/// One program in one mode, over its JVMs.
#[derive(Default)]
struct Arm {
    runs: Vec<Run>,
}

impl Arm {
    /// Each JVM's median round (ns): their median and range.
    fn spread(&self) -> Jvms {
        Jvms::of(
            &self
                .runs
                .iter()
                .map(|r| r.rounds.median())
                .collect::<Vec<_>>(),
        )
    }

    /// The median over the JVMs of their median rounds.
    fn median(&self) -> f64 {
        self.spread().median
    }

    /// `4.21× [3.90–4.60]`: over `without`, the medians' ratio and the widest range the
    /// JVMs allow.
    fn ratio_cell(&self, without: &Arm) -> String {
        self.spread().over(&without.spread()).cell_ratio()
    }

    /// The worst drift of its JVMs (see `Rounds::drift`).
    fn drift(&self) -> f64 {
        worst_drift(self.runs.iter().map(|r| r.rounds.drift()))
    }

    /// The median warm-up, starred if a JVM ended its warm-up with the JIT still compiling.
    fn warmup_cell(&self) -> String {
        let warm = median(
            &mut self
                .runs
                .iter()
                .map(|r| r.rounds.warmup as f64)
                .collect::<Vec<_>>(),
        );
        let star = if self.runs.iter().any(|r| r.rounds.jit_quiet == Some(false)) {
            "*"
        } else {
            ""
        };
        format!("{warm:.0}{star}")
    }

    /// C2's figures over the JVMs, (seconds, code bytes), each with its range: a JVM's
    /// C2 work depends on what its profile happened to see, and one JVM of a mode can
    /// compile several times what the others do (None if one JVM printed none).
    fn c2(&self) -> Option<(Jvms, Jvms)> {
        let all: Option<Vec<C2>> = self.runs.iter().map(|r| r.c2).collect();
        let all = all?;
        Some((
            Jvms::of(&all.iter().map(|c| c.seconds).collect::<Vec<_>>()),
            Jvms::of(&all.iter().map(|c| c.code_bytes).collect::<Vec<_>>()),
        ))
    }

    /// Calls a round, median over the JVMs (None without the agent).
    fn calls_per_round(&self) -> Option<f64> {
        let all: Option<Vec<f64>> = self.runs.iter().map(|r| r.calls_per_round).collect();
        Some(median(&mut all?))
    }
}

pub fn run(
    out: &Deliverables,
    dir: &Path,
    jdks: &[Jdk],
    programs: &[Program],
) -> Result<(String, Geomeans)> {
    let mut sections = String::new();
    let mut c2_sections = String::new();
    let mut geomeans = Geomeans::new();
    let mut goals = Vec::new();
    let mut worst: Option<(f64, &str)> = None;
    for (j, (label, java)) in jdks.iter().enumerate() {
        let mut runs: BTreeMap<(usize, Mode), Arm> = BTreeMap::new();
        for (p, program) in programs.iter().enumerate() {
            for r in 0..JVMS {
                for i in 0..MODES.len() {
                    let mode = MODES[(i + p + j + r) % MODES.len()];
                    let run = run_one(java, out, dir, program, mode)?;
                    runs.entry((p, mode)).or_default().runs.push(run);
                }
            }
            eprintln!("xtask: bench jvm steady {label}: {} done", program.key);
        }
        let (table, g) = steady_table(label, programs, &runs, &mut worst);
        sections.push_str(&table);
        sections.push_str(&per_call_table(programs, &runs));
        c2_sections.push_str(&c2_table(label, programs, &runs, &mut goals));
        geomeans.insert(label, g);
    }
    let mut verdict = String::new();
    for (label, (d, p)) in &geomeans {
        verdict.push_str(&format!(
            "- {label}: geometric mean ≤ 1.5× with bba=default: {} ({d:.2}×); ≤ 2× with bba=precise: {} ({p:.2}×).\n",
            met(*d <= 1.5),
            met(*p <= 2.0)
        ));
    }
    verdict.push_str(&match worst {
        Some((r, name)) => format!(
            "- No program above 3× (either BBA, either JDK): {} (worst {r:.2}×, {name}).\n",
            met(r <= 3.0)
        ),
        None => "- No program above 3×: **not measured**.\n".to_string(),
    });
    let c2_verdict: String = goals.concat();
    let body = format!(
        "### Steady state (what a service pays)\n\n\
`SteadyBench` (in `xtask/bench-inputs/jvm/`) runs each program's work in rounds inside one \
JVM: rhino evaluating the script, jython executing it through `PythonInterpreter`, H2 running \
the SQL script through JDBC on a fresh in-memory database, Xalan transforming the document, \
Lucene indexing and searching, javac compiling jp's test programs through `javax.tools` \
(its agent run adds `include=com.sun.tools.javac`). Each is set up once; a round is the work \
repeated so that it lasts ~0.05–0.5 s without the agent. At least {} rounds and {} s of warm-up, \
and until the JIT compilers spent at most 2 ms in each of {} rounds in a row (at most 60 s: \
a warm-up that reached that limit is starred in the warm-up column), then {} measured rounds: CPU time of the working thread (so not the JIT compilers' or GC \
threads'), median over the measured rounds. {JVMS} JVMs per program and mode, the modes in \
rotating order; a mode's figure is the median over its JVMs. Slowdown = that figure with \
the agent / without, [the widest range the JVMs allow: fastest with the agent over slowest \
without, slowest with over fastest without]; the warm-up column is each mode's median \
warm-up; *drift* = median of the last half of the measured rounds over the first half, \
minus 1, worst of all the JVMs: near 0 means the rounds had settled. Under each table, from the same JVMs, the cost per call: the calls \
a round makes (the agent's profile of the whole run over its rounds; set-up included, so \
a little high), calls per ns of the program's CPU without the agent, the agent's extra \
CPU per call ((round with − round without) / calls a round; blocks' counting included) \
and what a call may cost for the 1.5× goal (0.5 / calls per ns): the slowdown is \
1 + calls per ns × extra ns per call, so a program that calls often needs a cheap call.\n{sections}\n\
Goals (steady state):\n{verdict}\n\
### C2 compile time and code size\n\n\
From the same JVMs, `-XX:+CITime` at exit: C2's compile time (standard + OSR) and the size \
of the code it installed (`nmethods_code_size`): the median over each mode's JVMs [their range; \
for a ratio, the widest range the JVMs allow], with the agent against without. A JVM's C2 \
work depends on what its profile happened to see, and one JVM in a few can compile several \
times what the others of its mode do, so a median over three can land on either side. The \
JVMs ran until their JIT was quiet (their warm-up rounds differ), so each figure is what C2 \
spent reaching the steady state; instrumented methods are bigger, and bigger methods inline \
less.\n{c2_sections}\n\
Goal: C2 compile time at most 1.5× of no agent, for every program:\n{c2_verdict}",
        rounds::WARMUP_ROUNDS,
        rounds::WARMUP_MS / 1000,
        rounds::JIT_QUIET_ROUNDS,
        rounds::MEASURED,
    );
    Ok((body, geomeans))
}

fn run_one(
    java: &Path,
    out: &Deliverables,
    dir: &Path,
    program: &Program,
    mode: Mode,
) -> Result<Run> {
    let mut args = vec![
        "-XX:+CITime".to_string(),
        format!("-Drounds.jitQuiet={}", rounds::JIT_QUIET_ROUNDS),
    ];
    if let Some(bba) = mode.bba() {
        let profile = dir.join(format!("steady-{}-{bba}.json", program.key));
        args.push(agent_arg(out, bba, &profile, program.agent_options));
    }
    let args = program.steady_command(args)?;
    let rounds = rounds::run(java, dir, &args)
        .with_context(|| format!("steady state of {} ({mode:?})", program.key))?;
    let c2 = parse_c2(&rounds.stdout);
    let calls_per_round = match mode.bba() {
        Some(bba) => {
            let profile = dir.join(format!("steady-{}-{bba}.json", program.key));
            let calls = profile_calls(&profile)?;
            // The profile holds the whole run: set-up, warm-up and measured rounds.
            Some(calls as f64 / (rounds.warmup + rounds.cpu_ns.len()) as f64)
        }
        None => None,
    };
    Ok(Run {
        rounds,
        c2,
        calls_per_round,
    })
}

/// The calls of every context in a `jp-mct/1` JSON profile (one node per line).
fn profile_calls(profile: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(profile)
        .with_context(|| format!("the agent wrote no profile at {}", profile.display()))?;
    let mut total = 0u64;
    for line in text.lines() {
        if let Some(rest) = line.split("\"calls\": ").nth(1) {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            total += digits
                .parse::<u64>()
                .with_context(|| format!("calls in {}: {line:.80}", profile.display()))?;
        }
    }
    Ok(total)
}

/// What the agent costs per call in each program, and what a call may cost for the 1.5×
/// goal: a program's slowdown is 1 + (calls per ns without the agent) × (extra ns per call).
fn per_call_table(programs: &[Program], runs: &BTreeMap<(usize, Mode), Arm>) -> String {
    let mut s = String::from(
        "\n| program | calls a round (M) | calls per ns without the agent | extra ns per call, default | extra ns per call, precise | a call's budget for 1.5× (ns) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (i, program) in programs.iter().enumerate() {
        let Some((off, def, pre)) = by_mode(runs, i) else {
            continue;
        };
        let (Some(calls), Some(pre_calls)) = (def.calls_per_round(), pre.calls_per_round()) else {
            continue;
        };
        let base = off.median();
        let density = calls / base;
        let extra = |r: &Arm, c: f64| (r.median() - base) / c;
        s.push_str(&format!(
            "| {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} |\n",
            program.name,
            calls / 1e6,
            density,
            extra(def, calls),
            extra(pre, pre_calls),
            0.5 / density,
        ));
    }
    s
}

/// `  C2 {speed: …; standard:  0.5 s, …; osr:  0.1 s, …; nmethods_code_size: 544 bytes}`.
fn parse_c2(stdout: &str) -> Option<C2> {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("C2 {"))?;
    let field = |key: &str| -> Option<f64> {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split_whitespace()
            .next()?
            .trim_end_matches(',')
            .parse()
            .ok()
    };
    Some(C2 {
        seconds: field("standard:")? + field("osr:")?,
        code_bytes: field("nmethods_code_size:")?,
    })
}

fn steady_table(
    label: &str,
    programs: &[Program],
    runs: &BTreeMap<(usize, Mode), Arm>,
    worst: &mut Option<(f64, &'static str)>,
) -> (String, (f64, f64)) {
    let mut s = format!(
        "\n#### {label}\n\n| program | round no agent (ms) | default | precise | warm-up rounds | drift |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
    );
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for (i, program) in programs.iter().enumerate() {
        let Some((off, def, pre)) = by_mode(runs, i) else {
            continue;
        };
        d.push(def.median() / off.median());
        p.push(pre.median() / off.median());
        for r in [d[d.len() - 1], p[p.len() - 1]] {
            if worst.is_none_or(|(w, _)| r > w) {
                *worst = Some((r, program.name));
            }
        }
        let drift = worst_drift([off, def, pre].iter().map(|a| a.drift()));
        let warm = [off, def, pre].map(Arm::warmup_cell);
        s.push_str(&format!(
            "| {} | {:.1} | {} | {} | {}/{}/{} | {:+.0}% |\n",
            program.name,
            off.median() / 1e6,
            def.ratio_cell(off),
            pre.ratio_cell(off),
            warm[0],
            warm[1],
            warm[2],
            100.0 * drift
        ));
    }
    let g = (geomean(&d), geomean(&p));
    s.push_str(&format!(
        "| **geometric mean** | | **{:.2}×** | **{:.2}×** | | |\n",
        g.0, g.1
    ));
    (s, g)
}

fn c2_table(
    label: &str,
    programs: &[Program],
    runs: &BTreeMap<(usize, Mode), Arm>,
    goals: &mut Vec<String>,
) -> String {
    let mut s = format!(
        "\n#### {label}\n\n| program | C2 compile no agent (s) | default | precise | C2 code no agent (KB) | default | precise |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    let mut worst: Option<(Jvms, &str)> = None;
    for (i, program) in programs.iter().enumerate() {
        let c2 = |m: Mode| runs.get(&(i, m)).and_then(Arm::c2);
        let (Some(off), Some(def), Some(pre)) =
            (c2(Mode::Off), c2(Mode::Default), c2(Mode::Precise))
        else {
            s.push_str(&format!(
                "| {} | no `-XX:+CITime` figures | | | | | |\n",
                program.name
            ));
            goals.push(format!("- {label}, {}: **not measured**.\n", program.name));
            continue;
        };
        let (def_s, pre_s) = (def.0.over(&off.0), pre.0.over(&off.0));
        for r in [def_s, pre_s] {
            if worst.is_none_or(|(w, _)| r.median > w.median) {
                worst = Some((r, program.name));
            }
        }
        let kb = |j: Jvms| {
            format!(
                "{:.0} [{:.0}–{:.0}]",
                j.median / 1024.0,
                j.min / 1024.0,
                j.max / 1024.0
            )
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            program.name,
            off.0.cell(),
            def_s.cell_ratio(),
            pre_s.cell_ratio(),
            kb(off.1),
            def.1.over(&off.1).cell_ratio(),
            pre.1.over(&off.1).cell_ratio(),
        ));
    }
    if let Some((w, name)) = worst {
        goals.push(format!(
            "- {label}: {} (worst median {}, {name}).\n",
            met(w.median <= 1.5),
            w.cell_ratio()
        ));
    }
    s
}

/// The geometric means (default, precise) per JDK that BENCHMARKS.md's steady-state
/// section last recorded, for parts that compare with them in a run without it.
pub fn recorded_geomeans(jdks: &[super::Jdk]) -> Option<Geomeans> {
    let text = std::fs::read_to_string(crate::cmd::root().join("BENCHMARKS.md")).ok()?;
    let section = text.split("<!-- bench:jvm-steady -->").nth(1)?;
    let section = section.split("<!-- /bench:jvm-steady -->").next()?;
    let mut found = Geomeans::new();
    for (label, _) in jdks {
        let table = section.split(&format!("#### {label}\n")).nth(1)?;
        let row = table
            .lines()
            .find(|l| l.starts_with("| **geometric mean**"))?;
        let ratios: Vec<f64> = row
            .split('|')
            .filter_map(|c| c.trim().trim_matches('*').strip_suffix('×')?.parse().ok())
            .collect();
        if let [default, precise, ..] = ratios[..] {
            found.insert(label, (default, precise));
        }
    }
    (!found.is_empty()).then_some(found)
}
