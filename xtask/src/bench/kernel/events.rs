//! Each eBPF program's cost per event, from the kernel's BPF statistics (on for the
//! measuring windows only: they add two clock reads to every program run on the host,
//! which must not be in the workload's numbers). jpd runs under the disk IRQ load and
//! the pinned kernel work; beside it, in the same windows, runs the floor's empty
//! perf_event program at the same frequency. That one is what any program costs here
//! before it does anything (the statistics' clock reads and the call), and it moves with
//! the machine's speed, which on a shared VM changes from one window to the next: a
//! program's figure above it, window by window, is what the program's own code costs.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{jpd_config, socket_path, IrqLoad, Worker};
use crate::bench::floor::{bpf_stats_on, Floor};
use crate::bench::harness::{Jpd, FREQUENCY_HZ};
use crate::bench::report::Spread;
use crate::build::Deliverables;

/// Work per window, and windows per setting.
const WINDOW: Duration = Duration::from_secs(4);
const WINDOWS: usize = 5;
/// jpd publishes its reading once a second: a wait this long gives a fresh one.
const PUBLISH_WAIT: Duration = Duration::from_millis(1100);
/// The interrupted-IP walk at hard-IRQ entry: jpd's default, off, and 10× the default.
const SETTINGS: [(&str, Option<u32>); 3] = [
    ("default (100/s)", None),
    ("off", Some(0)),
    ("1000/s", Some(1000)),
];

/// Per program: (runs, run time ns).
type ProgramCosts = Vec<(String, u64, u64)>;

struct Window {
    programs: ProgramCosts,
    /// The empty program's (runs, run time ns).
    empty: (u64, u64),
    secs: f64,
}

pub(super) struct Events {
    settings: Vec<(&'static str, Vec<Window>)>,
}

pub(super) fn run(out: &Deliverables, worker: &Worker, iters: u64, cpus: usize) -> Result<Events> {
    let _irq = IrqLoad::start()?;
    let floor = Floor::open(FREQUENCY_HZ, cpus)?;
    let mut settings = Vec::new();
    for (label, rate) in SETTINGS {
        let socket = socket_path();
        let config = jpd_config(rate)?;
        let mut jpd = Jpd::start_at(
            out,
            &socket,
            Some(&config),
            FREQUENCY_HZ,
            Duration::from_millis(500),
        )?;
        floor.enable()?;
        let windows = (0..WINDOWS)
            .map(|_| window(out, &socket, &floor, worker, iters))
            .collect::<Result<Vec<_>>>();
        floor.disable()?;
        jpd.stop();
        settings.push((label, windows?));
    }
    Ok(Events { settings })
}

/// One window with the statistics on: jpd's programs and the empty one.
fn window(
    out: &Deliverables,
    socket: &Path,
    floor: &Floor,
    worker: &Worker,
    iters: u64,
) -> Result<Window> {
    let stats = bpf_stats_on()?;
    // jpd's reading lags by up to a second: both of its ends fall inside the time the
    // statistics are on, a second at most from the empty program's.
    std::thread::sleep(PUBLISH_WAIT);
    let (before, empty0, t0) = (
        program_stats(out, socket)?,
        floor.program_stats()?,
        Instant::now(),
    );
    while t0.elapsed() < WINDOW {
        worker.reps(iters, 5)?;
    }
    std::thread::sleep(PUBLISH_WAIT);
    let (after, empty1) = (program_stats(out, socket)?, floor.program_stats()?);
    let secs = t0.elapsed().as_secs_f64();
    drop(stats);
    let programs = after
        .into_iter()
        .map(|(name, runs, ns)| {
            let (r0, n0) = before
                .iter()
                .find(|(n, _, _)| *n == name)
                .map_or((0, 0), |(_, r, t)| (*r, *t));
            (name, runs.saturating_sub(r0), ns.saturating_sub(n0))
        })
        .collect();
    Ok(Window {
        programs,
        empty: (
            empty1.0.saturating_sub(empty0.0),
            empty1.1.saturating_sub(empty0.1),
        ),
        secs,
    })
}

fn program_stats(out: &Deliverables, socket: &Path) -> Result<ProgramCosts> {
    let o = Command::new(&out.jpctl)
        .arg("--socket")
        .arg(socket)
        .args(["status", "--json"])
        .output()
        .context("cannot run jpctl status")?;
    if !o.status.success() {
        bail!(
            "jpctl status failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    let programs = v["kernel"]["programs"]
        .as_array()
        .context("no kernel.programs in jpctl status --json")?;
    Ok(programs
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("?").to_string(),
                p["run_count"].as_u64().unwrap_or(0),
                p["run_time_ns"].as_u64().unwrap_or(0),
            )
        })
        .collect())
}

/// ns per run.
fn per_run((runs, ns): (u64, u64)) -> f64 {
    ns as f64 / runs.max(1) as f64
}

/// "median [min…max]" in whole ns.
fn ns_cell(s: &Spread) -> String {
    format!("{:.0} [{:.0}…{:.0}]", s.median, s.min, s.max)
}

/// One program's figures over a setting's windows.
struct ProgramRow {
    name: String,
    runs_per_s: f64,
    ns: Spread,
    above_empty: Spread,
}

fn rows(windows: &[Window]) -> Vec<ProgramRow> {
    let names: Vec<String> = windows
        .first()
        .map(|w| w.programs.iter().map(|(n, _, _)| n.clone()).collect())
        .unwrap_or_default();
    names
        .into_iter()
        .map(|name| {
            let of = |w: &Window| {
                w.programs
                    .iter()
                    .find(|(n, _, _)| *n == name)
                    .map_or((0, 0), |(_, r, t)| (*r, *t))
            };
            let runs: Vec<f64> = windows.iter().map(|w| of(w).0 as f64 / w.secs).collect();
            ProgramRow {
                runs_per_s: Spread::of(&runs).median,
                ns: Spread::of(&windows.iter().map(|w| per_run(of(w))).collect::<Vec<_>>()),
                above_empty: Spread::of(
                    &windows
                        .iter()
                        .map(|w| per_run(of(w)) - per_run(w.empty))
                        .collect::<Vec<_>>(),
                ),
                name,
            }
        })
        .collect()
}

impl Events {
    pub(super) fn render(&self) -> String {
        let mut t = format!(
            "### Per-event costs (BPF statistics at {FREQUENCY_HZ} Hz under disk IRQ load and the kernel work)\n\n\
For each setting of the interrupted-IP walk, jpd ran {WINDOWS} windows of {} s of work, and in the same windows \
the floor's empty perf_event program at the same frequency. Cells: median [min…max] over the windows. \"Above the \
empty program\" is, window by window, a program's ns per run minus the empty program's: the empty program's own \
figure is entering a program and the statistics' two clock reads, which every program pays and which move with this \
shared machine's speed.\n\n\
| program | interrupted-IP walks | runs/s | ns per run | above the empty program |\n| --- | --- | ---: | ---: | ---: |\n",
            WINDOW.as_secs()
        );
        let mut sample = Vec::new();
        let mut irq_entry = None;
        let mut small = Vec::new();
        for (label, windows) in &self.settings {
            for r in rows(windows) {
                t.push_str(&format!(
                    "| `{}` | {label} | {:.0} | {} | {} |\n",
                    r.name,
                    r.runs_per_s,
                    ns_cell(&r.ns),
                    ns_cell(&r.above_empty)
                ));
                let default = label.starts_with("default");
                match r.name.as_str() {
                    "jp_sample" => sample.push((r.ns.median, r.above_empty.median)),
                    "jp_irq_entry" if default => irq_entry = Some(r.ns.median),
                    _ if default && r.name != "jp_irq_entry" => {
                        small.push((r.ns.median, r.above_empty.median))
                    }
                    _ => {}
                }
            }
            let empty = Spread::of(&windows.iter().map(|w| per_run(w.empty)).collect::<Vec<_>>());
            let runs = Spread::of(
                &windows
                    .iter()
                    .map(|w| w.empty.0 as f64 / w.secs)
                    .collect::<Vec<_>>(),
            );
            t.push_str(&format!(
                "| empty perf_event program | {label} | {:.0} | {} | 0 |\n",
                runs.median,
                ns_cell(&empty)
            ));
        }
        let worst = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
            v.iter().map(f).fold(f64::NEG_INFINITY, f64::max)
        };
        let verdict = |x: f64, goal: f64| if x <= goal { "met" } else { "**not met**" };
        let (sample_raw, sample_own) = (worst(&sample, |p| p.0), worst(&sample, |p| p.1));
        let (small_raw, small_own) = (worst(&small, |p| p.0), worst(&small, |p| p.1));
        let irq_entry = irq_entry.unwrap_or(f64::NAN);
        t.push_str(&format!(
            "\nGoals, each as measured and above the empty program (medians; the worst setting for `jp_sample`):\n\
- `jp_sample` ≤ 100 ns per sample: {} as measured ({sample_raw:.0} ns), {} above the empty program ({sample_own:.0} ns).\n\
- hard-IRQ entry ≤ 500 ns on average at the defaults under IRQ load: {} ({irq_entry:.0} ns as measured).\n\
- IRQ exit and softirq programs ≤ 150 ns: {} as measured (worst {small_raw:.0} ns), {} above the empty program (worst {small_own:.0} ns).\n",
            verdict(sample_raw, 100.0),
            verdict(sample_own, 100.0),
            verdict(irq_entry, 500.0),
            verdict(small_raw, 150.0),
            verdict(small_own, 150.0),
        ));
        t
    }
}
