//! The join's sync: who owns an announced thread, the fair share of the map, a full
//! map, and that a sync costs what changed (checked against a full recomputation).
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::owner::{namespaced_threads, thread_owner, NamespacedTids};
use super::share::max_min_quota;
use super::*;
use crate::refusals;

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

/// Owners from a table (a thread not in it is gone), counting the lookups.
#[derive(Default)]
struct TableOwners {
    owners: HashMap<(u32, u32), Owner>,
    lookups: usize,
}

impl Owners for TableOwners {
    fn owner(&mut self, tgid: u32, tid: u32) -> Owner {
        self.lookups += 1;
        match self.owners.get(&(tgid, tid)) {
            Some(Owner::Own(host)) => Owner::Own(*host),
            Some(Owner::Other) => Owner::Other,
            _ => Owner::Gone,
        }
    }
}

/// A map of `capacity` entries, as the kernel's hash map (an insert of a new key into a
/// full map fails), counting the writes.
struct TestMap {
    capacity: usize,
    entries: HashMap<u64, JvmThread>,
    writes: usize,
}

impl TestMap {
    fn new(capacity: usize) -> TestMap {
        TestMap {
            capacity,
            entries: HashMap::new(),
            writes: 0,
        }
    }
}

impl ThreadMap for TestMap {
    fn remove(&mut self, key: u64) {
        self.writes += 1;
        self.entries.remove(&key);
    }

    fn insert(&mut self, key: u64, thread: JvmThread) -> anyhow::Result<()> {
        self.writes += 1;
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            anyhow::bail!("full");
        }
        self.entries.insert(key, thread);
        Ok(())
    }
}

/// stream → (tid, slot).
type FakeThreads = BTreeMap<u64, (u32, u64)>;

/// A store of announced threads, as the JVM store hands them to the join: per JVM, what
/// changed since the mark the join gives (all of it for a JVM it never read, or read
/// in an earlier incarnation).
#[derive(Default)]
struct FakeStore {
    version: u64,
    next_incarnation: u64,
    /// tgid → (incarnation, epoch, its threads).
    jvms: BTreeMap<u32, (u64, u64, FakeThreads)>,
    /// Each JVM's announced threads at each mark, to tell a reader what changed since.
    history: HashMap<JvmMark, FakeThreads>,
    refused: Mutex<Vec<(u32, u64)>>,
}

impl FakeStore {
    fn change(&mut self, tgid: u32, f: impl FnOnce(&mut FakeThreads)) {
        self.version += 1;
        let Some((incarnation, epoch, threads)) = self.jvms.get_mut(&tgid) else {
            return;
        };
        f(threads);
        *epoch += 1;
        self.history.insert((*incarnation, *epoch), threads.clone());
    }

    fn start(&mut self, tgid: u32) {
        self.version += 1;
        self.next_incarnation += 1;
        self.jvms
            .insert(tgid, (self.next_incarnation, 0, BTreeMap::new()));
        self.history
            .insert((self.next_incarnation, 0), BTreeMap::new());
    }

    fn exit(&mut self, tgid: u32) {
        self.version += 1;
        self.jvms.remove(&tgid);
    }

    fn announce(&mut self, tgid: u32, stream: u64, tid: u32, slot: u64) {
        self.change(tgid, |t| {
            t.insert(stream, (tid, slot));
        });
    }

    fn end(&mut self, tgid: u32, stream: u64) {
        self.change(tgid, |t| {
            t.remove(&stream);
        });
    }

    /// The refusals the join made drop their slots, as the store does.
    fn take_refusals(&mut self) {
        let refused = std::mem::take(&mut *self.refused.lock().unwrap());
        for (tgid, stream) in refused {
            self.end(tgid, stream);
        }
    }

    /// Every announced thread, as the join read them all before.
    fn all_threads(&self) -> Vec<SlotThread> {
        let mut v = Vec::new();
        for (&tgid, (_, _, threads)) in &self.jvms {
            for (&stream, &(tid, slot)) in threads {
                v.push(slot_thread(tgid, stream, tid, slot));
            }
        }
        v
    }
}

fn slot_thread(tgid: u32, stream: u64, tid: u32, slot: u64) -> SlotThread {
    SlotThread {
        tgid,
        tid,
        slot,
        heap: None,
        stream,
    }
}

impl ContextJoin for FakeStore {
    fn joined(&self, version: Option<u64>, marks: &HashMap<u32, JvmMark>) -> Option<Joined> {
        if version == Some(self.version) {
            return None;
        }
        let mut changed = Vec::new();
        for (&tgid, &(incarnation, epoch, ref threads)) in &self.jvms {
            let mark = (incarnation, epoch);
            let before = marks
                .get(&tgid)
                .filter(|m| m.0 == incarnation)
                .and_then(|m| self.history.get(m));
            if marks.get(&tgid) == Some(&mark) {
                continue;
            }
            let announced = threads
                .iter()
                .filter(|(s, t)| before.is_none_or(|b| b.get(s) != Some(t)))
                .map(|(&s, &(tid, slot))| slot_thread(tgid, s, tid, slot))
                .collect();
            let ended = before.map_or(Vec::new(), |b| {
                b.keys()
                    .filter(|s| !threads.contains_key(s))
                    .copied()
                    .collect()
            });
            changed.push(JvmThreads {
                tgid,
                mark,
                all: before.is_none(),
                announced,
                ended,
            });
        }
        Some(Joined {
            version: self.version,
            changed,
            pids: self.jvms.keys().copied().collect(),
        })
    }

    fn refuse(&self, t: &SlotThread) {
        self.refused.lock().unwrap().push((t.tgid, t.stream));
    }

    fn samples(&self, _: u64, _: &[(CtxKey, u64)]) {}
}

/// One sync, as the collector runs it.
fn sync(state: &mut JoinState, store: &FakeStore, owners: &mut TableOwners, map: &mut TestMap) {
    let marks: HashMap<u32, JvmMark> = state.jvms.iter().map(|(t, j)| (*t, j.mark)).collect();
    if let Some(joined) = store.joined(state.version, &marks) {
        state.apply(joined, store, owners, map);
    }
}

fn key(tgid: u32, tid: u32) -> u64 {
    (u64::from(tgid) << 32) | u64::from(tid)
}

fn per_jvm(t: &HashMap<u64, JvmThread>) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for k in t.keys() {
        *m.entry((k >> 32) as u32).or_insert(0) += 1;
    }
    m
}

/// A store with JVM `tgid` announcing `n` threads of its own, tids from 1.
fn own_threads(
    store: &mut FakeStore,
    owners: &mut TableOwners,
    tgid: u32,
    tids: std::ops::RangeInclusive<u32>,
) {
    for tid in tids {
        owners.owners.insert((tgid, tid), Owner::Own(tid));
        store.announce(tgid, u64::from(tid), tid, 8 * u64::from(tid));
    }
}

#[test]
fn a_jvm_filling_the_map_cannot_lock_others_out() {
    let (mut store, mut owners) = (FakeStore::default(), TableOwners::default());
    for tgid in [7, 8, 9] {
        store.start(tgid);
    }
    own_threads(&mut store, &mut owners, 7, 1..=1000);
    own_threads(&mut store, &mut owners, 8, 1..=10);
    own_threads(&mut store, &mut owners, 9, 1..=60);
    let (mut state, mut map) = (JoinState::with_capacity(100), TestMap::new(100));
    let before = refusals::get(JVM_QUOTA);
    sync(&mut state, &store, &mut owners, &mut map);
    // 100 entries: 8 wants 10 and gets them; 7 and 9 split the 90 left.
    assert_eq!(
        per_jvm(&map.entries),
        BTreeMap::from([(7, 45), (8, 10), (9, 45)])
    );
    assert_eq!(refusals::get(JVM_QUOTA) - before, 955 + 15);
    // Lowest thread ids first.
    assert!(map.entries.contains_key(&key(7, 45)));
    assert!(!map.entries.contains_key(&key(7, 46)));
    // 9 goes: 7 gets 90, the threads it holds staying; nothing counted again.
    store.exit(9);
    sync(&mut state, &store, &mut owners, &mut map);
    assert_eq!(per_jvm(&map.entries), BTreeMap::from([(7, 90), (8, 10)]));
    // 7's lowest threads end: the ones already in the map stay, the next lowest join.
    for stream in 1..=10u64 {
        store.end(7, stream);
    }
    sync(&mut state, &store, &mut owners, &mut map);
    let sevens: Vec<u32> = (1..=1000)
        .filter(|&tid| map.entries.contains_key(&key(7, tid)))
        .collect();
    assert_eq!(sevens, (11..=100).collect::<Vec<u32>>());
    assert_eq!(refusals::get(JVM_QUOTA) - before, 955 + 15);
    assert_eq!(map.entries, *state.map.written());
    assert_eq!(max_min_quota([3, 3].into_iter(), 7), usize::MAX);
    assert_eq!(max_min_quota([5, 5, 5].into_iter(), 7), 2);
}

#[test]
fn a_full_map_skips_threads_and_the_sync_goes_on() {
    let (mut store, mut owners) = (FakeStore::default(), TableOwners::default());
    store.start(7);
    own_threads(&mut store, &mut owners, 7, 1..=3);
    let (mut state, mut map) = (JoinState::with_capacity(100), TestMap::new(7));
    sync(&mut state, &store, &mut owners, &mut map);
    assert_eq!(per_jvm(&map.entries), BTreeMap::from([(7, 3)]));
    // Something else holds 2 entries: of JVM 8's 4 threads, 2 find no room; the sync
    // goes on and says what the map holds.
    map.entries.insert(u64::MAX, JvmThread::default());
    map.entries.insert(u64::MAX - 1, JvmThread::default());
    store.start(8);
    own_threads(&mut store, &mut owners, 8, 1..=4);
    let before = refusals::get(MAP_FULL);
    sync(&mut state, &store, &mut owners, &mut map);
    assert_eq!(
        per_jvm(state.map.written()),
        BTreeMap::from([(7, 3), (8, 2)])
    );
    assert_eq!(refusals::get(MAP_FULL) - before, 2);
    // Counted once per thread left out, not at every sync; tried again, and written
    // once there is room.
    store.announce(7, 99, 3, 0);
    sync(&mut state, &store, &mut owners, &mut map);
    assert_eq!(refusals::get(MAP_FULL) - before, 2);
    map.entries.remove(&u64::MAX);
    map.entries.remove(&(u64::MAX - 1));
    store.announce(7, 100, 3, 0);
    sync(&mut state, &store, &mut owners, &mut map);
    assert_eq!(
        per_jvm(state.map.written()),
        BTreeMap::from([(7, 3), (8, 4)])
    );
    assert!(state
        .map
        .written()
        .iter()
        .all(|(k, v)| map.entries.get(k) == Some(v)));
}

/// What a sync cost: (streams visited, /proc lookups, map writes).
fn cost_of(
    state: &mut JoinState,
    store: &FakeStore,
    owners: &mut TableOwners,
    map: &mut TestMap,
) -> (u64, usize, usize) {
    let before = (state.visited, owners.lookups, map.writes);
    sync(state, store, owners, map);
    (
        state.visited - before.0,
        owners.lookups - before.1,
        map.writes - before.2,
    )
}

#[test]
fn one_jvms_change_does_not_rewalk_or_rewrite_another_jvms_threads() {
    let (mut store, mut owners) = (FakeStore::default(), TableOwners::default());
    store.start(7);
    store.start(8);
    own_threads(&mut store, &mut owners, 7, 1..=1000);
    // 1000 made-up ids: looked up once, never again.
    for tid in 5001..=6000 {
        store.announce(7, u64::from(tid), tid, 0);
    }
    own_threads(&mut store, &mut owners, 8, 1..=10);
    let (mut state, mut map) = (JoinState::with_capacity(100), TestMap::new(100));
    assert_eq!(
        cost_of(&mut state, &store, &mut owners, &mut map),
        (2010, 2010, 100)
    );
    // 8 announces a thread: that thread alone is visited, looked up and written; over
    // the map's capacity, 7 gives one entry up to it (one more write).
    own_threads(&mut store, &mut owners, 8, 11..=11);
    assert_eq!(
        cost_of(&mut state, &store, &mut owners, &mut map),
        (1, 1, 2)
    );
    // 8's thread ends: it alone is visited, and 7 gets its entry back.
    store.end(8, 11);
    assert_eq!(
        cost_of(&mut state, &store, &mut owners, &mut map),
        (1, 0, 2)
    );
    // 7 re-announces one thread in a new slot: one visit, no lookup, one write.
    store.announce(7, 3, 3, 4096);
    assert_eq!(
        cost_of(&mut state, &store, &mut owners, &mut map),
        (1, 0, 1)
    );
    // Nothing changed: nothing to do.
    assert_eq!(
        cost_of(&mut state, &store, &mut owners, &mut map),
        (0, 0, 0)
    );
    assert_eq!(per_jvm(&map.entries), BTreeMap::from([(7, 90), (8, 10)]));
}

/// A small deterministic generator (xorshift), for the random sequences.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The whole recomputation the join did at every sync before it was incremental: every
/// announced thread looked up, the map cut max-min fairly (threads in the map first,
/// then the lowest ids), from what the map held (`previous`).
fn recomputed(
    announced: &[SlotThread],
    owners: &TableOwners,
    previous: &HashMap<u64, JvmThread>,
    capacity: usize,
) -> HashMap<u64, JvmThread> {
    let mut want = HashMap::new();
    for t in announced {
        if let Some(Owner::Own(host)) = owners.owners.get(&(t.tgid, t.tid)) {
            want.insert(key(t.tgid, *host), sampled(t));
        }
    }
    if want.len() <= capacity {
        return want;
    }
    let mut by_jvm: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for &k in want.keys() {
        by_jvm.entry((k >> 32) as u32).or_default().push(k);
    }
    let quota = max_min_quota(by_jvm.values().map(Vec::len), capacity);
    for keys in by_jvm.values_mut().filter(|keys| keys.len() > quota) {
        keys.sort_unstable_by_key(|k| (!previous.contains_key(k), *k));
        for k in keys.drain(quota..) {
            want.remove(&k);
        }
    }
    want
}

#[test]
fn incremental_syncs_equal_the_whole_recomputation() {
    const CAPACITY: usize = 24;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut over_capacity = 0;
    for _run in 0..20 {
        let (mut store, mut owners) = (FakeStore::default(), TableOwners::default());
        // Tids 1..40 of each JVM are its own (tid 40 + JVM: a shared id, announced by
        // several streams), 41..45 another process's, the rest gone.
        for tgid in 1..=4u32 {
            for tid in 1..=40 {
                owners
                    .owners
                    .insert((tgid, tid), Owner::Own(tid + 1000 * tgid));
            }
            for tid in 41..=45 {
                owners.owners.insert((tgid, tid), Owner::Other);
            }
        }
        let (mut state, mut map) = (JoinState::with_capacity(CAPACITY), TestMap::new(CAPACITY));
        let mut previous = HashMap::new();
        for _step in 0..60 {
            for _ in 0..=rng.below(6) {
                let tgid = 1 + rng.below(4) as u32;
                let stream = 1 + rng.below(30);
                match rng.below(60) {
                    0 => store.start(tgid),
                    1 => store.exit(tgid),
                    2..=15 => store.end(tgid, stream),
                    _ => {
                        if !store.jvms.contains_key(&tgid) {
                            store.start(tgid);
                        }
                        let tid = 1 + rng.below(50) as u32;
                        store.announce(tgid, stream, tid, rng.below(4) * 8);
                    }
                }
            }
            // The refusals of the sync before dropped their slots: the store changed.
            let before_sync = store.all_threads();
            sync(&mut state, &store, &mut owners, &mut map);
            // Sorted by (tgid, stream): a thread id announced by several streams is the
            // highest stream's.
            let want = recomputed(&before_sync, &owners, &previous, CAPACITY);
            let wanted: HashMap<u64, JvmThread> =
                recomputed(&before_sync, &owners, &previous, usize::MAX);
            over_capacity += usize::from(wanted.len() > CAPACITY);
            assert_eq!(*state.map.written(), want);
            assert_eq!(map.entries, want);
            previous = want;
            store.take_refusals();
        }
    }
    // The fair share is what is checked here: many syncs must be over the map's size
    // (511 with this seed).
    assert!(
        over_capacity >= 400,
        "{over_capacity} of 1200 syncs over capacity"
    );
}
