//! The `programs` part: what publishing the current context costs real programs at steady
//! state, where a service pays it (the `agent` part's loop is nearly nothing but the store).
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{env_num, java, joined_jvms, jpd_config, min_max, wait_for, GOAL_RATIO};
use crate::bench::jvm::{self as jvm_bench, rounds};
use crate::bench::kernel::Jpd;
use crate::bench::report::median;
use crate::build::Deliverables;

/// The jvm bench's steady-state programs measured with publishing: the four whose rounds
/// are short enough for pairs of JVMs (H2's and javac's warm-ups take minutes with `-Xbatch`).
const PUBLISH_PROGRAMS: [&str; 4] = ["rhino", "jython", "xalan", "lucene"];

/// One SteadyBench JVM under the agent (`-Xbatch`): the median of its measured rounds, ms.
fn program_run(
    out: &Deliverables,
    dir: &Path,
    program: &jvm_bench::Program,
    joined: bool,
) -> Result<f64> {
    let options = if joined {
        "profiler=usdt".to_string()
    } else {
        format!(
            "profiler=file,out={}",
            dir.join(format!("publish-{}.json", program.key)).display()
        )
    };
    let mut args = vec![
        "-Xbatch".to_string(),
        format!("-Drounds.jitQuiet={}", rounds::JIT_QUIET_ROUNDS),
        format!(
            "-agentpath:{}=bba=default,{options}{}",
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
        .with_context(|| format!("{} with publishing={joined}", program.key))?;
    Ok(r.median() / 1e6)
}

pub(super) fn run(out: &Deliverables) -> Result<String> {
    let pairs = env_num("JP_CPU_PROGRAM_PAIRS", 2) as usize;
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
            for joined in [pair % 2 == 1, pair % 2 == 0] {
                if joined {
                    let mut jpd = Jpd::start_at(
                        out,
                        &socket,
                        Some(&config),
                        997,
                        Duration::from_millis(500),
                    )?;
                    with = program_run(out, &dir, program, true)?;
                    // The JVM must really have been joined, else this arm is the other one.
                    wait_for(
                        &format!("jpd joined the SteadyBench {} JVM", program.key),
                        Duration::from_secs(5),
                        || Ok(joined_jvms(out, &socket, "SteadyBench")? > 0),
                    )?;
                    jpd.stop();
                } else {
                    without = program_run(out, &dir, program, false)?;
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
            "**met**"
        } else if lo > GOAL_RATIO {
            "**not met**"
        } else {
            "cannot tell (pairs on both sides of 1.05)"
        };
        verdicts.push(format!("- {}: {v}", program.name));
    }
    let geo = (all_ratios.iter().map(|r| r.ln()).sum::<f64>() / all_ratios.len() as f64).exp();
    Ok(format!(
        "### Publishing in real programs at steady state (ms a round, JDK 17, bba=default)\n\n\
The jvm bench's `SteadyBench` (its warm-up, then the median of {} measured rounds, CPU time of \
the working thread) with the agent's file profiler (no context slot: without publishing) \
against `profiler=usdt` under a jpd that joined the JVM (checked for every run: `jpctl jvm \
list` shows its `cpu`; the slot written at every context change, read by the sampler at \
997 Hz, reports sent). Both with `-Xbatch`, so that the two JVMs of a pair compile the same \
methods with the same profiles (without it, JVMs of the same agent differ by up to 40 %; \
with it, by a few %: jp-agent/README-dev.md, \"The last child: made, not found\"); {pairs} \
pairs a program, the order alternating. Cells: without / with (ratio).\n\n\
| program | pairs: without / with (ratio) | ratio, median [min–max] |\n\
| --- | --- | ---: |\n{rows}\n\
Geometric mean of all pairs' ratios: {geo:.3}.\n\n\
Goal (issue 13): publishing costs at most 5 % more than the agent without it.\n{}\n",
        rounds::MEASURED,
        verdicts.join("\n"),
    ))
}
