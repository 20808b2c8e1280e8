//! The JVM store: what jpd knows of every JVM that runs jp's agent with `profiler=usdt`.
//!
//! The USDT collector hands over ring-buffer events ([`JvmStore::ingest`]); the store
//! decodes them trusting nothing but the kernel-filled [`EventHeader`] — each record
//! whole, header and body, into a typed `wire::Body` (jp-common's `decode_body`), which
//! the JVM's state then only applies — keeps one merged
//! Method Call Tree per JVM (64-bit counters) plus each live thread's own tree, tracks
//! every stream's sequence numbers, and answers the gRPC server's queries.
//!
//! The record format is `docs/usdt-wire-format.md`; beyond applying it: `ingest` also takes
//! the event's bytes longer than the header says (the ring buffer pads: only
//! `event.len` bytes are read); `generation_written` creates the JVM if the collector did
//! not report it first; the queries [`JvmStore::thread_trees`] (live threads only) and
//! [`JvmStore::jvm_generation`] (per-JVM change counter, for Watch); `limits()`.
//!
//! Limits of what jpd can know (the wire format has no marker for them):
//! - A re-send spanning several records has no "last record" flag: a thread counts as
//!   synced from its RESYNC record on (the agent sends the whole re-send at one report
//!   point, so the records arrive back to back).
//! - The lost *last* record of a stream shows no sequence gap. Events without a record
//!   (too long, fault) and ring-buffer overflow set a loss marker instead: the JVM is
//!   incomplete until each of its live streams has sent again (and a re-send is asked).
//! - Threads that stayed idle since jpd attached have sent nothing: the HELLO's
//!   `live_threads` beyond the threads jpd knows shows as "N threads not yet reported".
//!
//! Rules (see the design for the protocol):
//! - A record is validated whole before anything is applied: a malformed record changes
//!   nothing but the malformed counters (by reason, per JVM and globally).
//! - A thread stream is *synced* from its RESYNC record on; a sequence gap, a malformed
//!   record on a synced stream, or a record on a stream that is not synced marks it
//!   broken: its deltas are dropped (and counted lost) until its next RESYNC, the JVM is
//!   incomplete, and the JVM is queued once for [`JvmStore::take_resync_requests`].
//! - A RESYNC's absolute counts replace what the thread contributed before: each node's
//!   old contribution is subtracted as its new total is added, so the merged tree never
//!   dips while a re-send is under way; old nodes that the re-send does not name are
//!   subtracted when the re-send ends (the next delta record, END, or RESYNC).
//! - Limits bound the memory of every JVM; hitting one drops data and makes the JVM
//!   incomplete with the limit named, never silently.

mod admission;
mod announced;
mod budget;
mod chunked;
pub mod cpu;
pub mod idle;
mod idle_view;
mod methods;
mod nodes;
pub mod offcpu;
mod one_jvm;
mod query;
pub mod sink;
mod slots;
mod stream;
mod totals;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jp_common::wire::{self, EventHeader, WireError};

use crate::refusals;

pub use announced::{ContextMark, ContextThreads, JvmContextThreads};
pub use query::{CpuSnapshot, JvmSnapshot, MethodCalls, MethodTotals, ThreadTree};

/// The store as the daemon shares it between the USDT collector, the server and the
/// exporters.
pub type SharedJvmStore = std::sync::Arc<std::sync::Mutex<JvmStore>>;
use one_jvm::Jvm;

/// Bounds on what one JVM (and the store) may hold. Hitting one drops data, and the JVM
/// says which limit it hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JvmLimits {
    /// JVMs kept, running and exited. At the limit the oldest exited JVM is dropped,
    /// else the oldest one that sent no HELLO; if every one is running and said HELLO,
    /// records of a new JVM are dropped (and counted).
    pub max_jvms: usize,
    /// Running JVMs kept per uid (of the process, from /proc when the collector finds
    /// it): a process over its uid's quota is not tracked (and counted).
    pub max_jvms_per_uid: usize,
    /// Bytes all JVMs together may hold (the sum of their `memory_bytes`). A record
    /// that could take the store past it may only update what is there: its new nodes,
    /// threads and methods are dropped, and the JVM says so.
    pub max_store_bytes: usize,
    /// Nodes of one JVM's merged tree (the root not counted).
    pub max_nodes_per_jvm: usize,
    /// Live threads of one JVM.
    pub max_threads_per_jvm: usize,
    /// Per-thread node slots of one JVM, all live threads together (a thread's slots
    /// are its largest node id + 1).
    pub max_thread_nodes_per_jvm: usize,
    /// Methods in one JVM's method table.
    pub max_methods_per_jvm: usize,
    /// Bytes of strings (method names, files, thread names, hello) of one JVM.
    pub max_string_bytes_per_jvm: usize,
    /// Ended threads whose names are remembered per JVM (their counts stay in the tree).
    pub max_ended_threads_per_jvm: usize,
    /// How long an exited JVM is kept.
    pub retention: Duration,
}

impl Default for JvmLimits {
    fn default() -> JvmLimits {
        JvmLimits {
            max_jvms: 256,
            max_jvms_per_uid: 32,
            max_store_bytes: 512 << 20,
            max_nodes_per_jvm: 4_000_000,
            max_threads_per_jvm: 16_384,
            max_thread_nodes_per_jvm: 16_000_000,
            max_methods_per_jvm: 1_000_000,
            max_string_bytes_per_jvm: 256 << 20,
            max_ended_threads_per_jvm: 4096,
            retention: Duration::from_secs(3600),
        }
    }
}

/// What the collector found out about a process from /proc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// `/proc/PID/stat` field 22: with the tgid, the process's identity.
    pub start_time_ticks: u64,
    /// The pid inside the process's own PID namespace, when it differs.
    pub ns_pid: Option<u32>,
    pub cmdline: String,
    pub exe: String,
    /// The process's real uid (`/proc/PID/status`), for the per-uid quota; `None`
    /// when it could not be read.
    pub uid: Option<u32>,
}

/// The eBPF side's counters (`jp_common::wire::usdt_stat`), summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtKernelCounters {
    pub fired: u64,
    pub sent: u64,
    pub ring_full: u64,
    pub fault: u64,
    pub too_long: u64,
    /// Events over their process's rate, dropped before the ring.
    pub rate_limited: u64,
    /// Events of processes outside the allow-lists, dropped before the ring.
    pub not_allowed: u64,
}

/// Why a record was dropped as malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// The decoder's verdicts ([`WireError`]).
    Wire(WireError),
    /// A tree entry for a node the stream never defined.
    UnknownNode,
    /// A definition whose parent the stream never defined.
    UnknownParent,
    /// A node defined twice in one record, or again with another parent or method.
    Redefined,
    /// Absolute counts outside a re-send (no RESYNC before them in the stream).
    AbsoluteOutsideResync,
    /// A record on a thread stream after its END.
    AfterEnd,
    /// The event's length disagrees with the bytes handed over.
    EventLength,
    /// A thread's context slot (`KIND_THREAD`) that cannot be one: address 0 or not
    /// 4-aligned (a heap context's cell: not 8-aligned, or its offsets not ints' or the
    /// same), or a thread id that is not the JVM's.
    BadSlot,
}

/// Malformed counts by reason; every reason has a fixed slot (no allocation per record).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MalformedCounts([u64; MalformedCounts::SLOTS]);

impl MalformedCounts {
    const SLOTS: usize = 18;
    const NAMES: [&'static str; MalformedCounts::SLOTS] = [
        "truncated",
        "bad magic",
        "unknown version",
        "unknown record kind",
        "flags not allowed",
        "header length differs",
        "bad varint",
        "bad string",
        "id out of range",
        "trailing bytes",
        "kind not allowed on stream",
        "unknown node",
        "unknown parent",
        "node redefined",
        "absolute counts outside a re-send",
        "record after thread end",
        "event length differs",
        "context slot refused",
    ];

    fn slot(m: Malformed) -> usize {
        match m {
            Malformed::Wire(w) => match w {
                WireError::Truncated => 0,
                WireError::BadMagic => 1,
                WireError::Version(_) => 2,
                WireError::Kind(_) => 3,
                WireError::Flags(_) => 4,
                WireError::Length => 5,
                WireError::Varint => 6,
                WireError::String => 7,
                WireError::Id => 8,
                WireError::Trailing => 9,
                WireError::Stream => 10,
            },
            Malformed::UnknownNode => 11,
            Malformed::UnknownParent => 12,
            Malformed::Redefined => 13,
            Malformed::AbsoluteOutsideResync => 14,
            Malformed::AfterEnd => 15,
            Malformed::EventLength => 16,
            Malformed::BadSlot => 17,
        }
    }

    pub fn add(&mut self, m: Malformed) {
        let s = &mut self.0[Self::slot(m)];
        *s = s.saturating_add(1);
    }

    pub fn get(&self, m: Malformed) -> u64 {
        self.0[Self::slot(m)]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// `(reason, records)` for every reason with records.
    pub fn by_reason(&self) -> Vec<(&'static str, u64)> {
        Self::NAMES
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| (*name, n))
            .collect()
    }
}

/// A limit that was hit (see [`JvmLimits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitKind {
    Nodes,
    Threads,
    ThreadNodes,
    Methods,
    StringBytes,
    /// The store's byte budget, shared by all JVMs.
    StoreBytes,
}

impl LimitKind {
    pub fn name(self) -> &'static str {
        match self {
            LimitKind::Nodes => "max_nodes_per_jvm",
            LimitKind::Threads => "max_threads_per_jvm",
            LimitKind::ThreadNodes => "max_thread_nodes_per_jvm",
            LimitKind::Methods => "max_methods_per_jvm",
            LimitKind::StringBytes => "max_string_bytes_per_jvm",
            LimitKind::StoreBytes => "max_store_mib",
        }
    }
}

/// One JVM, as `jpctl jvm list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JvmSummary {
    /// Process id in jpd's (the initial) PID namespace.
    pub pid: u32,
    /// Process id in the JVM's own namespace, when it differs from `pid`.
    pub ns_pid: Option<u32>,
    /// Main class or jar (first word of the hello's `sun.java.command`), else the
    /// command line; empty if neither is known.
    pub main: String,
    pub cmdline: String,
    pub exe: String,
    /// `java.vm.version`; empty until a HELLO arrived.
    pub jdk_version: String,
    pub agent_version: String,
    /// "default" or "precise"; empty until a HELLO arrived.
    pub bba: String,
    /// The agent's report granularity (bytecodes), 0 until a HELLO arrived.
    pub granularity: u64,
    /// JVM start (Unix ms) as the agent reported it; 0 until a HELLO arrived.
    pub jvm_start_unix_ms: u64,
    /// Threads with a live stream, and every thread ever seen (live and ended).
    pub threads_live: u32,
    pub threads_total: u32,
    /// Sums over the merged tree.
    pub calls: u64,
    pub bytecodes: u64,
    /// CPU (ns) from the kernel sampler, by kind of thread (see [`cpu::ThreadKind`]):
    /// (kind, user, kernel). Empty when the sampler is not joined to this JVM.
    pub cpu: Vec<(&'static str, u64, u64)>,
    /// CPU (ns) counted under contexts not resolved yet (waiting for their node), never
    /// resolved, and on threads whose slot could not be read.
    pub cpu_pending_ns: u64,
    pub cpu_unresolved_ns: u64,
    pub cpu_read_failed_ns: u64,
    /// CPU (ns) under resolved contexts: the part of the app's the views show per context.
    pub cpu_contexts_ns: u64,
    /// Time off CPU (ns) under resolved contexts by reason (a kernel address or an
    /// `offcpu_reason` code; see [`offcpu::reason_kind`]), sorted by reason. Empty when
    /// no time off CPU was counted.
    pub offcpu_by_reason: Vec<(u64, u64)>,
    /// Live threads that announced where they publish their current context.
    pub publishing_threads: u32,
    /// When jpd first heard of the JVM (process found or first record).
    pub attached_since: SystemTime,
    pub exited_at: Option<SystemTime>,
    /// JVM_END received: the VM shut down and every thread sent its last record.
    pub finished: bool,
    /// jpd holds every count the JVM reported, see [`JvmSummary::incomplete_reason`].
    pub complete: bool,
    /// Why not complete, e.g. "2 threads waiting for a re-send"; empty when complete.
    pub incomplete_reason: String,
    /// Records lost: missing sequence numbers, plus records dropped because their
    /// stream was not synced.
    pub records_lost: u64,
    pub records_malformed: u64,
    /// Records (or parts: nodes) dropped because a limit was hit.
    pub limit_drops: u64,
    /// Events of this process the eBPF program dropped over its rate, and lost to a
    /// full ring (charged to it alone).
    pub ring_rate_limited: u64,
    pub ring_full: u64,
    pub records: u64,
    /// Nodes of the merged tree, the root not counted.
    pub nodes: u64,
    pub methods: u64,
    pub last_update: Option<SystemTime>,
    /// Memory held for this JVM (bytes, estimated from allocation sizes).
    pub memory_bytes: u64,
}

/// Global ingest counters ([`JvmStore::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngestStats {
    /// Ring-buffer events handed to the store.
    pub events: u64,
    /// Records accepted (decoded and applied, possibly partly dropped by a limit).
    pub records: u64,
    /// Bytes of all events' records.
    pub bytes: u64,
    /// Events that carried no record: too long for the eBPF copy, or a failed copy.
    pub too_long_events: u64,
    pub fault_events: u64,
    pub malformed: MalformedCounts,
    /// Records lost (missing sequence numbers and records of unsynced streams).
    pub lost: u64,
    /// Sequence gaps seen (incidents, not records).
    pub gaps: u64,
    /// Records or nodes dropped because a limit was hit.
    pub limit_drops: u64,
    /// Records of a new JVM dropped: `max_jvms` JVMs running that all said HELLO, the
    /// process's uid over its quota, or the store over its byte budget.
    pub jvm_limit_drops: u64,
    /// Re-sends asked for.
    pub resync_requests: u64,
    pub kernel: UsdtKernelCounters,
    pub jvms_running: u32,
    pub jvms_exited: u32,
    /// Merged-tree nodes, all JVMs (roots not counted).
    pub nodes: u64,
    /// Per-thread node slots held, all JVMs.
    pub thread_nodes: u64,
    /// Memory of the store (bytes, estimated from allocation sizes).
    pub memory_bytes: u64,
    /// What the USDT collector feeding this store is attached to (none without one).
    pub collector: Option<crate::store::jvm::sink::UsdtStatus>,
    /// The scheduler program's counters, once it handed any (`kernel.offcpu`).
    pub offcpu: Option<offcpu::OffcpuCounters>,
}

/// All JVMs jpd knows. A plain struct: the daemon wraps it in `Arc<Mutex<_>>`.
pub struct JvmStore {
    limits: JvmLimits,
    jvms: HashMap<u32, Jvm>,
    resync_queue: Vec<u32>,
    stats: IngestStats,
    generation: u64,
    scratch: Vec<wire::TreeEntry>,
    context_version: u64,
    /// Called whenever `context_version` changes, under the store's lock (see
    /// [`JvmStore::on_context_threads_change`]).
    context_watcher: Option<Box<dyn Fn() + Send>>,
    /// Bytes all JVMs hold: the sum of their [`Jvm::charged`] (see `budget`).
    held: u64,
    /// Processes refused at their uid's quota, until they exit (see `admission`).
    refused: HashMap<u32, u64>,
    /// The scheduler program's counters, host-wide (see `offcpu`), once it handed any.
    offcpu_counters: Option<offcpu::OffcpuCounters>,
    /// What makes a context idle in the off-CPU views (`kernel.offcpu_idle`).
    offcpu_idle: idle::IdlePatterns,
    /// Time off CPU is measured (`kernel.offcpu`): the agents' unmounted time counts too.
    offcpu_measured: bool,
}

impl JvmStore {
    pub fn new(limits: JvmLimits) -> JvmStore {
        JvmStore {
            limits,
            jvms: HashMap::new(),
            resync_queue: Vec::new(),
            stats: IngestStats::default(),
            generation: 0,
            scratch: Vec::new(),
            context_version: 0,
            context_watcher: None,
            held: 0,
            refused: HashMap::new(),
            offcpu_counters: None,
            offcpu_idle: idle::IdlePatterns::default(),
            offcpu_measured: false,
        }
    }

    /// `watch` is called each time a thread's context slot or a running JVM comes or goes
    /// ([`JvmStore::context_threads_version`] changes), with the store locked: it must
    /// not block. The daemon has the kernel sampler join new threads at once with it.
    pub fn on_context_threads_change(&mut self, watch: Box<dyn Fn() + Send>) {
        self.context_watcher = Some(watch);
    }

    fn context_threads_changed(&mut self) {
        self.context_version = self.context_version.wrapping_add(1);
        if let Some(watch) = &self.context_watcher {
            watch();
        }
    }

    pub fn limits(&self) -> &JvmLimits {
        &self.limits
    }

    /// jpd wrote `generation` into that process's control block: a re-send is coming,
    /// and a HELLO of this generation is needed for the JVM to be complete.
    /// (The collector calls `process_found` first; if it did not, the JVM is created here.)
    pub fn generation_written(&mut self, tgid: u32, generation: u64) {
        self.generation += 1;
        let room = self.room_for(0);
        if let Some(j) = self.entry(tgid, SystemTime::now(), room) {
            j.generation_written(generation);
        }
    }

    /// One ring-buffer event: the kernel-filled header and the bytes after it (at least
    /// `event.len` of them). Never panics.
    pub fn ingest(&mut self, event: &EventHeader, record: &[u8], now: SystemTime) {
        self.generation += 1;
        let s = &mut self.stats;
        s.events += 1;
        if event.status != wire::EVENT_OK {
            if event.status == wire::EVENT_TOO_LONG {
                s.too_long_events += 1;
            } else {
                s.fault_events += 1;
            }
            // Some stream lost a record; which one shows only when it sends again.
            if let Some(j) = self.jvms.get_mut(&event.tgid) {
                let requested = j.unattributed_loss(event.status, now);
                self.queue_resync(event.tgid, requested);
            }
            return;
        }
        let Some(bytes) = record.get(..event.len as usize) else {
            self.malformed(event.tgid, Malformed::EventLength);
            return;
        };
        self.stats.bytes += bytes.len() as u64;
        let rec = match wire::split_record(bytes) {
            Ok(r) => r,
            Err(e) => {
                self.malformed(event.tgid, Malformed::Wire(e));
                return;
            }
        };
        // Decoded whole here, applied below: a body that does not decode is refused
        // where the JVM's state says what its loss means.
        let mut scratch = std::mem::take(&mut self.scratch);
        let body = match wire::decode_body(&rec, &mut scratch) {
            Ok(wire::Body::Unmounted(_)) if !self.offcpu_measured => {
                Ok(wire::Body::Unmounted(vec![]))
            }
            body => body,
        };
        let limits = self.limits.clone();
        let room = self.room_for(bytes.len());
        let Some(jvm) = self.entry(event.tgid, now, room) else {
            self.stats.jvm_limit_drops += 1;
            self.scratch = scratch;
            return;
        };
        let context = jvm.context.mark();
        jvm.allow_growth(room);
        let out = jvm.apply(&rec.header, body, &limits, now);
        if rec.header.kind == wire::KIND_TREE {
            // Samples may wait for a node this record defined.
            jvm.cpu_retry(now);
        }
        let (changed_contexts, held) = (jvm.context.mark() != context, jvm.memory_bytes());
        self.charge(event.tgid, held);
        refusals::count(budget::OVER_BUDGET, out.over_budget);
        if changed_contexts {
            self.context_threads_changed();
        }
        if scratch.capacity() > stream::SCRATCH_KEPT {
            // Sized on demand: a big record's buffer goes with it (the store keeps 8 KiB).
            scratch.clear();
            scratch.shrink_to(stream::SCRATCH_KEPT);
        }
        self.scratch = scratch;
        let stats = &mut self.stats;
        if out.accepted {
            stats.records += 1;
        }
        if let Some(m) = out.malformed {
            stats.malformed.add(m);
        }
        stats.lost += out.lost;
        stats.gaps += out.gaps;
        stats.limit_drops += out.limit_drops;
        self.queue_resync(event.tgid, out.resync_requested);
    }

    /// Bumps when a thread's context slot or a running JVM comes or goes (see
    /// [`JvmStore::context_threads`] and [`JvmStore::context_pids`]).
    pub fn context_threads_version(&self) -> u64 {
        self.context_version
    }

    /// (tgid, where the thread publishes, stream) of every announced thread of a running
    /// JVM.
    pub fn context_threads(&self) -> Vec<(u32, jp_common::wire::ThreadSlot, u64)> {
        let mut v = Vec::new();
        for (tgid, j) in &self.jvms {
            if j.exited_at.is_some() {
                continue;
            }
            for (stream, th) in &j.threads {
                if let Some(s) = th.context_slot {
                    v.push((*tgid, s, *stream));
                }
            }
        }
        v
    }

    /// Every running JVM's tgid: the sampler counts the CPU of their threads, by context
    /// for the threads that announced a slot and by kind (the thread's name) for the rest,
    /// so a JVM whose threads publish nothing (`publish=false`, or none reported yet)
    /// still has its app/GC/JIT split.
    pub fn context_pids(&self) -> Vec<u32> {
        self.jvms
            .iter()
            .filter(|(_, j)| j.exited_at.is_none())
            .map(|(tgid, _)| *tgid)
            .collect()
    }

    /// A thread's announced slot was refused (its thread is not the JVM's).
    pub fn context_slot_refused(&mut self, tgid: u32, stream: u64) {
        if let Some(j) = self.jvms.get_mut(&tgid) {
            if j.refuse_context_slot(stream) {
                self.stats.malformed.add(Malformed::BadSlot);
                self.context_threads_changed();
            }
        }
    }

    /// Samples the kernel sampler counted for JVMs' threads since the last call
    /// (`period_ns` per sample).
    pub fn add_cpu_samples(
        &mut self,
        period_ns: u64,
        samples: &[(jp_common::CtxKey, u64)],
        now: SystemTime,
    ) {
        self.generation += 1;
        for (key, n) in samples {
            if let Some(j) = self.jvms.get_mut(&key.tgid) {
                j.cpu_samples(period_ns, key, *n, now);
            }
        }
        for j in self.jvms.values_mut() {
            j.cpu_expire(now);
        }
        self.recount();
    }

    /// Off-CPU time the scheduler program logged for JVMs' threads since the last call:
    /// (record with the periods' summed ns, periods); `counters` are totals since attach.
    pub fn add_offcpu(
        &mut self,
        periods: &[(jp_common::OffcpuRecord, u64)],
        counters: offcpu::OffcpuCounters,
        now: SystemTime,
    ) {
        self.generation += 1;
        self.offcpu_counters = Some(counters);
        for (r, n) in periods {
            if let Some(j) = self.jvms.get_mut(&r.tgid) {
                j.offcpu_periods(r, *n, now);
            }
        }
        self.recount();
    }

    /// The collector's latest state, passed on in [`JvmStore::stats`].
    pub fn set_collector_status(&mut self, status: crate::store::jvm::sink::UsdtStatus) {
        self.stats.collector = Some(status);
    }

    /// JVMs not known to have exited.
    pub fn running_tgids(&self) -> Vec<u32> {
        self.jvms
            .iter()
            .filter(|(_, j)| j.exited_at.is_none())
            .map(|(&t, _)| t)
            .collect()
    }

    /// Processes whose records were lost: the collector writes a new generation into
    /// each (and then calls [`JvmStore::generation_written`]).
    pub fn take_resync_requests(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.resync_queue)
    }

    /// eBPF-side counters, summed over CPUs. Losses are charged per process, by
    /// [`JvmStore::process_losses`]: a full ring no longer marks every JVM lossy.
    pub fn set_kernel_counters(&mut self, counters: UsdtKernelCounters) {
        self.generation += 1;
        self.stats.kernel = counters;
    }

    /// The eBPF program dropped events of this process (over its rate, or to a full
    /// ring): it stays incomplete until all its streams have sent again (a lost *last*
    /// record of a stream shows no gap), and it alone is asked to re-send.
    pub fn process_losses(&mut self, tgid: u32, rate_limited: u64, ring_full: u64) {
        self.generation += 1;
        let Some(j) = self.jvms.get_mut(&tgid) else {
            return;
        };
        j.ring_rate_limited += rate_limited;
        j.ring_full += ring_full;
        if j.exited_at.is_some() {
            return;
        }
        let requested = j.ring_loss();
        self.queue_resync(tgid, requested);
    }

    // --- queries -------------------------------------------------------------

    /// Every JVM, sorted by pid.
    pub fn list(&self) -> Vec<JvmSummary> {
        let mut v: Vec<JvmSummary> = self.jvms.values().map(Jvm::summary).collect();
        v.sort_by_key(|s| s.pid);
        v
    }

    pub fn summary(&self, tgid: u32) -> Option<JvmSummary> {
        self.jvms.get(&tgid).map(Jvm::summary)
    }

    /// The merged tree with resolved names (`?MID` for a method jpd has no name for), in
    /// the agent's `jp-mct/1` model: `jp_mct::write_json` of it is byte-identical to the
    /// agent's `out=` file for the same counts.
    ///
    /// This and [`JvmStore::top_methods`] and [`JvmStore::thread_trees`] walk the tree
    /// while the caller holds the store: O(tree). The server takes a
    /// [`JvmStore::snapshot`] instead and walks it after releasing the lock.
    pub fn mct(&self, tgid: u32) -> Option<jp_mct::Mct> {
        self.jvms.get(&tgid).map(query::mct)
    }

    /// Per method with counts: calls, exclusive bytecodes, inclusive bytecodes (once per
    /// stack under recursion), name and file. Sorted by exclusive bytecodes, descending,
    /// then by name (then by the method's first node). Computed by a walk of the whole
    /// tree: the reference for the totals kept on ingest.
    pub fn top_methods(&self, tgid: u32) -> Option<Vec<MethodTotals>> {
        self.jvms.get(&tgid).map(query::top_methods)
    }

    /// Calls and exclusive bytecodes per method, in the order of [`JvmStore::top_methods`],
    /// from the totals kept on ingest: O(methods), no walk of the tree.
    pub fn method_calls(&self, tgid: u32) -> Option<Vec<MethodCalls>> {
        self.jvms.get(&tgid).map(query::method_calls)
    }

    /// The trees of the JVM's live threads (ended threads' counts are only in the merged
    /// tree), sorted by thread id.
    pub fn thread_trees(&self, tgid: u32) -> Option<Vec<ThreadTree>> {
        self.jvms.get(&tgid).map(query::thread_trees)
    }

    /// The JVM's tree, names and per-method totals as they are now, to be read after
    /// the lock is released ([`JvmSnapshot::mct`], [`JvmSnapshot::top_methods`]):
    /// O(chunks + methods) here, no node is copied. The JVM's next record copies the
    /// chunks that the snapshot still holds (once per snapshot).
    /// The patterns of idle contexts (see [`idle`]); set from the configuration.
    pub fn offcpu_idle(&self) -> &idle::IdlePatterns {
        &self.offcpu_idle
    }

    pub fn set_offcpu_idle(&mut self, patterns: idle::IdlePatterns) {
        self.offcpu_idle = patterns;
    }

    /// Whether jpd measures time off CPU (`kernel.offcpu`): the views then count the
    /// agents' `KIND_UNMOUNTED` time too, else those records are checked and dropped.
    pub fn set_offcpu_measured(&mut self, on: bool) {
        self.offcpu_measured = on;
    }

    pub fn snapshot(&mut self, tgid: u32) -> Option<JvmSnapshot> {
        self.jvms
            .get_mut(&tgid)
            .map(|j| JvmSnapshot::take(j, false))
    }

    /// [`JvmStore::snapshot`] with the live threads' trees
    /// ([`JvmSnapshot::thread_trees`]): O(threads) more.
    pub fn snapshot_with_threads(&mut self, tgid: u32) -> Option<JvmSnapshot> {
        self.jvms.get_mut(&tgid).map(|j| JvmSnapshot::take(j, true))
    }

    pub fn stats(&self) -> IngestStats {
        let mut s = self.stats.clone();
        s.offcpu = self.offcpu_counters;
        s.jvms_running = 0;
        s.jvms_exited = 0;
        s.nodes = 0;
        s.thread_nodes = 0;
        s.memory_bytes = (self.scratch.capacity() * std::mem::size_of::<wire::TreeEntry>()
            + self.resync_queue.capacity() * 4) as u64;
        for j in self.jvms.values() {
            if j.exited_at.is_some() {
                s.jvms_exited += 1;
            } else {
                s.jvms_running += 1;
            }
            s.nodes += j.node_count();
            s.thread_nodes += j.thread_slots();
            s.memory_bytes += j.memory_bytes();
        }
        s
    }

    /// Bumps on every change of the store (for Watch deltas).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Bumps when this JVM's data changed; `None` for an unknown pid.
    pub fn jvm_generation(&self, tgid: u32) -> Option<u64> {
        self.jvms.get(&tgid).map(|j| j.change)
    }

    // --- internals -----------------------------------------------------------

    fn malformed(&mut self, tgid: u32, m: Malformed) {
        self.stats.malformed.add(m);
        if let Some(j) = self.jvms.get_mut(&tgid) {
            j.malformed.add(m);
            j.change += 1;
        }
    }

    fn queue_resync(&mut self, tgid: u32, requested: bool) {
        // Bounded even if nobody takes the requests: one entry per JVM at most.
        if requested && !self.resync_queue.contains(&tgid) {
            self.stats.resync_requests += 1;
            self.resync_queue.push(tgid);
        }
    }
}

/// Shared, cheap clones of a JVM's method names.
pub(crate) type Name = Arc<str>;
