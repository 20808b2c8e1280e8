//! The `attach` part: from a window's request to counting, on a JVM started with the agent
//! dormant and on one started without it (the first request loads the library, starts the
//! agent dormant, then opens). The answer comes once `Agent_OnAttach` returned, the loaded
//! classes in scope retransformed: from then on every call of theirs is counted, so the
//! request's wall time is the time to the first counted call (within a call's time).
use std::time::Duration;

use anyhow::{Context, Result};

use super::jvm::{self, num, LiveJvm, Spec};
use super::{chosen, Bench};
use crate::bench::jvm::Jdk;
use crate::bench::report::Spread;

/// Seconds of each window (the result must show the calls counted).
const SECONDS: u32 = 2;

/// One JVM: the first and the second window's request wall (ms), the agent's open_ms of
/// the first, the calls the first window counted.
struct Arm {
    first_ms: Vec<f64>,
    open_ms: Vec<f64>,
    second_ms: Vec<f64>,
    calls: Vec<f64>,
}

pub(super) fn run(bench: &Bench) -> Result<String> {
    let jvms = bench.size("ATTACH_JVMS", 3, 1) as usize;
    let programs = chosen(bench, &["rhino", "jython"]);
    let mut rows = String::new();
    for jdk in &bench.jdks {
        for program in &programs {
            for dormant in [true, false] {
                let mut arm = Arm {
                    first_ms: Vec::new(),
                    open_ms: Vec::new(),
                    second_ms: Vec::new(),
                    calls: Vec::new(),
                };
                for i in 0..jvms {
                    eprintln!(
                        "xtask: bench windows attach {}: {} dormant={dormant} JVM {}/{jvms}",
                        jdk.0,
                        program.key,
                        i + 1
                    );
                    one_jvm(bench, jdk, program, dormant, &mut arm).with_context(|| {
                        format!("{} on {}, dormant={dormant}", program.key, jdk.0)
                    })?;
                }
                let cell = |v: &[f64]| {
                    let s = Spread::of(v);
                    format!("{:.0} [{:.0}–{:.0}]", s.median, s.min, s.max)
                };
                rows.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {:.0} |\n",
                    jdk.0,
                    program.name,
                    if dormant { "dormant" } else { "no agent" },
                    cell(&arm.first_ms),
                    cell(&arm.open_ms),
                    cell(&arm.second_ms),
                    Spread::of(&arm.calls).median,
                ));
            }
        }
    }
    Ok(format!(
        "### Attach: from the request to the first counted call\n\n\
A warm SteadyBench JVM, started with the agent dormant or without it; a window of \
{SECONDS} s requested (all application classes). The request's wall time, from sending the \
attach request to its answer: the attach listener's start on the first request to the JVM \
(both arms pay it), loading the library and starting the agent dormant (without the agent \
only), bringing up its Java runtime and retransforming the classes (the agent's `open_ms`). \
The second window on the same JVM shows the switch alone. {jvms} JVMs per arm; cells: \
median [min–max] over them, ms. Calls: the first window's tree (the sum of its nodes' \
calls), to show that it counted.\n\n\
| JDK | program | started | first window: request to counting (ms) | agent `open_ms` | second window: request (ms) | calls counted |\n\
| --- | --- | --- | ---: | ---: | ---: | ---: |\n{rows}"
    ))
}

fn one_jvm(
    bench: &Bench,
    jdk: &Jdk,
    program: &crate::bench::jvm::Program,
    dormant: bool,
    arm: &mut Arm,
) -> Result<()> {
    let mut live = LiveJvm::start(&Spec {
        java: &jdk.1,
        dir: &bench.dir,
        program,
        agent: dormant.then(|| bench.dormant_arg(program)),
        jvm_args: Vec::new(),
    })?;
    live.warmed(jvm::WARM_LIMIT)?;
    let dir = jvm::window_dir(&bench.dir, &format!("attach-{}", live.pid()))?;
    // Without the agent, the JVM must be given the program's scope (javac's) by the window.
    let scope = if dormant { "" } else { program.agent_options };
    let limit = Duration::from_secs(u64::from(SECONDS) + 120);
    let first = jvm::open_window(live.pid(), &bench.lib, &dir, 1, SECONDS, scope)?;
    let done = first.done(&mut live, limit)?;
    arm.first_ms.push(first.wall.as_secs_f64() * 1e3);
    arm.open_ms.push(num(&done, "open_ms"));
    arm.calls.push(window_calls(&dir.join("window-1.json"))?);
    let second = jvm::open_window(live.pid(), &bench.lib, &dir, 2, SECONDS, scope)?;
    second.done(&mut live, limit)?;
    arm.second_ms.push(second.wall.as_secs_f64() * 1e3);
    Ok(())
}

/// The calls of every node of a window's tree (`"calls": N`, one node per line).
fn window_calls(path: &std::path::Path) -> Result<f64> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("the agent wrote no {}", path.display()))?;
    let mut total = 0.0;
    for line in text.lines() {
        for part in line.split("\"calls\":").skip(1) {
            let digits: String = part
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            total += digits.parse::<f64>().unwrap_or(0.0);
        }
    }
    Ok(total)
}
