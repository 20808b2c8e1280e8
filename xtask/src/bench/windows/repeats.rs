//! The `repeats` part: many windows opened and closed on one JVM, as a rotation does over
//! a JVM's life: it must not crash, a switch must not grow slower, metaspace must not grow.
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::attach::metaspace_used_kib;
use super::jvm::{self, num, LiveJvm, Spec};
use super::{chosen, verdict, Bench};
use crate::bench::jvm::{Jdk, Program};
use crate::bench::report::median;

/// How long a window stays open before `window=close`: long enough for calls to be counted.
const HOLD: Duration = Duration::from_millis(200);
/// Switches compared at each end (the medians of the first and the last few).
const ENDS: usize = 5;
const LAST_OVER_FIRST: f64 = 2.0;
const METASPACE_GROWTH_MIB: f64 = 10.0;

/// One switch: the open's request wall (ms), the agent's open_ms and close_ms.
struct Cycle {
    open_request_ms: f64,
    open_ms: f64,
    close_ms: f64,
}

struct Repeated {
    cycles: Vec<Cycle>,
    asked: usize,
    /// Why fewer cycles ran than asked (the time limit).
    stopped: Option<String>,
    classes: f64,
    /// Metaspace used (KiB) before the first window, after it, at the end.
    metaspace_kib: [f64; 3],
}

pub(super) fn run(bench: &Bench) -> Result<String> {
    let cycles = bench.size("CYCLES", 200, 3) as usize;
    let limit = Duration::from_secs(bench.size("REPEAT_SECONDS", 600, 120));
    let programs = chosen(bench, &["rhino", "jython"]);
    let mut rows = String::new();
    let mut goals = String::new();
    for jdk in &bench.jdks {
        for program in &programs {
            eprintln!("xtask: bench windows repeats {}: {}", jdk.0, program.key);
            let r = repeat(bench, jdk, program, cycles, limit)
                .with_context(|| format!("{} on {}", program.key, jdk.0))?;
            let (row, goal) = row(jdk.0, program, &r);
            rows.push_str(&row);
            goals.push_str(&goal);
        }
    }
    Ok(format!(
        "### Repeats: {cycles} windows opened and closed on one JVM\n\n\
One SteadyBench JVM per program and JDK, dormant, warm; then windows one after the other \
(all application classes), each closed by `window=close` {HOLD:?} after it opened, each \
waited for (its `.done`) before the next, at most {} s per JVM. The first and the last \
switch: the open's request wall (attach included), the agent's `open_ms` and `close_ms`; \
last / first compares the last request with the first (in parentheses the medians of \
the last and the first {ENDS} cycles' requests, less sensitive to one slow request). \
Metaspace: the `used` total of `VM.metaspace` after `GC.run` (attach requests, like `jcmd PID GC.run`; \
`jcmd PID VM.metaspace`: the full GC frees the old versions of the retransformed methods) \
before the first window, after it, and after the last.\n\n\
| JDK | program | cycles | classes | first: request / open_ms / close_ms (ms) | last | last / first (medians of {ENDS}) | metaspace before / after the first / at the end (MiB) | growth after the first (MiB) |\n\
| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n{rows}\n\
Goals: no crash; the last switch ≤ {LAST_OVER_FIRST}× the first; metaspace growth after the \
first cycle ≤ {METASPACE_GROWTH_MIB} MiB.\n{goals}",
        limit.as_secs()
    ))
}

fn repeat(
    bench: &Bench,
    jdk: &Jdk,
    program: &Program,
    asked: usize,
    limit: Duration,
) -> Result<Repeated> {
    let mut live = LiveJvm::start(&Spec {
        java: &jdk.1,
        dir: &bench.dir,
        program,
        agent: Some(bench.dormant_arg(program)),
        jvm_args: Vec::new(),
    })?;
    live.warmed(jvm::WARM_LIMIT)?;
    let dir = jvm::window_dir(
        &bench.dir,
        &format!("repeats-{}-{}", program.key, jdk.0.replace(' ', "")),
    )?;
    let mut metaspace_kib = [metaspace_used_kib(live.pid())?, f64::NAN, f64::NAN];
    let mut cycles = Vec::new();
    let mut classes = f64::NAN;
    let t0 = Instant::now();
    let mut stopped = None;
    for id in 1..=asked as u64 {
        if t0.elapsed() > limit {
            stopped = Some(format!("the {} s limit of a JVM", limit.as_secs()));
            break;
        }
        let opened = jvm::open_window(live.pid(), &bench.lib, &dir, id, 3600, "")?;
        std::thread::sleep(HOLD);
        jvm::close_window(live.pid(), &bench.lib, id)?;
        let done = opened.done(&mut live, Duration::from_secs(120))?;
        classes = num(&done, "classes_transformed");
        cycles.push(Cycle {
            open_request_ms: opened.wall.as_secs_f64() * 1e3,
            open_ms: num(&done, "open_ms"),
            close_ms: num(&done, "close_ms"),
        });
        if id == 1 {
            metaspace_kib[1] = metaspace_used_kib(live.pid())?;
        }
        // Results are not kept: a long run would fill the scratch directory.
        for ext in ["json", "done"] {
            let _ = std::fs::remove_file(dir.join(format!("window-{id}.{ext}")));
        }
    }
    live.check_alive()?;
    metaspace_kib[2] = metaspace_used_kib(live.pid())?;
    Ok(Repeated {
        cycles,
        asked,
        stopped,
        classes,
        metaspace_kib,
    })
}

fn row(label: &str, program: &Program, r: &Repeated) -> (String, String) {
    let cell = |c: Option<&Cycle>| {
        c.map_or("–".to_string(), |c| {
            format!(
                "{:.0} / {:.0} / {:.0}",
                c.open_request_ms, c.open_ms, c.close_ms
            )
        })
    };
    let ends = ENDS.min(r.cycles.len());
    let med = |cs: &[Cycle]| median(&mut cs.iter().map(|c| c.open_request_ms).collect::<Vec<_>>());
    let smoothed = med(&r.cycles[r.cycles.len() - ends..]) / med(&r.cycles[..ends]);
    // The goal's figure: the last switch's request over the first's.
    let request = |c: Option<&Cycle>| c.map_or(f64::NAN, |c| c.open_request_ms);
    let ratio = request(r.cycles.last()) / request(r.cycles.first());
    let mib = |k: f64| k / 1024.0;
    let growth = mib(r.metaspace_kib[2] - r.metaspace_kib[1]);
    let ran = match &r.stopped {
        Some(why) => format!("{} of {} ({why})", r.cycles.len(), r.asked),
        None => r.cycles.len().to_string(),
    };
    let row = format!(
        "| {label} | {} | {ran} | {:.0} | {} | {} | {ratio:.2} ({smoothed:.2}) | {:.1} / {:.1} / {:.1} | {growth:+.2} |\n",
        program.name,
        r.classes,
        cell(r.cycles.first()),
        cell(r.cycles.last()),
        mib(r.metaspace_kib[0]),
        mib(r.metaspace_kib[1]),
        mib(r.metaspace_kib[2]),
    );
    let goal = format!(
        "- {label}, {}: {} cycles without a crash; last / first {ratio:.2} (medians of {ends}: {smoothed:.2}): {}; metaspace growth {growth:+.2} MiB: {}.\n",
        program.name,
        r.cycles.len(),
        verdict(ratio <= LAST_OVER_FIRST),
        verdict(growth <= METASPACE_GROWTH_MIB),
    );
    (row, goal)
}
