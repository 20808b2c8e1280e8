//! The `switch` part: `jp_offcpu`'s ns per context switch above an EMPTY program on the
//! same raw tracepoint, both attached at once and read through the kernel's BPF run-time
//! statistics at the same moments (same switches, same machine state), under a paced
//! switch load of a process jpd does not track (pipe ping-pong in this process) and of a
//! joined JVM (park/unpark ping-pong in `Switches.java`), in alternating order.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::load::{thread_switches, SwitchJvm};
use super::pingpong::PingPong;
use super::programs::{held_by, is_tracing, stats_of, Attached};
use crate::bench::cpu::jvms::{jvm_list, wait_for};
use crate::bench::floor::bpf_stats_on;
use crate::bench::harness::{env_num, jpctl_json, Jpd};
use crate::build::Deliverables;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Arm {
    Untracked,
    Tracked,
    /// As `Tracked`, the threads publishing in native slots (`publish=slot`): one user
    /// read for the context at switch-out instead of two.
    TrackedSlot,
    /// Joined threads that never block: spinning, more than the CPUs, so every switch of
    /// theirs is a preemption (run queue: the tracked path without the kernel stack walk).
    Preempted,
}

pub(super) const ARMS: [Arm; 4] = [
    Arm::Untracked,
    Arm::Tracked,
    Arm::TrackedSlot,
    Arm::Preempted,
];

/// The arms `JP_OFFCPU_ARMS` names (`untracked,tracked,slot,preempted`), all by default.
pub(super) fn arms_chosen() -> Result<Vec<Arm>> {
    let Ok(list) = std::env::var("JP_OFFCPU_ARMS") else {
        return Ok(ARMS.to_vec());
    };
    list.split(',')
        .map(|name| match name.trim() {
            "untracked" => Ok(Arm::Untracked),
            "tracked" => Ok(Arm::Tracked),
            "slot" => Ok(Arm::TrackedSlot),
            "preempted" => Ok(Arm::Preempted),
            other => bail!(
                "JP_OFFCPU_ARMS: no load named {other:?} (untracked, tracked, slot, preempted)"
            ),
        })
        .collect()
}

impl Arm {
    pub(super) fn label(self) -> &'static str {
        match self {
            Arm::Untracked => "untracked: pipe ping-pong of a process jpd does not track",
            Arm::Tracked => "tracked: park/unpark ping-pong of a joined JVM",
            Arm::TrackedSlot => "tracked, `publish=slot`: the same, contexts in slots",
            Arm::Preempted => "tracked, preempted: spinning threads of a joined JVM",
        }
    }
}

/// (runs, run time ns) of one program over a window.
#[derive(Clone, Copy, Default)]
pub(super) struct Runs {
    pub runs: u64,
    pub ns: u64,
}

impl Runs {
    fn between(a: (u64, u64), b: (u64, u64)) -> Runs {
        Runs {
            runs: b.0.saturating_sub(a.0),
            ns: b.1.saturating_sub(a.1),
        }
    }
    pub(super) fn per_run(&self) -> f64 {
        self.ns as f64 / self.runs.max(1) as f64
    }
}

/// One arm's window.
pub(super) struct Window {
    pub arm: Arm,
    pub seconds: f64,
    pub empty: Runs,
    pub btf: Runs,
    /// The empty program at `jp_offcpu`'s own attach point (`empty` or `btf`).
    pub base: Runs,
    pub offcpu: Runs,
    /// Context switches of the load's own threads (switch-outs, from /proc).
    pub load_switches: u64,
    /// Other people's JVMs jpd joined meanwhile (the machine is shared).
    pub foreign_joined: usize,
}

impl Window {
    /// jp_offcpu's ns per run above the empty program's at its attach point.
    pub(super) fn delta(&self) -> f64 {
        self.offcpu.per_run() - self.base.per_run()
    }
    pub(super) fn switches_per_s(&self) -> f64 {
        self.empty.runs as f64 / self.seconds
    }
    /// Share of the host's switches that are a load thread's switch-out (each run of the
    /// program is one switch: one task out, one in).
    pub(super) fn load_share(&self) -> f64 {
        (self.load_switches as f64 / self.empty.runs.max(1) as f64).min(1.0)
    }
}

/// What every window reads: the three programs.
pub(super) struct Probes {
    pub empty: Attached,
    pub btf: Option<Attached>,
    pub offcpu: std::os::fd::OwnedFd,
    /// `jp_offcpu` is a `tp_btf` program: compared with the empty `tp_btf` program.
    pub offcpu_tracing: bool,
}

impl Probes {
    fn read(&self) -> Result<[(u64, u64); 3]> {
        // The two programs compared are read back to back: one moment.
        let empty = self.empty.stats()?;
        let offcpu = stats_of(&self.offcpu)?;
        let btf = match &self.btf {
            Some(b) => b.stats()?,
            None => (0, 0),
        };
        Ok([empty, offcpu, btf])
    }
}

pub(super) struct Setting<'a> {
    pub out: &'a Deliverables,
    /// The agent library the JVMs load (a copy under a name only this jpd looks for).
    pub agent_lib: &'a Path,
    pub dir: &'a Path,
    pub socket: &'a Path,
    pub window: Duration,
    pub round_trips: u64,
}

pub(super) fn window(s: &Setting, probes: &Probes, arm: Arm) -> Result<Window> {
    let (jvm, pingpong) = match arm {
        Arm::Untracked => (None, Some(PingPong::start(s.round_trips)?)),
        Arm::Tracked | Arm::TrackedSlot => {
            let slot = arm == Arm::TrackedSlot;
            let jvm = SwitchJvm::pingpong(s.agent_lib, s.dir, s.round_trips, slot)?;
            (Some(jvm), None)
        }
        Arm::Preempted => (Some(SwitchJvm::spinning(s.agent_lib, s.dir)?), None),
    };
    let load_pid = jvm.as_ref().map_or(std::process::id(), SwitchJvm::pid);
    if let Some(j) = &jvm {
        let pid = j.pid();
        wait_for(
            &format!("jpd joins JVM {pid} and times its threads off CPU"),
            Duration::from_secs(60),
            || Ok(jvm_offcpu_ns(s.out, s.socket, pid)? > 0),
        )?;
    }
    // Let the load settle (the JVM's threads announced, its JIT done with the loop).
    std::thread::sleep(Duration::from_secs(2));
    let base = if probes.offcpu_tracing { 2 } else { 0 };
    let stats = bpf_stats_on()?;
    let (a, l0, t0) = (probes.read()?, thread_switches(load_pid)?, Instant::now());
    std::thread::sleep(s.window);
    let (b, l1, seconds) = (
        probes.read()?,
        thread_switches(load_pid)?,
        t0.elapsed().as_secs_f64(),
    );
    drop(stats);
    let list = jvm_list(s.out, s.socket)?;
    // Running JVMs other than this window's (the earlier windows' JVMs stay listed, exited).
    let ours = jvm.as_ref().map(SwitchJvm::pid);
    let foreign_joined = list
        .iter()
        .filter(|(p, j, _)| *j && Some(*p) != ours && Path::new(&format!("/proc/{p}")).exists())
        .count();
    if let Some(j) = &jvm {
        if !list.iter().any(|(p, joined, _)| *p == j.pid() && *joined) {
            bail!("the tracked arm's JVM was not joined at the end of the window");
        }
    }
    drop(pingpong);
    drop(jvm);
    Ok(Window {
        arm,
        seconds,
        empty: Runs::between(a[0], b[0]),
        offcpu: Runs::between(a[1], b[1]),
        btf: Runs::between(a[2], b[2]),
        base: Runs::between(a[base], b[base]),
        load_switches: l1.saturating_sub(l0),
        foreign_joined,
    })
}

/// Off-CPU time jpd put under the JVM's contexts (`jpctl jvm top --by offcpu`).
fn jvm_offcpu_ns(out: &Deliverables, socket: &Path, pid: u32) -> Result<u64> {
    let pid = pid.to_string();
    let args = ["jvm", "top", &pid, "--by", "offcpu", "-n", "20", "--json"];
    let v = jpctl_json(out, socket, &args)?;
    Ok(v["methods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["offcpu_ns"].as_u64())
        .sum())
}

/// Round trips per second of each load: ~2 switches each (measured on this 2-CPU VM: the
/// woken thread often runs right where the other blocked) on top of the ping thread's
/// 1 ms pacing (2 switches a tick), near `JP_OFFCPU_SWITCHES` (20000) switches per second
/// in all; the table states the rate each window had.
pub(super) fn round_trips() -> u64 {
    env_num("JP_OFFCPU_SWITCHES", 20_000).saturating_sub(2000) / 2
}

/// The programs: the empty ones attached here, jpd's found among its fds.
pub(super) fn probes(jpd: &Jpd) -> Result<Probes> {
    let empty = Attached::empty_raw_tp()?;
    let btf = match Attached::empty_tp_btf() {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("xtask: bench offcpu: no empty tp_btf program ({e:#}); raw tracepoint only");
            None
        }
    };
    let offcpu = held_by(jpd.pid(), "jp_offcpu")?;
    let offcpu_tracing = is_tracing(&offcpu)?;
    if offcpu_tracing && btf.is_none() {
        bail!("jp_offcpu is a tp_btf program and the empty tp_btf program to compare it with was refused");
    }
    Ok(Probes {
        empty,
        btf,
        offcpu,
        offcpu_tracing,
    })
}
