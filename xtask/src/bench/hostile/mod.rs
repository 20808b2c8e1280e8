//! `cargo xtask bench hostile [--quick]`: what each attack of jp-daemon's `hostile`
//! suite costs jpd and the real JVM beside it. Two parts, both with `JP_HOSTILE_MEASURE`
//! set (each test then appends what it measured to that file as JSON lines):
//! - **goals**: each attack's own test, once: jpd's peak resident memory and its growth
//!   over the baseline against the store budget, jpd's CPU over the attack, the share of
//!   the real JVM's CPU under its contexts, and whether the test's goals held;
//! - **throughput** (`throughput.rs`): the suite's `throughput` test, which plays every
//!   attack in alternating pairs, seen by jpd and unseen, beside one warm real JVM.
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;

use super::report::write_section;
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

mod throughput;

/// The throughput test's attacks (its keys), as the table calls them.
const THROUGHPUT_ATTACKS: [(&str, &str); 8] = [
    ("far_node", "far node id per thread (13 records)"),
    ("flood", "flood (2 processes)"),
    ("resends", "endless re-sends"),
    ("fake_jvms", "300 sleeping fake JVMs"),
    (
        "thread_map",
        "thread map filler (16 400 slots + 16 400 made-up ids)",
    ),
    ("method_ids", "colliding method ids (60 000)"),
    ("deep_chain", "100 k-deep chain + pprof"),
    ("main_class", "names with escapes, 3000 chars"),
];

/// The store budget the goals measure growth against (`[usdt] max_store_mib`).
const BUDGET_MIB: f64 = 512.0;
/// The throughput test's name in the suite.
const THROUGHPUT_TEST: &str = "throughput::each_attack_seen_and_unseen_beside_one_real_jvm";
/// Throughput pairs per attack and each arm's window (ms): full run and `--quick`.
const PAIRS: (u64, u64) = (8, 1);
const WINDOW_MS: (u64, u64) = (5000, 2000);

/// One run of one attack, as its scene measured it.
struct Run {
    passed: bool,
    /// The share of the real JVM's application CPU that jpd put under its contexts.
    contexts_share: Option<f64>,
    peak_mib: f64,
    growth_mib: f64,
    cpu_percent: f64,
    slow_statuses: u64,
    resends: u64,
    refusals: Vec<String>,
}

pub fn run(d: &Deliverables, quick: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let load = load_average();
    let dir = std::env::temp_dir().join(format!("jp-bench-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    for (i, (test, label)) in ATTACKS.into_iter().enumerate() {
        let file = dir.join(format!("goals-{i}.jsonl"));
        let passed = run_test(d, test, &file, &[])?;
        rows.push((label, Run::of(&last_line(&file), passed)));
        eprintln!("xtask: hostile {label}: passed {passed}");
    }
    let (pairs, window_ms) = if quick {
        (PAIRS.1, WINDOW_MS.1)
    } else {
        (PAIRS.0, WINDOW_MS.0)
    };
    let file = dir.join("throughput.jsonl");
    let settings = [
        ("JP_HOSTILE_PAIRS", pairs.to_string()),
        ("JP_HOSTILE_WINDOW_MS", window_ms.to_string()),
    ];
    let throughput_passed = run_test(d, THROUGHPUT_TEST, &file, &settings)?;
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let run = RunInfo {
        quick,
        pairs,
        window_ms,
        load_before: load,
        load_after: load_average(),
        minutes: started.elapsed().as_secs_f64() / 60.0,
        throughput_passed,
    };
    let body = format!(
        "{}\n{}",
        table(&rows, quick),
        throughput_table(&lines, &run)
    );
    println!("{body}");
    write_section("hostile", &body)
}

/// How the run went, for the section's text.
struct RunInfo {
    quick: bool,
    pairs: u64,
    window_ms: u64,
    load_before: String,
    load_after: String,
    minutes: f64,
    throughput_passed: bool,
}

/// The last JSON line of a measure file (`null` when the test wrote none).
fn last_line(file: &Path) -> Value {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null)
}

/// The machine's load averages (1, 5, 15 min) as `/proc/loadavg` gives them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs one test of the suite (built in release, as `cargo xtask test` does): whether
/// it passed.
fn run_test(d: &Deliverables, test: &str, measure: &Path, env: &[(&str, String)]) -> Result<bool> {
    let mut c = Command::new("cargo");
    c.envs(env.iter().map(|(k, v)| (k, v)));
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
        let mib = |key: &str| m[key].as_f64().unwrap_or(0.0) / f64::from(1 << 20);
        let attack_s = m["attack_s"].as_f64().unwrap_or(0.0);
        Run {
            passed,
            contexts_share: m["contexts_share"].as_f64(),
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

fn table(rows: &[(&str, Run)], quick: bool) -> String {
    let mut out = format!(
        "## Hostile load: `cargo xtask bench hostile`{}\n\n\
         ### Goals: memory, status, re-sends, refusals\n\n\
         Each attack's test of the `hostile` suite, once, beside a real JVM (the real agent, the \
         `Phases` workload, on the JDK the attack's row names), jpd with its default \
         configuration. jpd: peak resident memory (VmHWM), its growth over the resident memory \
         before the attack, and its CPU over the attack (% of one core). Real JVM: the share of \
         its application CPU that jpd put under its contexts (the sampler's join). Goals: growth \
         within the store budget ({BUDGET_MIB} MiB), `jpctl status` always within 1 s, the real \
         JVM complete and asked to re-send at most twice, every refusal counted.\n\n\
         | attack | goals held | jpd peak (MiB) | growth (MiB) | jpd CPU | real JVM's CPU under contexts | slow status | real JVM re-sends | refusals |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        if quick { " (quick)" } else { "" },
    );
    for (label, r) in rows {
        let refusals = Some(r.refusals.join(", "))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "none".into());
        let share = r
            .contexts_share
            .map_or("—".into(), |s| format!("{:.0} %", 100.0 * s));
        out.push_str(&format!(
            "| {label} | {} | {:.0} | {:.0} | {:.0} % | {share} | {} | {} | {refusals} |\n",
            if r.passed { "yes" } else { "**no**" },
            r.peak_mib,
            r.growth_mib,
            r.cpu_percent,
            r.slow_statuses,
            r.resends,
        ));
    }
    out
}

/// The throughput part: one row per attack, and the run's settings and load.
fn throughput_table(lines: &[Value], run: &RunInfo) -> String {
    let mut out = format!(
        "### Throughput: the real JVM beside each attack, seen by jpd against unseen\n\n\
         One real JVM (JDK 17, the real agent, `Phases` rounds back to back) beside every \
         attack in turn; each attack played in {} pair(s) of {:.0} s windows, seen (the fake \
         agent's library bears the agent's name) and unseen (the same program, records and \
         user, its library under another name, which jpd's discovery does not match), \
         alternating which goes first. Per pair: the real JVM's throughput (rounds per wall \
         second, and per CPU second of the JVM's threads) seen over unseen, less one; median \
         over the pairs (range) ±2.5 standard errors of the median. Noise: the same ratio \
         between the unseen arms of adjacent pairs, median size (range). The attackers' CPU \
         (their processes' own, the probe's traps included) and jpd's: median over the arms, \
         % of one core; jpd's extra CPU in the seen arms over the real JVM's own CPU \
         rate is what the JVM would lose if every extra cycle of jpd's were taken from it. \
         Goal: the real JVM loses at most {:.0} % of its throughput. Per figure: met when the \
         median less its margin stays above −{:.0} %, not met when the median plus its margin \
         is below it. A row is met when both figures are, or when the CPU figure is and the \
         extra CPU's share is within the goal (the wall figure alone carries the machine's \
         load); not met when either figure is not. Load average (1, 5, 15 min) at the \
         start: {}, at the end: {}; the whole run took {:.0} min{}.\n\n",
        run.pairs,
        run.window_ms as f64 / 1e3,
        100.0 * throughput::MAX_SLOWDOWN,
        100.0 * throughput::MAX_SLOWDOWN,
        run.load_before,
        run.load_after,
        run.minutes,
        if run.quick { " (quick)" } else { "" },
    );
    if !run.throughput_passed {
        out.push_str(
            "**The throughput test failed** (see its output); the rows are what it measured.\n\n",
        );
    }
    out.push_str(throughput::head());
    let mut verdicts = Vec::new();
    for (key, label) in THROUGHPUT_ATTACKS {
        match lines.iter().find(|l| l["throughput"] == key) {
            Some(line) => {
                let (row, verdict) = throughput::row(label, line);
                out.push_str(&row);
                verdicts.push(verdict);
            }
            None => out.push_str(&format!("| {label} | not measured | | | | | | | | |\n")),
        }
    }
    let count = |v: Option<bool>| verdicts.iter().filter(|&&x| x == v).count();
    out.push_str(&format!(
        "\nThe 5 % goal: met for {}, not met for {}, not decidable for {} of the {} attacks.\n",
        count(Some(true)),
        count(Some(false)),
        count(None),
        THROUGHPUT_ATTACKS.len()
    ));
    out
}
