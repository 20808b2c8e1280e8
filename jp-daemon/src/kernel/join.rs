//! CPU per exact JVM context, the kernel side: tells `jp_sample` which
//! threads publish a context slot (`JP_JVM_PIDS`, `JP_JVM_THREADS`); the collector hands
//! the samples it logged under them (`ctx_log`) to whoever resolves contexts.
//!
//! The seam is [`ContextJoin`]: the kernel collector knows nothing of JVM stores; the
//! daemon connects it to the one that receives the agents' records.
//!
//! `JP_JVM_THREADS` is one map for the whole host, and any JVM may announce as many
//! threads as it likes: its entries are shared max-min fairly between the JVMs
//! ([`fair_share`]), so one JVM cannot lock the others out, and a thread the map has no
//! room for is skipped and counted (`sampler_map` refusals), never an end to the sync.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use anyhow::Context as _;
use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::Ebpf;
use jp_common::wire::HeapContext;
use jp_common::{maps, CtxKey, JvmThread};

use crate::refusals::{self, Refusal};

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

/// The JVMs the sampler counts, and their threads that publish a context.
pub struct Joined {
    /// Changes whenever `threads` or `pids` do.
    pub version: u64,
    /// Threads that announced a context slot: samples count under their context.
    pub threads: Vec<SlotThread>,
    /// Running JVMs (tgids): samples of their other threads count by the thread's kind.
    pub pids: Vec<u32>,
}

/// Where the join's threads come from and its samples go.
pub trait ContextJoin: Send + Sync {
    /// The JVMs and announced threads, if they changed since `version`.
    fn joined(&self, version: Option<u64>) -> Option<Joined>;
    /// An announced thread that is not its process's: the announcement is refused.
    fn refuse(&self, thread: &SlotThread);
    /// Samples counted since the last call (deltas), `period_ns` each.
    fn samples(&self, period_ns: u64, samples: &[(CtxKey, u64)]);
    /// Off-CPU time logged since the last call, with the program's counters (totals);
    /// only with `kernel.offcpu` on.
    fn offcpu(&self, _pass: &super::offcpu::OffcpuPass) {}
}

/// Whose thread an announced thread id is.
#[derive(Debug, PartialEq, Eq)]
enum Owner {
    /// A thread of the announcing process, by its id in jpd's pid namespace.
    Own(u32),
    /// A live thread of another process: the announcement is refused.
    Other,
    /// No such thread (any more).
    Gone,
}

/// Thread ids of processes in another pid namespace than jpd's (a JVM in a container
/// announces the ids `gettid()` gives it there), by process: innermost id → jpd's.
#[derive(Default)]
struct NamespacedTids {
    by_process: HashMap<u32, Option<HashMap<u32, u32>>>,
}

/// An announced thread id translated to jpd's pid namespace.
#[derive(Debug, PartialEq, Eq)]
enum HostTid {
    /// The process shares jpd's pid namespace: the id is jpd's already.
    SameNamespace,
    /// The process is in another pid namespace, where this thread has jpd's id.
    Translated(u32),
    /// The process is in another pid namespace and has no thread of this id now.
    NotInNamespace,
}

impl NamespacedTids {
    /// `tid` of `tgid` as jpd sees it.
    fn host_tid(&mut self, tgid: u32, tid: u32) -> HostTid {
        let map = self
            .by_process
            .entry(tgid)
            .or_insert_with(|| namespaced_threads(tgid));
        match map.as_ref() {
            None => HostTid::SameNamespace,
            Some(m) => m
                .get(&tid)
                .map_or(HostTid::NotInNamespace, |&host| HostTid::Translated(host)),
        }
    }
}

/// Innermost → jpd's id of every thread of `tgid`, if it is in another pid namespace.
fn namespaced_threads(tgid: u32) -> Option<HashMap<u32, u32>> {
    let ns = |p: &str| std::fs::read_link(format!("{p}/ns/pid")).ok();
    let theirs = ns(&format!("/proc/{tgid}"))?;
    if ns("/proc/self") == Some(theirs) {
        return None;
    }
    let mut map = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{tgid}/task"))
        .ok()?
        .flatten()
    {
        let Some(host) = task
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|ids| ids.split_whitespace().last()?.parse::<u32>().ok());
        if let Some(inner) = inner {
            map.insert(inner, host);
        }
    }
    Some(map)
}

fn thread_owner(tgid: u32, tid: u32, namespaced: &mut NamespacedTids) -> Owner {
    match namespaced.host_tid(tgid, tid) {
        HostTid::Translated(host) => return Owner::Own(host),
        // In a container: not one of its threads now (another process's id space is
        // not visible from here, so this cannot be told from a thread that ended).
        HostTid::NotInNamespace => return Owner::Gone,
        HostTid::SameNamespace => {}
    }
    if Path::new(&format!("/proc/{tgid}/task/{tid}")).exists() {
        Owner::Own(tid)
    } else if tid != 0 && Path::new(&format!("/proc/{tid}")).exists() {
        // /proc/TID answers for any live thread id, listed or not.
        Owner::Other
    } else {
        Owner::Gone
    }
}

/// The sampler's `JP_JVM_THREADS`: `pid_tgid` (as jpd sees it) → the thread's slot.
type SampledThreads = HashMap<u64, JvmThread>;

/// (tgid, announced tid, stream) → the tid as jpd sees it.
type OwnedThreads = HashMap<(u32, u32, u64), u32>;

/// What the collector keeps between passes for the join.
#[derive(Default)]
pub struct JoinState {
    version: Option<u64>,
    pids: HashSet<u32>,
    threads: SampledThreads,
    /// Announced threads found to be their process's at an earlier sync, (tgid, announced
    /// tid, stream) → the tid as jpd sees it: a sync looks in /proc only for new ones
    /// (syncs follow every announcement, and a JVM may have thousands of threads).
    owned: OwnedThreads,
    /// Announced threads found gone at an earlier sync, (tgid, announced tid, stream):
    /// a thread id that ended does not come back to the same stream, so they are not
    /// looked up again. Without this, a process announcing thousands of made-up thread
    /// ids cost two /proc lookups each at every sync, and every sync follows an
    /// announcement of any JVM.
    gone: HashSet<(u32, u32, u64)>,
    left_out: LeftOut,
}

impl JoinState {
    /// Mirrors the announced threads into the sampler's maps. Threads whose id is not
    /// in their process are refused (a process may announce only its own threads); each
    /// JVM gets its fair share of the map ([`fair_share`]).
    pub fn sync_threads(&mut self, ebpf: &mut Ebpf, join: &dyn ContextJoin) -> anyhow::Result<()> {
        let Some(Joined {
            version,
            threads: announced,
            pids: jvms,
        }) = join.joined(self.version)
        else {
            return Ok(());
        };
        let (want, owned, gone) = self.owned_threads(&announced, join);
        let capacity = maps::JVM_THREADS.max_entries as usize;
        let (want, over_quota) = fair_share(want, &self.threads, capacity);
        let pids = joined_pids(&want, jvms);
        let name = maps::JVM_THREADS.name;
        let mut map: BpfHashMap<&mut MapData, u64, JvmThread> =
            BpfHashMap::try_from(ebpf.map_mut(name).with_context(|| format!("no {name}"))?)?;
        let (written, full) = write_threads(&mut map, &self.threads, want);
        self.left_out.count_new(over_quota, full);
        self.write_pids(ebpf, &pids)?;
        self.threads = written;
        self.owned = owned;
        self.gone = gone;
        self.pids = pids;
        self.version = Some(version);
        Ok(())
    }

    /// The announced threads that are their process's, as the sampler's map wants them
    /// (by `pid_tgid` as jpd sees it), and the ownership found, for the next sync.
    fn owned_threads(
        &self,
        announced: &[SlotThread],
        join: &dyn ContextJoin,
    ) -> (SampledThreads, OwnedThreads, HashSet<(u32, u32, u64)>) {
        let mut want = SampledThreads::new();
        let mut namespaced = NamespacedTids::default();
        let mut owned = HashMap::with_capacity(announced.len());
        let mut gone = HashSet::new();
        for t in announced {
            let id = (t.tgid, t.tid, t.stream);
            if self.gone.contains(&id) {
                gone.insert(id);
                continue;
            }
            let tid = match self.owned.get(&id) {
                Some(&tid) => tid,
                None => match thread_owner(t.tgid, t.tid, &mut namespaced) {
                    Owner::Own(tid) => tid,
                    Owner::Other => {
                        join.refuse(t);
                        continue;
                    }
                    // Ended since it announced itself (its end record is on its way):
                    // nothing to read any more, and nothing to hold against the JVM.
                    Owner::Gone => {
                        gone.insert(id);
                        continue;
                    }
                },
            };
            owned.insert(id, tid);
            let key = (u64::from(t.tgid) << 32) | u64::from(tid);
            want.insert(
                key,
                JvmThread {
                    slot: t.slot,
                    stream: t.stream,
                    current_offset: t.heap.map_or(0, |h| h.current_offset),
                    cookie_offset: t.heap.map_or(0, |h| h.cookie_offset),
                    cookie: t.heap.map_or(0, |h| h.cookie),
                    _pad: 0,
                },
            );
        }
        (want, owned, gone)
    }

    /// Brings `JP_JVM_PIDS` from what the last sync wrote to `pids`.
    fn write_pids(&self, ebpf: &mut Ebpf, pids: &HashSet<u32>) -> anyhow::Result<()> {
        let name = maps::JVM_PIDS.name;
        let mut map: BpfHashMap<&mut MapData, u32, u32> =
            BpfHashMap::try_from(ebpf.map_mut(name).with_context(|| format!("no {name}"))?)?;
        for p in self.pids.difference(pids) {
            let _ = map.remove(p);
        }
        for p in pids.difference(&self.pids) {
            // `joined_pids` keeps to the map's size: a failure here is the kernel's.
            if let Err(e) = map.insert(p, 1, 0) {
                log::warn!("{name}: JVM {p} not added ({e}): its CPU is not split");
            }
        }
        Ok(())
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

/// Brings the map from what the last sync wrote (`previous`) to `want`: only the
/// threads gone, new or changed are written. A thread the map refuses is skipped (the
/// others are still written). Returns what the map now holds and the skipped keys.
fn write_threads(
    map: &mut dyn ThreadMap,
    previous: &SampledThreads,
    mut want: SampledThreads,
) -> (SampledThreads, Vec<u64>) {
    for k in previous.keys().filter(|k| !want.contains_key(k)) {
        map.remove(*k);
    }
    let mut skipped = Vec::new();
    for (k, v) in &want {
        if previous.get(k) != Some(v) && map.insert(*k, *v).is_err() {
            skipped.push(*k);
        }
    }
    for k in &skipped {
        // A changed thread's old entry may still be there: gone, it cannot be stale.
        map.remove(*k);
        want.remove(k);
    }
    (want, skipped)
}

/// `want` cut to `capacity` entries, max-min fairly between JVMs: every JVM keeps all
/// its threads up to one quota, the largest that fits (so a JVM that wants no more
/// than `capacity / JVMs` always gets all it wants, whatever the others announce).
/// Within a JVM, the threads already in the map stay first (no churn between syncs),
/// then the lowest thread ids. Returns the threads kept and the keys left out.
fn fair_share(
    mut want: SampledThreads,
    previous: &SampledThreads,
    capacity: usize,
) -> (SampledThreads, Vec<u64>) {
    if want.len() <= capacity {
        return (want, Vec::new());
    }
    let mut by_jvm: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for &k in want.keys() {
        by_jvm.entry((k >> 32) as u32).or_default().push(k);
    }
    let quota = max_min_quota(by_jvm.values().map(Vec::len), capacity);
    let mut left_out = Vec::new();
    for keys in by_jvm.values_mut().filter(|keys| keys.len() > quota) {
        keys.sort_unstable_by_key(|k| (!previous.contains_key(k), *k));
        for k in keys.drain(quota..) {
            want.remove(&k);
            left_out.push(k);
        }
    }
    (want, left_out)
}

/// The largest quota q with Σ min(demand, q) ≤ `capacity`.
fn max_min_quota(demands: impl Iterator<Item = usize>, capacity: usize) -> usize {
    let mut demands: Vec<usize> = demands.collect();
    demands.sort_unstable();
    let mut remaining = capacity;
    for (i, &d) in demands.iter().enumerate() {
        let share = remaining / (demands.len() - i);
        if d > share {
            return share;
        }
        remaining -= d;
    }
    usize::MAX
}

/// The threads left out of the map at the last sync: a thread is counted when it is
/// left out anew, not again at every sync while it stays out.
#[derive(Default)]
struct LeftOut {
    over_quota: HashSet<u64>,
    full: HashSet<u64>,
}

impl LeftOut {
    fn count_new(&mut self, over_quota: Vec<u64>, full: Vec<u64>) {
        let over_quota: HashSet<u64> = over_quota.into_iter().collect();
        let full: HashSet<u64> = full.into_iter().collect();
        let mut new_by_jvm: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for k in over_quota.difference(&self.over_quota) {
            new_by_jvm.entry((k >> 32) as u32).or_default().0 += 1;
        }
        for k in full.difference(&self.full) {
            new_by_jvm.entry((k >> 32) as u32).or_default().1 += 1;
        }
        for (jvm, (quota, full)) in new_by_jvm {
            log::warn!(
                "{}: JVM {jvm}: {quota} more thread(s) over its share of the map, {full} \
                 refused by a full map: their CPU is counted by thread kind only",
                maps::JVM_THREADS.name
            );
            refusals::count(JVM_QUOTA, quota);
            refusals::count(MAP_FULL, full);
        }
        self.over_quota = over_quota;
        self.full = full;
    }
}

/// The JVMs the sampler counts: those with announced threads first (their samples need
/// the join to find a context), then the other running JVMs (counted by thread kind)
/// while `JP_JVM_PIDS` has room.
fn joined_pids(want: &SampledThreads, jvms: Vec<u32>) -> HashSet<u32> {
    let mut pids: HashSet<u32> = want.keys().map(|k| (k >> 32) as u32).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_threads_are_told_apart_by_owner() {
        let me = std::process::id();
        let mut ns = NamespacedTids::default();
        assert_eq!(thread_owner(me, me, &mut ns), Owner::Own(me));
        // pid 1's main thread is alive and not ours.
        assert_eq!(thread_owner(me, 1, &mut ns), Owner::Other);
        // Beyond pid_max: never a thread.
        assert_eq!(thread_owner(me, u32::MAX - 1, &mut ns), Owner::Gone);
        // Our own namespace: ids are taken as they are.
        assert_eq!(namespaced_threads(me), None);
    }

    fn thread(slot: u64) -> JvmThread {
        JvmThread {
            slot,
            stream: slot,
            current_offset: 0,
            cookie_offset: 0,
            cookie: 0,
            _pad: 0,
        }
    }

    /// `n` threads of JVM `tgid`, tids from 1.
    fn threads_of(tgid: u32, n: u32) -> SampledThreads {
        (1..=n)
            .map(|tid| {
                (
                    (u64::from(tgid) << 32) | u64::from(tid),
                    thread(u64::from(tid)),
                )
            })
            .collect()
    }

    fn per_jvm(t: &SampledThreads) -> BTreeMap<u32, usize> {
        let mut m = BTreeMap::new();
        for k in t.keys() {
            *m.entry((k >> 32) as u32).or_insert(0) += 1;
        }
        m
    }

    #[test]
    fn a_jvm_filling_the_map_cannot_lock_others_out() {
        let mut want = threads_of(7, 1000);
        want.extend(threads_of(8, 10));
        want.extend(threads_of(9, 60));
        // 100 entries: 8 wants 10 and gets them; 7 and 9 split the 90 left.
        let (kept, left_out) = fair_share(want.clone(), &SampledThreads::new(), 100);
        assert_eq!(per_jvm(&kept), BTreeMap::from([(7, 45), (8, 10), (9, 45)]));
        assert_eq!(left_out.len(), 955 + 15);
        // Lowest thread ids first; then the ones already in the map stay.
        assert!(kept.contains_key(&((7u64 << 32) | 45)));
        assert!(!kept.contains_key(&((7u64 << 32) | 46)));
        let previous: SampledThreads = threads_of(7, 1000)
            .into_iter()
            .filter(|(k, _)| k & 0xffff_ffff > 955)
            .collect();
        let (kept, _) = fair_share(want.clone(), &previous, 100);
        let sevens: Vec<u64> = (1..=1000u64)
            .filter(|tid| kept.contains_key(&((7u64 << 32) | tid)))
            .collect();
        assert_eq!(sevens, (956..=1000).collect::<Vec<u64>>());
        // Room for everyone: nothing is cut.
        let (kept, left_out) = fair_share(want.clone(), &SampledThreads::new(), 1070);
        assert_eq!((kept.len(), left_out.len()), (1070, 0));
        assert_eq!(max_min_quota([3, 3].into_iter(), 7), usize::MAX);
        assert_eq!(max_min_quota([5, 5, 5].into_iter(), 7), 2);
    }

    /// A map of `capacity` entries, as the kernel's hash map: an insert of a new key
    /// into a full map fails.
    struct SmallMap {
        capacity: usize,
        entries: HashMap<u64, JvmThread>,
    }

    impl ThreadMap for SmallMap {
        fn remove(&mut self, key: u64) {
            self.entries.remove(&key);
        }

        fn insert(&mut self, key: u64, thread: JvmThread) -> anyhow::Result<()> {
            if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
                anyhow::bail!("full");
            }
            self.entries.insert(key, thread);
            Ok(())
        }
    }

    #[test]
    fn a_full_map_skips_threads_and_the_sync_goes_on() {
        let mut map = SmallMap {
            capacity: 7,
            entries: HashMap::new(),
        };
        let first = threads_of(7, 3);
        let (written, skipped) = write_threads(&mut map, &SampledThreads::new(), first.clone());
        assert_eq!((written, skipped), (first.clone(), vec![]));
        // Something else holds 2 entries: of JVM 8's 4 threads, 2 find no room; the
        // sync goes on and says what the map holds.
        map.entries.insert(u64::MAX, thread(0));
        map.entries.insert(u64::MAX - 1, thread(0));
        let mut want = first.clone();
        want.extend(threads_of(8, 4));
        let (written, skipped) = write_threads(&mut map, &first, want);
        assert_eq!(per_jvm(&written), BTreeMap::from([(7, 3), (8, 2)]));
        assert_eq!(skipped.len(), 2);
        assert!(written.keys().all(|k| map.entries.contains_key(k)));
        // Counted once per thread left out, not at every sync.
        let before = refusals::get(MAP_FULL);
        let mut left_out = LeftOut::default();
        left_out.count_new(vec![], skipped.clone());
        left_out.count_new(vec![], skipped);
        assert_eq!(refusals::get(MAP_FULL) - before, 2);
    }
}
