//! Whether jpd's long-running parts still make progress: the kernel reader, the USDT
//! manager and the ring reader each hold a [`Heartbeat`] and beat it whenever they get
//! something done (the ring reader also when its poll times out on an idle host, so
//! that quiet is not taken for stuck). [`check`] judges every part from its last beat
//! on the monotonic clock: systemd's watchdog is fed only while none is stuck
//! (`daemon/watchdog.rs`), and `jpctl status` shows the same verdicts
//! (`Status.subsystems`).
//!
//! The registry is process-wide, like the refusal counts: the parts sit in different
//! pipeline stages and threads, and the readers (the watchdog, the API) need no wiring
//! to each of them. Only the parts that run register, so a disabled USDT collector is
//! not held stuck. A later registration under the same name (a new daemon life in
//! the same process) replaces the earlier one.
//!
//! A part is stuck when it has not beaten for twice its own interval plus the
//! watchdog's grace (half of systemd's `WatchdogSec`, see [`set_grace`]), or at once
//! when its heartbeat ended (the task returned, panicked or was cancelled): a part
//! that is gone makes no progress again.

pub mod fault;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::lock::lock;

/// One of jpd's long-running parts, by the name `jpctl status` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Part(pub &'static str);

/// The thread that reads the kernel sampler's maps every `read_interval`.
pub const KERNEL_READER: Part = Part("kernel_reader");
/// The USDT manager thread: scans `/proc`, attaches library files, writes generations.
pub const USDT_MANAGER: Part = Part("usdt_manager");
/// The task that drains the USDT ring buffer into the JVM store.
pub const RING_READER: Part = Part("ring_reader");

/// The grace when jpd runs without systemd's watchdog: half of the unit's
/// `WatchdogSec=30s`, so that `jpctl status` judges as it would under the unit.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(15);

/// A part's beats, shared between the part and the registry.
#[derive(Debug)]
struct Beats {
    interval: Duration,
    /// Nanoseconds after [`epoch`] of the last beat.
    last_ns: AtomicU64,
    /// Why the part ended, once it has.
    ended: Mutex<Option<String>>,
}

static PARTS: Mutex<BTreeMap<Part, Arc<Beats>>> = Mutex::new(BTreeMap::new());
static GRACE_NS: AtomicU64 = AtomicU64::new(DEFAULT_GRACE.as_nanos() as u64);

/// The monotonic instant beats are counted from (the first use in the process).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// A part's handle on its liveness: [`Heartbeat::beat`] on progress. Dropping it
/// (the part returned, panicked or was cancelled) marks the part ended.
#[derive(Debug)]
pub struct Heartbeat {
    part: Part,
    beats: Arc<Beats>,
}

impl Heartbeat {
    /// Registers `part`, which makes progress at least every `interval` when healthy,
    /// as having beaten now.
    pub fn register(part: Part, interval: Duration) -> Heartbeat {
        let beats = Arc::new(Beats {
            interval,
            last_ns: AtomicU64::new(since_epoch(Instant::now())),
            ended: Mutex::new(None),
        });
        lock(&PARTS).insert(part, Arc::clone(&beats));
        Heartbeat { part, beats }
    }

    /// The part made progress now. One clock read and one atomic store.
    pub fn beat(&self) {
        self.beats
            .last_ns
            .store(since_epoch(Instant::now()), Ordering::Relaxed);
    }

    /// The part ends for `why` (logged by the watchdog and shown by `jpctl status`).
    pub fn end(self, why: &str) {
        lock(&self.beats.ended).get_or_insert_with(|| why.to_string());
    }

    pub fn part(&self) -> Part {
        self.part
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        lock(&self.beats.ended).get_or_insert_with(|| "it ended".to_string());
    }
}

/// Sets the watchdog's grace: half of systemd's `WatchdogSec` (the pinger's period),
/// so that a part is held stuck before systemd's own timer runs out.
pub fn set_grace(grace: Duration) {
    GRACE_NS.store(
        u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

fn grace() -> Duration {
    Duration::from_nanos(GRACE_NS.load(Ordering::Relaxed))
}

/// A part's state as judged now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub part: Part,
    /// Time since its last beat.
    pub idle: Duration,
    pub stuck: bool,
    /// Why it is held stuck; empty when it is not.
    pub detail: String,
}

/// Every registered part, judged now (sorted by name).
pub fn check() -> Vec<Health> {
    check_at(Instant::now(), grace())
}

fn check_at(now: Instant, grace: Duration) -> Vec<Health> {
    let now = since_epoch(now);
    lock(&PARTS)
        .iter()
        .map(|(&part, beats)| {
            let idle =
                Duration::from_nanos(now.saturating_sub(beats.last_ns.load(Ordering::Relaxed)));
            let ended = lock(&beats.ended).clone();
            judge(part, beats.interval, grace, idle, ended)
        })
        .collect()
}

/// The rule: stuck once ended, or when idle for longer than [`allowed_idle`].
pub fn judge(
    part: Part,
    interval: Duration,
    grace: Duration,
    idle: Duration,
    ended: Option<String>,
) -> Health {
    let allowed = allowed_idle(interval, grace);
    let detail = match ended {
        Some(why) => format!("ended: {why}"),
        None if idle > allowed => format!(
            "no progress for {:.1} s (allowed {:.1} s)",
            idle.as_secs_f64(),
            allowed.as_secs_f64()
        ),
        None => String::new(),
    };
    Health {
        part,
        idle,
        stuck: !detail.is_empty(),
        detail,
    }
}

/// How long a part with beats every `interval` may stay quiet: one interval late is
/// normal jitter (a pass or a scan that took as long as the interval), and the grace
/// covers a slow moment of the host (a pass parsing kallsyms, a starved thread).
pub fn allowed_idle(interval: Duration, grace: Duration) -> Duration {
    interval.saturating_mul(2).saturating_add(grace)
}

#[cfg(test)]
mod tests;
