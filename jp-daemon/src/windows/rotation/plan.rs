//! The rotation's arithmetic, pure: which JVMs get windows, how often, and when the next
//! one opens. Nothing here reads a clock, a process or a random source; the caller hands
//! in the time (seconds on a monotonic clock) and uniform draws.
//!
//! Each JVM alternates between a closed gap and an open window of `seconds`. The gaps are
//! exponential (memoryless): a window's opening is independent of anything the program
//! does, so no periodic behaviour of the program is hit more or less often than its share
//! of time. With a mean gap G and windows of length T, the JVM's expected duty cycle (the
//! share of time a window is open) is `T / (T + G)`; a JVM whose windows cost `c` extra CPU
//! (its CPU rate in a window is `1 + c` times its rate outside) then pays `duty × c` extra
//! CPU on average, which the plan keeps at or under the budget.
use super::config::RotationConfig;

/// What a window costs a JVM before anything was measured: a 5× slowdown, 4.0 extra.
pub const PRIOR_COST: f64 = 4.0;
/// A measured cost below this counts as this: the measurement's noise, not a free window.
pub const MIN_COST: f64 = 0.1;
/// A JVM spends at most this share of its time in windows, however cheap they are.
pub const MAX_DUTY: f64 = 0.5;
/// The share of the host's rotation slots the plan fills on average: the rest absorbs the
/// randomness of exponential gaps, so that a due window seldom waits for a free slot.
pub const SLOT_LOAD: f64 = 0.8;

/// Whether a JVM gets rotation windows, and how the window reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eligibility {
    /// Started with the agent dormant: it opted in.
    Dormant,
    /// Started without the agent; named by the configuration, so it is attached.
    Attach,
    /// No windows, and why.
    No(&'static str),
}

/// The agent's state in a JVM, as the rotation tells JVMs apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentState {
    None,
    /// Profiled from start: its live tree is already exact; windows are refused.
    Live,
    Dormant,
    /// A window (the rotation's or a requested one) is open now.
    WindowOpen,
    /// An agent too old to say.
    Unknown,
}

/// A HotSpot JVM as the rotation sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub pid: u32,
    /// Process start time (clock ticks since boot): a pid reused is another JVM.
    pub start_time: u64,
    pub uid: u32,
    pub main_class: String,
    /// The process's cgroup (v2 path, from /proc/PID/cgroup), empty when unknown.
    pub cgroup: String,
    pub agent: AgentState,
    /// Started with -XX:+DisableAttachMechanism: nothing can reach it.
    pub attach_disabled: bool,
}

/// Whether `jvm` gets windows under `config`. The filters narrow the fleet (every listed
/// kind must match; within a kind, any entry); a JVM started without the agent is attached
/// only when `attach_without_agent` is on AND a filter names it.
pub fn eligibility(config: &RotationConfig, jvm: &Candidate) -> Eligibility {
    if jvm.attach_disabled {
        return Eligibility::No("attach is disabled in this JVM");
    }
    if !filters_match(config, jvm) {
        return Eligibility::No("not matched by the [windows.rotation] filters");
    }
    match jvm.agent {
        AgentState::Dormant | AgentState::WindowOpen => Eligibility::Dormant,
        AgentState::Live => Eligibility::No("profiled from start"),
        AgentState::Unknown => Eligibility::No("its agent is too old for windows"),
        AgentState::None if !config.attach_without_agent => {
            Eligibility::No("started without the agent (attach_without_agent = false)")
        }
        AgentState::None if !config.names_jvms() => {
            Eligibility::No("started without the agent and no filter names it")
        }
        AgentState::None => Eligibility::Attach,
    }
}

fn filters_match(config: &RotationConfig, jvm: &Candidate) -> bool {
    let class = config.main_class.is_empty()
        || config
            .main_class
            .iter()
            .any(|p| glob_match(p, &jvm.main_class));
    let uid = config.uids.is_empty() || config.uids.contains(&jvm.uid);
    let cgroup =
        config.cgroups.is_empty() || config.cgroups.iter().any(|p| cgroup_under(&jvm.cgroup, p));
    class && uid && cgroup
}

/// `*` matches any run of characters (dots included), `?` one character; the rest
/// matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it has swallowed up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `cgroup` is `prefix` or below it (whole path components: `/a` holds `/a/b`, not `/ab`).
pub fn cgroup_under(cgroup: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return cgroup.starts_with('/');
    }
    cgroup == prefix
        || cgroup
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The rotation's settings the arithmetic needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// Extra CPU a JVM may pay on average, as a fraction of its own (1 % = 0.01).
    pub budget: f64,
    /// A window's length.
    pub seconds: f64,
    /// Rotation windows open at once on the host.
    pub max_open: u32,
}

impl Policy {
    pub fn of(config: &RotationConfig) -> Policy {
        Policy {
            budget: config.budget_percent.get() / 100.0,
            seconds: f64::from(config.seconds),
            max_open: config.max_open,
        }
    }
}

/// One JVM's share of the plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share {
    /// Expected share of time with a window open.
    pub duty: f64,
    /// Mean closed gap between its windows, seconds.
    pub mean_gap: f64,
}

/// The plan for the whole fleet, in the order of the costs given.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub shares: Vec<Share>,
    /// Every duty was multiplied by this (≤ 1) so that the expected number of windows open
    /// at once stays within the host's slots.
    pub scale: f64,
    /// Windows expected open at once: the sum of the duties (Little's law).
    pub expected_open: f64,
}

/// Each JVM's duty from its estimated cost: `budget / cost` (cost at least [`MIN_COST`],
/// duty at most [`MAX_DUTY`]); then all scaled down together when their sum exceeds
/// `max_open × SLOT_LOAD`. Expected extra CPU per JVM: `duty × cost ≤ budget`.
pub fn plan(policy: &Policy, costs: &[f64]) -> Plan {
    let mut duties: Vec<f64> = costs
        .iter()
        .map(|c| (policy.budget / c.max(MIN_COST)).min(MAX_DUTY))
        .collect();
    let total: f64 = duties.iter().sum();
    let room = f64::from(policy.max_open) * SLOT_LOAD;
    let scale = if total > room { room / total } else { 1.0 };
    for d in &mut duties {
        *d *= scale;
    }
    Plan {
        shares: duties
            .iter()
            .map(|&duty| Share {
                duty,
                mean_gap: mean_gap(policy.seconds, duty),
            })
            .collect(),
        scale,
        expected_open: duties.iter().sum(),
    }
}

/// The mean closed gap that gives `duty` with windows of `seconds`: `T (1 − d) / d`;
/// infinite for a duty of 0.
pub fn mean_gap(seconds: f64, duty: f64) -> f64 {
    if duty <= 0.0 {
        f64::INFINITY
    } else {
        seconds * (1.0 - duty) / duty
    }
}

/// When the next window opens: `after` plus an exponential gap of mean `mean_gap`, from a
/// uniform draw `u` in (0, 1].
pub fn next_open(after: f64, mean_gap: f64, u: f64) -> f64 {
    let u = u.clamp(f64::MIN_POSITIVE, 1.0);
    after - u.ln() * mean_gap
}

/// Windows a JVM with `share` gets on average over `horizon` seconds: one per
/// `seconds + mean_gap`, i.e. `horizon × duty / seconds`.
pub fn expected_windows(policy: &Policy, share: &Share, horizon: f64) -> f64 {
    horizon * share.duty / policy.seconds
}

/// The windows to open now: the waiting JVMs whose time has come, earliest first, as many
/// as the free rotation slots allow. `due` is each JVM's next opening (None: open or not
/// scheduled); `open` the rotation windows open now.
pub fn due_now(due: &[Option<f64>], now: f64, open: usize, max_open: u32) -> Vec<usize> {
    let free = (max_open as usize).saturating_sub(open);
    let mut ready: Vec<(f64, usize)> = due
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.filter(|&t| t <= now).map(|t| (t, i)))
        .collect();
    ready.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    ready.into_iter().take(free).map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests;
