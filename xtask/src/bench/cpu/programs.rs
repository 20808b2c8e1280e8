//! The `programs` part: what publishing the current context costs real programs at steady
//! state, where a service pays it (the `agent` part's loop is nearly nothing but the store).
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{context_cpu_ns, env_num, java, joined_pid, jpd_config, min_max, wait_for, GOAL_RATIO};
use crate::bench::jvm::{self as jvm_bench, rounds};
use crate::bench::kernel::Jpd;
use crate::bench::report::median;
use crate::build::Deliverables;

/// The jvm bench's steady-state programs measured with publishing: the four whose rounds
/// are short enough for pairs of JVMs (H2's and javac's warm-ups take minutes with `-Xbatch`).
const PUBLISH_PROGRAMS: [&str; 4] = ["rhino", "jython", "xalan", "lucene"];

/// One SteadyBench JVM under the agent (`-Xbatch`, `profiler=usdt`) joined by the jpd on
/// `socket`: the median of its measured rounds, ms. Checks that jpd joined it and that it
/// published its contexts exactly when asked to (CPU on its contexts, or none).
fn program_run(
    out: &Deliverables,
    dir: &Path,
    socket: &Path,
    program: &jvm_bench::Program,
    publish: bool,
) -> Result<f64> {
    let mut args = vec![
        "-Xbatch".to_string(),
        format!("-Drounds.jitQuiet={}", rounds::JIT_QUIET_ROUNDS),
        format!(
            "-agentpath:{}=bba=default,profiler=usdt,publish={publish}{}",
            out.agent_lib.display(),
            program.agent_options
        ),
        "-cp".to_string(),
        format!(".:{}", jvm_bench::harness_cp()?),
        "SteadyBench".to_string(),
        program.key.to_string(),
        program.steady_reps.to_string(),
    ];
    args.extend(rounds::schedule());
    args.extend(program.steady_args.iter().cloned());
    let r = rounds::run(&java(), dir, &args)
        .with_context(|| format!("{} with publish={publish}", program.key))?;
    // Each arm must be what it says: joined (else neither arm pays the sends and the
    // sampler's reads), and with CPU on its contexts only if it published them.
    let mut joined = None;
    wait_for(
        &format!("jpd joined the SteadyBench {} JVM", program.key),
        Duration::from_secs(5),
        || {
            joined = joined_pid(out, socket, "SteadyBench")?;
            Ok(joined.is_some())
        },
    )?;
    let pid = joined.context("wait_for returned without a joined JVM")?;
    let on_contexts = context_cpu_ns(out, socket, pid)?;
    if publish != (on_contexts > 0) {
        bail!(
            "{} with publish={publish}: jpd counted {on_contexts} ns on its contexts",
            program.key
        );
    }
    Ok(r.median() / 1e6)
}

pub(super) fn run(out: &Deliverables) -> Result<String> {
    let pairs = env_num("JP_CPU_PROGRAM_PAIRS", 4) as usize;
    let dir = jvm_bench::prepare()?;
    let all = jvm_bench::programs(&dir)?;
    let chosen: Vec<&jvm_bench::Program> = PUBLISH_PROGRAMS
        .iter()
        .filter_map(|k| all.iter().find(|p| p.key == *k))
        .collect();
    if chosen.len() != PUBLISH_PROGRAMS.len() {
        bail!("the jvm bench no longer has all of {PUBLISH_PROGRAMS:?}");
    }
    let socket = dir.join("jpd-programs.sock");
    let config = jpd_config(&dir, true)?;
    let mut rows = String::new();
    let mut verdicts = Vec::new();
    let mut all_ratios = Vec::new();
    for program in &chosen {
        // [pair] → (without, with) ms a round; the pair's order alternates.
        let mut ms: Vec<(f64, f64)> = Vec::new();
        for pair in 0..pairs {
            eprintln!(
                "xtask: bench cpu programs: {} pair {}/{pairs}",
                program.key,
                pair + 1
            );
            let mut without = 0.0;
            let mut with = 0.0;
            for publish in [pair % 2 == 1, pair % 2 == 0] {
                // A jpd of its own for every JVM, so that it lists just that one.
                let mut jpd =
                    Jpd::start_at(out, &socket, Some(&config), 997, Duration::from_millis(500))?;
                let ms = program_run(out, &dir, &socket, program, publish)?;
                jpd.stop();
                if publish {
                    with = ms;
                } else {
                    without = ms;
                }
            }
            ms.push((without, with));
        }
        let ratios: Vec<f64> = ms.iter().map(|(a, b)| b / a).collect();
        all_ratios.extend(ratios.iter().copied());
        let cells: Vec<String> = ms
            .iter()
            .map(|(a, b)| format!("{a:.1} / {b:.1} ({:.3})", b / a))
            .collect();
        let (lo, hi) = min_max(&ratios);
        let m = median(&mut ratios.clone());
        rows.push_str(&format!(
            "| {} | {} | {m:.3} [{lo:.3}–{hi:.3}] |\n",
            program.name,
            cells.join(", ")
        ));
        let v = if hi <= GOAL_RATIO {
            "**met** in every pair".to_string()
        } else if lo > GOAL_RATIO {
            "**not met** in any pair".to_string()
        } else {
            let over = ratios.iter().filter(|r| **r > GOAL_RATIO).count();
            format!(
                "{} at the median; {over} of {} pairs above 1.05 (cannot tell for sure)",
                if m <= GOAL_RATIO {
                    "met"
                } else {
                    "**not met**"
                },
                ratios.len()
            )
        };
        verdicts.push(format!("- {}: {v}", program.name));
    }
    let geo = (all_ratios.iter().map(|r| r.ln()).sum::<f64>() / all_ratios.len() as f64).exp();
    Ok(format!(
        "### Publishing in real programs at steady state (ms a round, JDK 17, bba=default)\n\n\
The jvm bench's `SteadyBench` (its warm-up, then the median of {} measured rounds, CPU time of \
the working thread), `profiler=usdt` under a jpd that joined the JVM, in both arms: reports \
sent, threads counted by kind. The arms differ only in publishing: `publish=false` (no thread \
gets a context slot; calls and returns test for one and store nothing) against the default \
(the slot written at every context change and read by the sampler at 997 Hz). Checked for \
every run: `jpctl jvm list` shows the JVM's `cpu`, and jpd counted CPU on its contexts in \
the publishing arm and none in the other. Both with `-Xbatch`, so that the two JVMs of a \
pair compile the same methods with the same profiles (without it, JVMs of the same agent \
differ by up to 40 %; with it, by a few %: jp-agent/README-dev.md, \"The last child: made, \
not found\"); {pairs} pairs a program, the order alternating, a jpd started for each JVM. \
Cells: without / with (ratio).\n\n\
| program | pairs: without / with (ratio) | ratio, median [min–max] |\n\
| --- | --- | ---: |\n{rows}\n\
Geometric mean of all pairs' ratios: {geo:.3}.\n\n\
Goal (issue 13): publishing costs at most 5 % more than the agent without it.\n{}\n",
        rounds::MEASURED,
        verdicts.join("\n"),
    ))
}
