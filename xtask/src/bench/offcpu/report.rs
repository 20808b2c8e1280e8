//! The `switch` part's table and verdicts.
use super::switch::{Arm, Setting, Window};
use crate::bench::cpu::spread_cell;
use crate::bench::report::median;

/// The goals, ns per switch above the empty program.
const GOAL_TRACKED_NS: f64 = 150.0;
const GOAL_UNTRACKED_NS: f64 = 50.0;

fn of(windows: &[Window], arm: Arm, f: impl Fn(&Window) -> f64) -> Vec<f64> {
    windows.iter().filter(|w| w.arm == arm).map(f).collect()
}

fn verdict(values: &[f64], goal: f64) -> String {
    let med = median(&mut values.to_vec());
    let worst = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match (med <= goal, worst <= goal) {
        (true, true) => format!("**met** (median {med:.0} ns, every round ≤ {goal:.0} ns)"),
        (true, false) => format!(
            "**met by the median** ({med:.0} ns ≤ {goal:.0} ns; the worst round {worst:.0} ns is over)"
        ),
        (false, _) => format!("**NOT met** (median {med:.0} ns > {goal:.0} ns)"),
    }
}

pub(super) fn switch(windows: &[Window], s: &Setting, btf: bool, load_before: &str) -> String {
    let mut rows = String::new();
    for arm in [Arm::Untracked, Arm::Tracked] {
        let cell = |f: &dyn Fn(&Window) -> f64, digits| spread_cell(&of(windows, arm, f), digits);
        let btf_cell = if btf {
            cell(&|w| w.btf.per_run() - w.empty.per_run(), 1)
        } else {
            "—".to_string()
        };
        let foreign = windows
            .iter()
            .filter(|w| w.arm == arm)
            .map(|w| w.foreign_joined)
            .max()
            .unwrap_or(0);
        rows.push_str(&format!(
            "| {} | {} | {} | {} | {} | **{}** | {btf_cell} | {foreign} |\n",
            arm.label(),
            cell(&|w| w.switches_per_s(), 0),
            cell(&|w| 100.0 * w.load_share(), 0),
            cell(&|w| w.empty.per_run(), 0),
            cell(&|w| w.offcpu.per_run(), 0),
            cell(&|w| w.delta(), 0),
        ));
    }
    let untracked = of(windows, Arm::Untracked, Window::delta);
    let tracked = of(windows, Arm::Tracked, Window::delta);
    // Per tracked switch, round by round: the tracked window's average less its untracked
    // part (priced at the same round's untracked figure), over the load's share.
    let shares = of(windows, Arm::Tracked, Window::load_share);
    let per_tracked: Vec<f64> = tracked
        .iter()
        .zip(&untracked)
        .zip(&shares)
        .map(|((t, u), s)| (t - (1.0 - s) * u) / s.max(0.01))
        .collect();
    format!(
        "### `jp_offcpu` per context switch, above an empty program at the same attach point\n\n\
jpd with `[kernel] offcpu = true` (and the cap at 1000000 switches per CPU per second, so that \
every tracked switch takes the whole path) holds `jp_offcpu` on the `sched_switch` raw \
tracepoint; the bench attaches an EMPTY program (`r0 = 0; exit`) to the same raw tracepoint{}, \
and reads the kernel's BPF run-time statistics of each (runs, run time) at the same moments, \
over {} s windows: the same switches went through all of them, so each window's difference is \
`jp_offcpu`'s own cost per switch, the attach point's (and the statistics' two clock reads) \
taken out. Loads, paced in 1 ms ticks at {} round trips per second (4 switches each, and \
2 per tick for the pacing: ~{} switches per second), alternating, {} rounds: \
**untracked**: two threads of the bench's own process handing a byte over two pipes (jpd does \
not track it: one `JP_JVM_PIDS` miss going out and one coming in); **tracked**: a JVM (JDK 17, \
agent `profiler=usdt`, joined by jpd) whose two threads hand a turn over with \
`LockSupport.park/unpark` (futex waits: every switch-out of theirs reads the context, walks \
the kernel stack and remembers the period; every switch-in times and logs it; a window starts \
once jpd shows off-CPU time under the JVM's contexts). \"Load share\": 2 × the load threads' own \
switches (`/proc/…/status`) over all the host's switches (each switch-out and its switch-in \
are a run each); the rest are other processes of this shared machine. \"Other JVMs joined\": \
other people's JVMs with the agent (tests) that this jpd joined during a window (their \
switches were tracked too). Machine load average (1 min) at the start: {load_before}.\n\n\
| load | switches/s (host) | load share % | empty ns/run | `jp_offcpu` ns/run | `jp_offcpu` − empty, ns | empty tp_btf − empty raw_tp, ns | other JVMs joined |\n\
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n{rows}\n\
Each cell: median [min–max] over rounds. Per tracked switch (the tracked window's difference \
less its untracked share priced at the same round's untracked difference, over the load's \
share): {} ns.\n\n\
- Goal, switches of processes jpd does not track ≤ {GOAL_UNTRACKED_NS:.0} ns above the empty \
program: {}.\n\
- Goal, ≤ {GOAL_TRACKED_NS:.0} ns per switch on average above the empty program under ~20 k \
switches/s with the JVM join on (the tracked load): {}; per tracked switch alone: {}.\n",
        if btf {
            " and an empty `tp_btf` program (BTF-typed attach of the same tracepoint)"
        } else {
            " (an empty `tp_btf` program was refused by this kernel: not compared)"
        },
        s.window.as_secs(),
        s.round_trips,
        s.round_trips * 4 + 2000,
        windows.len() / 2,
        spread_cell(&per_tracked, 0),
        verdict(&untracked, GOAL_UNTRACKED_NS),
        verdict(&tracked, GOAL_TRACKED_NS),
        verdict(&per_tracked, GOAL_TRACKED_NS),
    )
}
