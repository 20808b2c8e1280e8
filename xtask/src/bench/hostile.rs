//! `cargo xtask bench hostile [--quick]`: what each attack of jp-daemon's `hostile`
//! suite costs jpd and the real JVM beside it. Each attack's test runs ROUNDS times
//! with `JP_HOSTILE_MEASURE` set: its scene then times the real JVM's rounds without
//! the attack (before and after it) and during it (same JVM, same run, side by side) and
//! jpd's CPU over the attack, and appends them as one JSON line. Per attack: the median
//! slowdown of the real JVM (the median round during the attack against the median
//! round without it) with its range over the runs,
//! jpd's peak resident memory and its growth over the baseline against the store
//! budget, jpd's CPU, and whether the test's goals held.
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;

use super::report::{median, write_section, Spread};
use crate::build::{Deliverable, Deliverables};
use crate::cmd::root;
use crate::setup::{JDK17, JDK25};

/// (test name, what the table calls it).
const ATTACKS: [(&str, &str); 8] = [
    (
        "far_node::far_node_ids_of_ended_threads_stay_within_the_budget",
        "far node id per thread (13 records; JDK 25)",
    ),
    (
        "flood::a_flood_costs_the_real_jvm_beside_it_no_resends_jdk17",
        "flood (2 processes, 10 s; JDK 17)",
    ),
    (
        "resends::endless_resends_are_spaced_and_cost_the_real_jvm_nothing_jdk17",
        "endless re-sends (10 s; JDK 17)",
    ),
    (
        "fake_jvms::sleeping_fake_jvms_do_not_lock_a_real_jvm_out",
        "300 sleeping fake JVMs (JDK 17)",
    ),
    (
        "thread_map::a_thread_map_filler_does_not_unjoin_the_real_jvm",
        "thread map filler (16 400 slots; JDK 17)",
    ),
    (
        "method_ids::colliding_method_ids_do_not_stall_jpd",
        "colliding method ids (60 000; JDK 17)",
    ),
    (
        "deep_chain::a_deep_chain_exports_within_bounds",
        "100 k-deep chain + pprof (JDK 25)",
    ),
    (
        "main_class::names_with_escapes_reach_no_terminal_and_no_label_raw",
        "names with escapes, 3000 chars (JDK 25)",
    ),
];

/// The store budget the goals measure growth against (`[usdt] max_store_mib`).
const BUDGET_MIB: f64 = 512.0;
/// The real JVM may slow down by this much at most.
const MAX_SLOWDOWN: f64 = 0.05;

/// One run of one attack, as its scene measured it.
struct Run {
    passed: bool,
    /// Median round during the attack over the median round without it, less one.
    slowdown: Option<f64>,
    peak_mib: f64,
    growth_mib: f64,
    cpu_percent: f64,
    slow_statuses: u64,
    resends: u64,
    refusals: Vec<String>,
}

pub fn run(d: &Deliverables, quick: bool) -> Result<()> {
    let rounds = if quick { 1 } else { 3 };
    let dir = std::env::temp_dir().join(format!("jp-bench-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    for (test, label) in ATTACKS {
        let mut runs = Vec::new();
        for round in 0..rounds {
            let file = dir.join(format!("{}-{round}.jsonl", label.len()));
            let _ = std::fs::remove_file(&file);
            let passed = run_test(d, test, &file)?;
            let line = std::fs::read_to_string(&file).unwrap_or_default();
            let m: Value =
                serde_json::from_str(line.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
            runs.push(Run::of(&m, passed));
            eprintln!("xtask: hostile {label} round {round}: passed {passed}");
        }
        rows.push((label, runs));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let body = table(&rows, rounds, quick);
    println!("{body}");
    write_section("hostile", &body)
}

/// Runs one test of the suite (built in release, as `cargo xtask test` does): whether
/// it passed.
fn run_test(d: &Deliverables, test: &str, measure: &Path) -> Result<bool> {
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .args(["test", "--release", "-p", "jp-daemon", "--test", "hostile"])
        .args(["--", "--exact", test, "--nocapture"])
        .env("JP_HOSTILE_MEASURE", measure)
        .env("JP_JDK17", JDK17)
        .env("JP_JDK25", JDK25);
    for (deliverable, path) in [
        (Deliverable::Jpd, &d.jpd),
        (Deliverable::Jpctl, &d.jpctl),
        (Deliverable::AgentLib, &d.agent_lib),
    ] {
        c.env(deliverable.var(), path);
    }
    let status = c.status().context("run the hostile suite")?;
    Ok(status.success())
}

impl Run {
    fn of(m: &Value, passed: bool) -> Run {
        let ms = |key: &str| -> Vec<f64> {
            m[key]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default()
        };
        let (mut before, mut during) = (ms("without_ms"), ms("during_ms"));
        let slowdown = (!before.is_empty() && !during.is_empty())
            .then(|| median(&mut during) / median(&mut before) - 1.0);
        let mib = |key: &str| m[key].as_f64().unwrap_or(0.0) / f64::from(1 << 20);
        let attack_s = m["attack_s"].as_f64().unwrap_or(0.0);
        Run {
            passed,
            slowdown,
            peak_mib: mib("peak_hwm"),
            growth_mib: (mib("peak_hwm") - mib("baseline_rss")).max(0.0),
            cpu_percent: if attack_s > 0.0 {
                100.0 * m["jpd_cpu_s"].as_f64().unwrap_or(0.0) / attack_s
            } else {
                0.0
            },
            slow_statuses: m["slow_statuses"].as_u64().unwrap_or(0),
            resends: m["resends"].as_u64().unwrap_or(0),
            refusals: m["refusals"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

fn table(rows: &[(&str, Vec<Run>)], rounds: usize, quick: bool) -> String {
    let mut out = format!(
        "## Hostile load: `cargo xtask bench hostile`\n\n\
         Each attack of the `hostile` suite beside a real JVM (the real agent, the `Phases` \
         workload, on the JDK the attack's row names), jpd with its default configuration; {rounds} run(s) per attack{}. \
         Real JVM: the median round during the attack against the median round without it \
         (before and after), in the same JVM and run (range over the runs; a round lasts a \
         few hundred ms, so a short attack is measured on few rounds). jpd: peak resident memory (VmHWM), its \
         growth over the resident memory before the attack, and its CPU over the attack (% of \
         one core). Goals: growth within the store budget ({BUDGET_MIB} MiB), the real JVM \
         slowed by at most {:.0} %, `jpctl status` always within 1 s, every refusal counted.\n\n\
         | attack | goals held | real JVM's rounds | jpd peak (MiB) | growth (MiB) | jpd CPU | slow status | real JVM re-sends | refusals |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        if quick { " (quick)" } else { "" },
        MAX_SLOWDOWN * 100.0
    );
    for (label, runs) in rows {
        let passed = runs.iter().filter(|r| r.passed).count();
        let slow: Vec<f64> = runs.iter().filter_map(|r| r.slowdown).collect();
        let rounds_cell = if slow.is_empty() {
            "not measured".to_string()
        } else {
            let s = Spread::of(&slow);
            format!(
                "{:+.1} % ({:+.1} … {:+.1})",
                100.0 * s.median,
                100.0 * s.min,
                100.0 * s.max
            )
        };
        let max = |f: fn(&Run) -> f64| runs.iter().map(f).fold(0.0, f64::max);
        let refusals = runs
            .last()
            .map(|r| r.refusals.join(", "))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "none".into());
        out.push_str(&format!(
            "| {label} | {passed}/{} | {rounds_cell} | {:.0} | {:.0} | {:.0} % | {} | {} | {refusals} |\n",
            runs.len(),
            max(|r| r.peak_mib),
            max(|r| r.growth_mib),
            max(|r| r.cpu_percent),
            runs.iter().map(|r| r.slow_statuses).sum::<u64>(),
            runs.iter().map(|r| r.resends).max().unwrap_or(0),
        ));
    }
    out
}
