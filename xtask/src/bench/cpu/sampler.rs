//! The `sampler` part: `jp_sample`'s ns per sample from the kernel's BPF run-time
//! statistics, with and without the join, under the same load, each arm with a jpd of its
//! own, in rotating order every round.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::jvms::{context_cpu_ns, jpd_config, jvm_list, wait_for, Load};
use super::{min_max, spread_cell};
use crate::bench::floor::bpf_stats_on;
use crate::bench::harness::{env_num, jpctl_json, Jpd};
use crate::bench::report::median;
use crate::build::Deliverables;

/// Spinning threads of the sampler's load: more than the CPUs, so that (nearly) every
/// sample interrupts one of them and the arms differ only in what the sampler does.
const SPIN_THREADS: u32 = 4;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arm {
    /// Joined, the threads publishing on the heap (the default).
    Join,
    /// Joined, the threads publishing in native slots (`publish=slot`).
    JoinSlot,
    JoinOff,
    NoAgent,
    Idle,
}
const ARMS: [Arm; 5] = [
    Arm::Join,
    Arm::JoinSlot,
    Arm::JoinOff,
    Arm::NoAgent,
    Arm::Idle,
];

impl Arm {
    fn label(self) -> &'static str {
        match self {
            Arm::Join => "JVM + agent, joined (on the heap)",
            Arm::JoinSlot => "JVM + agent, joined, `publish=slot`",
            Arm::JoinOff => "JVM + agent, `jvm_contexts = false`",
            Arm::NoAgent => "JVM without the agent",
            Arm::Idle => "no JVM of ours",
        }
    }
}

/// One arm's window: jp_sample's runs and run time, the sample mix, and other people's
/// JVMs jpd joined meanwhile (this machine is shared).
struct Window {
    runs: u64,
    run_ns: u64,
    seconds: f64,
    idle_share: f64,
    foreign_joined: usize,
}

impl Window {
    fn ns_per_run(&self) -> f64 {
        self.run_ns as f64 / self.runs.max(1) as f64
    }
}

/// jp_sample's (runs, run time ns) and the (total, idle) samples, from `jpctl status`.
fn sampler_status(out: &Deliverables, socket: &Path) -> Result<((u64, u64), (u64, u64))> {
    let v = jpctl_json(out, socket, &["status", "--json"])?;
    let p = v["kernel"]["programs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "jp_sample")
        .context("no jp_sample in jpctl status --json")?;
    let s = &v["kernel"]["samples"];
    Ok((
        (
            p["run_count"].as_u64().unwrap_or(0),
            p["run_time_ns"].as_u64().unwrap_or(0),
        ),
        (
            s["total"].as_u64().unwrap_or(0),
            s["idle"].as_u64().unwrap_or(0),
        ),
    ))
}

fn sampler_window(out: &Deliverables, dir: &Path, arm: Arm, window: Duration) -> Result<Window> {
    let mut load = match arm {
        Arm::Idle => None,
        Arm::NoAgent => Some(Load::start(out, dir, None, &[], SPIN_THREADS, 0, 1000)?),
        Arm::Join | Arm::JoinSlot | Arm::JoinOff => Some(Load::start(
            out,
            dir,
            Some(if arm == Arm::JoinSlot {
                "profiler=usdt,publish=slot"
            } else {
                "profiler=usdt"
            }),
            &[],
            SPIN_THREADS,
            0,
            1000,
        )?),
    };
    if let Some(l) = load.as_mut() {
        l.ready()?;
    }
    let pid = load.as_ref().map(Load::pid);
    let socket = dir.join("jpd-sampler.sock");
    let config = jpd_config(dir, arm != Arm::JoinOff)?;
    let mut jpd = Jpd::start_with(out, &socket, Some(&config))?;
    if let Some(pid) = pid {
        let limit = Duration::from_secs(60);
        match arm {
            Arm::Join | Arm::JoinSlot => wait_for(&format!("jpd joins JVM {pid}"), limit, || {
                Ok(jvm_list(out, &socket)?
                    .iter()
                    .any(|(p, joined, _)| *p == pid && *joined))
            })?,
            Arm::JoinOff => wait_for(&format!("jpd lists JVM {pid}"), limit, || {
                Ok(jvm_list(out, &socket)?.iter().any(|(p, _, _)| *p == pid))
            })?,
            _ => {}
        }
    }
    // Let the join's start (the threads' first announcements) pass, in every arm alike.
    std::thread::sleep(Duration::from_secs(2));
    let stats = bpf_stats_on()?;
    let (r0, s0) = sampler_status(out, &socket)?;
    let t0 = Instant::now();
    std::thread::sleep(window);
    // jpd publishes its reading every second: the last one must cover the window.
    std::thread::sleep(Duration::from_millis(1100));
    let (r1, s1) = sampler_status(out, &socket)?;
    let seconds = t0.elapsed().as_secs_f64();
    drop(stats);
    let list = jvm_list(out, &socket)?;
    let resolved = match (arm, pid) {
        (Arm::Join | Arm::JoinSlot, Some(p)) => context_cpu_ns(out, &socket, p)?,
        _ => 0,
    };
    jpd.stop();
    drop(load);
    let ours_joined = pid.is_some_and(|p| list.iter().any(|(q, j, _)| *q == p && *j));
    match arm {
        Arm::Join | Arm::JoinSlot if !ours_joined || resolved == 0 => bail!(
            "the joined arm's JVM was not joined at the end (listed with cpu: {ours_joined}, CPU under its contexts: {resolved} ns)"
        ),
        Arm::JoinOff if list.iter().any(|(_, j, _)| *j) => {
            bail!("jpd with jvm_contexts = false joined a JVM")
        }
        _ => {}
    }
    let total = s1.0.saturating_sub(s0.0);
    Ok(Window {
        runs: r1.0.saturating_sub(r0.0),
        run_ns: r1.1.saturating_sub(r0.1),
        seconds,
        idle_share: s1.1.saturating_sub(s0.1) as f64 / total.max(1) as f64,
        foreign_joined: list
            .iter()
            .filter(|(p, j, _)| *j && Some(*p) != pid)
            .count(),
    })
}

pub(super) fn run(out: &Deliverables, dir: &Path) -> Result<String> {
    let rounds = env_num("JP_CPU_ROUNDS", 6) as usize;
    let window = Duration::from_secs(env_num("JP_CPU_WINDOW_S", 10));
    let mut windows: Vec<Vec<Window>> = ARMS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for i in 0..ARMS.len() {
            // Rotating order: a drift of the machine hits every arm alike.
            let a = (i + round) % ARMS.len();
            eprintln!(
                "xtask: bench cpu sampler: round {}/{rounds}, {}",
                round + 1,
                ARMS[a].label()
            );
            windows[a].push(sampler_window(out, dir, ARMS[a], window)?);
        }
    }
    let ns: Vec<Vec<f64>> = windows
        .iter()
        .map(|w| w.iter().map(Window::ns_per_run).collect())
        .collect();
    let mut rows = String::new();
    for (a, arm) in ARMS.iter().enumerate() {
        let w = &windows[a];
        let rate: Vec<f64> = w.iter().map(|w| w.runs as f64 / w.seconds).collect();
        let idle: Vec<f64> = w.iter().map(|w| 100.0 * w.idle_share).collect();
        let foreign = w.iter().map(|w| w.foreign_joined).max().unwrap_or(0);
        rows.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {foreign} |\n",
            arm.label(),
            spread_cell(&ns[a], 0),
            median(&mut rate.clone()),
            median(&mut idle.clone()),
        ));
    }
    // Differences within a round (same machine state), then over rounds.
    let diff =
        |a: usize, b: usize| -> Vec<f64> { ns[a].iter().zip(&ns[b]).map(|(x, y)| x - y).collect() };
    let join = diff(0, 2);
    let join_slot = diff(1, 2);
    let heap_over_slot = diff(0, 1);
    let miss = diff(2, 3);
    let jvm = diff(3, 4);
    let (lo, hi) = min_max(&join);
    let join_med = median(&mut join.clone());
    let verdict = if lo > 0.0 {
        format!("the join costs **{join_med:.0} ns per sample** (every round's difference is positive: {lo:.0}–{hi:.0} ns)")
    } else {
        format!(
            "the join's cost per sample, median {join_med:.0} ns, is **within the noise** (differences over rounds {lo:.0}–{hi:.0} ns straddle 0)"
        )
    };
    Ok(format!(
        "### `jp_sample` per sample, with and without the join\n\n\
The kernel's BPF run-time statistics (on for each measuring window only) over {} s windows, \
jpd at 997 Hz on 2 CPUs (its `jpctl status` run count and run time of `jp_sample`; ns per run = \
run time / runs). Load: CpuLoad, {SPIN_THREADS} threads spinning on calls of small methods (JDK 17). \
Arms, each with a jpd started for it, in rotating order every round, {rounds} rounds: the JVM \
with the agent (`profiler=usdt`), joined (its threads in `JP_JVM_THREADS`: the sampler reads \
each interrupted thread's current context, on the heap by default: the reference's cell, the \
cookie and the id, three reads; with `publish=slot` from its slot, one read; and logs the sample \
in `JP_CTX_LOG`); the same JVM under a jpd with \
`[kernel] jvm_contexts = false` (the pid never registered: one `JP_JVM_PIDS` lookup that misses); \
the same program without the agent (a miss too, under the default jpd); no JVM of ours (the \
floor on an idle machine, where idle samples return before the lookup; on a shared one, other \
people's processes: the idle column says which it was). The statistics' own two clock reads \
are in every figure alike.\n\n\
| arm | ns per sample, median [min–max] | samples/s | idle % | other JVMs joined |\n\
| --- | ---: | ---: | ---: | ---: |\n{rows}\n\
Differences within a round, median [min–max] over rounds: joined − join off (the join itself, \
on the heap) **{}** ns; joined with slots − join off {} ns; on the heap − slots {} ns; join off \
− no agent (same lookup miss, the agent's JVM) {} ns; no agent − no JVM of ours {} ns.\n\n\
So {verdict}. \"Other JVMs joined\": JVMs of other people's runs on this machine (tests \
with the agent) that the default jpd joined during a window (the most in any round; their \
samples took the join's path too; the `jvm_contexts = false` arm joins none).\n",
        window.as_secs(),
        spread_cell(&join, 0),
        spread_cell(&join_slot, 0),
        spread_cell(&heap_over_slot, 0),
        spread_cell(&miss, 0),
        spread_cell(&jvm, 0),
    ))
}
