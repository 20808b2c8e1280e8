//! The `switching` part: one window on a warm, dormant JVM per program and JDK. The switch
//! itself (wall of the open per 1000 classes, the safepoints of the open and of the close,
//! the JIT compilers' CPU in the 5 s after each), the rounds inside the window against the
//! agent's steady-state table, and the rounds 5 s after the close against those before the
//! window. Rhino gets a second window whose scope is its script's classes only.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::jvm::{self, num, Done, LiveJvm, Opened, Spec};
use super::safepoints::{self, Pauses};
use super::{chosen, verdict, Bench};
use crate::bench::jvm::{Jdk, Program};

/// Seconds measured before a window, and after a switch for its JIT and its rounds.
const SETTLE: Duration = Duration::from_secs(5);
/// Rhino compiles its script into classes of this package: the script-only scope.
const RHINO_SCRIPT_SCOPE: &str = "org.mozilla.javascript.gen";

/// What one window on one JVM measured.
pub(super) struct Switch {
    pub done: Done,
    pub opened: Opened,
    pub open_pauses: Pauses,
    pub close_pauses: Pauses,
    /// JIT compilers' CPU (s) from the request to 5 s after the answer, and from the
    /// close's start to 5 s after its `.done`.
    pub jit_open_s: f64,
    pub jit_close_s: f64,
    /// The VM thread's CPU (ms) from the request to the answer, and from the close's start
    /// to its `.done`: the work of the switch's safepoint operations.
    pub vm_open_ms: f64,
    pub vm_close_ms: f64,
    /// Median round (ms) in the 5 s before, in the second half of the window, 5–10 s
    /// after the close; the rounds each median took.
    pub before: (f64, usize),
    pub inside: (f64, usize),
    pub after: (f64, usize),
}

/// The program's JVM and what it measured: its warm-up's JIT CPU (s), its windows.
struct Measured {
    warmup_jit_s: f64,
    whole: Switch,
    script_only: Option<Switch>,
}

pub(super) fn run(bench: &Bench) -> Result<String> {
    let seconds = bench.size("SECONDS", 20, 8) as u32;
    let programs = chosen(bench, &[]);
    let mut switch_tables = String::new();
    let mut inside_tables = String::new();
    let mut goals = Goals::default();
    for jdk in &bench.jdks {
        let mut all = Vec::new();
        for program in &programs {
            eprintln!("xtask: bench windows switching {}: {}", jdk.0, program.key);
            all.push(measure(bench, jdk, program, seconds)?);
        }
        switch_tables.push_str(&switch_table(jdk.0, &programs, &all, &mut goals));
        switch_tables.push_str(&cpu_table(jdk.0, &programs, &all, &mut goals));
        inside_tables.push_str(&inside_table(jdk.0, &programs, &all, &mut goals));
    }
    Ok(format!(
        "### Switching: opening and closing a window on a warm JVM\n\n\
One SteadyBench JVM per program and JDK, started with the agent dormant and \
`-Xlog:safepoint`, run until its warm-up ended (the JIT quiet), then {SETTLE:?} of rounds, \
then a window of {seconds} s (all application classes; javac's scope `com.sun.tools.javac`) \
that the agent closes at its deadline. Open: the wall time of the request (attach, \
`Agent_OnAttach`, the retransformation; the answer comes when the classes are rewritten) and \
the agent's `open_ms`, per 1000 classes it transformed. Safepoints: every pause \
`-Xlog:safepoint` logged from the request to the answer (open) and from the close's start \
(`closed_unix_ms − close_ms`) to its `.done` (close), whatever their operation (in parentheses those of `RedefineClasses`, the retransformation, alone; all are \
named below the table). JIT: the CPU of the JVM's C1/C2 compiler threads (their \
`/proc/PID/task/*/schedstat`) from the switch to 5 s after it, against what they spent from \
the JVM's start to the end of its warm-up. One window per program: each figure is one \
measurement, so only a large margin to its goal means something. The second table of each \
JDK is the same switches in CPU: the agent's `open_cpu_ms` and `close_cpu_ms` (the CPU time of \
the thread that opened or closed), `open_hook_ms` (of it, the class-file hook rewriting the \
classes), and the VM thread's CPU (its `schedstat`, sampled every 50 ms) over the open and \
over the close, also per `RedefineClasses` pause. On a shared machine a switch's wall is \
mostly a wait for a CPU, of the opening thread and of the VM thread inside each pause; its \
CPU is what it takes with a core to itself.\n{switch_tables}\n\
### Inside a window\n\n\
The same JVMs: the median round (CPU of the working thread) in the second half of the \
window, and from 5 s to 10 s after the close, over the median round in the {SETTLE:?} before \
the window. Inside / before is the program's slowdown in the window; the agent's \
steady-state slowdown (bba=default) is the one BENCHMARKS.md's `bench jvm steady` section \
recorded for the same program and JDK (measured in other JVMs at another time: a \
comparison, not a pair). Rhino's second window has the script-only scope \
`include={RHINO_SCRIPT_SCOPE}` (the classes Rhino compiles the script into).\n{inside_tables}\n\
Goals:\n{}",
        goals.text()
    ))
}

/// Starts the program's JVM dormant, measures its windows, stops it.
fn measure(bench: &Bench, jdk: &Jdk, program: &Program, seconds: u32) -> Result<Measured> {
    let tag = format!("{}-{}", program.key, jdk.0.replace(' ', ""));
    let log = bench.dir.join(format!("safepoints-{tag}.log"));
    let _ = std::fs::remove_file(&log);
    let mut live = LiveJvm::start(&Spec {
        java: &jdk.1,
        dir: &bench.dir,
        program,
        agent: Some(bench.dormant_arg(program)),
        jvm_args: vec![safepoints::xlog_arg(&log)],
    })?;
    live.warmed(jvm::WARM_LIMIT)?;
    let warmup_jit_s = live.jit_cpu_ns() / 1e9;
    let dir = jvm::window_dir(&bench.dir, &format!("windows-{tag}"))?;
    let mut target = Target {
        live: &mut live,
        log: &log,
        dir: &dir,
    };
    let whole = one_window(bench, &mut target, 1, seconds, "")
        .with_context(|| format!("{} on {}", program.key, jdk.0))?;
    let script_only = if program.key == "rhino" {
        let scope = format!(",include={RHINO_SCRIPT_SCOPE}");
        Some(one_window(bench, &mut target, 2, seconds, &scope)?)
    } else {
        None
    };
    Ok(Measured {
        warmup_jit_s,
        whole,
        script_only,
    })
}

/// The JVM windows open on, and where its safepoints and its windows' results go.
struct Target<'a> {
    live: &'a mut LiveJvm,
    log: &'a Path,
    dir: &'a Path,
}

/// The JIT compilers' CPU sampled every 50 ms while the bench waits: (unix ms, ns), and
/// the VM thread's beside it.
struct JitLog(Vec<(f64, f64)>, Vec<(f64, f64)>);

impl JitLog {
    fn sample(&mut self, live: &LiveJvm) {
        let now = jvm::unix_ms();
        self.0.push((now, live.jit_cpu_ns()));
        self.1.push((now, live.vm_thread_cpu_ns()));
    }

    /// Waits until `until`, sampling.
    fn wait(&mut self, live: &mut LiveJvm, until: Instant) -> Result<()> {
        while Instant::now() < until {
            live.check_alive()?;
            self.sample(live);
            std::thread::sleep(Duration::from_millis(50));
        }
        self.sample(live);
        Ok(())
    }

    /// The JIT's CPU at the last sample at or before `unix_ms`.
    fn at_or_before(&self, unix_ms: f64) -> f64 {
        sample_at_or_before(&self.0, unix_ms)
    }

    /// The JIT's CPU at the first sample at or after `unix_ms`.
    fn at_or_after(&self, unix_ms: f64) -> f64 {
        sample_at_or_after(&self.0, unix_ms)
    }

    /// The VM thread's CPU (ms) between the last sample at or before `from` and the first
    /// at or after `to`.
    fn vm_ms_between(&self, from: f64, to: f64) -> f64 {
        (sample_at_or_after(&self.1, to) - sample_at_or_before(&self.1, from)) / 1e6
    }
}

/// The last sample at or before `unix_ms` (the first one if none).
fn sample_at_or_before(samples: &[(f64, f64)], unix_ms: f64) -> f64 {
    samples
        .iter()
        .rev()
        .find(|(t, _)| *t <= unix_ms)
        .or(samples.first())
        .map_or(0.0, |s| s.1)
}

/// The first sample at or after `unix_ms` (the last one if none).
fn sample_at_or_after(samples: &[(f64, f64)], unix_ms: f64) -> f64 {
    samples
        .iter()
        .find(|(t, _)| *t >= unix_ms)
        .or(samples.last())
        .map_or(0.0, |s| s.1)
}

/// One window: rounds before, the open, rounds inside, the close, rounds after.
fn one_window(bench: &Bench, t: &mut Target, id: u64, seconds: u32, scope: &str) -> Result<Switch> {
    let live = &mut *t.live;
    let t0 = Instant::now();
    let before = live.median_between(t0, t0 + SETTLE)?;
    let mut jit = JitLog(Vec::new(), Vec::new());
    jit.sample(live);
    let opened = jvm::open_window(live.pid(), &bench.lib, t.dir, id, seconds, scope)?;
    // Sampled at once: the open's VM thread CPU is the difference with the first sample.
    jit.sample(live);
    let window = Duration::from_secs(u64::from(seconds));
    // Sampling the JIT until the agent closed the window (its `.done`) and 5 s after the
    // open at least.
    jit.wait(live, opened.answered + SETTLE)?;
    let done = loop {
        if let Ok(d) = opened.done(live, Duration::from_millis(1)) {
            break d;
        }
        if opened.answered.elapsed() > window + Duration::from_secs(120) {
            bail!("window {id}: no .done 120 s after its deadline");
        }
        jit.wait(live, Instant::now() + Duration::from_millis(50))?;
    };
    let seen = Instant::now();
    let seen_unix_ms = jvm::unix_ms();
    let close_start = num(&done, "closed_unix_ms") - num(&done, "close_ms");
    let jit_open_s = (jit.at_or_after(opened.answered_unix_ms + SETTLE.as_secs_f64() * 1e3)
        - jit.0.first().map_or(0.0, |s| s.1))
        / 1e9;
    let jit_at_close = jit.at_or_before(close_start);
    let vm_open_ms = jit.vm_ms_between(opened.requested_unix_ms, opened.answered_unix_ms);
    let vm_close_ms = jit.vm_ms_between(close_start, seen_unix_ms);
    jit.wait(live, seen + SETTLE)?;
    let jit_close_s = (live.jit_cpu_ns() - jit_at_close) / 1e9;
    // Inside: the second half of the window, up to the close's start.
    let close_instant = seen
        .checked_sub(Duration::from_secs_f64(
            ((seen_unix_ms - close_start) / 1e3).max(0.0),
        ))
        .unwrap_or(seen);
    let inside = live.median_between(opened.answered + window / 2, close_instant)?;
    let after = live.median_between(seen + SETTLE, seen + 2 * SETTLE)?;
    // The log is written as the JVM goes; its last line may lag its pause by a little.
    std::thread::sleep(Duration::from_millis(200));
    let all = safepoints::read(t.log);
    Ok(Switch {
        open_pauses: safepoints::between(&all, opened.requested_unix_ms, opened.answered_unix_ms),
        close_pauses: safepoints::between(&all, close_start, seen_unix_ms),
        done,
        opened,
        jit_open_s,
        jit_close_s,
        vm_open_ms,
        vm_close_ms,
        before: ms(before),
        inside: ms(inside),
        after: ms(after),
    })
}

fn ms((ns, n): (f64, usize)) -> (f64, usize) {
    (ns / 1e6, n)
}

/// The goals' lines, collected over JDKs and programs.
#[derive(Default)]
struct Goals {
    lines: Vec<String>,
}

impl Goals {
    fn push(&mut self, line: String) {
        self.lines.push(line);
    }
    fn text(&self) -> String {
        self.lines.iter().map(|l| format!("- {l}\n")).collect()
    }
}

const OPEN_S_PER_1000: f64 = 0.6;
const LONGEST_PAUSE_MS: f64 = 25.0;
const PAUSES_PER_2000_MS: f64 = 100.0;
const JIT_OVER_WARMUP: f64 = 2.0;
const BACK_WITHIN: f64 = 0.05;
const INSIDE_WITHIN: f64 = 0.15;
const SCRIPT_ONLY_MAX: f64 = 1.5;

/// `1.54×`, or why there is none.
fn ratio_or_none(r: Option<f64>) -> String {
    r.map_or(
        "no round ended in the window's second half".to_string(),
        |r| format!("{r:.2}×"),
    )
}

/// All pauses, then those of `RedefineClasses` alone: `n / longest / total (n / longest / total)`.
fn pauses_cell(p: &Pauses) -> String {
    format!(
        "{} / {:.1} / {:.1} ({} / {:.1} / {:.1})",
        p.count, p.longest_ms, p.total_ms, p.redefine.0, p.redefine.1, p.redefine.2
    )
}

fn switch_table(label: &str, programs: &[&Program], all: &[Measured], goals: &mut Goals) -> String {
    let mut s = format!(
        "\n#### {label}\n\n| program | classes | open: request (ms) | open: agent `open_ms` (the window's longest `RetransformClasses`) | s per 1000 classes | close: `close_ms` | safepoints open: n / longest / total ms (`RedefineClasses` alone) | close: the same | JIT after open (s) | JIT after close (s) | JIT of the warm-up (s) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    let mut operations: Vec<String> = Vec::new();
    let (mut worst_rate, mut worst_pause, mut worst_per_2000, mut worst_jit) =
        (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut worst_redefine = 0.0f64;
    for (program, m) in programs.iter().zip(all) {
        let w = &m.whole;
        let classes = num(&w.done, "classes_transformed");
        let request_ms = w.opened.wall.as_secs_f64() * 1e3;
        let rate = request_ms.max(num(&w.done, "open_ms")) / 1e3 / classes * 1000.0;
        worst_rate = worst_rate.max(rate);
        for p in [&w.open_pauses, &w.close_pauses] {
            worst_pause = worst_pause.max(p.longest_ms);
            worst_redefine = worst_redefine.max(p.redefine.1);
            worst_per_2000 = worst_per_2000.max(p.total_ms * 2000.0 / classes.max(1.0));
            for o in &p.operations {
                if !operations.contains(o) {
                    operations.push(o.clone());
                }
            }
        }
        worst_jit = worst_jit.max(w.jit_open_s.max(w.jit_close_s) / m.warmup_jit_s);
        s.push_str(&format!(
            "| {} | {classes:.0} | {request_ms:.0} | {:.0} ({:.0}) | {rate:.3} | {:.0} | {} | {} | {:.2} | {:.2} | {:.2} |\n",
            program.name,
            num(&w.done, "open_ms"),
            num(&w.done, "longest_retransform_ms"),
            num(&w.done, "close_ms"),
            pauses_cell(&w.open_pauses),
            pauses_cell(&w.close_pauses),
            w.jit_open_s,
            w.jit_close_s,
            m.warmup_jit_s,
        ));
    }
    s.push_str(&format!(
        "\nSafepoint operations during the switches: {}.\n",
        if operations.is_empty() {
            "none".to_string()
        } else {
            operations.join(", ")
        }
    ));
    goals.push(format!(
        "{label}: open ≤ {OPEN_S_PER_1000} s per 1000 classes (the longer of the request and `open_ms`): {} (worst {worst_rate:.3} s).",
        verdict(worst_rate <= OPEN_S_PER_1000)
    ));
    goals.push(format!(
        "{label}: longest safepoint of a switch ≤ {LONGEST_PAUSE_MS} ms: {} (worst {worst_pause:.1} ms; of `RedefineClasses` alone {worst_redefine:.1} ms); all of a switch ≤ {PAUSES_PER_2000_MS} ms per 2000 classes: {} (worst {worst_per_2000:.1} ms).",
        verdict(worst_pause <= LONGEST_PAUSE_MS),
        verdict(worst_per_2000 <= PAUSES_PER_2000_MS)
    ));
    goals.push(format!(
        "{label}: JIT CPU in the 5 s after a switch ≤ {JIT_OVER_WARMUP}× the warm-up's: {} (worst {worst_jit:.2}×).",
        verdict(worst_jit <= JIT_OVER_WARMUP)
    ));
    s
}

/// What the switches cost in CPU: on a shared host their wall is mostly a wait for a CPU
/// (the opening thread's, and the VM thread's inside each pause).
fn cpu_table(label: &str, programs: &[&Program], all: &[Measured], goals: &mut Goals) -> String {
    let mut s = format!(
        "\n#### {label}: the switches' CPU\n\n| program | classes | open: wall / CPU of the opening thread (ms) | of the CPU: the hook's rewriting (ms) | open CPU per 1000 classes (s) | VM thread CPU in the open (ms) / per `RedefineClasses` pause | close: wall / CPU of the closing thread (ms) | VM thread CPU in the close (ms) / per pause |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    let (mut worst_rate, mut worst_per_pause, mut worst_per_2000) = (0.0f64, 0.0f64, 0.0f64);
    for (program, m) in programs.iter().zip(all) {
        let w = &m.whole;
        let classes = num(&w.done, "classes_transformed");
        let open_cpu = num(&w.done, "open_cpu_ms");
        let rate = open_cpu / classes * 1000.0 / 1e3;
        worst_rate = worst_rate.max(rate);
        let per_pause = |vm_ms: f64, p: &Pauses| vm_ms / (p.redefine.0.max(1) as f64);
        let (open_pp, close_pp) = (
            per_pause(w.vm_open_ms, &w.open_pauses),
            per_pause(w.vm_close_ms, &w.close_pauses),
        );
        worst_per_pause = worst_per_pause.max(open_pp).max(close_pp);
        worst_per_2000 =
            worst_per_2000.max(w.vm_open_ms.max(w.vm_close_ms) * 2000.0 / classes.max(1.0));
        s.push_str(&format!(
            "| {} | {classes:.0} | {:.0} / {open_cpu:.0} | {:.0} | {rate:.3} | {:.0} / {open_pp:.1} | {:.0} / {:.0} | {:.0} / {close_pp:.1} |\n",
            program.name,
            num(&w.done, "open_ms"),
            num(&w.done, "open_hook_ms"),
            w.vm_open_ms,
            num(&w.done, "close_ms"),
            num(&w.done, "close_cpu_ms"),
            w.vm_close_ms,
        ));
    }
    goals.push(format!(
        "{label}, in CPU (what a switch takes with a core to itself): open ≤ {OPEN_S_PER_1000} s per 1000 classes: {} (worst {worst_rate:.3} s); the VM thread's CPU per `RedefineClasses` pause ≤ {LONGEST_PAUSE_MS} ms (the mean of a switch's pauses): {} (worst {worst_per_pause:.1} ms); per switch ≤ {PAUSES_PER_2000_MS} ms per 2000 classes: {} (worst {worst_per_2000:.1} ms).",
        verdict(worst_rate <= OPEN_S_PER_1000),
        verdict(worst_per_pause <= LONGEST_PAUSE_MS),
        verdict(worst_per_2000 <= PAUSES_PER_2000_MS)
    ));
    s
}

fn inside_table(label: &str, programs: &[&Program], all: &[Measured], goals: &mut Goals) -> String {
    let mut s = format!(
        "\n#### {label}\n\n| program | round before (ms) | inside / before | steady table (default) | inside / steady table | 5–10 s after the close / before | rounds (before, inside, after) |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n"
    );
    let (mut worst_back, mut worst_inside) = (0.0f64, None::<f64>);
    let mut script_only = None;
    for (program, m) in programs.iter().zip(all) {
        let w = &m.whole;
        // None when no round ended in the window's second half (rounds longer than it).
        let inside = (w.inside.1 > 0).then(|| w.inside.0 / w.before.0);
        let back = w.after.0 / w.before.0 - 1.0;
        worst_back = if back.abs() > worst_back.abs() {
            back
        } else {
            worst_back
        };
        let recorded = recorded_steady(label, program.name);
        let vs = recorded.zip(inside).map(|(r, i)| i / r);
        if let Some(v) = vs {
            if worst_inside.is_none_or(|x| (v - 1.0).abs() > (x - 1.0).abs()) {
                worst_inside = Some(v);
            }
        }
        s.push_str(&format!(
            "| {} | {:.1} | {} | {} | {} | {:+.1} % | {}, {}, {} |\n",
            program.name,
            w.before.0,
            ratio_or_none(inside),
            recorded.map_or("not recorded".to_string(), |r| format!("{r:.2}×")),
            vs.map_or("–".to_string(), |v| format!("{v:.2}")),
            100.0 * back,
            w.before.1,
            w.inside.1,
            w.after.1,
        ));
        if let Some(so) = &m.script_only {
            let r = (so.inside.1 > 0).then(|| so.inside.0 / so.before.0);
            script_only = Some(r);
            s.push_str(&format!(
                "| {}, script-only scope ({:.0} classes) | {:.1} | {} | | | {:+.1} % | {}, {}, {} |\n",
                program.name,
                num(&so.done, "classes_transformed"),
                so.before.0,
                ratio_or_none(r),
                100.0 * (so.after.0 / so.before.0 - 1.0),
                so.before.1,
                so.inside.1,
                so.after.1,
            ));
        }
    }
    goals.push(format!(
        "{label}: rounds 5 s after the close within ±{:.0} % of before: {} (worst {:+.1} %).",
        100.0 * BACK_WITHIN,
        verdict(worst_back.abs() <= BACK_WITHIN),
        100.0 * worst_back
    ));
    goals.push(match worst_inside {
        Some(v) => format!(
            "{label}: slowdown inside a window within ±{:.0} % of the steady table: {} (worst {v:.2} of it).",
            100.0 * INSIDE_WITHIN,
            verdict((v - 1.0).abs() <= INSIDE_WITHIN)
        ),
        None => format!("{label}: slowdown inside a window against the steady table: **not measured** (no steady table recorded)."),
    });
    match script_only {
        Some(Some(r)) => goals.push(format!(
            "{label}: rhino with a script-only scope ≤ {SCRIPT_ONLY_MAX}×: {} ({r:.2}×).",
            verdict(r <= SCRIPT_ONLY_MAX)
        )),
        Some(None) => goals.push(format!(
            "{label}: rhino with a script-only scope: **not measured** (no round ended in the window's second half)."
        )),
        None => {}
    }
    s
}

/// The bba=default slowdown BENCHMARKS.md's steady-state section records for `program` on
/// the JDK `label` (its row's first ratio, `8.35× [8.12–9.08]`).
fn recorded_steady(label: &str, program: &str) -> Option<f64> {
    let text = std::fs::read_to_string(crate::cmd::root().join("BENCHMARKS.md")).ok()?;
    let section = text.split("<!-- bench:jvm-steady -->").nth(1)?;
    let section = section.split("<!-- /bench:jvm-steady -->").next()?;
    let table = section.split(&format!("#### {label}\n")).nth(1)?;
    let row = table
        .lines()
        .take_while(|l| !l.starts_with("####"))
        .find(|l| l.starts_with(&format!("| {program} |")))?;
    row.split('|')
        .filter_map(|c| {
            c.trim()
                .split('×')
                .next()?
                .parse::<f64>()
                .ok()
                .filter(|_| c.contains('×'))
        })
        .next()
}
