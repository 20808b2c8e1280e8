//! `cargo xtask bench fleet rotation`: what jpd's fleet rotation costs the JVMs. The same
//! fleet (FleetWork, JDK 17) runs with the agent dormant, each thread pausing between
//! rounds so the host is not saturated (a window's extra work then shows as extra CPU, not
//! as lost throughput). jpd's rotation is turned on and off in turns by a reload
//! (`[windows.rotation] enabled`), phases of equal length, the order swapped every pair so
//! that a drift of the machine cancels. The rotation takes only the fleet's JVMs
//! (`main_class`). Per phase: each JVM's CPU (schedstat of its threads), jpd's CPU, and the
//! rotation's counters and planned duty cycles from /metrics.
//!
//! Results: the fleet's extra CPU with the rotation on (its CPU on over off, less 1) per
//! pair, its mean and standard error; each JVM's over the whole run; the windows delivered
//! against what the plan's arithmetic expects (Σ phase seconds × duty / window seconds);
//! windows lost (opened and not completed, failed, refused).
//!
//! Sizes from the environment: `JP_ROTATION_JVMS` (20), `JP_ROTATION_THREADS` (1),
//! `JP_ROTATION_PAUSE_MS` (1), `JP_ROTATION_PHASE_SECONDS` (60), `JP_ROTATION_PAIRS` (5),
//! `JP_ROTATION_BUDGET_PERCENT` (1), `JP_ROTATION_WINDOW_SECONDS` (10).
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{scrape, start_jpd, wait_all_listed, Files, Fleet, FleetJvms, EXPORT};
use crate::bench::cgroups::FleetGroups;
use crate::bench::harness::{env_num, task_cpu_ns};
use crate::bench::report::{write_section_after, Spread};
use crate::build::Deliverables;

/// Before the first phase: the JVMs' warm-up (JIT, class loading), and the rotation's
/// watch of a JVM before its first window (12 window lengths, at most 120 s).
const WARM_UP: Duration = Duration::from_secs(120);

struct Settings {
    jvms: usize,
    threads: u64,
    pause_ms: u64,
    phase: Duration,
    pairs: usize,
    budget_percent: f64,
    window_seconds: u64,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            jvms: env_num("JP_ROTATION_JVMS", 20) as usize,
            threads: env_num("JP_ROTATION_THREADS", 1),
            pause_ms: env_num("JP_ROTATION_PAUSE_MS", 1),
            phase: Duration::from_secs(env_num("JP_ROTATION_PHASE_SECONDS", 60)),
            pairs: env_num("JP_ROTATION_PAIRS", 5) as usize,
            budget_percent: env_num("JP_ROTATION_BUDGET_PERCENT", 1) as f64,
            window_seconds: env_num("JP_ROTATION_WINDOW_SECONDS", 10),
        }
    }

    fn config(&self, enabled: bool) -> String {
        format!(
            "[export]\nenabled = true\nlisten = \"{EXPORT}\"\n[usdt]\nscan_interval_ms = 500\n\
             [windows.rotation]\nenabled = {enabled}\nbudget_percent = {:.3}\nseconds = {}\nmax_open = 1\n\
             main_class = [\"FleetWork\"]\n",
            self.budget_percent, self.window_seconds
        )
    }
}

/// The rotation's figures from one scrape.
#[derive(Clone, Copy, Default)]
struct Counters {
    opened: f64,
    completed: f64,
    failed: f64,
    refused: f64,
    /// Σ over JVMs of the planned duty cycle.
    duty_sum: f64,
}

impl Counters {
    fn read() -> Result<Counters> {
        let text = scrape()?;
        let rotation = |name: &str| metric(&text, name, Some("origin=\"rotation\""));
        Ok(Counters {
            opened: rotation("jp_jvm_windows_opened_total"),
            completed: rotation("jp_jvm_windows_completed_total"),
            failed: rotation("jp_jvm_windows_failed_total"),
            refused: rotation("jp_jvm_windows_refused_total"),
            duty_sum: metric(&text, "jp_jvm_rotation_duty_cycle", None),
        })
    }
}

/// The sum of the samples of `name` (whose labels hold `label`, when given).
fn metric(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| label.is_none_or(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One phase: the rotation on or off, the CPU each JVM and jpd used, the counters'
/// difference, and the duty the plan gave.
struct Phase {
    on: bool,
    seconds: f64,
    jvm_cpu_s: Vec<f64>,
    jpd_cpu_s: f64,
    delta: Counters,
    duty_sum: f64,
}

pub fn run(out: &Deliverables) -> Result<()> {
    let s = Settings::from_env();
    let files = Files::prepare()?;
    std::fs::write(&files.config, s.config(false))?;
    let groups = FleetGroups::create()?;
    FleetGroups::enter(&groups.client, std::process::id())?;
    let jpd = start_jpd(out, &files, &groups)?;
    eprintln!(
        "xtask: bench fleet rotation: {} dormant JVMs × {} threads, {} pairs of {} s phases, \
         budget {} %, windows of {} s",
        s.jvms,
        s.threads,
        s.pairs,
        s.phase.as_secs(),
        s.budget_percent,
        s.window_seconds
    );
    let jvms = FleetJvms {
        count: s.jvms,
        threads: s.threads,
        agent_options: "mode=dormant",
        pause_ms: s.pause_ms,
    };
    let mut fleet = Fleet::start(out, &files, &jvms, &groups)?;
    let pids = fleet.pids();
    wait_all_listed(out, &files.socket, &pids, Duration::from_secs(120))?;
    std::thread::sleep(WARM_UP);
    let mut phases = Vec::new();
    for pair in 0..s.pairs {
        let order = if pair % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for on in order {
            phases.push(phase(&s, &files, jpd.pid(), &pids, on)?);
        }
    }
    std::fs::write(&files.stop, b"")?;
    fleet.wait();
    drop(jpd);
    write_section_after("fleet-rotation", Some("fleet"), &render(&s, &phases))
}

/// Turns the rotation on or off (a reload), waits a phase, reads what it cost.
fn phase(s: &Settings, files: &Files, jpd: u32, pids: &[u32], on: bool) -> Result<Phase> {
    std::fs::write(&files.config, s.config(on))?;
    // SAFETY: kill on jpd's pid, our child, still running.
    unsafe { libc::kill(jpd as i32, libc::SIGHUP) };
    let c0 = Counters::read()?;
    let cpu0: Vec<u64> = pids.iter().map(|&p| task_cpu_ns(p).unwrap_or(0)).collect();
    let jpd0 = task_cpu_ns(jpd)?;
    let t0 = Instant::now();
    std::thread::sleep(s.phase);
    let cpu1: Vec<u64> = pids.iter().map(|&p| task_cpu_ns(p).unwrap_or(0)).collect();
    let jpd1 = task_cpu_ns(jpd).context("jpd ended")?;
    let seconds = t0.elapsed().as_secs_f64();
    let c1 = Counters::read()?;
    eprintln!(
        "xtask: bench fleet rotation: phase {} — windows completed {}",
        if on { "on" } else { "off" },
        c1.completed - c0.completed
    );
    Ok(Phase {
        on,
        seconds,
        jvm_cpu_s: cpu0
            .iter()
            .zip(&cpu1)
            .map(|(a, b)| b.saturating_sub(*a) as f64 / 1e9)
            .collect(),
        jpd_cpu_s: jpd1.saturating_sub(jpd0) as f64 / 1e9,
        delta: Counters {
            opened: c1.opened - c0.opened,
            completed: c1.completed - c0.completed,
            failed: c1.failed - c0.failed,
            refused: c1.refused - c0.refused,
            duty_sum: 0.0,
        },
        // At the phase's end: a reload that turned the rotation on applies at its next
        // tick, after the first scrape.
        duty_sum: c1.duty_sum,
    })
}

/// The fleet's CPU rate in a phase (cores, all JVMs).
fn fleet_rate(p: &Phase) -> f64 {
    p.jvm_cpu_s.iter().sum::<f64>() / p.seconds
}

/// Mean and standard error of the mean.
fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

fn render(s: &Settings, phases: &[Phase]) -> String {
    let pairs: Vec<f64> = phases
        .chunks(2)
        .filter_map(|pair| {
            let on = pair.iter().find(|p| p.on)?;
            let off = pair.iter().find(|p| !p.on)?;
            Some(fleet_rate(on) / fleet_rate(off) - 1.0)
        })
        .collect();
    let (extra, extra_se) = mean_se(&pairs);
    let per_jvm: Vec<f64> = (0..s.jvms)
        .map(|j| {
            let rate = |on: bool| {
                let (cpu, secs) = phases
                    .iter()
                    .filter(|p| p.on == on)
                    .fold((0.0, 0.0), |a, p| {
                        (
                            a.0 + p.jvm_cpu_s.get(j).copied().unwrap_or(0.0),
                            a.1 + p.seconds,
                        )
                    });
                cpu / secs
            };
            rate(true) / rate(false) - 1.0
        })
        .collect();
    let jvm_spread = Spread::of(&per_jvm);
    let on: Vec<&Phase> = phases.iter().filter(|p| p.on).collect();
    let sum = |f: fn(&Phase) -> f64| on.iter().map(|p| f(p)).sum::<f64>();
    let expected: f64 = sum(|p| p.seconds * p.duty_sum) / s.window_seconds as f64;
    let completed = sum(|p| p.delta.completed);
    let opened = sum(|p| p.delta.opened);
    let failed = sum(|p| p.delta.failed);
    let refused = sum(|p| p.delta.refused);
    let off_windows: f64 = phases
        .iter()
        .filter(|p| !p.on)
        .map(|p| p.delta.opened)
        .sum();
    let jpd_pct = |on: bool| {
        let (cpu, secs) = phases
            .iter()
            .filter(|p| p.on == on)
            .fold((0.0, 0.0), |a, p| (a.0 + p.jpd_cpu_s, a.1 + p.seconds));
        cpu / secs * 100.0
    };
    let mut rows = String::new();
    for (i, p) in phases.iter().enumerate() {
        rows.push_str(&format!(
            "| {} | {} | {:.3} | {:.2} | {} | {} |\n",
            i + 1,
            if p.on { "on" } else { "off" },
            fleet_rate(p),
            p.jpd_cpu_s / p.seconds * 100.0,
            p.delta.completed,
            if p.on {
                format!("{:.2}", p.seconds * p.duty_sum / s.window_seconds as f64)
            } else {
                "—".into()
            },
        ));
    }
    format!(
        "## The fleet rotation's cost: `cargo xtask bench fleet rotation`\n\n\
         {} JVMs (JDK 17, C1 only, FleetWork, {} thread(s) pausing {} ms between rounds) \
         started with the agent dormant; jpd's rotation (budget {} %, windows of {} s, \
         max_open 1) turned on and off by a reload, {} pairs of {} s phases (order swapped \
         every pair), after {} s of warm-up.\n\n\
         | phase | rotation | fleet CPU (cores) | jpd CPU % | windows completed | windows expected |\n\
         |---:|---|---:|---:|---:|---:|\n{rows}\n\
         Extra CPU of the fleet with the rotation on: {:+.2} % ± {:.2} % (mean of the pairs' \
         on/off ratios less 1, ± its standard error; the budget is {} %). Per JVM over the \
         whole run: median {:+.2} %, from {:+.2} % to {:+.2} %.\n\n\
         Windows with the rotation on: {} completed of {} opened, against {:.1} expected by \
         the plan (Σ phase seconds × planned duty cycles / window seconds); failed {}, \
         refused {}; opened while off (a reload takes effect at the next tick) {}. jpd's \
         CPU: {:.2} % of a core with the rotation on, {:.2} % off.\n",
        s.jvms,
        s.threads,
        s.pause_ms,
        s.budget_percent,
        s.window_seconds,
        s.pairs,
        s.phase.as_secs(),
        WARM_UP.as_secs(),
        extra * 100.0,
        extra_se * 100.0,
        s.budget_percent,
        jvm_spread.median * 100.0,
        jvm_spread.min * 100.0,
        jvm_spread.max * 100.0,
        completed,
        opened,
        expected,
        failed,
        refused,
        off_windows,
        jpd_pct(true),
        jpd_pct(false),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_summed_by_name_and_label() {
        let text = "# HELP x\njp_a{origin=\"rotation\"} 3\njp_a{origin=\"request\"} 4\n\
                    jp_ab 100\njp_b{pid=\"1\"} 0.5\njp_b{pid=\"2\"} 0.25\n";
        assert_eq!(metric(text, "jp_a", Some("origin=\"rotation\"")), 3.0);
        assert_eq!(metric(text, "jp_a", None), 7.0);
        assert_eq!(metric(text, "jp_b", None), 0.75);
        assert_eq!(metric(text, "jp_c", None), 0.0);
    }

    #[test]
    fn mean_and_standard_error() {
        let (m, se) = mean_se(&[1.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((se - 1.0).abs() < 1e-12);
        assert!(mean_se(&[1.0]).1.is_nan());
    }
}
