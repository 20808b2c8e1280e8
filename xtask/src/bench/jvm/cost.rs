//! The cost-model table: nanoseconds per operation with and without the agent, each
//! operation alone in a loop (`CostModel.java`), one JVM per operation and mode, timed on
//! the working thread after warm-up.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::rounds::{self, Rounds};
use super::{agent_arg, met, Jdk, Mode, MODES};
use crate::build::Deliverables;

/// (CostModel's op, what it is, operations per round).
pub(crate) const OPS: [(&str, &str, u32); 6] = [
    ("static", "tiny static call", 2_000_000),
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
];

pub fn run(out: &Deliverables, dir: &Path, jdks: &[Jdk]) -> Result<String> {
    let mut sections = String::new();
    let mut verdict = String::new();
    for (j, (label, java)) in jdks.iter().enumerate() {
        let mut runs: BTreeMap<(usize, Mode), Rounds> = BTreeMap::new();
        for (o, (op, _, n)) in OPS.iter().enumerate() {
            for i in 0..MODES.len() {
                let mode = MODES[(i + o + j) % MODES.len()];
                let mut args = Vec::new();
                if let Some(bba) = mode.bba() {
                    let profile = dir.join(format!("cost-{op}-{bba}.json"));
                    args.push(agent_arg(out, bba, &profile, ""));
                }
                args.extend(["-cp", ".", "CostModel", op].map(String::from));
                args.push(n.to_string());
                args.extend(rounds::schedule());
                let r = rounds::run(java, dir, &args)
                    .with_context(|| format!("cost model {op} ({mode:?})"))?;
                runs.insert((o, mode), r);
            }
        }
        eprintln!("xtask: bench jvm cost {label} done");
        sections.push_str(&format!(
            "\n#### {label}\n\n| operation | no agent (ns) | default (ns) | default − no agent | precise (ns) | precise − no agent | noise (ns, ±) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        ));
        for (o, (op, what, n)) in OPS.iter().enumerate() {
            let per_op = |m: Mode| runs.get(&(o, m)).map(|r| (r.median() / *n as f64, r));
            let (Some((off, roff)), Some((def, rdef)), Some((pre, rpre))) = (
                per_op(Mode::Off),
                per_op(Mode::Default),
                per_op(Mode::Precise),
            ) else {
                continue;
            };
            // Half the range of the measured rounds, per operation, of the noisiest JVM.
            let noise = [(roff, off), (rdef, def), (rpre, pre)]
                .iter()
                .map(|(r, v)| 0.5 * r.spread() * v)
                .fold(0.0f64, f64::max);
            sections.push_str(&format!(
                "| {what} | {off:.2} | {def:.2} | {:+.2} | {pre:.2} | {:+.2} | {noise:.2} |\n",
                def - off,
                pre - off
            ));
            if *op == "static" {
                verdict.push_str(&format!(
                    "- {label}: tiny static call at most 2 ns more than no agent: bba=default {} ({:+.2} ns), bba=precise {} ({:+.2} ns).\n",
                    met(def - off <= 2.0),
                    def - off,
                    met(pre - off <= 2.0),
                    pre - off
                ));
            }
        }
    }
    Ok(format!(
        "### Cost model (ns per operation)\n\n\
`CostModel` (in `xtask/bench-inputs/jvm/`) repeats one operation in a loop, {} a round \
(throws: {}); at least {} rounds and {} s of warm-up, then {} measured rounds; CPU time of \
the working thread, median over the measured rounds, divided by the operations of a round. \
One JVM per operation and mode, the modes in rotating order. Without the agent C2 inlines \
the tiny and the bimorphic calls, so their figure is the loop's; the difference is what \
the agent adds per operation.\n{sections}\nGoal:\n{verdict}",
        OPS[0].2,
        OPS[5].2,
        rounds::WARMUP_ROUNDS,
        rounds::WARMUP_MS / 1000,
        rounds::MEASURED,
    ))
}
