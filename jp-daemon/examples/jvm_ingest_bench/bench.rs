//! Ingest throughput and memory per node of the JVM store, and what the server's
//! queries cost the ingestion, measured (not printed): the lead's `cargo xtask bench
//! usdt` runs them in a release build (the `jvm_ingest_bench` example).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use jp_common::wire::{self, EventHeader, TreeEntry, Writer};

use jp_daemon::lock::lock;
use jp_daemon::store::jvm::{JvmLimits, JvmStore, MethodTotals};

/// What [`ingest_throughput`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct IngestBench {
    /// Nodes of the tree the deltas update (one thread, so also the merged tree's).
    pub nodes: usize,
    /// Entries of each delta record (the last record of a set may have fewer).
    pub entries_per_record: usize,
    /// Delta records ingested in the timed part, and the node updates they carried.
    pub records: u64,
    pub node_updates: u64,
    pub bytes: u64,
    /// Wall time of the timed part, and the CPU time this thread used in it (on a busy
    /// machine the wall time includes waiting for a core).
    pub seconds: f64,
    pub cpu_seconds: f64,
    /// Node updates per second of wall time, and per second of CPU time (one core).
    pub updates_per_sec: f64,
    pub updates_per_cpu_sec: f64,
    pub records_per_sec: f64,
    pub records_per_cpu_sec: f64,
    /// Store memory per merged-tree node while the thread lives (merged tree + the
    /// thread's own node map and counts + method table), and after it ended (merged
    /// tree only).
    pub bytes_per_node_live: f64,
    pub bytes_per_node_ended: f64,
    /// Cross-check of the estimate: growth of the process's resident memory while the
    /// store was built and updated (thread live), per node; 0 if /proc is unreadable.
    pub rss_bytes_per_node_live: f64,
    /// Time to ingest the full re-send that built the tree (absolute records).
    pub resync_seconds: f64,
    /// CPU time of the queries the server makes on this tree: `mct` and `top_methods`.
    pub mct_cpu_seconds: f64,
    pub top_methods_cpu_seconds: f64,
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Resident memory of this process (`VmRSS`), 0 if unreadable.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// xorshift: the benchmark must not depend on a crate for random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const TGID: u32 = 4242;
const THREAD: u64 = 1;

fn event(len: usize) -> EventHeader {
    EventHeader {
        tgid: TGID,
        tid: TGID,
        ktime_ns: 0,
        len: len as u32,
        status: wire::EVENT_OK,
    }
}

/// Splits `entries` into TREE records of at most `wire::MAX_RECORD` bytes.
fn tree_records(
    entries: &[TreeEntry],
    first_seq: u32,
    flags_first: u32,
    flags: u32,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let mut i = 0;
    let mut seq = first_seq;
    while i < entries.len() || out.is_empty() {
        let f = if out.is_empty() { flags_first } else { flags };
        let h = wire::header(wire::KIND_TREE, TGID, 1, THREAD, seq, f);
        let Ok(mut w) = Writer::new(&mut buf, &h) else {
            break;
        };
        let ok = w.string(if out.is_empty() { b"main" } else { b"" }).is_ok()
            && w.begin_entries().is_ok();
        if !ok {
            break;
        }
        while let Some(e) = entries.get(i) {
            if w.tree_entry(e).is_err() {
                break;
            }
            i += 1;
        }
        out.push(w.finish().to_vec());
        seq += 1;
    }
    out
}

/// Limits that let one thread's tree of `nodes` nodes in whole.
fn limits_for(nodes: usize) -> JvmLimits {
    JvmLimits {
        max_nodes_per_jvm: nodes + 1,
        max_thread_nodes_per_jvm: nodes + 2,
        ..JvmLimits::default()
    }
}

/// The records of a benchmark: a full re-send that builds the tree, delta records of
/// random nodes (with the number of entries of each), and the next sequence number.
struct Workload {
    resync: Vec<Vec<u8>>,
    deltas: Vec<(Vec<u8>, u64)>,
    seq: u32,
}

fn workload(nodes: usize, per: usize) -> Workload {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);

    // The tree: each node under a random earlier node, methods shared by ~4 contexts.
    let methods = (nodes as u64 / 4).max(1);
    // A real thread's tree has one child per (parent, method): draw again on a repeat.
    let mut used = std::collections::HashSet::with_capacity(nodes);
    let defs: Vec<TreeEntry> = (1..=nodes as u32)
        .map(|id| {
            let (mut parent, mut mid);
            loop {
                parent = rng.below(u64::from(id)) as u32;
                mid = rng.below(methods) as u32;
                if used.insert((parent, mid)) {
                    break;
                }
            }
            TreeEntry {
                node: id,
                definition: Some((parent, mid)),
                calls: 1 + rng.below(100),
                bytecodes: rng.below(10_000),
            }
        })
        .collect();
    let resync = tree_records(
        &defs,
        0,
        wire::FLAG_RESYNC | wire::FLAG_ABSOLUTE,
        wire::FLAG_ABSOLUTE,
    );
    drop(used);
    let seq = resync.len() as u32;

    // Delta records over random nodes (a few distinct sets, re-used with new seqs).
    let mut deltas = Vec::new();
    let sets = (64_000 / per).clamp(16, 4096);
    for _ in 0..sets {
        let entries: Vec<TreeEntry> = (0..per)
            .map(|_| TreeEntry {
                node: 1 + rng.below(nodes as u64) as u32,
                definition: None,
                calls: rng.below(4),
                bytecodes: rng.below(300),
            })
            .collect();
        let mut recs = tree_records(&entries, 0, 0, 0);
        recs.truncate(1);
        for r in recs {
            let n = wire::split_record(&r)
                .ok()
                .and_then(|rec| wire::Tree::decode(rec.body).ok())
                .map_or(0, |t| t.entries.count() as u64);
            deltas.push((r, n));
        }
    }

    Workload {
        resync,
        deltas,
        seq,
    }
}

/// Builds a random tree of `nodes` nodes in one thread (through a full re-send), then
/// ingests delta records of random nodes until `updates` node updates were applied, and
/// measures the time of that part alone.
#[cfg(test)]
pub fn ingest_throughput(nodes: usize, updates: u64) -> IngestBench {
    ingest_throughput_with(nodes, updates, 4000)
}

/// [`ingest_throughput`] with delta records of `entries_per_record` entries (at most what
/// fits a record, about 4000): small records measure the cost per record.
pub fn ingest_throughput_with(
    nodes: usize,
    updates: u64,
    entries_per_record: usize,
) -> IngestBench {
    let per = entries_per_record.clamp(1, 4000);
    let nodes = nodes.max(1);
    let limits = limits_for(nodes);
    let now = SystemTime::now();
    let Workload {
        resync,
        mut deltas,
        mut seq,
    } = workload(nodes, per);

    // Everything the bench needs is built: from here on the process grows by the store.
    let rss0 = rss_bytes();
    let mut store = JvmStore::new(limits);
    let t0 = Instant::now();
    for r in &resync {
        store.ingest(&event(r.len()), r, now);
    }
    let resync_seconds = t0.elapsed().as_secs_f64();

    let mut records = 0u64;
    let mut done = 0u64;
    let mut bytes = 0u64;
    let cpu0 = thread_cpu_seconds();
    let t0 = Instant::now();
    'outer: loop {
        for (r, n) in deltas.iter_mut() {
            r[32..36].copy_from_slice(&seq.to_le_bytes());
            seq += 1;
            store.ingest(&event(r.len()), r, now);
            records += 1;
            done += *n;
            bytes += r.len() as u64;
            if done >= updates {
                break 'outer;
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_seconds = thread_cpu_seconds() - cpu0;
    let rss_growth = rss_bytes().saturating_sub(rss0);
    let live = store.stats();
    let ok = live.malformed.total() == 0 && live.lost == 0;

    // The thread ends: its map goes, the merged tree stays.
    let end = tree_records(&[], seq, wire::FLAG_END, wire::FLAG_END);
    for r in &end {
        store.ingest(&event(r.len()), r, now);
    }
    let ended = store.stats();
    let t = thread_cpu_seconds();
    let mct_nodes = store.mct(TGID).map_or(0, |m| m.nodes.len());
    let mct_cpu_seconds = thread_cpu_seconds() - t;
    let t = thread_cpu_seconds();
    let methods_seen = store.top_methods(TGID).map_or(0, |m| m.len());
    let top_methods_cpu_seconds = thread_cpu_seconds() - t;
    let ok = ok && mct_nodes == nodes + 1 && methods_seen > 0;
    let merged = (ended.nodes.max(1)) as f64;
    IngestBench {
        nodes,
        entries_per_record: per,
        records,
        node_updates: if ok { done } else { 0 },
        bytes,
        seconds,
        cpu_seconds,
        updates_per_sec: if ok { done as f64 / seconds } else { 0.0 },
        updates_per_cpu_sec: if ok { done as f64 / cpu_seconds } else { 0.0 },
        records_per_sec: records as f64 / seconds,
        records_per_cpu_sec: records as f64 / cpu_seconds,
        bytes_per_node_live: live.memory_bytes as f64 / merged,
        bytes_per_node_ended: ended.memory_bytes as f64 / merged,
        rss_bytes_per_node_live: rss_growth as f64 / merged,
        resync_seconds,
        mct_cpu_seconds,
        top_methods_cpu_seconds,
    }
}

/// What [`query_bench`] measured: each query the old way ("walk": the tree is walked
/// while the store's lock is held) and the new way ("snapshot": a snapshot is taken
/// under the lock, the walk runs after it), seconds (medians of a few runs).
#[derive(Clone, Debug, PartialEq)]
pub struct QueryBench {
    pub nodes: usize,
    /// `jpctl jvm top`: every method's totals, the first 10 kept.
    pub top_walk: f64,
    pub top_snapshot: f64,
    /// A full export: the tree built and written as `jp-mct/1` JSON.
    pub export_walk: f64,
    pub export_snapshot: f64,
    /// The longest time one delta record took to ingest (waiting for the lock
    /// included) while nothing else ran, while walk exports ran, while snapshot
    /// exports ran; and the records ingested in each phase.
    pub stall_idle: f64,
    pub stall_walk: f64,
    pub stall_snapshot: f64,
    /// The part of each of those spent waiting for the lock (the rest is the ingest
    /// itself — with a snapshot alive, copying the chunks it shares — and waiting for a
    /// core on a busy machine).
    pub lock_wait: [f64; 3],
    pub records: [u64; 3],
    /// The top-10 and export answers of both ways were equal.
    pub same_answers: bool,
}

fn median_of(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn top_walk(store: &Mutex<JvmStore>) -> Vec<MethodTotals> {
    let mut t = lock(store).top_methods(TGID).unwrap_or_default();
    t.truncate(10);
    t
}

fn top_snapshot(store: &Mutex<JvmStore>) -> Vec<MethodTotals> {
    let snap = lock(store).snapshot(TGID);
    let mut t = snap.map(|s| s.top_methods()).unwrap_or_default();
    t.truncate(10);
    t
}

fn json(t: &jp_mct::Mct) -> Vec<u8> {
    let mut out = Vec::new();
    if jp_mct::write_json(t, &mut out).is_err() {
        out.clear();
    }
    out
}

fn export_walk(store: &Mutex<JvmStore>) -> Vec<u8> {
    let tree = lock(store).mct(TGID);
    tree.as_ref().map(json).unwrap_or_default()
}

fn export_snapshot(store: &Mutex<JvmStore>) -> Vec<u8> {
    let snap = lock(store).snapshot(TGID);
    snap.map(|s| json(&s.mct())).unwrap_or_default()
}

/// Builds a tree of `nodes` nodes (one live thread, as [`ingest_throughput`]), times
/// the queries both ways, then ingests delta records on a second thread through the
/// store's mutex while exports run both ways, and records the longest ingest.
pub fn query_bench(nodes: usize, runs: usize) -> QueryBench {
    let nodes = nodes.max(1);
    let runs = runs.max(1);
    let now = SystemTime::now();
    let Workload {
        resync,
        deltas,
        seq,
    } = workload(nodes, 4000);
    let store = Arc::new(Mutex::new(JvmStore::new(limits_for(nodes))));
    for r in &resync {
        lock(&store).ingest(&event(r.len()), r, now);
    }
    drop(resync);

    let time = |f: &dyn Fn() -> usize| {
        let t = Instant::now();
        let n = f();
        (t.elapsed().as_secs_f64(), n)
    };
    let mut same = true;
    let (mut tw, mut ts, mut ew, mut es) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (a, b) = (top_walk(&store), top_snapshot(&store));
        same &= a == b && !a.is_empty();
        tw.push(time(&|| top_walk(&store).len()).0);
        ts.push(time(&|| top_snapshot(&store).len()).0);
        let (a, b) = (export_walk(&store), export_snapshot(&store));
        same &= a == b && !a.is_empty();
        ew.push(time(&|| export_walk(&store).len()).0);
        es.push(time(&|| export_snapshot(&store).len()).0);
    }

    // The ingest thread: phase 0 idle, 1 walk exports, 2 snapshot exports.
    let phase = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Records applied so far in each phase: a phase lasts until it saw one (a small tree's
    // exports can be over before the ingest thread gets a turn).
    let applied = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let ingester = {
        let (store, phase, stop) = (Arc::clone(&store), Arc::clone(&phase), Arc::clone(&stop));
        let applied = Arc::clone(&applied);
        std::thread::spawn(move || {
            let mut deltas = deltas;
            let mut seq = seq;
            let mut worst = [0f64; 3];
            let mut wait = [0f64; 3];
            let mut records = [0u64; 3];
            'outer: loop {
                for (r, _) in deltas.iter_mut() {
                    if stop.load(Ordering::Relaxed) {
                        break 'outer;
                    }
                    r[32..36].copy_from_slice(&seq.to_le_bytes());
                    seq += 1;
                    let p = (phase.load(Ordering::Relaxed) as usize).min(2);
                    let t = Instant::now();
                    let mut s = lock(&store);
                    let waited = t.elapsed().as_secs_f64();
                    s.ingest(&event(r.len()), r, now);
                    drop(s);
                    let dt = t.elapsed().as_secs_f64();
                    worst[p] = worst[p].max(dt);
                    wait[p] = wait[p].max(waited);
                    records[p] += 1;
                    applied[p].fetch_add(1, Ordering::Relaxed);
                    // A JVM's records arrive spread out, not back to back.
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            (worst, wait, records)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    while applied[0].load(Ordering::Relaxed) == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    phase.store(1, Ordering::Relaxed);
    let mut done = 0;
    while done < runs || applied[1].load(Ordering::Relaxed) == 0 {
        same &= !export_walk(&store).is_empty();
        done += 1;
    }
    phase.store(2, Ordering::Relaxed);
    let mut done = 0;
    while done < runs || applied[2].load(Ordering::Relaxed) == 0 {
        same &= !export_snapshot(&store).is_empty();
        done += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let (worst, lock_wait, records) =
        ingester
            .join()
            .unwrap_or(([f64::NAN; 3], [f64::NAN; 3], [0; 3]));
    let ok = lock(&store).stats().lost == 0 && records.iter().all(|&r| r > 0);
    QueryBench {
        nodes,
        top_walk: median_of(tw),
        top_snapshot: median_of(ts),
        export_walk: median_of(ew),
        export_snapshot: median_of(es),
        stall_idle: worst[0],
        stall_walk: worst[1],
        stall_snapshot: worst[2],
        lock_wait,
        records,
        same_answers: same && ok,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_applies_every_update() {
        let b = ingest_throughput(1000, 50_000);
        assert!(b.node_updates >= 50_000, "{b:?}");
        assert!(b.records > 0 && b.seconds > 0.0);
        // Ended threads keep their node maps (for late CPU samples) and their counts as
        // a map of the nodes they reached, all charged to the store's budget: they may
        // cost more per node than live threads' dense slots, but within twice as much.
        assert!(
            b.bytes_per_node_ended > 0.0 && b.bytes_per_node_ended < 2.0 * b.bytes_per_node_live,
            "{b:?}"
        );
    }

    #[test]
    fn query_bench_answers_alike_both_ways() {
        let q = query_bench(2000, 1);
        assert!(q.same_answers, "{q:?}");
        assert!(q.records.iter().all(|&r| r > 0), "{q:?}");
    }
}
