//! One JVM: its streams' state, its merged tree and method table, its counters; what
//! it reports of itself (summary, completeness) is in [`summary`].

mod summary;
mod unmounted;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime};

use jp_common::wire::{
    self, Body, Hello, MethodDef, RecordHeader, TreeBody, WireError, FLAG_ABSOLUTE, FLAG_END,
    FLAG_RESYNC, STREAM_ENDED,
};

use super::announced::ContextLog;
use super::cpu::{self, ContextCpu};
use super::methods::{MethodNames, StringBudget};
use super::nodes::NodeTable;
use super::offcpu::ContextOffcpu;
use super::slots::NodeMap;
use super::stream::{Reject, SlotBudget, ThreadStream};
use super::{JvmLimits, LimitKind, Malformed, MalformedCounts, ProcessInfo};

/// A re-send asked for and not answered (no `generation_written`) is asked again after
/// this long, if records still show it is needed.
const RESYNC_RETRY: Duration = Duration::from_secs(5);

/// The HELLO's fields.
#[derive(Clone, Debug, Default)]
pub(crate) struct HelloInfo {
    pub start_time_ms: u64,
    pub granularity: u64,
    pub bba: u64,
    pub live_threads: u64,
    pub jdk_version: String,
    pub main: String,
    pub agent_version: String,
}

impl HelloInfo {
    fn bytes(&self) -> usize {
        self.jdk_version.len() + self.main.len() + self.agent_version.len()
    }
}

/// What one record did, for the store's global counters.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub accepted: bool,
    pub malformed: Option<Malformed>,
    pub lost: u64,
    pub gaps: u64,
    pub limit_drops: u64,
    pub resync_requested: bool,
    /// Parts dropped at the store's byte budget.
    pub over_budget: u64,
}

struct EndedThread {
    name: String,
}

pub(crate) struct Jvm {
    pub tgid: u32,
    pub info: Option<ProcessInfo>,
    /// The `pid` of the last valid record (the JVM's own namespace; informational).
    record_pid: Option<u32>,
    pub hello: Option<HelloInfo>,
    hello_generation: Option<u64>,
    written_generation: Option<u64>,
    resync_asked_at: Option<SystemTime>,

    // Stream 0.
    jvm_synced: bool,
    jvm_expected_seq: u32,
    jvm_last_record: u64,
    pub finished: bool,

    pub threads: HashMap<u64, ThreadStream>,
    ended: HashMap<u64, EndedThread>,
    ended_order: VecDeque<u64>,
    ended_total: u64,
    ended_broken: u64,
    ended_since_hello: u64,
    /// What the threads that ended contributed to the merged tree, by merged node: a
    /// RESYNC of the agent's [`STREAM_ENDED`] snapshot replaces all of it.
    /// A map of the nodes they reached, not an array over all nodes: that RESYNC costs
    /// what the ended threads sent, not the size of the tree.
    ended_counts: HashMap<u32, [u64; 2]>,

    pub tree: NodeTable,
    pub methods: MethodNames,
    slots: SlotBudget,
    strings: StringBudget,
    limits: JvmLimits,
    limits_hit: BTreeSet<LimitKind>,

    pub malformed: MalformedCounts,
    lost: u64,
    limit_drops: u64,
    /// Events the eBPF program dropped over this process's rate, and to a full ring.
    pub ring_rate_limited: u64,
    pub ring_full: u64,
    records: u64,
    /// Records with a valid header: the clock of the loss marker.
    records_seen: u64,
    /// A record was lost somewhere (fault, too long, ring full) at this clock: a stream
    /// that has not sent since may have lost its last record, which shows no gap.
    loss_marker: Option<(u64, &'static str)>,

    pub attached_since: SystemTime,
    pub exited_at: Option<SystemTime>,
    pub last_update: Option<SystemTime>,
    /// Bumps on every change of this JVM.
    pub change: u64,
    /// A snapshot froze the threads' slots (see [`Jvm::thaw`]).
    pub threads_frozen: bool,

    /// CPU per context, from the kernel sampler (see `cpu`).
    pub cpu: ContextCpu,
    /// Off-CPU time per context, from the scheduler program (see `offcpu`).
    pub offcpu: ContextOffcpu,
    /// The order in which threads' context slots came and went, for the sampler's join.
    pub context: ContextLog,
    /// Ended threads' wire ids → merged nodes, for their late samples, and when kept.
    ended_node_maps: HashMap<u64, (NodeMap, SystemTime)>,
    /// Live streams a carrier's sample named (virtual threads, which announce no slot of
    /// their own): their ids are kept at their end too, for their late samples.
    carried: HashSet<u64>,

    // Running sums of what the variable-size parts hold, so that the JVM's memory is
    // O(1) to tell after every record (the store's byte budget reads it).
    /// Every thread stream's `thread_cost`.
    thread_bytes: usize,
    /// Ended threads' names.
    ended_name_bytes: usize,
    /// `ended_node_maps`' maps.
    ended_map_bytes: usize,
    /// What the store's byte budget counts for this JVM (its last `memory_bytes`).
    pub charged: u64,
}

/// What one thread stream holds beyond its entry in the threads' map.
fn stream_cost(t: &ThreadStream) -> usize {
    t.memory_bytes()
}

/// Ended threads whose ids are kept for late CPU samples, at most.
const MAX_ENDED_NODE_MAPS: usize = 256;

/// The merged node of (stream, wire id), from a live thread or a recently ended one. A
/// carrier's sample names in the id's high half the stream of the virtual thread mounted on
/// it (the slot's word, see `jp_common::ctx_kind::USER`).
fn resolve_node(
    threads: &HashMap<u64, ThreadStream>,
    ended: &HashMap<u64, (NodeMap, SystemTime)>,
    stream: u64,
    id: u64,
) -> Option<u32> {
    let (stream, id) = match id >> 32 {
        0 => (stream, id),
        carried => (carried, id & u64::from(u32::MAX)),
    };
    if let Some(th) = threads.get(&stream) {
        return th.node_of(id);
    }
    let (map, _) = ended.get(&stream)?;
    map.node(id)
}

impl Jvm {
    pub fn new(tgid: u32, limits: &JvmLimits, now: SystemTime) -> Jvm {
        Jvm {
            tgid,
            info: None,
            record_pid: None,
            hello: None,
            hello_generation: None,
            written_generation: None,
            resync_asked_at: None,
            jvm_synced: false,
            jvm_expected_seq: 0,
            jvm_last_record: 0,
            finished: false,
            threads: HashMap::new(),
            ended: HashMap::new(),
            ended_order: VecDeque::new(),
            ended_total: 0,
            ended_broken: 0,
            ended_since_hello: 0,
            ended_counts: HashMap::new(),
            tree: NodeTable::new(limits.max_nodes_per_jvm),
            methods: MethodNames::default(),
            slots: SlotBudget {
                used: 0,
                limit: limits.max_thread_nodes_per_jvm,
                grow: true,
            },
            strings: StringBudget {
                used: 0,
                limit: limits.max_string_bytes_per_jvm,
            },
            limits: limits.clone(),
            limits_hit: BTreeSet::new(),
            malformed: MalformedCounts::default(),
            lost: 0,
            limit_drops: 0,
            ring_rate_limited: 0,
            ring_full: 0,
            records: 0,
            records_seen: 0,
            loss_marker: None,
            attached_since: now,
            exited_at: None,
            last_update: None,
            change: 0,
            threads_frozen: false,
            cpu: ContextCpu::default(),
            offcpu: ContextOffcpu::default(),
            context: ContextLog::new(),
            ended_node_maps: HashMap::new(),
            carried: HashSet::new(),
            thread_bytes: 0,
            ended_name_bytes: 0,
            ended_map_bytes: 0,
            charged: 0,
        }
    }

    /// Whether the store's byte budget leaves room for this record to grow what the JVM
    /// holds (new nodes, threads, methods); set by the store before each record.
    pub fn allow_growth(&mut self, grow: bool) {
        self.slots.grow = grow;
    }

    /// What one thread stream holds, its entry in `threads` included.
    fn thread_cost(&self, stream: u64) -> usize {
        self.threads.get(&stream).map_or(0, stream_cost)
    }

    /// Makes what a snapshot froze writable again (chunks a snapshot still holds are
    /// copied): every change of the tree or of a thread's slots comes after it.
    fn thaw(&mut self) {
        self.tree.thaw();
        if self.threads_frozen {
            for t in self.threads.values_mut() {
                t.thaw();
            }
            self.threads_frozen = false;
            // A chunk copied back from a snapshot has no spare capacity: sizes changed.
            self.thread_bytes = self.threads.values().map(stream_cost).sum();
        }
    }

    pub fn generation_written(&mut self, generation: u64) {
        self.change += 1;
        self.written_generation = Some(generation);
        self.resync_asked_at = None;
    }

    /// A stream needs a re-send. Returns true when the collector should be asked for one:
    /// not when the record shows the sender has not yet seen the latest generation jpd
    /// wrote (it re-sends by itself at its next report point), and once per incident
    /// (until the collector answers with `generation_written`, or a retry time passed).
    /// Nor before jpd wrote any generation: the collector writes one right after it
    /// attached, and cannot write to a process it has not found.
    fn incident(&mut self, record_generation: Option<u64>, now: SystemTime) -> bool {
        let Some(w) = self.written_generation else {
            return false;
        };
        if record_generation.is_some_and(|g| g != w) {
            return false;
        }
        if let Some(at) = self.resync_asked_at {
            // A wall clock stepped back must not hold the request back until it catches
            // up; the collector spaces re-sends on the monotonic clock anyway.
            let waited = now.duration_since(at).unwrap_or(RESYNC_RETRY);
            if waited < RESYNC_RETRY {
                return false;
            }
        }
        self.resync_asked_at = Some(now);
        true
    }

    /// An event without a record (too long, fault) for this process.
    pub fn unattributed_loss(&mut self, status: u32, now: SystemTime) -> bool {
        self.change += 1;
        self.lost += 1;
        let why = if status == wire::EVENT_TOO_LONG {
            "record too long for the eBPF copy"
        } else {
            "reading the record faulted"
        };
        self.loss_marker = Some((self.records_seen, why));
        self.incident(None, now)
    }

    /// The ring buffer was full: some record of some JVM was lost.
    pub fn ring_loss(&mut self) -> bool {
        self.change += 1;
        self.loss_marker = Some((self.records_seen, "ring buffer full"));
        // The time of the loss is not known; asking is cheap and once per incident.
        let now = self.last_update.unwrap_or(self.attached_since);
        self.incident(None, now)
    }

    fn hit(&mut self, k: LimitKind, out: &mut Outcome) {
        if k == LimitKind::StoreBytes {
            out.over_budget += 1;
        }
        self.limits_hit.insert(k);
        out.limit_drops += 1;
        self.limit_drops += 1;
    }

    fn malformed_record(&mut self, m: Malformed, out: &mut Outcome) {
        self.malformed.add(m);
        out.malformed = Some(m);
    }

    /// Applies one record: its header, which `split_record` checked, and its body as
    /// `decode_body` decoded it, or why it did not decode.
    pub fn apply(
        &mut self,
        header: &RecordHeader,
        body: Result<Body<'_, '_>, WireError>,
        limits: &JvmLimits,
        now: SystemTime,
    ) -> Outcome {
        let mut out = Outcome::default();
        self.thaw();
        self.change += 1;
        self.records_seen += 1;
        self.last_update = Some(now);
        self.record_pid = Some(header.pid);
        // A record changes at most its own stream's thread.
        let before = self.thread_cost(header.stream);
        match body {
            Ok(Body::Hello(h)) => self.hello(header, &h, limits, &mut out),
            Ok(Body::Methods(defs)) => self.methods_record(header, &defs, now, &mut out),
            Ok(Body::JvmEnd) => {
                self.jvm_seq(header, now, &mut out);
                self.finished = true;
                out.accepted = true;
            }
            Ok(Body::Tree(tree)) => self.tree_record(header, Ok(tree), now, &mut out),
            Ok(Body::Thread(slot)) => self.thread_slot(header, slot, &mut out),
            Ok(Body::Unmounted(times)) => self.unmounted(header, &times, now, &mut out),
            Err(e) if header.kind == wire::KIND_TREE => {
                self.tree_record(header, Err(e), now, &mut out)
            }
            Err(e) => self.jvm_record_malformed(header, e, now, &mut out),
        }
        if out.accepted {
            self.records += 1;
        }
        let after = self.thread_cost(header.stream);
        self.thread_bytes = self.thread_bytes.saturating_sub(before) + after;
        out
    }

    /// A HELLO or METHODS record whose body did not decode: what it carried is lost,
    /// so the JVM stream needs a re-send.
    fn jvm_record_malformed(
        &mut self,
        header: &RecordHeader,
        e: WireError,
        now: SystemTime,
        out: &mut Outcome,
    ) {
        self.jvm_last_record = self.records_seen;
        self.malformed_record(Malformed::Wire(e), out);
        self.jvm_synced = false;
        out.resync_requested = self.incident(Some(header.generation), now);
    }

    fn hello(
        &mut self,
        header: &RecordHeader,
        h: &Hello<'_>,
        limits: &JvmLimits,
        out: &mut Outcome,
    ) {
        self.jvm_last_record = self.records_seen;
        let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut info = HelloInfo {
            start_time_ms: h.start_time_ms,
            granularity: h.granularity,
            bba: h.bba,
            live_threads: h.live_threads,
            jdk_version: lossy(h.jdk_version),
            main: lossy(h.main),
            agent_version: lossy(h.agent_version),
        };
        // Another VM in the same process (exec): what jpd held belongs to the old one.
        if let Some(old) = &self.hello {
            if old.start_time_ms != 0 && old.start_time_ms != info.start_time_ms {
                self.reset_for_new_vm(limits);
            }
        }
        let old_bytes = self.hello.as_ref().map_or(0, HelloInfo::bytes);
        if !self.strings.charge(old_bytes, info.bytes()) {
            self.hit(LimitKind::StringBytes, out);
            self.strings.used = self.strings.used.saturating_sub(old_bytes);
            info.jdk_version.clear();
            info.main.clear();
            info.agent_version.clear();
        }
        self.hello = Some(info);
        self.hello_generation = Some(header.generation);
        self.jvm_synced = true;
        self.jvm_expected_seq = 1;
        self.ended_since_hello = 0;
        out.accepted = true;
    }

    fn reset_for_new_vm(&mut self, limits: &JvmLimits) {
        let mut fresh = Jvm::new(self.tgid, limits, self.attached_since);
        fresh.info = self.info.take();
        fresh.exited_at = self.exited_at;
        fresh.written_generation = self.written_generation;
        fresh.malformed = self.malformed;
        fresh.lost = self.lost;
        fresh.limit_drops = self.limit_drops;
        fresh.ring_rate_limited = self.ring_rate_limited;
        fresh.ring_full = self.ring_full;
        fresh.records = self.records;
        fresh.records_seen = self.records_seen;
        fresh.change = self.change;
        fresh.charged = self.charged;
        *self = fresh;
    }

    /// Sequence check of stream 0; METHODS and JVM_END are applied even after a loss
    /// (they are self-contained), but the loss is counted and a re-send asked for.
    fn jvm_seq(&mut self, header: &RecordHeader, now: SystemTime, out: &mut Outcome) {
        self.jvm_last_record = self.records_seen;
        let seq = header.seq;
        if !self.jvm_synced {
            out.resync_requested = self.incident(Some(header.generation), now);
        } else if seq != self.jvm_expected_seq {
            let missing = u64::from(seq.wrapping_sub(self.jvm_expected_seq));
            let missing = if seq > self.jvm_expected_seq {
                missing
            } else {
                1
            };
            self.lost += missing;
            out.lost += missing;
            out.gaps += 1;
            self.jvm_synced = false;
            out.resync_requested = self.incident(Some(header.generation), now);
        }
        self.jvm_expected_seq = seq.wrapping_add(1);
    }

    fn methods_record(
        &mut self,
        header: &RecordHeader,
        defs: &[MethodDef<'_>],
        now: SystemTime,
        out: &mut Outcome,
    ) {
        self.jvm_seq(header, now, out);
        for d in defs {
            if !self.slots.grow && !self.methods.contains(d.mid) {
                self.hit(LimitKind::StoreBytes, out);
                continue;
            }
            if let Err(k) =
                self.methods
                    .define(d, self.limits.max_methods_per_jvm, &mut self.strings)
            {
                self.hit(k, out);
            }
        }
        out.accepted = true;
    }

    /// A thread stream's record: its sequence decides first whether it applies, so
    /// that a body that did not decode counts as what the stream's state makes it
    /// (lost after a gap, malformed when in order).
    fn tree_record(
        &mut self,
        h: &RecordHeader,
        body: Result<TreeBody<'_, '_>, WireError>,
        now: SystemTime,
        out: &mut Outcome,
    ) {
        let tid = h.stream;
        if self.ended.contains_key(&tid) {
            self.malformed_record(Malformed::AfterEnd, out);
            return;
        }
        if !self.new_thread(tid, out) {
            return;
        }
        let resync = h.flags & FLAG_RESYNC != 0;
        let absolute = h.flags & FLAG_ABSOLUTE != 0;
        let end = h.flags & FLAG_END != 0;
        let generation = Some(h.generation);
        let clock = self.records_seen;
        let Some(th) = self.threads.get_mut(&tid) else {
            return;
        };
        th.last_record = clock;
        if !resync {
            // (records lost, a gap) when the record cannot be applied in order.
            let problem = if th.limited {
                Some(None)
            } else if !th.synced {
                Some(Some((1, false)))
            } else if h.seq != th.expected_seq {
                let missing = if h.seq > th.expected_seq {
                    u64::from(h.seq - th.expected_seq)
                } else {
                    1
                };
                Some(Some((missing, true)))
            } else if absolute && !th.absolute_phase {
                th.synced = false;
                self.malformed.add(Malformed::AbsoluteOutsideResync);
                out.malformed = Some(Malformed::AbsoluteOutsideResync);
                out.resync_requested = self.incident(generation, now);
                if end {
                    self.end_thread(tid, true);
                }
                return;
            } else {
                None
            };
            if let Some(p) = problem {
                th.synced = false;
                match p {
                    None => {
                        self.limit_drops += 1;
                        out.limit_drops += 1;
                    }
                    Some((missing, gap)) => {
                        self.lost += missing;
                        out.lost += missing;
                        out.gaps += u64::from(gap);
                        out.resync_requested = self.incident(generation, now);
                    }
                }
                if end {
                    self.end_thread(tid, true);
                }
                return;
            }
        }
        let r = match body {
            Ok(body) => th.apply_tree(&body, resync, absolute, &mut self.tree, &mut self.slots),
            Err(e) => Err(Reject::Malformed(Malformed::Wire(e))),
        };
        match r {
            Ok((applied, name)) => {
                if resync && tid == STREAM_ENDED {
                    // The snapshot covers every thread whose END came before it: their
                    // own contributions go (the snapshot's replace them).
                    for (node, [c, b]) in self.ended_counts.drain() {
                        self.tree.sub(node, c, b);
                    }
                }
                th.records += 1;
                th.limited = false;
                if resync {
                    th.synced = true;
                    th.absolute_phase = true;
                    th.expected_seq = 1;
                } else {
                    th.expected_seq = th.expected_seq.wrapping_add(1);
                }
                if let Some(name) = name {
                    if self.strings.charge(th.name.len(), name.len()) {
                        th.name = name;
                    } else {
                        self.limits_hit.insert(LimitKind::StringBytes);
                    }
                }
                if applied.dropped > 0 {
                    self.limit_drops += applied.dropped;
                    out.limit_drops += applied.dropped;
                }
                if applied.node_limit {
                    self.limits_hit.insert(LimitKind::Nodes);
                }
                out.accepted = true;
                if end {
                    self.end_thread(tid, false);
                }
            }
            Err(Reject::Malformed(m)) => {
                th.synced = false;
                self.malformed_record(m, out);
                out.resync_requested = self.incident(generation, now);
                if end {
                    self.end_thread(tid, true);
                }
            }
            Err(Reject::Limit(k)) => {
                th.synced = false;
                th.limited = true;
                self.hit(k, out);
                if end {
                    self.end_thread(tid, true);
                }
            }
        }
    }

    /// The stream `tid` exists, created if new and room is left; false (a limit hit)
    /// if not.
    fn new_thread(&mut self, tid: u64, out: &mut Outcome) -> bool {
        if self.threads.contains_key(&tid) {
            return true;
        }
        if self.threads.len() >= self.limits.max_threads_per_jvm {
            self.hit(LimitKind::Threads, out);
            return false;
        }
        if !self.slots.grow {
            self.hit(LimitKind::StoreBytes, out);
            return false;
        }
        self.threads.insert(tid, ThreadStream::default());
        true
    }

    /// `KIND_THREAD`: where the thread publishes its current context. The address is the
    /// JVM's business (a bad one only makes the sampler's reads fail, counted); one that
    /// cannot be an int's (or, on the heap, a cell's address and ints' offsets) is
    /// refused, as is a heap context whose current id would be read as its cookie.
    fn thread_slot(&mut self, h: &RecordHeader, slot: wire::ThreadSlot, out: &mut Outcome) {
        if !slot.well_formed() {
            self.malformed_record(Malformed::BadSlot, out);
            return;
        }
        if self.ended.contains_key(&h.stream) {
            self.malformed_record(Malformed::AfterEnd, out);
            return;
        }
        if !self.new_thread(h.stream, out) {
            return;
        }
        if let Some(th) = self.threads.get_mut(&h.stream) {
            if th.context_slot != Some(slot) {
                th.context_slot = Some(slot);
                self.context.changed(h.stream, self.threads.len());
            }
            out.accepted = true;
        }
    }

    /// jpd found the announced thread not to be this JVM's: its slot is dropped.
    /// True if there was one.
    pub fn refuse_context_slot(&mut self, stream: u64) -> bool {
        let refused = self
            .threads
            .get_mut(&stream)
            .and_then(|th| th.context_slot.take())
            .is_some();
        if refused {
            self.malformed.add(Malformed::BadSlot);
            self.context.changed(stream, self.threads.len());
        }
        refused
    }

    /// Samples of this JVM's threads, counted by the kernel sampler.
    pub fn cpu_samples(
        &mut self,
        period_ns: u64,
        key: &jp_common::CtxKey,
        n: u64,
        now: SystemTime,
    ) {
        self.cpu.period_ns = period_ns;
        let on_context = matches!(
            key.kind,
            jp_common::ctx_kind::USER | jp_common::ctx_kind::KERNEL
        );
        if on_context {
            self.note_carried(key.id);
        }
        let (threads, ended) = (&self.threads, &self.ended_node_maps);
        let resolve = |stream: u64, id: u64| resolve_node(threads, ended, stream, id);
        self.cpu.add(key, n, now, &resolve);
        self.change += 1;
    }

    /// Off-CPU time of this JVM's threads, from the scheduler program.
    pub fn offcpu_periods(&mut self, r: &jp_common::OffcpuRecord, n: u64, now: SystemTime) {
        self.note_carried(r.id);
        let (threads, ended) = (&self.threads, &self.ended_node_maps);
        let resolve = |stream: u64, id: u64| resolve_node(threads, ended, stream, id);
        self.offcpu.add(r, n, now, &resolve);
        self.change += 1;
    }

    /// A carrier's slot word (`id`) names in its high half the live virtual thread mounted
    /// on it: that thread's ids are then kept at its end, for what is read after it.
    fn note_carried(&mut self, id: u64) {
        let carried = id >> 32;
        if carried != 0 && self.threads.contains_key(&carried) {
            self.carried.insert(carried);
        }
    }

    /// Samples and off-CPU time that waited for their node: resolved if it came, or expired.
    pub fn cpu_retry(&mut self, now: SystemTime) {
        let (threads, ended) = (&self.threads, &self.ended_node_maps);
        let resolve = |stream: u64, id: u64| resolve_node(threads, ended, stream, id);
        if self.offcpu.has_pending() {
            self.offcpu.retry(now, &resolve);
        }
        if self.cpu.has_pending() {
            self.cpu.retry(now, &resolve);
        }
    }

    /// Once a pass: ended threads' ids are kept as long as samples may wait for them.
    pub fn cpu_expire(&mut self, now: SystemTime) {
        self.cpu_retry(now);
        let bytes = &mut self.ended_map_bytes;
        self.ended_node_maps.retain(|_, (map, at)| {
            let keep = now.duration_since(*at).unwrap_or_default() < cpu::PENDING_FOR;
            if !keep {
                *bytes = bytes.saturating_sub(map.memory_bytes());
            }
            keep
        });
    }

    /// The thread's last record: its counts stay in the merged tree, its map goes.
    fn end_thread(&mut self, tid: u64, broken: bool) {
        let Some(mut th) = self.threads.remove(&tid) else {
            return;
        };
        if self.carried.remove(&tid) || th.context_slot.is_some() {
            // The sampler's last samples of the thread are read up to a pass later: keep
            // its ids for them a while (bounded).
            if self.ended_node_maps.len() < MAX_ENDED_NODE_MAPS {
                let map = th.node_map();
                self.ended_map_bytes += map.memory_bytes();
                let at = self.last_update.unwrap_or(SystemTime::UNIX_EPOCH);
                if let Some((old, _)) = self.ended_node_maps.insert(tid, (map, at)) {
                    self.ended_map_bytes = self.ended_map_bytes.saturating_sub(old.memory_bytes());
                }
            }
            self.change += 1;
            if th.context_slot.is_some() {
                self.context.changed(tid, self.threads.len());
            }
        }
        let broken = broken || !th.synced;
        if !broken {
            th.finish_resync(&mut self.tree);
        }
        for (node, calls, bytecodes) in th.contributions() {
            let c = self.ended_counts.entry(node).or_insert([0, 0]);
            c[0] = c[0].wrapping_add(calls);
            c[1] = c[1].wrapping_add(bytecodes);
        }
        th.release(&mut self.slots);
        self.ended_total += 1;
        self.ended_since_hello += 1;
        if broken {
            self.ended_broken += 1;
        }
        self.ended_name_bytes += th.name.capacity();
        self.ended.insert(tid, EndedThread { name: th.name });
        self.ended_order.push_back(tid);
        while self.ended_order.len() > self.limits.max_ended_threads_per_jvm {
            if let Some(old) = self.ended_order.pop_front() {
                if let Some(e) = self.ended.remove(&old) {
                    self.strings.used = self.strings.used.saturating_sub(e.name.len());
                    self.ended_name_bytes = self.ended_name_bytes.saturating_sub(e.name.capacity());
                }
            }
        }
    }
}
