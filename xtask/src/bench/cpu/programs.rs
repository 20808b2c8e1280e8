//! The `programs` part: what publishing the current context costs real programs at steady
//! state, where a service pays it (the `agent` part's loop is nearly nothing but the store).
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::jvms::{context_cpu_ns, joined_pid, jpd_config, wait_for};
use super::{java, min_max, GOAL_RATIO};
use crate::bench::harness::env_num;
use crate::bench::harness::Jpd;
use crate::bench::jvm::{self as jvm_bench, rounds};
use crate::bench::report::median;
use crate::build::Deliverables;

/// The jvm bench's steady-state programs measured with publishing: the four whose rounds
/// are short enough for pairs of JVMs (H2's and javac's warm-ups take minutes with `-Xbatch`).
const PUBLISH_PROGRAMS: [&str; 4] = ["rhino", "jython", "xalan", "lucene"];

/// The arms, `publish=` values: without publishing, the default (the heap), slots. The
/// goal's verdict is the default's.
const ARMS: [&str; 3] = ["false", "true", "slot"];

/// One SteadyBench JVM under the agent (`-Xbatch`, `profiler=usdt`) joined by the jpd on
/// `socket`: the median of its measured rounds, ms. Checks that jpd joined it and that it
/// published its contexts exactly when asked to (CPU on its contexts, or none).
fn program_run(
    out: &Deliverables,
    dir: &Path,
    socket: &Path,
    program: &jvm_bench::Program,
    publish: &str,
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
    if (publish != "false") != (on_contexts > 0) {
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
    // `JP_CPU_PROGRAMS=jython,rhino`: only these (to look at one program again).
    let only = std::env::var("JP_CPU_PROGRAMS").unwrap_or_default();
    let only: Vec<&str> = only.split(',').filter(|k| !k.is_empty()).collect();
    if let Some(k) = only.iter().find(|k| !PUBLISH_PROGRAMS.contains(k)) {
        bail!("JP_CPU_PROGRAMS: {k:?} is not one of {PUBLISH_PROGRAMS:?}");
    }
    let chosen: Vec<_> = chosen
        .into_iter()
        .filter(|p| only.is_empty() || only.contains(&p.key))
        .collect();
    let socket = dir.join("jpd-programs.sock");
    let config = jpd_config(&dir, true)?;
    let mut rows = String::new();
    let mut verdicts = Vec::new();
    let mut all_ratios = Vec::new();
    let mut slot_ratios = Vec::new();
    for program in &chosen {
        // [set] → ms a round by ARMS; the order rotates from set to set.
        let mut ms: Vec<[f64; 3]> = Vec::new();
        for set in 0..pairs {
            eprintln!(
                "xtask: bench cpu programs: {} set {}/{pairs}",
                program.key,
                set + 1
            );
            let mut round = [0.0; 3];
            for i in 0..ARMS.len() {
                let a = (i + set) % ARMS.len();
                // A jpd of its own for every JVM, so that it lists just that one.
                let mut jpd =
                    Jpd::start_at(out, &socket, Some(&config), 997, Duration::from_millis(500))?;
                round[a] = program_run(out, &dir, &socket, program, ARMS[a])?;
                jpd.stop();
            }
            ms.push(round);
        }
        let ratios: Vec<f64> = ms.iter().map(|r| r[1] / r[0]).collect();
        let slots: Vec<f64> = ms.iter().map(|r| r[2] / r[0]).collect();
        all_ratios.extend(ratios.iter().copied());
        slot_ratios.extend(slots.iter().copied());
        let cells: Vec<String> = ms
            .iter()
            .map(|r| {
                format!(
                    "{:.1} / {:.1} / {:.1} ({:.3}, {:.3})",
                    r[0],
                    r[1],
                    r[2],
                    r[1] / r[0],
                    r[2] / r[0]
                )
            })
            .collect();
        let (lo, hi) = min_max(&ratios);
        let m = median(&mut ratios.clone());
        let (slo, shi) = min_max(&slots);
        let sm = median(&mut slots.clone());
        rows.push_str(&format!(
            "| {} | {} | {m:.3} [{lo:.3}–{hi:.3}] | {sm:.3} [{slo:.3}–{shi:.3}] |\n",
            program.name,
            cells.join(", ")
        ));
        let v = if hi <= GOAL_RATIO {
            "**met** in every set".to_string()
        } else if lo > GOAL_RATIO {
            "**not met** in any set".to_string()
        } else {
            let over = ratios.iter().filter(|r| **r > GOAL_RATIO).count();
            format!(
                "{} at the median; {over} of {} sets above 1.05 (cannot tell for sure)",
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
    let geomean = |v: &[f64]| (v.iter().map(|r| r.ln()).sum::<f64>() / v.len() as f64).exp();
    let (geo, slot_geo) = (geomean(&all_ratios), geomean(&slot_ratios));
    Ok(format!(
        "### Publishing in real programs at steady state (ms a round, JDK 17, bba=default)\n\n\
The jvm bench's `SteadyBench` (its warm-up, then the median of {} measured rounds, CPU time of \
the working thread), `profiler=usdt` under a jpd that joined the JVM, in every arm: reports \
sent, threads counted by kind. The arms differ only in publishing: `publish=false` (no thread \
publishes; calls and returns test whether it does and store nothing more), the default (on \
the heap: the sampler reads the field each context change stores anyway, at 997 Hz) and \
`publish=slot` (a native slot written at every context change and read by the sampler). \
Checked for every run: `jpctl jvm list` shows the JVM's `cpu`, and jpd counted CPU on its \
contexts in the publishing arms and none in the other. All with `-Xbatch`, so that the JVMs \
of a set compile the same methods with the same profiles (without it, JVMs of the same agent \
differ by up to 40 %; with it, by a few %: docs/journal/last-child-made-not-found.md); \
{pairs} sets of three JVMs a program, the order rotating, a jpd started for each \
JVM. Cells: without / heap (the default) / slot, ms a round (ratios to without).\n\n\
| program | sets: without / heap / slot (heap, slot ratios) | heap ratio, median [min–max] | slot ratio, median [min–max] |\n\
| --- | --- | ---: | ---: |\n{rows}\n\
Geometric mean of all sets' ratios: {geo:.3} publishing on the heap (the default), {slot_geo:.3} in slots.\n\n\
Goal: publishing costs at most 5 % more than the agent without it.\n{}\n",
        rounds::MEASURED,
        verdicts.join("\n"),
    ))
}
