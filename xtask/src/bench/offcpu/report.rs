//! The `switch` part's table and verdicts.
use super::switch::{Arm, Probes, Setting, Window, ARMS};
use crate::bench::cpu::spread_cell;
use crate::bench::report::median;

/// Per switch of the load's threads (one switch-out and its switch-in), round by round:
/// the window's difference less the switches of other tasks (priced at the same round's
/// untracked difference), over the load's share.
fn per_load_switch(windows: &[Window], arm: Arm, untracked: &[f64]) -> Vec<f64> {
    let deltas = of(windows, arm, Window::delta);
    let shares = of(windows, arm, Window::load_share);
    deltas
        .iter()
        .zip(untracked)
        .zip(&shares)
        .map(|((d, u), s)| (d - (1.0 - s) * u) / s.max(0.01))
        .collect()
}

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

pub(super) fn switch(
    windows: &[Window],
    s: &Setting,
    probes: &Probes,
    load_before: &str,
) -> String {
    let btf = probes.btf.is_some();
    let attach = if probes.offcpu_tracing {
        "`tp_btf` program (BTF-typed attach)"
    } else {
        "raw tracepoint program"
    };
    let mut rows = String::new();
    for arm in ARMS {
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
            cell(&|w| w.base.per_run(), 0),
            cell(&|w| w.offcpu.per_run(), 0),
            cell(&|w| w.delta(), 0),
        ));
    }
    let untracked = of(windows, Arm::Untracked, Window::delta);
    let tracked = of(windows, Arm::Tracked, Window::delta);
    let per_tracked = per_load_switch(windows, Arm::Tracked, &untracked);
    let per_slot = per_load_switch(windows, Arm::TrackedSlot, &untracked);
    let per_preempted = per_load_switch(windows, Arm::Preempted, &untracked);
    let walk: Vec<f64> = per_tracked
        .iter()
        .zip(&per_preempted)
        .map(|(t, p)| t - p)
        .collect();
    format!(
        "### `jp_offcpu` per context switch, above an empty program at the same attach point\n\n\
jpd with `[kernel] offcpu = true` (and the cap at 1000000 switches per CPU per second, so that \
every tracked switch takes the whole path) holds `jp_offcpu` on the `sched_switch` \
tracepoint as a {attach}; the bench attaches an EMPTY program (`r0 = 0; exit`) of the same kind \
to the same tracepoint (the baseline: \"empty\" below) and, beside them, an empty raw tracepoint program{}, \
and reads the kernel's BPF run-time statistics of each (runs, run time) at the same moments, \
over {} s windows: the same switches went through all of them, so each window's difference is \
`jp_offcpu`'s own cost per switch, the attach point's (and the statistics' two clock reads) \
taken out. Loads, paced in 1 ms ticks at {} round trips per second (4 switches each, and \
2 per tick for the pacing: ~{} switches per second), alternating, {} rounds: \
**untracked**: two threads of the bench's own process handing a byte over two pipes (jpd does \
not track it: a test of its tgid's bit in `JP_JVM_PID_BITS` going out and one coming in); **tracked**: a JVM (JDK 17, \
agent `profiler=usdt`, joined by jpd) whose two threads hand a turn over with \
`LockSupport.park/unpark` (futex waits: every switch-out of theirs reads the context, finds why it blocks (the kernel \
stack, walked again only when the thread blocks from another place than last time) and remembers the period; every switch-in times and logs it; a window starts \
once jpd shows off-CPU time under the JVM's contexts); **tracked, `publish=slot`**: the same \
JVM with the agent's `publish=slot` (the context read from a native slot: one user read at \
switch-out instead of two, the reference and the object's field); **tracked, preempted**: the cpu bench's \
CpuLoad JVM, 4 threads spinning on calls (joined; more threads than CPUs, so their switches \
are preemptions: the tracked path with the run-queue reason, no kernel stack walk). \"Load \
share\": the load threads' own switches (`/proc/…/status`, each a switch-out) over all the \
host's switches (each run of a program is one switch); the rest are other processes of this \
shared machine. \"Other JVMs joined\": \
running JVMs other than the window's own that this jpd joined (the most in any window; \
other people's tests on this machine load the agent under its usual name, which this jpd \
does not look for: the bench's JVMs load a copy under a name of their own). Machine load average (1 min) at the start: {load_before}.\n\n\
| load | switches/s (host) | load share % | empty ns/run | `jp_offcpu` ns/run | `jp_offcpu` − empty, ns | empty tp_btf − empty raw_tp, ns | other JVMs joined |\n\
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n{rows}\n\
Each cell: median [min–max] over rounds. Per switch of the load's own threads (a switch-out \
and its switch-in: the window's difference less the other tasks' switches priced at the same \
round's untracked difference, over the load's share): blocked (park/unpark) {} ns, the same with \
`publish=slot` {} ns, preempted {} ns; blocked − preempted (the kernel stack walk of a blocked \
switch-out, and what else differs between the two loads) {} ns.\n\n\
- Goal, switches of processes jpd does not track ≤ {GOAL_UNTRACKED_NS:.0} ns above the empty \
program: {}.\n\
- Goal, ≤ {GOAL_TRACKED_NS:.0} ns per switch on average above the empty program under ~20 k \
switches/s with the JVM join on (the tracked load): {}; per tracked switch alone: {}.\n",
        if btf {
            " and an empty `tp_btf` program (the two kinds of attach compared in the last column)"
        } else {
            " (an empty `tp_btf` program was refused by this kernel: not compared)"
        },
        s.window.as_secs(),
        s.round_trips,
        s.round_trips * 4 + 2000,
        windows.first().map_or(0, |w| of(windows, w.arm, |_| 0.0).len()),
        spread_cell(&per_tracked, 0),
        spread_cell(&per_slot, 0),
        spread_cell(&per_preempted, 0),
        spread_cell(&walk, 0),
        verdict(&untracked, GOAL_UNTRACKED_NS),
        verdict(&tracked, GOAL_TRACKED_NS),
        verdict(&per_tracked, GOAL_TRACKED_NS),
    )
}
