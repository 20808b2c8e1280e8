//! The `jpd` part: jpd's own CPU and memory with many JVMs of light periodic work, the
//! join on against the join off, jpd restarted between windows while the JVMs keep
//! running; then the same JVMs without the agent.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::jvms::{context_cpu_ns, jpd_config_with, jvm_list, wait_for, JpdSetting, Load};
use super::{min_max, spread_cell};
use crate::bench::harness::{env_num, rss_kib, Jpd};
use crate::bench::report::median;
use crate::build::Deliverables;

/// jpd's load: each thread makes ~19 × WORK calls, then sleeps SLEEP_MS.
const LIGHT_SLEEP_MS: u32 = 20;
const LIGHT_WORK: u32 = 20;
/// jpd's warm-up after it holds (and joined) every JVM, before its CPU is measured.
const JPD_WARMUP: Duration = Duration::from_secs(10);

/// utime + stime of a process (all its threads, ended ones included), in seconds.
pub(in crate::bench) fn process_cpu_s(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields count from the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/PID/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3; utime 14 and stime 15 → indexes 11 and 12.
    let ticks: u64 = f
        .get(11..13)
        .context("short /proc/PID/stat")?
        .iter()
        .map(|v| v.parse::<u64>().unwrap_or(0))
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Ok(ticks as f64 / hz as f64)
}

/// The fleet: killed when dropped.
pub(in crate::bench) struct Loads(Vec<Load>);

impl Loads {
    pub(in crate::bench) fn start(
        out: &Deliverables,
        dir: &Path,
        agent: bool,
        jvms: u64,
        threads: u32,
    ) -> Result<Loads> {
        let mut loads = Loads(Vec::new());
        for _ in 0..jvms {
            loads.0.push(Load::start(
                out,
                dir,
                // Reports every 500 k bytecodes (a few seconds of this light work): every
                // thread is announced to a freshly started jpd within the warm-up.
                agent.then_some("profiler=usdt,granularity=500000"),
                // C1 only and a small heap: 20 JVMs on 2 cores and their compilers.
                &["-Xmx64m", "-XX:TieredStopAtLevel=1"],
                threads,
                LIGHT_SLEEP_MS,
                LIGHT_WORK,
            )?);
        }
        for l in &mut loads.0 {
            l.ready()?;
        }
        Ok(loads)
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Load::pid).collect()
    }

    fn cpu_s(&self) -> f64 {
        self.0
            .iter()
            .map(|l| process_cpu_s(l.pid()).unwrap_or(0.0))
            .sum()
    }
}

pub(in crate::bench) struct JpdWindow {
    pub label: &'static str,
    pub cpu_pct: f64,
    pub rss_mib: f64,
    pub load_cores: f64,
    pub joined: usize,
    pub listed: usize,
    /// JVMs with CPU counted under their resolved contexts.
    pub resolved: usize,
}

/// One window: a jpd started for it, every JVM listed (and joined, if `setting.join`), a
/// warm-up, then jpd's CPU over `window`.
pub(in crate::bench) fn jpd_window(
    out: &Deliverables,
    dir: &Path,
    loads: &Loads,
    label: &'static str,
    agent: bool,
    setting: JpdSetting,
    window: Duration,
) -> Result<JpdWindow> {
    let join = setting.join;
    let socket = dir.join("jpd-fleet.sock");
    let config = jpd_config_with(dir, setting)?;
    let mut jpd = Jpd::start_with(out, &socket, Some(&config))?;
    let pids = loads.pids();
    let count = |list: &[(u32, bool, String)], joined: bool| {
        pids.iter()
            .filter(|p| list.iter().any(|(q, j, _)| q == *p && (*j || !joined)))
            .count()
    };
    if agent {
        wait_for(
            &format!(
                "jpd lists all {} JVMs{}",
                pids.len(),
                if join { " and joins them" } else { "" }
            ),
            Duration::from_secs(180),
            || Ok(count(&jvm_list(out, &socket)?, join) == pids.len()),
        )?;
    }
    std::thread::sleep(JPD_WARMUP);
    let (c0, l0, t0) = (process_cpu_s(jpd.pid())?, loads.cpu_s(), Instant::now());
    std::thread::sleep(window);
    let (c1, l1, secs) = (
        process_cpu_s(jpd.pid())?,
        loads.cpu_s(),
        t0.elapsed().as_secs_f64(),
    );
    let rss = rss_kib(jpd.pid()) as f64 / 1024.0;
    let list = jvm_list(out, &socket)?;
    let mut resolved = 0;
    if join && agent {
        for pid in &pids {
            if context_cpu_ns(out, &socket, *pid)? > 0 {
                resolved += 1;
            }
        }
    }
    jpd.stop();
    let (listed, joined) = (count(&list, false), count(&list, true));
    if agent && listed != pids.len() {
        bail!(
            "{label}: jpd lists {listed} of {} JVMs at the end of the window",
            pids.len()
        );
    }
    if join && agent && joined != pids.len() {
        bail!(
            "{label}: jpd joined {joined} of {} JVMs at the end of the window (`cpu` missing)",
            pids.len()
        );
    }
    if join && agent && resolved != pids.len() {
        bail!(
            "{label}: only {resolved} of {} JVMs have CPU under their contexts (threads' slots never read)",
            pids.len()
        );
    }
    if !join && joined != 0 {
        bail!("{label}: jpd with jvm_contexts = false shows CPU for {joined} JVMs");
    }
    Ok(JpdWindow {
        label,
        cpu_pct: 100.0 * (c1 - c0) / secs,
        rss_mib: rss,
        load_cores: (l1 - l0) / secs,
        joined,
        listed,
        resolved,
    })
}

/// jpd's CPU (% of one core) in the windows labelled `label`.
pub(in crate::bench) fn cpu_of(windows: &[JpdWindow], label: &str) -> Vec<f64> {
    windows
        .iter()
        .filter(|w| w.label == label)
        .map(|w| w.cpu_pct)
        .collect()
}

/// jpd's median resident memory (MiB) in the windows labelled `label`.
pub(in crate::bench) fn rss_median(windows: &[JpdWindow], label: &str) -> f64 {
    let mut v: Vec<f64> = windows
        .iter()
        .filter(|w| w.label == label)
        .map(|w| w.rss_mib)
        .collect();
    median(&mut v)
}

pub(super) fn run(out: &Deliverables, dir: &Path) -> Result<String> {
    let jvms = env_num("JP_CPU_JVMS", 20);
    let threads = env_num("JP_CPU_THREADS", 50) as u32;
    let window = Duration::from_secs(env_num("JP_CPU_JPD_WINDOW_S", 30));
    let rounds_n = env_num("JP_CPU_JPD_ROUNDS", 2) as usize;
    const ON: &str = "agent, join on";
    const OFF: &str = "agent, `jvm_contexts = false`";
    const BARE: &str = "no agent";
    eprintln!("xtask: bench cpu jpd: {jvms} JVMs × {threads} threads with the agent");
    let mut windows = Vec::new();
    {
        let loads = Loads::start(out, dir, true, jvms, threads)?;
        for round in 0..rounds_n {
            // On/off alternating, the first arm alternating too.
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for join in order {
                eprintln!(
                    "xtask: bench cpu jpd: round {}/{rounds_n}, join {join}",
                    round + 1
                );
                let label = if join { ON } else { OFF };
                let setting = JpdSetting {
                    join,
                    offcpu: false,
                };
                windows.push(jpd_window(out, dir, &loads, label, true, setting, window)?);
            }
        }
    }
    eprintln!("xtask: bench cpu jpd: the same JVMs without the agent");
    {
        let loads = Loads::start(out, dir, false, jvms, threads)?;
        let setting = JpdSetting {
            join: true,
            offcpu: false,
        };
        windows.push(jpd_window(out, dir, &loads, BARE, false, setting, window)?);
    }
    let mut rows = String::new();
    for w in &windows {
        rows.push_str(&format!(
            "| {} | {:.2} | {:.1} | {:.2} | {} | {} | {} |\n",
            w.label, w.cpu_pct, w.rss_mib, w.load_cores, w.listed, w.joined, w.resolved
        ));
    }
    let of = |label: &str| cpu_of(&windows, label);
    let rss_of = |label: &str| rss_median(&windows, label);
    let (on, off, bare) = (of(ON), of(OFF), of(BARE));
    let diffs: Vec<f64> = windows
        .chunks(2)
        .filter(|c| c.len() == 2 && c[0].label != BARE && c[1].label != BARE)
        .map(|c| {
            if c[0].label == ON {
                c[0].cpu_pct - c[1].cpu_pct
            } else {
                c[1].cpu_pct - c[0].cpu_pct
            }
        })
        .collect();
    let lo = min_max(&diffs).0;
    let verdict = if lo > 0.0 {
        "more than without in every round"
    } else {
        "not distinguishable from the spread between rounds"
    };
    Ok(format!(
        "### jpd with {jvms} JVMs × {threads} threads joined\n\n\
{jvms} CpuLoad JVMs (JDK 17, C1 only, 64 MiB heap) × {threads} threads, each thread making ~{} calls \
then sleeping {LIGHT_SLEEP_MS} ms (light periodic work; the context changes at every call), \
agent `profiler=usdt,granularity=500000` (each thread reports every few seconds, so that a \
freshly started jpd learns every thread's slot within the warm-up), sampled at 997 Hz, all under one jpd (nice −5, as the unit runs it). The JVMs keep running \
while jpd is started afresh for each window, the join on and off alternating ({rounds_n} \
rounds); each window starts once jpd lists every JVM (and, join on, shows a `cpu` for each \
in `jpctl jvm list --json`; at the window's end every JVM must also have CPU under its \
resolved contexts in `jpctl jvm top --by cpu`, or the bench fails), \
then {} s of warm-up, then jpd's CPU (utime + stime of `/proc/PID/stat`, all threads) over \
{} s as a share of one core, and its resident memory at the end. Last, the same JVMs started \
again without the agent, under the default jpd. \"Load\": the JVMs' own CPU in the window, \
in cores (of 2).\n\n\
| jpd | CPU % of one core | RSS MiB | load (cores) | JVMs listed | JVMs joined | JVMs with CPU per context |\n\
| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n{rows}\n\
jpd's CPU, median [min–max]: join on **{}** %, join off {} %, JVMs without the agent {} % of \
one core; join on − off within a round {} percentage points ({verdict}). RSS: {:.1} MiB join \
on, {:.1} MiB join off, {:.1} MiB without the agent.\n",
        19 * LIGHT_WORK,
        JPD_WARMUP.as_secs(),
        window.as_secs(),
        spread_cell(&on, 2),
        spread_cell(&off, 2),
        spread_cell(&bare, 2),
        spread_cell(&diffs, 2),
        rss_of(ON),
        rss_of(OFF),
        rss_of(BARE),
    ))
}
