//! The cost-model table: nanoseconds per operation with and without the agent, each
//! operation alone in a loop (`CostModel.java`), a few JVMs per operation and mode, timed
//! on the working thread after warm-up.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::rounds::{self, Jvms};
use super::{agent_arg, Jdk, Mode, MODES};
use crate::build::Deliverables;

/// (CostModel's op, what it is, operations per round).
pub(crate) const OPS: [(&str, &str, u32); 9] = [
    ("static", "tiny static call", 2_000_000),
    ("across", "tiny static call of another class", 2_000_000),
    (
        "bimorphic",
        "bimorphic virtual call (2 receiver classes)",
        2_000_000,
    ),
    (
        "megamorphic",
        "megamorphic virtual call (4 receiver classes)",
        2_000_000,
    ),
    ("recursion", "call in a 1000-deep recursion", 2_000_000),
    (
        "blocks",
        "loop iteration of 4 if/else (≈10 basic blocks)",
        2_000_000,
    ),
    ("throw", "throw caught three frames up", 200_000),
    (
        VYIELD,
        "virtual thread yield: an unmount and a mount (CPU of all Java threads)",
        1_000_000,
    ),
    (
        VYIELD_LISTENED,
        "the same, while a profiler listens (`usdt_tap`: each wait timed)",
        1_000_000,
    ),
];

/// A virtual thread's yield: what the agent's mount and unmount events cost. It runs on a
/// carrier (one: `parallelism=1`), so the round's CPU is all Java threads'.
const VYIELD: &str = "vyield";
/// The same with the agent acting as if jpd listened: the unmount also reads why the
/// thread left and the mount times the wait (the tap's file writes are in it too).
const VYIELD_LISTENED: &str = "vyield-listened";

/// The java arguments of `op` beyond the agent: the class and its schedule.
fn op_args(op: &str, n: u32) -> Vec<String> {
    let mut args = Vec::new();
    if op.starts_with(VYIELD) {
        args.extend(
            [
                "-Drounds.allThreadsCpu=true",
                "-Djdk.virtualThreadScheduler.parallelism=1",
            ]
            .map(String::from),
        );
    }
    let class_op = if op.starts_with(VYIELD) { VYIELD } else { op };
    args.extend(["-cp", ".", "CostModel", class_op].map(String::from));
    args.push(n.to_string());
    args.extend(rounds::schedule());
    args
}

/// JVMs per operation and mode: one JVM's compiled code differs from the next one's (C2's
/// inlining follows the profile it happened to see), by more than the agent's cost on the
/// small operations; a single JVM per arm measured the loop without the agent at 1.6 ns in
/// one run and 3.3 ns in the next.
const JVMS: usize = 3;

pub fn run(out: &Deliverables, dir: &Path, jdks: &[Jdk]) -> Result<String> {
    let mut sections = String::new();
    let mut verdict = String::new();
    for (j, (label, java)) in jdks.iter().enumerate() {
        // ns per operation, one figure (the median of its measured rounds) per JVM.
        let mut runs: BTreeMap<(usize, Mode), Vec<f64>> = BTreeMap::new();
        for (o, (op, _, n)) in OPS.iter().enumerate() {
            if op.starts_with(VYIELD) && *label == "JDK 17" {
                continue;
            }
            for rep in 0..JVMS {
                for i in 0..MODES.len() {
                    let mode = MODES[(i + o + j + rep) % MODES.len()];
                    let mut args = Vec::new();
                    if let Some(bba) = mode.bba() {
                        let profile = dir.join(format!("cost-{op}-{bba}.json"));
                        let tap = dir.join(format!("cost-{op}-{bba}.tap"));
                        let extra = if *op == VYIELD_LISTENED {
                            format!(",usdt_tap={}", tap.display())
                        } else {
                            String::new()
                        };
                        args.push(agent_arg(out, bba, &profile, &extra));
                    }
                    args.extend(op_args(op, *n));
                    let r = rounds::run(java, dir, &args)
                        .with_context(|| format!("cost model {op} ({mode:?})"))?;
                    runs.entry((o, mode))
                        .or_default()
                        .push(r.median() / f64::from(*n));
                }
            }
        }
        eprintln!("xtask: bench jvm cost {label} done");
        sections.push_str(&format!(
            "\n#### {label}\n\n| operation | no agent (ns) | default (ns) | default − no agent | precise (ns) | precise − no agent |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
        ));
        for (o, (op, what, _)) in OPS.iter().enumerate() {
            let per_op = |m: Mode| runs.get(&(o, m)).map(|v| Jvms::of(v));
            let (Some(off), Some(def), Some(pre)) = (
                per_op(Mode::Off),
                per_op(Mode::Default),
                per_op(Mode::Precise),
            ) else {
                if op.starts_with(VYIELD) {
                    sections.push_str(&format!(
                        "| {what} | n/a: no virtual threads before JDK 21 | | | | |\n"
                    ));
                }
                continue;
            };
            sections.push_str(&format!(
                "| {what} | {} | {} | {} | {} | {} |\n",
                off.cell(),
                def.cell(),
                def.minus(&off).cell_signed(),
                pre.cell(),
                pre.minus(&off).cell_signed(),
            ));
            if *op == "static" {
                verdict.push_str(&format!(
                    "- {label}: tiny static call at most 2 ns more than no agent: bba=default {}, bba=precise {}.\n",
                    def.minus(&off).at_most(2.0),
                    pre.minus(&off).at_most(2.0),
                ));
            }
        }
    }
    Ok(format!(
        "### Cost model (ns per operation)\n\n\
`CostModel` (in `xtask/bench-inputs/jvm/`) repeats one operation in a loop, {} a round \
(throws: {}); at least {} rounds and {} s of warm-up, then {} measured rounds; CPU time of \
the working thread, median over the measured rounds, divided by the operations of a round. \
{JVMS} JVMs per operation and mode, the modes in rotating order; each cell is the median \
over the JVMs [their range]: JVMs of the same configuration differ by more than rounds of \
one JVM do (C2 compiles what its profile saw). A difference's range is the widest the \
JVMs allow (slowest with the agent minus fastest without, and the reverse). Without the \
agent C2 inlines the tiny and the bimorphic calls, so their figure is the loop's; the \
difference is what the agent adds per operation. The virtual-thread rows time one virtual \
thread yielding on one carrier with the CPU of all the JVM's Java threads (its work runs on the carrier), \
with the agent as it runs beside no jpd (the events' calls into the runtime), then as if jpd \
listened (`usdt_tap`: the unmount also reads why the thread leaves, the mount times the \
wait, and the tap writes the records to a file).\n{sections}\nGoal:\n{verdict}",
        OPS[0].2,
        OPS[6].2,
        rounds::WARMUP_ROUNDS,
        rounds::WARMUP_MS / 1000,
        rounds::MEASURED,
    ))
}
