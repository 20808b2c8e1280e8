//! CPU per exact JVM context, the kernel side: tells `jp_sample` which
//! threads publish a context slot (`JP_JVM_PIDS`, `JP_JVM_THREADS`); the collector hands
//! the samples it logged under them (`ctx_log`) to whoever resolves contexts.
//!
//! The seam is [`ContextJoin`]: the kernel collector knows nothing of JVM stores; the
//! daemon connects it to the one that receives the agents' records.
//!
//! `JP_JVM_THREADS` is one map for the whole host, and any JVM may announce as many
//! threads as it likes: its entries are shared max-min fairly between the JVMs
//! ([`share`]), so one JVM cannot lock the others out, and a thread the map has no
//! room for is skipped and counted (`sampler_map` refusals), never an end to the sync.
//!
//! A sync costs what changed since the last one: the store hands over only the JVMs
//! whose announced threads changed, and of those only the threads that did (each JVM
//! has a mark, [`JvmThreads::mark`]); a thread is looked up in /proc once; the map is
//! written only where an entry changes ([`share`]). Syncs follow every announcement of
//! any JVM, and one JVM may announce thousands of threads.
mod owner;
mod pid_bits;
mod share;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, HashSet};

use anyhow::Context as _;
use aya::maps::{Array as BpfArray, HashMap as BpfHashMap, MapData};
use aya::Ebpf;
use jp_common::wire::HeapContext;
use jp_common::{maps, CtxKey, JvmThread};

use crate::refusals::Refusal;
use owner::{Owner, Owners, ProcOwners};
use pid_bits::{PidBits, PidMaps};
use share::SharedMap;

/// A thread left out of `JP_JVM_THREADS` because its JVM holds its share of the map
/// while others want entries too.
pub const JVM_QUOTA: Refusal = Refusal::new("sampler_map", "jvm_quota");
/// A thread the map refused (full): skipped, the other threads are still written.
pub const MAP_FULL: Refusal = Refusal::new("sampler_map", "full");

/// A thread that announced its context slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotThread {
    pub tgid: u32,
    pub tid: u32,
    pub slot: u64,
    /// Set when the thread publishes on the JVM's heap (see `wire::HeapContext`).
    pub heap: Option<HeapContext>,
    pub stream: u64,
}

/// Where a reader left one JVM's announced threads: (its incarnation, its epoch).
pub type JvmMark = (u64, u64);

/// One JVM's announced threads since the join's last read of it.
pub struct JvmThreads {
    pub tgid: u32,
    /// Where the join is now with this JVM: given back at the next read.
    pub mark: JvmMark,
    /// True: `announced` are all its announced threads (what the join held of the JVM
    /// is replaced). False: the threads whose slot came or changed since the last read.
    pub all: bool,
    pub announced: Vec<SlotThread>,
    /// Streams whose slot went since the last read (`all`: none).
    pub ended: Vec<u64>,
}

/// The JVMs the sampler counts, and their threads that publish a context.
pub struct Joined {
    /// Changes whenever any JVM's threads or the running JVMs do.
    pub version: u64,
    /// The JVMs whose announced threads changed since the marks the join gave.
    pub changed: Vec<JvmThreads>,
    /// Running JVMs (tgids): samples of their other threads count by the thread's kind.
    /// A JVM the join holds that is not here is gone.
    pub pids: Vec<u32>,
}

/// Where the join's threads come from and its samples go.
pub trait ContextJoin: Send + Sync {
    /// The JVMs and announced threads, if they changed since `version`: of each JVM,
    /// what changed since its mark in `marks` (all of it, for a JVM not there).
    fn joined(&self, version: Option<u64>, marks: &HashMap<u32, JvmMark>) -> Option<Joined>;
    /// An announced thread that is not its process's: the announcement is refused.
    fn refuse(&self, thread: &SlotThread);
    /// Samples counted since the last call (deltas), `period_ns` each.
    fn samples(&self, period_ns: u64, samples: &[(CtxKey, u64)]);
    /// Off-CPU time logged since the last call, with the program's counters (totals);
    /// only with `kernel.offcpu` on.
    fn offcpu(&self, _pass: &super::offcpu::OffcpuPass) {}
}

/// What the join found of one announced stream (found once, while its thread id stays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resolved {
    /// The process's own thread: its entry in the sampler's map.
    Own {
        tid: u32,
        key: u64,
        thread: JvmThread,
    },
    /// No such thread any more (its end record is on its way): a thread id that ended
    /// does not come back to the same stream, so it is not looked up again. Without
    /// this, a process announcing thousands of made-up ids cost /proc lookups at
    /// every sync.
    Gone { tid: u32 },
}

/// What the join holds of one JVM.
#[derive(Default)]
struct JoinedJvm {
    mark: JvmMark,
    streams: HashMap<u64, Resolved>,
    /// `pid_tgid` → the streams whose thread it is (a thread id announced by several
    /// streams, as when a thread ended and its id was reused: the highest stream's).
    claims: HashMap<u64, BTreeSet<u64>>,
}

impl JoinedJvm {
    /// The entry `key` should have now.
    fn entry(&self, key: u64) -> Option<JvmThread> {
        let stream = self.claims.get(&key)?.last()?;
        match self.streams.get(stream)? {
            Resolved::Own { thread, .. } => Some(*thread),
            Resolved::Gone { .. } => None,
        }
    }

    /// `stream` now resolves to `now`; returns the key whose entry may have changed.
    fn set(&mut self, stream: u64, now: Option<Resolved>) -> Vec<u64> {
        let mut keys = Vec::new();
        let before = match now {
            Some(r) => self.streams.insert(stream, r),
            None => self.streams.remove(&stream),
        };
        if let Some(Resolved::Own { key, .. }) = before {
            if let Some(c) = self.claims.get_mut(&key) {
                c.remove(&stream);
                if c.is_empty() {
                    self.claims.remove(&key);
                }
            }
            keys.push(key);
        }
        if let Some(Resolved::Own { key, .. }) = now {
            self.claims.entry(key).or_default().insert(stream);
            keys.push(key);
        }
        keys
    }
}

/// What the collector keeps between passes for the join.
pub struct JoinState {
    version: Option<u64>,
    pids: HashSet<u32>,
    /// `JP_JVM_PID_BITS` as written: `pids`' bits.
    pid_bits: PidBits,
    jvms: HashMap<u32, JoinedJvm>,
    map: SharedMap,
    /// Announced streams handled by syncs so far (what a sync's cost is counted in).
    visited: u64,
}

impl Default for JoinState {
    fn default() -> JoinState {
        JoinState::with_capacity(maps::JVM_THREADS.max_entries as usize)
    }
}

impl JoinState {
    fn with_capacity(capacity: usize) -> JoinState {
        JoinState {
            version: None,
            pids: HashSet::new(),
            pid_bits: PidBits::default(),
            jvms: HashMap::new(),
            map: SharedMap::new(capacity),
            visited: 0,
        }
    }

    /// Mirrors the announced threads into the sampler's maps. Threads whose id is not
    /// in their process are refused (a process may announce only its own threads); each
    /// JVM gets its fair share of the map ([`share`]).
    pub fn sync_threads(&mut self, ebpf: &mut Ebpf, join: &dyn ContextJoin) -> anyhow::Result<()> {
        let marks: HashMap<u32, JvmMark> = self.jvms.iter().map(|(t, j)| (*t, j.mark)).collect();
        let Some(joined) = join.joined(self.version, &marks) else {
            return Ok(());
        };
        let name = maps::JVM_THREADS.name;
        let mut map: BpfHashMap<&mut MapData, u64, JvmThread> =
            BpfHashMap::try_from(ebpf.map_mut(name).with_context(|| format!("no {name}"))?)?;
        let pids = self.apply(joined, join, &mut ProcOwners::default(), &mut map);
        let mut kernel = KernelPidMaps { ebpf };
        self.pid_bits.move_pids(&self.pids, &pids, &mut kernel);
        self.pids = pids;
        Ok(())
    }

    /// Brings the join and the thread map to `joined`: returns the JVMs the sampler
    /// should count (`JP_JVM_PIDS`).
    fn apply(
        &mut self,
        joined: Joined,
        join: &dyn ContextJoin,
        owners: &mut dyn Owners,
        map: &mut dyn ThreadMap,
    ) -> HashSet<u32> {
        let running: HashSet<u32> = joined.pids.iter().copied().collect();
        let gone: Vec<u32> = self
            .jvms
            .keys()
            .filter(|t| !running.contains(t))
            .copied()
            .collect();
        for tgid in gone {
            self.jvms.remove(&tgid);
            for key in self.map.keys_of(tgid) {
                self.map.set(key, None);
            }
        }
        for jvm in joined.changed {
            self.apply_jvm(jvm, join, owners);
        }
        self.map.finish(map);
        self.version = Some(joined.version);
        joined_pids(self.map.jvms_kept().collect(), joined.pids)
    }

    /// One JVM's changes: only its changed streams are visited, and only new thread
    /// ids looked up.
    fn apply_jvm(&mut self, changes: JvmThreads, join: &dyn ContextJoin, owners: &mut dyn Owners) {
        let tgid = changes.tgid;
        let jvm = self.jvms.entry(tgid).or_default();
        jvm.mark = changes.mark;
        let mut touched = Vec::new();
        if changes.all {
            let now: HashSet<u64> = changes.announced.iter().map(|t| t.stream).collect();
            let ended: Vec<u64> = jvm
                .streams
                .keys()
                .filter(|s| !now.contains(s))
                .copied()
                .collect();
            for stream in ended {
                touched.extend(jvm.set(stream, None));
            }
        }
        for stream in changes.ended {
            self.visited += 1;
            touched.extend(jvm.set(stream, None));
        }
        for t in &changes.announced {
            self.visited += 1;
            let resolved = match jvm.streams.get(&t.stream) {
                Some(&Resolved::Own { tid, key, .. }) if tid == t.tid => Some(Resolved::Own {
                    tid,
                    key,
                    thread: sampled(t),
                }),
                Some(&Resolved::Gone { tid }) if tid == t.tid => Some(Resolved::Gone { tid }),
                _ => match owners.owner(t.tgid, t.tid) {
                    Owner::Own(host) => Some(Resolved::Own {
                        tid: t.tid,
                        key: (u64::from(t.tgid) << 32) | u64::from(host),
                        thread: sampled(t),
                    }),
                    Owner::Other => {
                        join.refuse(t);
                        None
                    }
                    Owner::Gone => Some(Resolved::Gone { tid: t.tid }),
                },
            };
            touched.extend(jvm.set(t.stream, resolved));
        }
        touched.sort_unstable();
        touched.dedup();
        for key in touched {
            self.map.set(key, jvm.entry(key));
        }
    }
}

/// `JP_JVM_PIDS` and `JP_JVM_PID_BITS` of the kernel instance, opened for each write
/// (a sync writes a few entries at most).
struct KernelPidMaps<'a> {
    ebpf: &'a mut Ebpf,
}

impl KernelPidMaps<'_> {
    fn bits(&mut self) -> anyhow::Result<BpfArray<&mut MapData, u64>> {
        let name = maps::JVM_PID_BITS.name;
        let map = self
            .ebpf
            .map_mut(name)
            .with_context(|| format!("no {name}"))?;
        Ok(BpfArray::try_from(map)?)
    }

    fn pids(&mut self) -> anyhow::Result<BpfHashMap<&mut MapData, u32, u32>> {
        let name = maps::JVM_PIDS.name;
        let map = self
            .ebpf
            .map_mut(name)
            .with_context(|| format!("no {name}"))?;
        Ok(BpfHashMap::try_from(map)?)
    }
}

impl PidMaps for KernelPidMaps<'_> {
    fn set_word(&mut self, index: u32, word: u64) {
        let written = self.bits().and_then(|mut b| Ok(b.set(index, word, 0)?));
        if let Err(e) = written {
            let name = maps::JVM_PID_BITS.name;
            log::warn!("{name}: word {index} not written ({e:#})");
        }
    }

    fn insert_pid(&mut self, tgid: u32) {
        // `joined_pids` keeps to the map's size: a failure here is the kernel's.
        let written = self.pids().and_then(|mut m| Ok(m.insert(tgid, 1, 0)?));
        if let Err(e) = written {
            let name = maps::JVM_PIDS.name;
            log::warn!("{name}: JVM {tgid} not added ({e:#}): its CPU is not split");
        }
    }

    fn remove_pid(&mut self, tgid: u32) {
        if let Ok(mut m) = self.pids() {
            let _ = m.remove(&tgid);
        }
    }
}

/// The sampler's entry for an announced thread.
fn sampled(t: &SlotThread) -> JvmThread {
    JvmThread {
        slot: t.slot,
        stream: t.stream,
        current_offset: t.heap.map_or(0, |h| h.current_offset),
        cookie_offset: t.heap.map_or(0, |h| h.cookie_offset),
        cookie: t.heap.map_or(0, |h| h.cookie),
        _pad: 0,
    }
}

/// Where the synced threads go: the sampler's map (a test's map in the tests).
trait ThreadMap {
    fn remove(&mut self, key: u64);
    fn insert(&mut self, key: u64, thread: JvmThread) -> anyhow::Result<()>;
}

impl ThreadMap for BpfHashMap<&mut MapData, u64, JvmThread> {
    fn remove(&mut self, key: u64) {
        let _ = BpfHashMap::remove(self, &key);
    }

    fn insert(&mut self, key: u64, thread: JvmThread) -> anyhow::Result<()> {
        Ok(BpfHashMap::insert(self, key, thread, 0)?)
    }
}

/// The JVMs the sampler counts: those with threads in the map first (their samples
/// need the join to find a context), then the other running JVMs (counted by thread
/// kind) while `JP_JVM_PIDS` has room.
fn joined_pids(with_threads: HashSet<u32>, jvms: Vec<u32>) -> HashSet<u32> {
    let mut pids = with_threads;
    let room = maps::JVM_PIDS.max_entries as usize;
    let mut left_out = 0usize;
    for p in jvms {
        if pids.len() < room {
            pids.insert(p);
        } else if !pids.contains(&p) {
            left_out += 1;
        }
    }
    if left_out > 0 {
        log::warn!(
            "the sampler counts at most {room} JVMs: {left_out} running JVM(s) get no CPU split"
        );
    }
    pids
}
