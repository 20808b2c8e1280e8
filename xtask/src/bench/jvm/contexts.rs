//! The contexts table: how the agent's memory and time grow with the calling contexts of a
//! thread (`Contexts.java`: branching recursion whose depth sets the contexts), one JVM per
//! size and mode: bytes per context in the thread's tree and in the merged tree (heap after
//! GC), and the slowdown per call.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::rounds::{self, ratio_cell, Rounds};
use super::steady::Geomeans;
use super::{agent_arg, by_mode, met, Jdk, Mode, MODES};
use crate::build::Deliverables;

/// (recursion depth, traversals per round): ~1.1 M calls a round at every size.
const SIZES: [(u32, u32); 3] = [(4, 100), (5, 10), (6, 1)];

/// The largest size again with a tenth of its contexts allowed (`max_thread_contexts`):
/// what the bound saves in memory and costs in time.
const LIMITED: u64 = 111_111;

struct Run {
    rounds: Rounds,
    /// Heap growth after GC while the worker lives, and after it ended.
    thread_bytes: f64,
    merged_bytes: f64,
    contexts: f64,
    calls_per_round: f64,
}

pub fn run(
    out: &Deliverables,
    dir: &Path,
    jdks: &[Jdk],
    steady: Option<&Geomeans>,
) -> Result<String> {
    let mut sections = String::new();
    let mut verdict = String::new();
    for (j, (label, java)) in jdks.iter().enumerate() {
        let mut runs: BTreeMap<(usize, Mode), Run> = BTreeMap::new();
        for (s, (depth, traversals)) in SIZES.iter().enumerate() {
            for i in 0..MODES.len() {
                let mode = MODES[(i + s + j) % MODES.len()];
                let r = run_one(java, out, dir, *depth, *traversals, mode, "")
                    .with_context(|| format!("contexts depth {depth} ({mode:?})"))?;
                runs.insert((s, mode), r);
            }
        }
        let (depth, traversals) = SIZES[SIZES.len() - 1];
        let limit = format!(",max_thread_contexts={LIMITED}");
        let limited = run_one(java, out, dir, depth, traversals, Mode::Default, &limit)
            .with_context(|| format!("contexts depth {depth} with{limit}"))?;
        eprintln!("xtask: bench jvm contexts {label} done");
        sections.push_str(&format!(
            "\n#### {label}\n\n| contexts per thread | no agent (ns per call) | slowdown default | slowdown precise | thread's tree, B/context (default / precise) | merged tree, B/context (default / precise) |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n"
        ));
        let mut slowdowns = Vec::new();
        let mut worst_bytes = 0.0f64;
        for s in 0..SIZES.len() {
            let Some((off, def, pre)) = by_mode(&runs, s) else {
                continue;
            };
            let per_context = |r: &Run, merged: bool| {
                let (with, without) = if merged {
                    (r.merged_bytes, off.merged_bytes)
                } else {
                    (r.thread_bytes, off.thread_bytes)
                };
                (with - without) / r.contexts
            };
            worst_bytes = worst_bytes
                .max(per_context(def, false))
                .max(per_context(pre, false));
            slowdowns.push((
                off.contexts,
                def.rounds.median() / off.rounds.median(),
                pre.rounds.median() / off.rounds.median(),
            ));
            sections.push_str(&format!(
                "| {:.0} | {:.2} | {} | {} | {:.1} / {:.1} | {:.1} / {:.1} |\n",
                off.contexts,
                off.rounds.median() / off.calls_per_round,
                ratio_cell(&def.rounds, &off.rounds),
                ratio_cell(&pre.rounds, &off.rounds),
                per_context(def, false),
                per_context(pre, false),
                per_context(def, true),
                per_context(pre, true),
            ));
        }
        if let Some((off, def, _)) = by_mode(&runs, SIZES.len() - 1) {
            let mib = |r: &Run| (r.thread_bytes - off.thread_bytes) / (1 << 20) as f64;
            sections.push_str(&format!(
                "\nThe largest size with `max_thread_contexts={LIMITED}` (bba=default): the thread's \
                 tree holds {:.1} MiB instead of {:.1} MiB (new contexts past the limit fold into \
                 overflow nodes, every call still counted); slowdown {} against {} unbounded.\n",
                mib(&limited),
                mib(def),
                ratio_cell(&limited.rounds, &off.rounds),
                ratio_cell(&def.rounds, &off.rounds),
            ));
        }
        verdict.push_str(&format!(
            "- {label}: at most 64 bytes per context in a thread's tree: {} (worst {worst_bytes:.1} B).\n",
            met(worst_bytes <= 64.0)
        ));
        if let (Some(small), Some(large)) = (slowdowns.first(), slowdowns.last()) {
            let (reference, what) = match steady.and_then(|g| g.get(label)) {
                Some(&(d, p)) => ((d, p), "the steady-state geometric mean above"),
                None => (
                    (small.1, small.2),
                    "this program's smallest size (steady part not run)",
                ),
            };
            verdict.push_str(&format!(
                "- {label}: with {:.0} contexts per thread, the slowdown within 2× of {what}: bba=default {} ({:.2}× against {:.2}×), bba=precise {} ({:.2}× against {:.2}×).\n",
                large.0,
                met(large.1 <= 2.0 * reference.0),
                large.1,
                reference.0,
                met(large.2 <= 2.0 * reference.1),
                large.2,
                reference.1,
            ));
        }
    }
    Ok(format!(
        "### Contexts\n\n\
`Contexts` (in `xtask/bench-inputs/jvm/`): ten methods that each call all ten until a depth \
is reached, so that every call is a calling context of its own; one traversal from the top \
makes as many calls as there are contexts. A worker thread traverses in rounds of ~1.1 M \
calls (warm-up as above, {} measured rounds; the first traversal builds the tree, the rest \
walk it); slowdown = CPU time of a round with the agent / without. Bytes per context: heap \
used after `System.gc()` while the worker lives (its tree) and after it ended (the merged \
tree, `profiler=file`, with whatever of the ended thread's tree the agent still holds), each minus the heap before the worker started, minus the same \
difference without the agent, divided by the contexts. G1 counts a humongous object's \
regions whole, so the big child tables of a large tree can round the figure up a little.\n{sections}\nGoals:\n{verdict}",
        rounds::MEASURED
    ))
}

fn run_one(
    java: &Path,
    out: &Deliverables,
    dir: &Path,
    depth: u32,
    traversals: u32,
    mode: Mode,
    extra: &str,
) -> Result<Run> {
    let mut args = Vec::new();
    if let Some(bba) = mode.bba() {
        // The folded format: the quickest to write of a million contexts at exit.
        let profile = dir.join(format!("contexts-{depth}-{bba}.folded"));
        args.push(agent_arg(
            out,
            bba,
            &profile,
            &format!(",format=folded{extra}"),
        ));
    }
    args.extend(["-cp", ".", "Contexts"].map(String::from));
    args.extend([depth.to_string(), traversals.to_string()]);
    args.extend(rounds::schedule());
    let rounds = rounds::run(java, dir, &args)?;
    let heap = rounds
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("heap "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>());
    let Some(
        ["thread_bytes", thread, "merged_bytes", merged, "contexts", contexts, "calls_per_round", calls],
    ) = heap.as_deref()
    else {
        bail!("no `heap` line in:\n{}", rounds.stdout);
    };
    Ok(Run {
        thread_bytes: thread.parse()?,
        merged_bytes: merged.parse()?,
        contexts: contexts.parse()?,
        calls_per_round: calls.parse()?,
        rounds,
    })
}
