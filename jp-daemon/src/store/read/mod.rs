//! The stores' read side, declared once: how the API, the Watch streams and the
//! exporters read the stores — snapshots, lists, and windows over time — with the
//! locking rule and the meaning of a delta in one place. Readers name nothing else of
//! the stores' locking; the writers (the kernel collector, the USDT collector) keep
//! their own side.
//!
//! # The lock rule
//!
//! The kernel store locks itself (a read-write lock inside [`kernel::KernelStore`]): every
//! read is one copy ([`kernel::KernelStore::kernel_view`], [`kernel::KernelStore::kernel_totals`],
//! [`kernel::KernelStore::symbols`]) and no reader holds anything afterwards.
//!
//! The window store is a mutex of its own that nothing else is taken under; its
//! windows are immutable, so [`ReadWindows`] copies pointers to them (O(windows)).
//!
//! The JVM store is one mutex ([`crate::store::jvm::SharedJvmStore`]) shared by the
//! USDT ring reader (ingest, batches of at most `usdt::ring::MAX_HOLD`), the USDT
//! collector's manager thread (processes found and gone, re-sends, expiry), the
//! kernel sampler's join ([`JvmJoin`]: the announced threads out, CPU samples in) and
//! every reader ([`ReadJvm`]). A reader takes it only through [`ReadJvm`] and [`JvmJoin`], and:
//! - holds it for O(JVMs) (a list, the stats) or O(chunks + methods) (a
//!   [`JvmSnapshot`], which is frozen: trees, totals and encodings are built from
//!   it after the lock is gone);
//! - never across an `.await`, never while building a tree, encoding or gzipping;
//! - for anything longer (Watch's per-method totals, O(methods)), runs on a blocking
//!   thread and bounds its own share ([`ReadJvm::with_store`]).
//!
//! # Windows over time: "since my last read"
//!
//! Every counter a reader differences only grows, with three exceptions that all
//! readers treat alike:
//! - *a counter that went back* (a JVM's re-send briefly shows less than before)
//!   counts 0: every subtraction saturates
//!   ([`Since`], [`kernel::KernelCounts::since`], [`mct_delta`],
//!   [`CpuSnapshot::since`]);
//! - *a reset* of the kernel counts (`jpctl reset`): readers of counts since the reset
//!   ([`kernel::KernelStore::kernel_view`]) see `reset_at` change and restart their readings
//!   from 0 ([`Since::restart`]); readers of the totals
//!   ([`kernel::KernelStore::kernel_totals`], monotonic: Prometheus, pprof, Pyroscope) never
//!   see it;
//! - *a JVM that is another one* behind the same pid or that *vanished* (its
//!   retention is over): its reader drops what it read of it and starts over from
//!   nothing, so the new JVM's first window is all of it. Each reader tells identity
//!   by what it reports: Watch by when jpd attached (a reused pid), Pyroscope by the
//!   JVM's start time (also a VM restarted in the same process). A window whose JVM
//!   vanished during it has no "after" reading ([`ReadJvm::snapshot`] fails).
//!
//! A JVM's tree over a window is [`tree_since`]: the difference per calling context
//! (a context is its path of method names), and the CPU of each context over the same
//! window, carried onto the difference's nodes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use jp_mct::{Mct, MctCpu};

use super::jvm::{
    ContextMark, ContextThreads, CpuSnapshot, IngestStats, JvmSnapshot, JvmStore, JvmSummary,
};
use super::kernel::{self, symbols::Symbols, KernelCounts};
use super::windows::{WindowProfile, WindowStore};
use crate::lock::lock;

pub use jp_mct::{mct_delta, mct_delta_mapped};

/// How every reader reads the JVM store as jpd shares it (see the lock rule above):
/// each call takes the lock once and returns what was read, with the lock released.
pub trait ReadJvm {
    /// Every JVM, sorted by pid. O(JVMs).
    fn list(&self) -> Vec<JvmSummary>;
    /// The store's ingest counters. O(JVMs).
    fn stats(&self) -> IngestStats;
    /// [`ReadJvm::list`] and [`ReadJvm::stats`] at one moment.
    fn list_and_stats(&self) -> (Vec<JvmSummary>, IngestStats);
    /// The pids of the JVMs the store holds, in order.
    fn pids(&self) -> Vec<u32>;
    /// JVM `pid`'s tree, names, totals and CPU, frozen (O(chunks + methods)); else the
    /// pids the store holds, for the caller's "not found".
    fn snapshot(&self, pid: u32) -> Result<JvmSnapshot, Vec<u32>>;
    /// [`ReadJvm::snapshot`] with the JVM's summary, at one moment.
    fn summary_and_snapshot(&self, pid: u32) -> Result<(JvmSummary, JvmSnapshot), Vec<u32>>;
    /// JVM `pid`'s change counter and snapshot, unless its data did not change since
    /// `seen` (its counter then) or the store no longer holds it. CPU samples count as
    /// a change.
    fn snapshot_if_changed(&self, pid: u32, seen: Option<u64>) -> Option<(u64, JvmSnapshot)>;
    /// `f` on the store, under its lock: for readers whose work is O(methods) and
    /// bounded by the reader itself (Watch budgets its per-method totals). Call it on
    /// a blocking thread.
    fn with_store<T>(&self, f: impl FnOnce(&JvmStore) -> T) -> T;
}

impl ReadJvm for Mutex<JvmStore> {
    fn list(&self) -> Vec<JvmSummary> {
        lock(self).list()
    }

    fn stats(&self) -> IngestStats {
        lock(self).stats()
    }

    fn list_and_stats(&self) -> (Vec<JvmSummary>, IngestStats) {
        let store = lock(self);
        (store.list(), store.stats())
    }

    fn pids(&self) -> Vec<u32> {
        pids_of(&lock(self))
    }

    fn snapshot(&self, pid: u32) -> Result<JvmSnapshot, Vec<u32>> {
        let mut store = lock(self);
        match store.snapshot(pid) {
            Some(s) => Ok(s),
            None => Err(pids_of(&store)),
        }
    }

    fn summary_and_snapshot(&self, pid: u32) -> Result<(JvmSummary, JvmSnapshot), Vec<u32>> {
        let mut store = lock(self);
        match (store.summary(pid), store.snapshot(pid)) {
            (Some(summary), Some(snapshot)) => Ok((summary, snapshot)),
            _ => Err(pids_of(&store)),
        }
    }

    fn snapshot_if_changed(&self, pid: u32, seen: Option<u64>) -> Option<(u64, JvmSnapshot)> {
        let mut store = lock(self);
        let change = store.jvm_generation(pid)?;
        if Some(change) == seen {
            return None;
        }
        store.snapshot(pid).map(|s| (change, s))
    }

    fn with_store<T>(&self, f: impl FnOnce(&JvmStore) -> T) -> T {
        f(&lock(self))
    }
}

fn pids_of(store: &JvmStore) -> Vec<u32> {
    store.list().iter().map(|s| s.pid).collect()
}

/// How every reader reads the window store: each call one short hold of its lock,
/// O(windows kept); the windows are immutable and built into answers after it.
pub trait ReadWindows {
    /// The windows kept (of `pid` only, when given), by pid, then oldest first.
    fn windows(&self, pid: Option<u32>) -> Vec<Arc<WindowProfile>>;
    /// Window `id` of JVM `pid`, while kept.
    fn window(&self, pid: u32, id: u64) -> Option<Arc<WindowProfile>>;
    /// The windows stored since a reader's last read (`seen`: what the last call
    /// returned; 0 the first time), and the value to pass next time.
    fn windows_since(&self, seen: u64) -> (Vec<Arc<WindowProfile>>, u64);
}

impl ReadWindows for Mutex<WindowStore> {
    fn windows(&self, pid: Option<u32>) -> Vec<Arc<WindowProfile>> {
        lock(self).list(pid)
    }

    fn window(&self, pid: u32, id: u64) -> Option<Arc<WindowProfile>> {
        lock(self).get(pid, id)
    }

    fn windows_since(&self, seen: u64) -> (Vec<Arc<WindowProfile>>, u64) {
        lock(self).since(seen)
    }
}

/// The kernel sampler's join to the JVM store: the one party that both reads the
/// store (the announced threads) and writes to it (CPU samples) besides the USDT
/// collector. Each call is one short hold of the lock, on the sampler's thread.
pub trait JvmJoin {
    /// The announced threads of the JVMs whose marks are not `marks`' (see
    /// [`JvmStore::context_threads_since`]), unless the store's version is still `seen`.
    fn context_threads_since(
        &self,
        seen: Option<u64>,
        marks: &HashMap<u32, ContextMark>,
    ) -> Option<ContextThreads>;
    /// A thread's announced slot was refused (its thread is not the JVM's).
    fn refuse_context_slot(&self, tgid: u32, stream: u64);
    /// Samples counted for JVMs' threads since the last call (`period_ns` each).
    fn add_cpu_samples(&self, period_ns: u64, samples: &[(jp_common::CtxKey, u64)]);
    /// Off-CPU time logged for JVMs' threads since the last call, with the scheduler
    /// program's counters (totals).
    fn add_offcpu(
        &self,
        periods: &[(jp_common::OffcpuRecord, u64)],
        counters: crate::store::jvm::offcpu::OffcpuCounters,
    );
    /// `wake` runs (under the lock) whenever the announced threads change.
    fn on_context_threads_change(&self, wake: Box<dyn Fn() + Send>);
}

impl JvmJoin for Mutex<JvmStore> {
    fn context_threads_since(
        &self,
        seen: Option<u64>,
        marks: &HashMap<u32, ContextMark>,
    ) -> Option<ContextThreads> {
        let store = lock(self);
        if seen == Some(store.context_threads_version()) {
            return None;
        }
        Some(store.context_threads_since(marks))
    }

    fn refuse_context_slot(&self, tgid: u32, stream: u64) {
        lock(self).context_slot_refused(tgid, stream);
    }

    fn add_cpu_samples(&self, period_ns: u64, samples: &[(jp_common::CtxKey, u64)]) {
        lock(self).add_cpu_samples(period_ns, samples, SystemTime::now());
    }

    fn add_offcpu(
        &self,
        periods: &[(jp_common::OffcpuRecord, u64)],
        counters: crate::store::jvm::offcpu::OffcpuCounters,
    ) {
        lock(self).add_offcpu(periods, counters, SystemTime::now());
    }

    fn on_context_threads_change(&self, wake: Box<dyn Fn() + Send>) {
        lock(self).on_context_threads_change(wake);
    }
}

/// One reader's last reading of `N` counters that only grow: [`Since::advance`] gives
/// what they counted since and keeps the new reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Since<const N: usize>([u64; N]);

impl<const N: usize> Default for Since<N> {
    fn default() -> Since<N> {
        Since([0; N])
    }
}

impl<const N: usize> Since<N> {
    /// `now` minus the last reading, counter by counter (a counter that went back
    /// counts 0); `now` becomes the last reading.
    pub fn advance(&mut self, now: [u64; N]) -> [u64; N] {
        let delta = std::array::from_fn(|i| now[i].saturating_sub(self.0[i]));
        self.0 = now;
        delta
    }

    /// The counters restarted (a reset): the next reading counts whole.
    pub fn restart(&mut self) {
        self.0 = [0; N];
    }
}

/// A reader's last reading of the kernel's totals ([`kernel::KernelStore::kernel_totals`])
/// and when it was taken: the start of the reader's next window.
#[derive(Clone, Debug)]
pub struct KernelSince {
    counts: KernelCounts,
    at: SystemTime,
}

impl KernelSince {
    /// Reads the store's totals now: the window opens here.
    pub fn open(store: &kernel::KernelStore) -> KernelSince {
        KernelSince::at(store.kernel_totals().counts, SystemTime::now())
    }

    /// A window opening at `at` with the totals `counts` read then.
    pub fn at(counts: KernelCounts, at: SystemTime) -> KernelSince {
        KernelSince { counts, at }
    }

    /// What `now` (a later reading of the totals) counted since this one, and when the
    /// window opened.
    pub fn window(&self, now: &KernelCounts) -> (KernelCounts, SystemTime) {
        (now.since(&self.counts), self.at)
    }
}

/// JVM `after`'s tree and CPU since an earlier reading of the same JVM: `before` its
/// tree then (none: the window is all of `after`), `before_cpu` its CPU then (none:
/// all of `after`'s). The CPU is per context of the returned tree, kernel addresses
/// named by `symbols`. O(tree): call it after the lock is released.
pub fn tree_since(
    before: Option<&Mct>,
    before_cpu: Option<&CpuSnapshot>,
    after: &JvmSnapshot,
    symbols: Option<&Symbols>,
) -> (Mct, Option<MctCpu>) {
    let whole = after.mct();
    let empty;
    let before = match before {
        Some(t) => t,
        None => {
            empty = Mct::new(&whole.bba);
            &empty
        }
    };
    // CPU is indexed by the merged tree's nodes (`after`'s); the delta has them
    // elsewhere.
    let (delta, map) = mct_delta_mapped(before, &whole);
    let cpu = after.cpu().map(|now| {
        let window = match before_cpu {
            Some(then) => now.since(then),
            None => now.clone(),
        };
        window
            .mct_cpu(&whole, symbols)
            .remap(&map, delta.nodes.len())
    });
    (delta, cpu)
}

#[cfg(test)]
mod tests;
