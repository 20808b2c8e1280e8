//! The `jpd` part: jpd's own CPU and memory with the cpu bench's fleet (JVMS JVMs ×
//! THREADS threads of light periodic work: calls, then a 20 ms sleep, so every thread
//! switches ~50 times a second), joined, off-CPU on against off, alternating, jpd
//! restarted for each window while the JVMs keep running.
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::bench::cpu::jpd::{cpu_of, jpd_window, rss_median, JpdWindow, Loads};
use crate::bench::cpu::jvms::JpdSetting;
use crate::bench::cpu::{min_max, spread_cell};
use crate::bench::harness::env_num;
use crate::bench::report::median;
use crate::build::Deliverables;

const ON: &str = "join on, `offcpu = true`";
const OFF: &str = "join on, off-CPU off";

pub(super) fn run(out: &Deliverables, dir: &Path) -> Result<String> {
    let jvms = env_num("JP_CPU_JVMS", 20);
    let threads = env_num("JP_CPU_THREADS", 50) as u32;
    let window = Duration::from_secs(env_num("JP_CPU_JPD_WINDOW_S", 30));
    let rounds = env_num("JP_OFFCPU_JPD_ROUNDS", 2) as usize;
    eprintln!("xtask: bench offcpu jpd: {jvms} JVMs × {threads} threads with the agent");
    let loads = Loads::start(out, dir, true, jvms, threads)?;
    let mut windows: Vec<JpdWindow> = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for offcpu in order {
            eprintln!(
                "xtask: bench offcpu jpd: round {}/{rounds}, offcpu {offcpu}",
                round + 1
            );
            let label = if offcpu { ON } else { OFF };
            let setting = JpdSetting { join: true, offcpu };
            windows.push(jpd_window(out, dir, &loads, label, true, setting, window)?);
        }
    }
    drop(loads);
    let mut rows = String::new();
    for w in &windows {
        rows.push_str(&format!(
            "| {} | {:.2} | {:.1} | {:.2} | {} | {} |\n",
            w.label, w.cpu_pct, w.rss_mib, w.load_cores, w.joined, w.resolved
        ));
    }
    let of = |label: &str| cpu_of(&windows, label);
    let rss = |label: &str| rss_median(&windows, label);
    let diffs: Vec<f64> = windows
        .chunks(2)
        .map(|c| match c {
            [a, b] if a.label == ON => a.cpu_pct - b.cpu_pct,
            [a, b] => b.cpu_pct - a.cpu_pct,
            _ => f64::NAN,
        })
        .collect();
    let (lo, hi) = min_max(&diffs);
    let verdict = if lo > 0.0 {
        format!(
            "off-CPU adds **{:.2}** points of one core (every round more)",
            median(&mut diffs.clone())
        )
    } else {
        format!("the difference ({lo:.2} to {hi:.2} points) is not distinguishable from the spread between rounds")
    };
    Ok(format!(
        "### jpd with {jvms} JVMs × {threads} threads joined, off-CPU on against off\n\n\
The cpu bench's fleet: {jvms} CpuLoad JVMs (JDK 17, C1 only, 64 MiB heap) × {threads} threads, \
each making a few hundred calls then sleeping 20 ms (so ~{} switch-outs a second of joined \
threads in all, more than the default cap of 10000 per CPU per second: the excess is counted, \
not timed), agent `profiler=usdt,granularity=500000`, sampled at 997 Hz. The JVMs keep \
running while jpd (default configuration but for `offcpu`) is started afresh for each window, \
off-CPU on and off alternating ({rounds} rounds); each window starts once jpd joined every JVM, \
then 10 s of warm-up, then jpd's CPU (utime + stime, all threads) over {} s as a share of one \
core, and its resident memory at the end; at the end every JVM must have CPU under its \
contexts. \"Load\": the JVMs' own CPU in the window, in cores (of 2).\n\n\
| jpd | CPU % of one core | RSS MiB | load (cores) | JVMs joined | JVMs with CPU per context |\n\
| --- | ---: | ---: | ---: | ---: | ---: |\n{rows}\n\
jpd's CPU, median [min–max]: off-CPU on **{}** %, off {} % of one core; on − off within a \
round {} points: {verdict}. RSS: {:.1} MiB on, {:.1} MiB off.\n",
        jvms * u64::from(threads) * 50,
        window.as_secs(),
        spread_cell(&of(ON), 2),
        spread_cell(&of(OFF), 2),
        spread_cell(&diffs, 2),
        rss(ON),
        rss(OFF),
    ))
}
