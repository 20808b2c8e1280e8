//! Pushes profiles to a Pyroscope server on an interval (`[pyroscope]`): the push side
//! of what `/debug/pprof/*` offers to Alloy's `pyroscope.scrape`.
//!
//! Two tasks: the collector makes one push request per interval (in a blocking thread:
//! it copies JVM trees and gzips) and queues it; the sender delivers the queue in order.
//! A slow or dead server therefore only grows the queue — bounded by `max_backlog` and
//! `max_backlog_mb`, the oldest push dropped and counted — and never delays collection,
//! the gRPC API or `/metrics`. A failed push is retried with exponential back-off
//! (1 s doubling to 60 s); one the server refuses for good (a 4xx other than 408/429)
//! is dropped and counted.
//!
//! The queue and the baselines live as long as jpd ([`Shared`]): a SIGHUP that changes
//! the URL, credentials or interval restarts the tasks and keeps both, so nothing is
//! lost or pushed twice; disabling drops them (counted), enabling starts afresh. At
//! SIGTERM the interval begun is pushed with the queue, for at most 5 s (`timeout_s` if
//! shorter); what is still queued then is lost with the process.

pub mod collect;
pub mod config;
pub mod windows;
pub mod wire;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use prost::Message;
use tokio::task::JoinHandle;

use self::collect::{Baselines, Labeling};
use self::config::PyroscopeConfig;
use self::wire::{Client, PushError, PushRequest};
use super::prometheus::Family;
use super::ExportState;
use crate::lock::lock;

const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Counters for `/metrics`.
#[derive(Default)]
pub struct PushStats {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub rejected: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub sent_profiles: AtomicU64,
    pub dropped_backlog: AtomicU64,
    pub dropped_rejected: AtomicU64,
    pub dropped_disabled: AtomicU64,
    pub backlog: AtomicU64,
    pub backlog_bytes: AtomicU64,
    pub last_success_ms: AtomicU64,
}

struct Batch {
    seq: u64,
    body: Bytes,
    profiles: u64,
}

#[derive(Default)]
struct Backlog {
    queue: VecDeque<Batch>,
    bytes: usize,
    next_seq: u64,
    /// The push the sender is delivering: never the one dropped for room.
    in_flight: Option<u64>,
}

/// What outlives one pusher: the counters, the queue and the baselines.
#[derive(Default)]
pub struct Shared {
    pub stats: PushStats,
    backlog: Mutex<Backlog>,
    /// Held by the collector's blocking thread while it collects.
    baselines: Mutex<Option<Baselines>>,
    /// Bumped by a disable: baselines of an older epoch are dropped.
    epoch: AtomicU64,
    wake: tokio::sync::Notify,
}

impl Shared {
    fn publish(&self, b: &Backlog) {
        self.stats
            .backlog
            .store(b.queue.len() as u64, Ordering::Relaxed);
        self.stats
            .backlog_bytes
            .store(b.bytes as u64, Ordering::Relaxed);
    }

    /// Queues a push, dropping the oldest ones beyond the bounds; `who` names the
    /// pusher in the log.
    fn enqueue(&self, who: &str, body: Bytes, profiles: u64, max: usize, max_bytes: usize) {
        let mut b = lock(&self.backlog);
        let seq = b.next_seq;
        b.next_seq += 1;
        b.bytes += body.len();
        b.queue.push_back(Batch {
            seq,
            body,
            profiles,
        });
        while b.queue.len() > max.max(2) || (b.bytes > max_bytes && b.queue.len() > 2) {
            let oldest = usize::from(b.queue.front().map(|f| f.seq) == b.in_flight);
            if let Some(old) = b.queue.remove(oldest) {
                b.bytes -= old.body.len();
                self.stats
                    .dropped_backlog
                    .fetch_add(old.profiles, Ordering::Relaxed);
                log::warn!(
                    "{who}: backlog full ({} pushes, {} bytes): dropped the oldest push ({} profiles)",
                    b.queue.len(),
                    b.bytes,
                    old.profiles
                );
            }
        }
        self.publish(&b);
        drop(b);
        self.wake.notify_one();
    }

    /// The oldest queued push, now in flight.
    fn front(&self) -> Option<(u64, Bytes, u64)> {
        let mut b = lock(&self.backlog);
        let f = b.queue.front().map(|f| (f.seq, f.body.clone(), f.profiles));
        b.in_flight = f.as_ref().map(|f| f.0);
        f
    }

    /// Removes push `seq` if still queued (the collector may have dropped it meanwhile).
    fn remove(&self, seq: u64) -> bool {
        let mut b = lock(&self.backlog);
        b.in_flight = None;
        if b.queue.front().is_some_and(|f| f.seq == seq) {
            if let Some(f) = b.queue.pop_front() {
                b.bytes -= f.body.len();
            }
            self.publish(&b);
            return true;
        }
        false
    }

    /// `[pyroscope]` was disabled: what is queued is dropped (counted) and the next
    /// enable starts from new baselines.
    pub fn disable(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
        let mut b = lock(&self.backlog);
        let profiles: u64 = b.queue.iter().map(|x| x.profiles).sum();
        b.queue.clear();
        b.bytes = 0;
        self.publish(&b);
        self.stats
            .dropped_disabled
            .fetch_add(profiles, Ordering::Relaxed);
    }
}

/// The host name for the `host` label.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// A running pusher; [`Pusher::stop`] ends it (the queue stays in [`Shared`]).
pub struct Pusher {
    who: &'static str,
    tasks: Vec<JoinHandle<()>>,
    /// The last collection, run by [`Pusher::finish`].
    last: Option<Box<dyn FnOnce() + Send>>,
}

/// Delivers one encoded push: the transport of a pusher.
pub trait Deliver: Send + Sync + 'static {
    fn deliver(
        &self,
        body: Bytes,
    ) -> impl std::future::Future<Output = Result<(), PushError>> + Send;
}

impl Deliver for Client {
    fn deliver(
        &self,
        body: Bytes,
    ) -> impl std::future::Future<Output = Result<(), PushError>> + Send {
        self.push(body)
    }
}

/// One interval's push from the baselines (moved to `now`): its encoded body and how
/// many profiles it holds; `None` when there is nothing to push.
pub type CollectFn =
    dyn Fn(&ExportState, &mut Baselines, SystemTime) -> Option<(Vec<u8>, u64)> + Send + Sync;

/// What a pusher is: its name in the log, its queue and baselines, and its bounds.
pub struct PushPlan {
    pub who: &'static str,
    pub shared: Arc<Shared>,
    pub interval: Duration,
    pub max: usize,
    pub max_bytes: usize,
}

impl Pusher {
    /// Starts the tasks (inside a tokio runtime). Fails when a secret file cannot be
    /// read or TLS cannot be set up; the message names the key.
    pub fn start(cfg: &PyroscopeConfig, sources: ExportState) -> Result<Pusher, String> {
        let client = Client::new(cfg)?;
        let labeling = Labeling {
            host: host_name(),
            labels: cfg.labels.clone(),
            kernel: cfg.kernel,
            jvms: cfg.jvms,
        };
        let collect: Arc<CollectFn> = Arc::new(move |sources, b, now| {
            let mut series = collect::collect(b, sources, &labeling, now);
            if labeling.jvms {
                windows::collect(b, sources, &labeling, &mut series);
            }
            let profiles = series.len() as u64;
            (profiles > 0).then(|| (PushRequest { series }.encode_to_vec(), profiles))
        });
        let plan = PushPlan {
            who: "pyroscope",
            shared: Arc::clone(&sources.pyroscope),
            interval: Duration::from_secs(cfg.interval_s),
            max: cfg.max_backlog,
            max_bytes: usize::try_from(cfg.max_backlog_mb << 20).unwrap_or(usize::MAX),
        };
        Ok(Pusher::spawn(plan, sources, client, collect))
    }

    /// Starts a pusher's two tasks: the collector queues one push per interval, the
    /// sender delivers the queue through `client`.
    pub fn spawn(
        plan: PushPlan,
        sources: ExportState,
        client: impl Deliver,
        collect: Arc<CollectFn>,
    ) -> Pusher {
        let plan = Arc::new(plan);
        let collector = tokio::spawn(collector(
            sources.clone(),
            Arc::clone(&plan),
            Arc::clone(&collect),
        ));
        let sender = tokio::spawn(sender(plan.who, Arc::clone(&plan.shared), client));
        Pusher {
            who: plan.who,
            tasks: vec![collector, sender],
            last: Some(Box::new(move || {
                collect_and_queue(&sources, &plan, &*collect)
            })),
        }
    }

    /// jpd is stopping: pushes the interval begun so far with what is queued, for at
    /// most `deadline` (a server that is down must not hold up the shutdown), then stops.
    pub async fn finish(mut self, shared: &Shared, deadline: Duration) {
        let until = tokio::time::Instant::now() + deadline;
        if let Some(collector) = self.tasks.first() {
            collector.abort();
        }
        if let Some(last) = self.last.take() {
            let _ = tokio::time::timeout_at(until, tokio::task::spawn_blocking(last)).await;
        }
        while shared.stats.backlog.load(Ordering::Relaxed) > 0
            && tokio::time::Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = shared.stats.backlog.load(Ordering::Relaxed);
        if left > 0 {
            log::warn!("{}: stopping with {left} pushes not delivered", self.who);
        }
        self.stop().await;
    }

    /// Ends both tasks; a push in flight is abandoned and stays queued.
    pub async fn stop(mut self) {
        self.last = None;
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn collector(sources: ExportState, plan: Arc<PushPlan>, collect: Arc<CollectFn>) {
    let who = plan.who;
    let start = {
        let (sources, shared) = (sources.clone(), Arc::clone(&plan.shared));
        tokio::task::spawn_blocking(move || {
            let epoch = shared.epoch.load(Ordering::Relaxed);
            let mut b = lock(&shared.baselines);
            if b.as_ref().is_none_or(|b| b.epoch != epoch) {
                *b = Some(Baselines::new(epoch, &sources, SystemTime::now()));
            }
        })
    };
    if start.await.is_err() {
        log::error!("{who}: the collector could not start");
        return;
    }
    let interval = plan.interval;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let (sources, plan, collect) = (sources.clone(), Arc::clone(&plan), Arc::clone(&collect));
        let done =
            tokio::task::spawn_blocking(move || collect_and_queue(&sources, &plan, &*collect))
                .await;
        if let Err(e) = done {
            log::error!("{who}: collecting profiles failed: {e}");
        }
    }
}

/// One interval's profiles, queued as one push (blocking: copies trees, encodes).
fn collect_and_queue(sources: &ExportState, plan: &PushPlan, collect: &CollectFn) {
    let shared = &plan.shared;
    let now = SystemTime::now();
    let epoch = shared.epoch.load(Ordering::Relaxed);
    let mut guard = lock(&shared.baselines);
    let b = match guard.as_mut() {
        Some(b) if b.epoch == epoch => b,
        _ => guard.insert(Baselines::new(epoch, sources, now)),
    };
    let batch = collect(sources, b, now);
    drop(guard);
    if let Some((body, profiles)) = batch {
        shared.enqueue(
            plan.who,
            Bytes::from(body),
            profiles,
            plan.max,
            plan.max_bytes,
        );
    }
}

async fn sender(who: &'static str, shared: Arc<Shared>, client: impl Deliver) {
    let mut backoff = MIN_BACKOFF;
    let mut failures = 0u64;
    loop {
        let Some((seq, body, profiles)) = shared.front() else {
            shared.wake.notified().await;
            continue;
        };
        let len = body.len() as u64;
        let s = &shared.stats;
        match client.deliver(body).await {
            Ok(()) => {
                shared.remove(seq);
                s.ok.fetch_add(1, Ordering::Relaxed);
                s.sent_bytes.fetch_add(len, Ordering::Relaxed);
                s.sent_profiles.fetch_add(profiles, Ordering::Relaxed);
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                s.last_success_ms.store(now_ms, Ordering::Relaxed);
                if failures > 0 {
                    log::info!("{who}: pushing again after {failures} failed attempts");
                }
                failures = 0;
                backoff = MIN_BACKOFF;
            }
            Err(PushError::Rejected(msg)) => {
                s.rejected.fetch_add(1, Ordering::Relaxed);
                shared.remove(seq);
                s.dropped_rejected.fetch_add(profiles, Ordering::Relaxed);
                log::error!("{who}: push refused, {profiles} profiles dropped: {msg}");
            }
            Err(PushError::Retry(msg)) => {
                s.failed.fetch_add(1, Ordering::Relaxed);
                failures += 1;
                if failures == 1 {
                    log::warn!("{who}: push failed, retrying with back-off: {msg}");
                } else {
                    log::debug!("{who}: push failed ({failures} in a row): {msg}");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// The pusher's counters in the Prometheus exposition (after the others).
pub fn render(out: &mut String, s: &PushStats) {
    render_named(out, s, "pyroscope", "the Pyroscope server");
}

/// A pusher's counters as `jp_<prefix>_*`; `peer` names the receiver in the help.
pub fn render_named(out: &mut String, s: &PushStats, prefix: &str, peer: &str) {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    let name = format!("jp_{prefix}_pushes_total");
    let help = format!("Push requests to {peer} by result: ok, error (retried later), rejected (refused by the receiver, dropped).");
    let mut f = Family::header(out, &name, "counter", &help);
    f.sample(&name, &[("result", "ok")], get(&s.ok));
    f.sample(&name, &[("result", "error")], get(&s.failed));
    f.sample(&name, &[("result", "rejected")], get(&s.rejected));
    let name = format!("jp_{prefix}_sent_bytes_total");
    let help = format!("Bytes of push requests {peer} accepted.");
    Family::header(out, &name, "counter", &help).sample(&name, &[], get(&s.sent_bytes));
    let name = format!("jp_{prefix}_sent_profiles_total");
    let help = format!("Profiles {peer} accepted.");
    Family::header(out, &name, "counter", &help).sample(&name, &[], get(&s.sent_profiles));
    let name = format!("jp_{prefix}_dropped_profiles_total");
    let help = format!("Profiles never delivered, by reason: backlog_full (oldest dropped), rejected (by {peer}), disabled (queued when [{prefix}] was turned off).");
    let mut f = Family::header(out, &name, "counter", &help);
    f.sample(
        &name,
        &[("reason", "backlog_full")],
        get(&s.dropped_backlog),
    );
    f.sample(&name, &[("reason", "rejected")], get(&s.dropped_rejected));
    f.sample(&name, &[("reason", "disabled")], get(&s.dropped_disabled));
    let name = format!("jp_{prefix}_backlog_requests");
    Family::header(
        out,
        &name,
        "gauge",
        "Push requests waiting to be delivered.",
    )
    .sample(&name, &[], get(&s.backlog));
    let name = format!("jp_{prefix}_backlog_bytes");
    Family::header(
        out,
        &name,
        "gauge",
        "Bytes of push requests waiting to be delivered.",
    )
    .sample(&name, &[], get(&s.backlog_bytes));
    let name = format!("jp_{prefix}_last_success_timestamp_seconds");
    let help = format!("When {peer} last accepted a push, seconds since the epoch (0: never).");
    Family::header(out, &name, "gauge", &help).sample(&name, &[], get(&s.last_success_ms) / 1000.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_drops_the_oldest_and_counts_it() {
        let s = Shared::default();
        for i in 0..5u8 {
            s.enqueue("test", Bytes::from(vec![i; 10]), 2, 3, 1 << 20);
        }
        assert_eq!(s.stats.dropped_backlog.load(Ordering::Relaxed), 4);
        assert_eq!(s.stats.backlog.load(Ordering::Relaxed), 3);
        let (seq, body, _) = s.front().unwrap();
        assert_eq!((seq, body[0]), (2, 2));
        // The push in flight (2) is kept; the next oldest (3) goes.
        s.enqueue("test", Bytes::from(vec![5; 10]), 2, 3, 1 << 20);
        let seqs: Vec<u64> = lock(&s.backlog).queue.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, [2, 4, 5]);
        assert!(s.remove(2));
        // By bytes: 25 bytes allowed, three pushes of 10 keep two.
        let s = Shared::default();
        for i in 0..3u8 {
            s.enqueue("test", Bytes::from(vec![i; 10]), 1, 100, 25);
        }
        assert_eq!(s.stats.backlog_bytes.load(Ordering::Relaxed), 20);
        assert_eq!(s.stats.dropped_backlog.load(Ordering::Relaxed), 1);
        assert!(!s.remove(0), "push 0 was dropped");
        assert!(s.remove(1));
        s.disable();
        assert_eq!(s.stats.dropped_disabled.load(Ordering::Relaxed), 1);
        assert_eq!(s.stats.backlog.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn metrics_have_every_family() {
        let s = PushStats::default();
        s.ok.store(3, Ordering::Relaxed);
        let mut out = String::new();
        render(&mut out, &s);
        assert!(
            out.contains("\njp_pyroscope_pushes_total{result=\"ok\"} 3\n"),
            "{out}"
        );
        assert!(out.contains("\njp_pyroscope_dropped_profiles_total{reason=\"backlog_full\"} 0\n"));
        assert!(out.contains("# TYPE jp_pyroscope_backlog_bytes gauge\n"));
    }
}
