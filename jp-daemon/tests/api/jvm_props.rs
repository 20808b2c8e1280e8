//! Property tests of the JVM store's ingestion: a simulated agent (random trees, counts,
//! reports, re-sends) against a model of the merged tree, with hostile input mixed in.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use jp_common::wire::{
    self, EventHeader, MethodDef, TreeEntry, Writer, FLAG_ABSOLUTE, FLAG_END, FLAG_RESYNC,
    STREAM_ENDED,
};
use jp_daemon::store::jvm::{JvmLimits, JvmStore};
use proptest::prelude::*;

const PID: u32 = 4000;
const OTHER: u32 = 4001;
const GEN: u64 = 9;
const MIDS: u32 = 6;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn ev(tgid: u32, rec: &[u8]) -> EventHeader {
    EventHeader {
        tgid,
        tid: tgid,
        ktime_ns: 0,
        len: rec.len() as u32,
        status: wire::EVENT_OK,
    }
}

fn hello(generation: u64, live_threads: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let h = wire::header(
        wire::KIND_HELLO,
        1,
        generation,
        0,
        0,
        FLAG_RESYNC | FLAG_ABSOLUTE,
    );
    let mut w = Writer::new(&mut buf, &h).unwrap();
    for v in [1, 1000, 0, live_threads] {
        w.varint(v).unwrap();
    }
    for s in [&b"17"[..], b"Main", b"0.1"] {
        w.string(s).unwrap();
    }
    w.finish().to_vec()
}

fn method_name(mid: u32) -> String {
    format!("p.C.m{mid}()V")
}

fn methods(generation: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let h = wire::header(wire::KIND_METHODS, 1, generation, 0, 1, 0);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.begin_entries().unwrap();
    for mid in 0..MIDS {
        let name = format!("m{mid}");
        w.method(&MethodDef {
            mid,
            class: b"p.C",
            name: name.as_bytes(),
            descriptor: b"()V",
            source_file: b"p/C.java",
        })
        .unwrap();
    }
    w.finish().to_vec()
}

/// One thread of the simulated agent: its logical tree (node 0 the root) and what it
/// told jpd so far.
#[derive(Clone, Default)]
struct SimThread {
    stream: u64,
    parent: Vec<usize>,
    mid: Vec<u32>,
    counts: Vec<[u64; 2]>,
    /// Counts as last reported, and the sender id of each node (0: not yet defined).
    sent: Vec<[u64; 2]>,
    id: Vec<u32>,
    next_id: u32,
    seq: u32,
    generation: u64,
}

impl SimThread {
    fn new(stream: u64) -> SimThread {
        SimThread {
            stream,
            parent: vec![0],
            mid: vec![0],
            counts: vec![[0, 0]],
            sent: vec![[0, 0]],
            id: vec![0],
            next_id: 1,
            seq: 0,
            generation: GEN,
        }
    }

    fn grow(&mut self, parent_sel: usize, mid: u32) {
        let p = parent_sel % self.parent.len();
        self.parent.push(p);
        self.mid.push(mid % MIDS);
        self.counts.push([1, 0]);
        self.sent.push([0, 0]);
        self.id.push(0);
    }

    fn count(&mut self, sel: usize, calls: u64, bytecodes: u64) {
        if self.parent.len() > 1 {
            let i = 1 + sel % (self.parent.len() - 1);
            self.counts[i][0] += calls;
            self.counts[i][1] += bytecodes;
        }
    }

    /// Splits entries over records of at most `per` entries; the first gets `first_flags`.
    fn records(
        &mut self,
        entries: &[TreeEntry],
        first_flags: u32,
        flags: u32,
        per: usize,
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let chunks: Vec<&[TreeEntry]> = if entries.is_empty() {
            vec![&[]]
        } else {
            entries.chunks(per.max(1)).collect()
        };
        for (k, chunk) in chunks.into_iter().enumerate() {
            let mut buf = vec![0u8; wire::MAX_RECORD];
            let f = if k == 0 { first_flags } else { flags };
            let h = wire::header(
                wire::KIND_TREE,
                1,
                self.generation,
                self.stream,
                self.seq,
                f,
            );
            let mut w = Writer::new(&mut buf, &h).unwrap();
            w.string(if f & FLAG_RESYNC != 0 { b"t" } else { b"" })
                .unwrap();
            w.begin_entries().unwrap();
            for e in chunk {
                w.tree_entry(e).unwrap();
            }
            out.push(w.finish().to_vec());
            self.seq += 1;
        }
        out
    }

    /// Deltas since the last report, with definitions of new nodes.
    fn report(&mut self, per: usize) -> Vec<Vec<u8>> {
        let mut entries = Vec::new();
        for i in 1..self.parent.len() {
            let new = self.id[i] == 0;
            if new {
                self.id[i] = self.next_id;
                self.next_id += 1;
            }
            let d = [
                self.counts[i][0] - self.sent[i][0],
                self.counts[i][1] - self.sent[i][1],
            ];
            if new || d != [0, 0] {
                entries.push(TreeEntry {
                    node: self.id[i],
                    definition: new.then(|| (self.id[self.parent[i]], self.mid[i])),
                    calls: d[0],
                    bytecodes: d[1],
                });
                self.sent[i] = self.counts[i];
            }
        }
        self.records(&entries, 0, 0, per)
    }

    /// The whole tree with totals, under fresh node ids.
    fn resync(&mut self, per: usize) -> Vec<Vec<u8>> {
        self.seq = 0;
        for i in 1..self.parent.len() {
            self.id[i] = self.next_id;
            self.next_id += 1;
        }
        let entries: Vec<TreeEntry> = (1..self.parent.len())
            .map(|i| TreeEntry {
                node: self.id[i],
                definition: Some((self.id[self.parent[i]], self.mid[i])),
                calls: self.counts[i][0],
                bytecodes: self.counts[i][1],
            })
            .collect();
        self.sent.clone_from(&self.counts);
        self.records(&entries, FLAG_RESYNC | FLAG_ABSOLUTE, FLAG_ABSOLUTE, per)
    }

    fn path(&self, mut i: usize) -> Vec<String> {
        let mut p = Vec::new();
        while i != 0 {
            p.push(method_name(self.mid[i]));
            i = self.parent[i];
        }
        p.reverse();
        p
    }
}

type Paths = HashMap<Vec<String>, [u64; 2]>;

/// The merged tree the model expects: every node any thread defined, counts summed.
fn model(threads: &[SimThread]) -> Paths {
    let mut m = Paths::new();
    for t in threads {
        for i in 1..t.parent.len() {
            let e = m.entry(t.path(i)).or_insert([0, 0]);
            e[0] += t.counts[i][0];
            e[1] += t.counts[i][1];
        }
    }
    m
}

fn held(s: &JvmStore) -> Paths {
    let t = s.mct(PID).expect("the JVM is known");
    let mut paths: Vec<Vec<String>> = vec![Vec::new(); t.nodes.len()];
    let mut m = Paths::new();
    for (i, n) in t.nodes.iter().enumerate().skip(1) {
        let p = n.parent.expect("non-root nodes have parents");
        let mut path = paths[p].clone();
        path.push(n.method.to_string());
        paths[i] = path.clone();
        let e = m.entry(path).or_insert([0, 0]);
        e[0] += n.calls;
        e[1] += n.bytecodes;
    }
    m
}

#[derive(Clone, Debug)]
enum Op {
    Grow(usize, usize, u32),
    Count(usize, usize, u64, u64),
    Report(usize),
    Resync(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..3usize, any::<usize>(), 0..MIDS).prop_map(|(t, p, m)| Op::Grow(t, p, m)),
        4 => (0..3usize, any::<usize>(), 0..5u64, 0..1000u64)
            .prop_map(|(t, n, c, b)| Op::Count(t, n, c, b)),
        2 => (0..3usize).prop_map(Op::Report),
        1 => (0..3usize).prop_map(Op::Resync),
    ];
    prop::collection::vec(op, 1..120)
}

/// Runs the ops, giving each record to `sink`; every thread reports at the end.
fn run(ops: &[Op], per: usize, mut sink: impl FnMut(Vec<u8>)) -> Vec<SimThread> {
    let mut threads: Vec<SimThread> = (1..=3).map(SimThread::new).collect();
    for t in threads.iter_mut() {
        for r in t.resync(per) {
            sink(r);
        }
    }
    for op in ops {
        match *op {
            Op::Grow(t, p, m) => threads[t].grow(p, m),
            Op::Count(t, n, c, b) => threads[t].count(n, c, b),
            Op::Report(t) => threads[t].report(per).into_iter().for_each(&mut sink),
            Op::Resync(t) => threads[t].resync(per).into_iter().for_each(&mut sink),
        }
    }
    for t in threads.iter_mut() {
        for r in t.report(per) {
            sink(r);
        }
    }
    threads
}

fn started() -> JvmStore {
    let mut s = JvmStore::new(JvmLimits::default());
    s.generation_written(PID, GEN);
    for r in [hello(GEN, 3), methods(GEN)] {
        s.ingest(&ev(PID, &r), &r, now());
    }
    s
}

/// Garbage derived from a valid record: bytes flipped, cut, or replaced.
fn mangle(rec: &[u8], how: u8, at: usize, byte: u8) -> Vec<u8> {
    let mut r = rec.to_vec();
    match how % 4 {
        0 => {
            let i = at % r.len();
            r[i] ^= byte | 1;
        }
        1 => r.truncate(at % r.len()),
        2 => {
            // Keep the header (so the body decoder is exercised), scramble the body.
            for (k, b) in r.iter_mut().enumerate().skip(wire::HEADER_LEN) {
                *b = b.wrapping_mul(31).wrapping_add(byte ^ k as u8);
            }
        }
        _ => {
            let i = wire::HEADER_LEN + at % (r.len() - wire::HEADER_LEN + 1);
            r.insert(i.min(r.len()), byte);
            let len = (r.len() as u32).to_le_bytes();
            r[8..12].copy_from_slice(&len);
        }
    }
    r
}

/// What happens to the store in [`totals_match_the_walk`]: the simulated agent's records,
/// some lost or mangled, threads ending, re-sends, snapshots of ended threads.
#[derive(Clone, Debug)]
enum Step {
    Op(Op),
    /// The next record of this thread is lost.
    Lose(usize),
    /// This thread's next report ends it (its counts stay in the merged tree).
    End(usize),
    /// A snapshot of ended threads (stream STREAM_ENDED): a random tree, re-sent whole.
    Ended(Vec<(usize, u32, u64, u64)>),
    /// A record mangled into garbage on this JVM's streams.
    Mangle(usize, u8, usize, u8),
    /// A snapshot taken now must still read as now after everything that follows.
    Snapshot,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let op = prop_oneof![
        4 => (0..3usize, any::<usize>(), 0..MIDS).prop_map(|(t, p, m)| Op::Grow(t, p, m)),
        4 => (0..3usize, any::<usize>(), 0..5u64, 0..1000u64)
            .prop_map(|(t, n, c, b)| Op::Count(t, n, c, b)),
        2 => (0..3usize).prop_map(Op::Report),
        1 => (0..3usize).prop_map(Op::Resync),
    ];
    let step = prop_oneof![
        12 => op.prop_map(Step::Op),
        1 => (0..3usize).prop_map(Step::Lose),
        1 => (0..3usize).prop_map(Step::End),
        1 => prop::collection::vec((any::<usize>(), 0..MIDS, 0..4u64, 0..500u64), 0..8)
            .prop_map(Step::Ended),
        1 => (0..3usize, any::<u8>(), any::<usize>(), any::<u8>())
            .prop_map(|(t, h, a, b)| Step::Mangle(t, h, a, b)),
        1 => Just(Step::Snapshot),
    ];
    prop::collection::vec(step, 1..150)
}

/// The totals kept on ingest, and a snapshot's views, against the reference walk.
fn check_totals(s: &mut JvmStore) -> Result<(), TestCaseError> {
    let walked = s.top_methods(PID).expect("the JVM is known");
    let kept = s.method_calls(PID).expect("the JVM is known");
    prop_assert_eq!(kept.len(), walked.len());
    for (k, w) in kept.iter().zip(&walked) {
        prop_assert_eq!(
            (k.mid, &k.name, &k.file, k.calls, k.exclusive_bytecodes),
            (w.mid, &w.name, &w.file, w.calls, w.exclusive_bytecodes)
        );
    }
    let snap = s.snapshot_with_threads(PID).expect("the JVM is known");
    prop_assert_eq!(snap.top_methods(), walked);
    prop_assert_eq!(snap.mct(), s.mct(PID).expect("the JVM is known"));
    prop_assert_eq!(
        snap.thread_trees(),
        s.thread_trees(PID).expect("the JVM is known")
    );
    Ok(())
}

/// A chain deeper than the store looks up for the outermost flags: the snapshot's top
/// falls back to the whole walk and still equals it; a shallow one uses the flags.
#[test]
fn deep_and_shallow_trees_give_the_walks_totals() {
    for depth in [300usize, 5000] {
        let mut s = started();
        let mut t = SimThread::new(1);
        for i in 0..depth {
            // Distinct methods (no name: `?MID`), then recursion through a few.
            t.grow(i, 0);
            let last = t.mid.len() - 1;
            t.mid[last] = if i + 200 < depth {
                100 + i as u32
            } else {
                (i as u32 * 7 / 3) % MIDS
            };
            t.count(i, 1, i as u64);
        }
        let recs = t.resync(500);
        for r in recs {
            s.ingest(&ev(PID, &r), &r, now());
        }
        assert_eq!(s.summary(PID).unwrap().nodes, depth as u64);
        check_totals(&mut s).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// Per-method totals kept on ingest equal the walk of the tree EXACTLY after any
    /// mix of deltas, re-sends, lost and mangled records, ended threads and snapshots of
    /// them; snapshots read as the tree was when they were taken, whatever follows.
    #[test]
    fn totals_match_the_walk(steps in steps(), per in 1..5usize) {
        let mut s = started();
        let mut threads: Vec<SimThread> = (1..=3).map(SimThread::new).collect();
        let mut ended = [false; 3];
        let mut lose = [false; 3];
        let mut end = [false; 3];
        let mut garble: [Option<(u8, usize, u8)>; 3] = [None; 3];
        let mut ended_snapshots = 0u32;
        let mut held = Vec::new();
        let give = |s: &mut JvmStore, recs: Vec<Vec<u8>>, lose: &mut bool, m: &mut Option<(u8, usize, u8)>| {
            for r in recs {
                if std::mem::take(lose) {
                    continue;
                }
                let r = match m.take() {
                    Some((how, at, byte)) => mangle(&r, how, at, byte),
                    None => r,
                };
                s.ingest(&ev(PID, &r), &r, now());
            }
        };
        for t in threads.iter_mut() {
            let recs = t.resync(per);
            give(&mut s, recs, &mut false, &mut None);
        }
        for step in &steps {
            match step {
                Step::Op(op) => {
                    let t = match *op {
                        Op::Grow(t, ..) | Op::Count(t, ..) | Op::Report(t) | Op::Resync(t) => t,
                    };
                    if ended[t] {
                        continue;
                    }
                    let th = &mut threads[t];
                    let mut recs = match *op {
                        Op::Grow(_, p, m) => { th.grow(p, m); Vec::new() }
                        Op::Count(_, n, c, b) => { th.count(n, c, b); Vec::new() }
                        Op::Report(_) => th.report(per),
                        Op::Resync(_) => th.resync(per),
                    };
                    if end[t] && !recs.is_empty() {
                        // The last record carries END.
                        if let Some(last) = recs.last_mut() {
                            let flags = u32::from_le_bytes([last[36], last[37], last[38], last[39]]);
                            last[36..40].copy_from_slice(&(flags | FLAG_END).to_le_bytes());
                        }
                        ended[t] = true;
                    }
                    give(&mut s, recs, &mut lose[t], &mut garble[t]);
                }
                Step::Lose(t) => lose[*t] = true,
                Step::End(t) => end[*t] = true,
                Step::Mangle(t, how, at, byte) => garble[*t] = Some((*how, *at, *byte)),
                Step::Ended(tree) => {
                    let mut e = SimThread::new(STREAM_ENDED);
                    for &(p, m, c, b) in tree {
                        e.grow(p, m);
                        e.count(usize::MAX, c, b);
                    }
                    // Fresh sender ids on every re-send of the snapshot stream.
                    e.next_id = 1 + ended_snapshots * 100;
                    ended_snapshots += 1;
                    let recs = e.resync(per);
                    give(&mut s, recs, &mut false, &mut None);
                }
                Step::Snapshot => {
                    let snap = s.snapshot_with_threads(PID).expect("the JVM is known");
                    let expect = (
                        s.top_methods(PID).expect("known"),
                        s.mct(PID).expect("known"),
                        s.thread_trees(PID).expect("known"),
                    );
                    held.push((snap, expect));
                }
            }
            check_totals(&mut s)?;
        }
        for (snap, (top, mct, threads)) in held {
            prop_assert_eq!(snap.top_methods(), top);
            prop_assert_eq!(snap.mct(), mct);
            prop_assert_eq!(snap.thread_trees(), threads);
        }
    }

    /// A valid stream interleaved with garbage from another process (random bytes and
    /// mangled copies of the valid records) gives exactly the model's tree, complete.
    #[test]
    fn valid_stream_with_foreign_garbage_is_exact(
        ops in ops(),
        per in 1..6usize,
        noise in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>(), prop::collection::vec(any::<u8>(), 0..80)), 0..40),
    ) {
        let mut s = started();
        let mut k = 0;
        let threads = run(&ops, per, |r| {
            s.ingest(&ev(PID, &r), &r, now());
            if let Some((how, at, byte, raw)) = noise.get(k) {
                let g = mangle(&r, *how, *at, *byte);
                s.ingest(&ev(OTHER, &g), &g, now());
                s.ingest(&ev(OTHER, raw), raw, now());
            }
            k += 1;
        });
        prop_assert_eq!(held(&s), model(&threads));
        let sum = s.summary(PID).unwrap();
        prop_assert!(sum.complete, "{}", sum.incomplete_reason);
        prop_assert_eq!(sum.records_lost, 0);
        prop_assert_eq!(sum.records_malformed, 0);
        prop_assert!(!s.take_resync_requests().contains(&PID));
    }

    /// Deltas, then a full re-send under new node ids in the middle (absolute after
    /// deltas), then more deltas: exact.
    #[test]
    fn resync_in_the_middle_is_exact(ops1 in ops(), ops2 in ops(), per in 1..6usize) {
        let mut s = started();
        let mut all: Vec<Op> = ops1;
        all.extend((0..3).map(Op::Resync));
        all.extend(ops2);
        let threads = run(&all, per, |r| s.ingest(&ev(PID, &r), &r, now()));
        prop_assert_eq!(held(&s), model(&threads));
        prop_assert!(s.summary(PID).unwrap().complete);
    }

    /// A lost record: one resync request (however many records follow), incomplete, and
    /// after the re-send of a new generation exact and complete again.
    #[test]
    fn a_gap_asks_once_and_a_resend_recovers(ops in ops(), per in 1..4usize, extra in 1..5usize) {
        let mut s = started();
        let mut threads = run(&ops, per, |r| s.ingest(&ev(PID, &r), &r, now()));
        prop_assert!(s.take_resync_requests().is_empty());
        // Thread 0 changes, reports twice; the first report is lost.
        let t = &mut threads[0];
        t.grow(0, 1);
        let _lost = t.report(per);
        for _ in 0..extra {
            t.count(0, 1, 1);
            for r in t.report(per) {
                s.ingest(&ev(PID, &r), &r, now());
            }
        }
        prop_assert_eq!(s.take_resync_requests(), vec![PID]);
        let sum = s.summary(PID).unwrap();
        prop_assert!(!sum.complete);
        prop_assert!(sum.records_lost >= 1);
        // The collector writes a new generation; the agent re-sends.
        s.generation_written(PID, GEN + 1);
        prop_assert!(!s.summary(PID).unwrap().complete);
        let h = hello(GEN + 1, 3);
        s.ingest(&ev(PID, &h), &h, now());
        for t in threads.iter_mut() {
            t.generation = GEN + 1;
            for r in t.resync(per) {
                s.ingest(&ev(PID, &r), &r, now());
            }
        }
        prop_assert_eq!(held(&s), model(&threads));
        let sum = s.summary(PID).unwrap();
        prop_assert!(sum.complete, "{}", sum.incomplete_reason);
        prop_assert!(s.take_resync_requests().is_empty());
    }

    /// Hostile input on the JVM's own streams: random bytes behind valid headers of every
    /// kind, mangled records; never a panic, memory within the limits.
    #[test]
    fn hostile_records_never_panic_and_memory_stays_bounded(
        recs in prop::collection::vec(
            (0..5u16, 0..4u64, any::<u32>(), 0..8u32, prop::collection::vec(any::<u8>(), 0..300)),
            1..60),
        ops in ops(),
        mangles in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..60),
    ) {
        let limits = JvmLimits {
            max_nodes_per_jvm: 50,
            max_thread_nodes_per_jvm: 200,
            max_threads_per_jvm: 4,
            max_methods_per_jvm: 20,
            max_string_bytes_per_jvm: 2000,
            max_ended_threads_per_jvm: 4,
            ..JvmLimits::default()
        };
        let mut s = JvmStore::new(limits);
        for (kind, stream, seq, flags, body) in &recs {
            let mut buf = vec![0u8; wire::HEADER_LEN + body.len()];
            let h = wire::header(*kind, 1, GEN, *stream, *seq % 4, *flags);
            let w = Writer::new(&mut buf, &h).unwrap();
            let mut r = w.finish().to_vec();
            r.extend_from_slice(body);
            let len = (r.len() as u32).to_le_bytes();
            r[8..12].copy_from_slice(&len);
            s.ingest(&ev(PID, &r), &r, now());
        }
        let mut k = 0;
        run(&ops, 3, |r| {
            let r = match mangles.get(k) {
                Some((how, at, byte)) if k % 2 == 0 => mangle(&r, *how, *at, *byte),
                _ => r,
            };
            s.ingest(&ev(PID, &r), &r, now());
            k += 1;
        });
        let st = s.stats();
        prop_assert!(st.nodes <= 50);
        prop_assert!(st.thread_nodes <= 200);
        prop_assert!(st.memory_bytes < 256 * 1024, "{}", st.memory_bytes);
        let sum = s.summary(PID).unwrap();
        prop_assert!(sum.threads_live <= 4);
        prop_assert!(sum.methods <= 20);
        let _ = s.mct(PID);
        let _ = s.top_methods(PID);
        let _ = s.thread_trees(PID);
    }
}
