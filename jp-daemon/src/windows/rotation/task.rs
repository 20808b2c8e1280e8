//! The rotation's task: a tick a second reads the fleet's CPU, finishes the cost
//! measurements whose readings arrived, plans, and opens the windows that are due; each
//! window runs as a task of its own and reports back when it completed (or failed).
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::config::RotationConfig;
use super::cost::{
    CpuHistory, Estimate, Reading, WindowCpu, BASELINE_SECONDS, MIN_BASELINE_SECONDS,
};
use super::plan::{self, AgentState, Candidate, Eligibility, Policy};
use super::{Completed, Fleet, JvmRotation, RotationPorts, RotationStats, RotationWindow};
use crate::lock::lock;

/// How often the task wakes.
const TICK: Duration = Duration::from_secs(1);
/// How often the list of JVMs is read again (every tick reads their CPU).
const RESCAN: Duration = Duration::from_secs(5);
/// How long after a window's close its CPU is read: the kernel sampler's samples reach
/// the JVM store at its next pass (a second by default), plus one for good measure.
const SAMPLER_LAG: f64 = 2.0;
/// A JVM's first window waits until it was watched this many window lengths (within
/// [`MIN_BASELINE_SECONDS`]..=[`BASELINE_SECONDS`]): its CPU outside windows must be
/// known to measure what the window costs, and a JVM that just started is still warming
/// up (class loading, JIT), which a window would only make slower.
const WATCH_WINDOWS: f64 = 12.0;

type Key = (u32, u64);

/// A window open (or opening) in a member.
#[derive(Clone, Copy)]
struct Measuring {
    opened: f64,
    closed: f64,
    /// The CPU rate outside windows before it, when it could be measured.
    baseline: Option<f64>,
}

/// One JVM in the rotation.
struct Member {
    jvm: Candidate,
    load_agent: bool,
    history: CpuHistory,
    estimate: Estimate,
    /// Its next window's opening; None while one is open.
    due: Option<f64>,
    /// The mean gap `due` was drawn with.
    mean_gap: f64,
    duty: f64,
    open: bool,
    /// When the rotation began watching it.
    watched_since: f64,
    /// When its last window's CPU was read after its close: baselines start later.
    quiet_since: f64,
    /// A closed window waiting for the reading after its close.
    measuring: Option<Measuring>,
    windows: u64,
    window_cpu_seconds: f64,
}

/// The task's state between ticks.
struct State {
    t0: Instant,
    members: BTreeMap<Key, Member>,
    rng: SplitMix,
    totals: Totals,
    last_tick: f64,
}

#[derive(Default)]
struct Totals {
    opened: u64,
    completed: u64,
    failed: u64,
    window_seconds: f64,
    member_seconds: f64,
    window_cpu_seconds: f64,
    expected_open: f64,
}

type Outcome = (Key, f64, Result<Completed, String>);

pub(super) async fn run(
    ports: RotationPorts,
    mut config: watch::Receiver<RotationConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut state = State {
        t0: Instant::now(),
        members: BTreeMap::new(),
        rng: SplitMix::seeded(),
        totals: Totals::default(),
        last_tick: 0.0,
    };
    let mut windows: JoinSet<Outcome> = JoinSet::new();
    // Which JVM each window task is for: a task that panicked still frees its JVM's slot.
    let mut tasks: HashMap<tokio::task::Id, (Key, f64)> = HashMap::new();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_scan: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = ticker.tick() => {}
            Some(joined) = windows.join_next_with_id(), if !windows.is_empty() => {
                if let Some((key, opened, result)) = outcome(joined, &mut tasks) {
                    state.window_ended(key, opened, result);
                }
                continue;
            }
        }
        let cfg = config.borrow_and_update().clone();
        if last_scan.is_none_or(|t| t.elapsed() >= RESCAN) {
            last_scan = Some(Instant::now());
            let fleet = Arc::clone(&ports.fleet);
            if let Ok(jvms) = tokio::task::spawn_blocking(move || fleet.jvms()).await {
                state.rescan(&cfg, jvms);
            }
        }
        state.read_cpu(&ports.fleet).await;
        for w in state.tick(&cfg) {
            let opener = Arc::clone(&ports.opener);
            let key = (w.pid, w.start_time);
            let opened = state.now();
            let task = windows.spawn(async move { (key, opened, opener.open(w).await) });
            tasks.insert(task.id(), (key, opened));
        }
        *lock(&ports.stats) = state.stats(&cfg);
    }
    // The windows still open close at their deadline in the agent.
    windows.detach_all();
}

/// A window task's outcome; a task that panicked is a failed window of its JVM.
fn outcome(
    joined: Result<(tokio::task::Id, Outcome), tokio::task::JoinError>,
    tasks: &mut HashMap<tokio::task::Id, (Key, f64)>,
) -> Option<Outcome> {
    match joined {
        Ok((id, outcome)) => {
            tasks.remove(&id);
            Some(outcome)
        }
        Err(e) => {
            let (key, opened) = tasks.remove(&e.id())?;
            Some((key, opened, Err(format!("the window's task ended: {e}"))))
        }
    }
}

impl State {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The eligible JVMs join (with the prior), the others and the ones gone leave; a
    /// member whose window is open stays until it ends.
    fn rescan(&mut self, config: &RotationConfig, jvms: Vec<Candidate>) {
        let mut seen: HashMap<Key, (Candidate, bool)> = HashMap::new();
        for jvm in jvms {
            let load_agent = match plan::eligibility(config, &jvm) {
                Eligibility::Dormant => false,
                Eligibility::Attach => true,
                Eligibility::No(_) => continue,
            };
            seen.insert((jvm.pid, jvm.start_time), (jvm, load_agent));
        }
        let quiet_since = self.now();
        self.members
            .retain(|key, m| m.open || seen.contains_key(key));
        for (key, (jvm, load_agent)) in seen {
            let m = self.members.entry(key).or_insert_with(|| Member {
                jvm: jvm.clone(),
                load_agent,
                history: CpuHistory::default(),
                estimate: Estimate::default(),
                due: None,
                mean_gap: f64::INFINITY,
                duty: 0.0,
                open: false,
                watched_since: quiet_since,
                quiet_since,
                measuring: None,
                windows: 0,
                window_cpu_seconds: 0.0,
            });
            m.jvm = jvm;
            m.load_agent = load_agent;
        }
    }

    /// Every member's CPU now, into its history.
    async fn read_cpu(&mut self, fleet: &Arc<dyn Fleet>) {
        let keys: Vec<Key> = self.members.keys().copied().collect();
        let fleet = Arc::clone(fleet);
        let asked = keys.clone();
        let Ok(cpu) = tokio::task::spawn_blocking(move || fleet.cpu(&asked)).await else {
            return;
        };
        let at = self.now();
        for (key, reading) in keys.iter().zip(cpu) {
            if let (Some(m), Some((cpu_ns, source))) = (self.members.get_mut(key), reading) {
                m.history.push(Reading { at, cpu_ns, source });
            }
        }
    }

    /// Measurements finished, the plan made again, the due windows to open now.
    fn tick(&mut self, config: &RotationConfig) -> Vec<RotationWindow> {
        let now = self.now();
        let dt = (now - self.last_tick).max(0.0);
        self.last_tick = now;
        for m in self.members.values_mut() {
            if let Some(cpu) = m.finish_measuring(now) {
                self.totals.window_cpu_seconds += cpu;
            }
        }
        if !config.enabled {
            for m in self.members.values_mut() {
                m.due = None;
                m.mean_gap = f64::INFINITY;
                m.duty = 0.0;
            }
            self.totals.expected_open = 0.0;
            return Vec::new();
        }
        self.totals.member_seconds += dt * self.members.len() as f64;
        let policy = Policy::of(config);
        let watch_for =
            (WATCH_WINDOWS * policy.seconds).clamp(MIN_BASELINE_SECONDS, BASELINE_SECONDS);
        self.replan(&policy, now, watch_for);
        let keys: Vec<Key> = self.members.keys().copied().collect();
        let due: Vec<Option<f64>> = self
            .members
            .values()
            .map(|m| {
                m.due
                    .filter(|_| m.jvm.agent != AgentState::WindowOpen || m.open)
            })
            .collect();
        let open = self.members.values().filter(|m| m.open).count();
        let mut out = Vec::new();
        for i in plan::due_now(&due, now, open, config.max_open) {
            let Some(m) = self.members.get_mut(&keys[i]) else {
                continue;
            };
            m.due = None;
            m.open = true;
            self.totals.opened += 1;
            out.push(RotationWindow {
                pid: m.jvm.pid,
                start_time: m.jvm.start_time,
                seconds: config.seconds,
                load_agent: m.load_agent,
            });
        }
        out
    }

    /// Each member's duty from its estimate; a waiting member whose mean gap changed
    /// draws its next opening again from now (memoryless: as if drawn with the new mean
    /// from the start), and never before it was watched for `watch_for` seconds.
    fn replan(&mut self, policy: &Policy, now: f64, watch_for: f64) {
        let costs: Vec<f64> = self.members.values().map(|m| m.estimate.cost).collect();
        let plan = plan::plan(policy, &costs);
        self.totals.expected_open = plan.expected_open;
        for (m, share) in self.members.values_mut().zip(plan.shares) {
            m.duty = share.duty;
            let changed =
                (share.mean_gap - m.mean_gap).abs() > 0.01 * share.mean_gap.min(m.mean_gap);
            if m.open || !(changed || m.due.is_none()) {
                continue;
            }
            m.mean_gap = share.mean_gap;
            let from = now.max(m.watched_since + watch_for);
            m.due = Some(plan::next_open(from, share.mean_gap, self.rng.uniform()));
        }
    }

    /// A window's task ended: the member waits for its next one, drawn from now, and its
    /// cost is measured once the reading after the close arrived.
    fn window_ended(&mut self, key: Key, opened: f64, result: Result<Completed, String>) {
        let now = self.now();
        let Some(m) = self.members.get_mut(&key) else {
            return;
        };
        m.open = false;
        m.due = Some(plan::next_open(now, m.mean_gap, self.rng.uniform()));
        match result {
            Ok(done) => {
                self.totals.completed += 1;
                m.windows += 1;
                // The agent's own times, on the task's clock.
                let ago = |t: SystemTime| SystemTime::now().duration_since(t).unwrap_or_default();
                let closed = now - ago(done.closed).as_secs_f64();
                let open_seconds = done.closed.duration_since(done.opened).unwrap_or_default();
                let opened = (closed - open_seconds.as_secs_f64()).max(opened.min(closed));
                self.totals.window_seconds += closed - opened;
                let from = m.quiet_since.max(opened - BASELINE_SECONDS);
                m.measuring = Some(Measuring {
                    opened,
                    closed,
                    baseline: m.history.rate_between(from, opened),
                });
            }
            Err(e) => {
                self.totals.failed += 1;
                log::warn!(target: "jpd", "rotation: a window in JVM {}: {e}", key.0);
            }
        }
    }

    fn stats(&self, config: &RotationConfig) -> RotationStats {
        let t = &self.totals;
        RotationStats {
            enabled: config.enabled,
            jvms: self
                .members
                .values()
                .map(|m| JvmRotation {
                    pid: m.jvm.pid,
                    start_time: m.jvm.start_time,
                    main_class: m.jvm.main_class.clone(),
                    cost: m.estimate.cost,
                    measured: m.estimate.measured,
                    duty: m.duty,
                    windows: m.windows,
                    window_cpu_seconds: m.window_cpu_seconds,
                })
                .collect(),
            expected_open: t.expected_open,
            open: self.members.values().filter(|m| m.open).count(),
            opened: t.opened,
            completed: t.completed,
            failed: t.failed,
            effective_duty: if t.member_seconds > 0.0 {
                t.window_seconds / t.member_seconds
            } else {
                0.0
            },
            window_cpu_seconds: t.window_cpu_seconds,
        }
    }
}

impl Member {
    /// The measurement of the last window, once a reading after its close (and the
    /// sampler's lag) arrived: the estimate takes its cost; returns the window's CPU (s).
    fn finish_measuring(&mut self, now: f64) -> Option<f64> {
        let w = self.measuring?;
        if now < w.closed + SAMPLER_LAG {
            return None;
        }
        self.measuring = None;
        self.quiet_since = now;
        let before = self.history.at_or_before(w.opened)?;
        let after = self.history.at_or_after(w.closed + SAMPLER_LAG)?;
        let cpu = WindowCpu {
            baseline_cores: w.baseline.unwrap_or(0.0),
            before,
            after,
            open_seconds: w.closed - w.opened,
        };
        if let (Some(_), Some(cost)) = (w.baseline, cpu.cost()) {
            self.estimate = self.estimate.with(cost);
        }
        let seconds = cpu.cpu_seconds();
        self.window_cpu_seconds += seconds;
        Some(seconds)
    }
}

/// SplitMix64: uniform draws for the gaps. Not for secrets: it only has to be unrelated to
/// what the JVMs do.
struct SplitMix(u64);

impl SplitMix {
    fn seeded() -> SplitMix {
        let mut seed = [0u8; 8];
        // SAFETY: getrandom writes at most `seed.len()` bytes into the buffer it is given.
        let n = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
        let mut s = u64::from_le_bytes(seed);
        if n != 8 {
            s = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as u64
                ^ u64::from(std::process::id());
        }
        SplitMix(s)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests;
