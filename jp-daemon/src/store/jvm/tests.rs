//! Unit tests of the JVM store: records built with `jp_common::wire::Writer`, trees
//! compared node by node.

use std::time::{Duration, SystemTime};

use jp_common::wire::{
    self, EventHeader, MethodDef, TreeEntry, Writer, FLAG_ABSOLUTE, FLAG_END, FLAG_RESYNC,
};
use jp_mct::{Mct, MethodInfo};

use super::*;

const PID: u32 = 1000;
const GEN: u64 = 77;

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
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

fn hello_rec(generation: u64, live_threads: u64, start_ms: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 512];
    let h = wire::header(
        wire::KIND_HELLO,
        7,
        generation,
        0,
        0,
        FLAG_RESYNC | FLAG_ABSOLUTE,
    );
    let mut w = Writer::new(&mut buf, &h).unwrap();
    for v in [start_ms, 10_000_000, 1, live_threads] {
        w.varint(v).unwrap();
    }
    for s in [&b"17.0.9+9"[..], b"app.Main arg1 arg2", b"0.1.0"] {
        w.string(s).unwrap();
    }
    w.finish().to_vec()
}

/// (mid, class, name, descriptor, source)
type M<'a> = (u32, &'a str, &'a str, &'a str, &'a str);

fn methods_rec(generation: u64, seq: u32, ms: &[M<'_>]) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(wire::KIND_METHODS, 7, generation, 0, seq, 0);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.begin_entries().unwrap();
    for &(mid, class, name, descriptor, source) in ms {
        w.method(&MethodDef {
            mid,
            class: class.as_bytes(),
            name: name.as_bytes(),
            descriptor: descriptor.as_bytes(),
            source_file: source.as_bytes(),
        })
        .unwrap();
    }
    w.finish().to_vec()
}

fn tree_rec(
    generation: u64,
    stream: u64,
    seq: u32,
    flags: u32,
    name: &str,
    entries: &[TreeEntry],
) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(wire::KIND_TREE, 7, generation, stream, seq, flags);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.string(name.as_bytes()).unwrap();
    w.begin_entries().unwrap();
    for e in entries {
        w.tree_entry(e).unwrap();
    }
    w.finish().to_vec()
}

/// The first record of stream `stream` of generation `GEN`: sequence 0, a resync with
/// absolute counts, thread name `name`; most tests start a stream this way.
fn resync_rec(stream: u64, name: &str, entries: &[TreeEntry]) -> Vec<u8> {
    tree_rec(GEN, stream, 0, FLAG_RESYNC | FLAG_ABSOLUTE, name, entries)
}

fn def(node: u32, parent: u32, mid: u32, calls: u64, bytecodes: u64) -> TreeEntry {
    TreeEntry {
        node,
        definition: Some((parent, mid)),
        calls,
        bytecodes,
    }
}

fn upd(node: u32, calls: u64, bytecodes: u64) -> TreeEntry {
    TreeEntry {
        node,
        definition: None,
        calls,
        bytecodes,
    }
}

const METHODS: &[M<'static>] = &[
    (
        0,
        "app.Main",
        "main",
        "([Ljava/lang/String;)V",
        "app/Main.java",
    ),
    (1, "app.Main", "f", "()V", "app/Main.java"),
    (2, "app.Main", "g", "(I)V", "app/Main.java"),
    (3, "app.Util", "h", "()V", ""),
];

/// A store that saw the process, wrote GEN, and got HELLO + the method table.
fn started(live_threads: u64) -> JvmStore {
    let mut s = JvmStore::new(JvmLimits::default());
    s.process_found(
        PID,
        ProcessInfo {
            start_time_ticks: 5,
            ns_pid: Some(1),
            cmdline: "java -jar app.jar".into(),
            exe: "/usr/bin/java".into(),
        },
        t0(),
    );
    s.generation_written(PID, GEN);
    feed(&mut s, &hello_rec(GEN, live_threads, 1));
    feed(&mut s, &methods_rec(GEN, 1, METHODS));
    s
}

fn feed(s: &mut JvmStore, rec: &[u8]) {
    s.ingest(&ev(PID, rec), rec, t0());
}

/// The merged tree node by node: (parent, method, calls, bytecodes) in index order.
fn nodes(s: &JvmStore) -> Vec<(usize, String, u64, u64)> {
    let t = s.mct(PID).unwrap();
    t.nodes
        .iter()
        .skip(1)
        .map(|n| {
            (
                n.parent.unwrap(),
                n.method.to_string(),
                n.calls,
                n.bytecodes,
            )
        })
        .collect()
}

fn n(parent: usize, m: &str, calls: u64, bytecodes: u64) -> (usize, String, u64, u64) {
    (parent, m.to_string(), calls, bytecodes)
}

const MAIN: &str = "app.Main.main([Ljava/lang/String;)V";
const F: &str = "app.Main.f()V";
const G: &str = "app.Main.g(I)V";
const H: &str = "app.Util.h()V";

/// Thread 1: main → f → g, main → h, fully sent (RESYNC, one record).
fn base_thread(s: &mut JvmStore) {
    feed(
        s,
        &resync_rec(
            1,
            "main",
            &[
                def(1, 0, 0, 1, 10),
                def(2, 1, 1, 2, 20),
                def(3, 2, 2, 3, 30),
                def(4, 1, 3, 4, 40),
            ],
        ),
    );
}

#[test]
fn a_full_send_then_deltas_give_the_exact_tree() {
    let mut s = started(1);
    base_thread(&mut s);
    feed(
        &mut s,
        &tree_rec(
            GEN,
            1,
            1,
            0,
            "",
            &[upd(3, 1, 5), def(5, 3, 3, 7, 70), upd(1, 0, 1)],
        ),
    );
    assert_eq!(
        nodes(&s),
        vec![
            n(0, MAIN, 1, 11),
            n(1, F, 2, 20),
            n(2, G, 4, 35),
            n(1, H, 4, 40),
            n(3, H, 7, 70),
        ]
    );
    let sum = s.summary(PID).unwrap();
    assert!(sum.complete, "{}", sum.incomplete_reason);
    assert_eq!(sum.incomplete_reason, "");
    assert_eq!((sum.calls, sum.bytecodes), (18, 176));
    assert_eq!(sum.nodes, 5);
    assert_eq!(sum.methods, 4);
    assert_eq!(sum.main, "app.Main");
    assert_eq!(sum.jdk_version, "17.0.9+9");
    assert_eq!(sum.bba, "precise");
    assert_eq!(sum.ns_pid, Some(1));
    assert_eq!((sum.threads_live, sum.threads_total), (1, 1));
    assert_eq!(sum.records, 4);
    assert_eq!((sum.records_lost, sum.records_malformed), (0, 0));
    let m = s.mct(PID).unwrap();
    assert_eq!(m.nodes[1].file.as_deref(), Some("app/Main.java"));
    assert_eq!(m.nodes[4].file, None);
    assert!(s.take_resync_requests().is_empty());
}

#[test]
fn threads_merge_by_calling_context_and_keep_their_own_trees() {
    let mut s = started(2);
    base_thread(&mut s);
    // Thread 2 numbers its nodes differently and shares main → f.
    feed(
        &mut s,
        &resync_rec(
            2,
            "worker",
            &[def(9, 0, 0, 1, 1), def(3, 9, 1, 5, 5), def(4, 3, 3, 6, 6)],
        ),
    );
    assert_eq!(
        nodes(&s),
        vec![
            n(0, MAIN, 2, 11),
            n(1, F, 7, 25),
            n(2, G, 3, 30),
            n(1, H, 4, 40),
            n(2, H, 6, 6),
        ]
    );
    let trees = s.thread_trees(PID).unwrap();
    assert_eq!(trees.len(), 2);
    assert_eq!((trees[0].thread_id, trees[0].name.as_str()), (1, "main"));
    assert_eq!((trees[1].thread_id, trees[1].name.as_str()), (2, "worker"));
    let flat = |t: &Mct| -> Vec<(usize, String, u64, u64)> {
        t.nodes
            .iter()
            .skip(1)
            .map(|x| {
                (
                    x.parent.unwrap(),
                    x.method.to_string(),
                    x.calls,
                    x.bytecodes,
                )
            })
            .collect()
    };
    assert_eq!(
        flat(&trees[1].mct),
        vec![n(0, MAIN, 1, 1), n(1, F, 5, 5), n(2, H, 6, 6)]
    );
    assert_eq!(
        flat(&trees[0].mct),
        vec![
            n(0, MAIN, 1, 10),
            n(1, F, 2, 20),
            n(2, G, 3, 30),
            n(1, H, 4, 40)
        ]
    );
    assert!(s.summary(PID).unwrap().complete);
}

#[test]
fn a_resync_after_deltas_replaces_the_threads_contribution_exactly() {
    let mut s = started(2);
    base_thread(&mut s);
    // Thread 2 shares main.
    feed(&mut s, &resync_rec(2, "w", &[def(1, 0, 0, 100, 1000)]));
    feed(
        &mut s,
        &tree_rec(GEN, 1, 1, 0, "", &[upd(2, 1, 1), upd(3, 1, 1)]),
    );
    // jpd asks again (e.g. a restart of the collector): thread 1 re-sends its totals with
    // new node ids, over two records. The first names main and f only.
    s.generation_written(PID, GEN + 1);
    feed(&mut s, &hello_rec(GEN + 1, 2, 1));
    feed(
        &mut s,
        &tree_rec(
            GEN + 1,
            1,
            0,
            FLAG_RESYNC | FLAG_ABSOLUTE,
            "main",
            &[def(10, 0, 0, 1, 12), def(11, 10, 1, 3, 21)],
        ),
    );
    // Mid-way: main and f hold the new totals, g and h still the old contribution; the
    // tree never dips below what was known.
    assert_eq!(
        nodes(&s),
        vec![
            n(0, MAIN, 101, 1012),
            n(1, F, 3, 21),
            n(2, G, 4, 31),
            n(1, H, 4, 40),
        ]
    );
    feed(
        &mut s,
        &tree_rec(
            GEN + 1,
            1,
            1,
            FLAG_ABSOLUTE,
            "",
            &[def(12, 11, 2, 4, 33), def(13, 10, 3, 4, 40), upd(10, 2, 13)],
        ),
    );
    assert_eq!(
        nodes(&s),
        vec![
            n(0, MAIN, 102, 1013),
            n(1, F, 3, 21),
            n(2, G, 4, 33),
            n(1, H, 4, 40),
        ]
    );
    // Back to deltas, on the new ids.
    feed(&mut s, &tree_rec(GEN + 1, 1, 2, 0, "", &[upd(12, 1, 1)]));
    assert_eq!(nodes(&s)[2], n(2, G, 5, 34));
    let sum = s.summary(PID).unwrap();
    assert!(sum.complete, "{}", sum.incomplete_reason);
    assert_eq!(sum.records_lost, 0);
}

#[test]
fn old_nodes_a_resync_does_not_name_are_removed_when_it_ends() {
    let mut s = started(1);
    base_thread(&mut s);
    // A (hostile or buggy) re-send that only names main: when deltas resume, f, g and h
    // lose what thread 1 contributed (their nodes stay, at zero).
    feed(&mut s, &resync_rec(1, "", &[def(1, 0, 0, 5, 50)]));
    assert_eq!(nodes(&s)[1], n(1, F, 2, 20));
    feed(&mut s, &tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1)]));
    assert_eq!(
        nodes(&s),
        vec![
            n(0, MAIN, 6, 51),
            n(1, F, 0, 0),
            n(2, G, 0, 0),
            n(1, H, 0, 0),
        ]
    );
}

#[test]
fn a_gap_breaks_the_stream_asks_once_and_recovers_with_a_resync() {
    let mut s = started(1);
    base_thread(&mut s);
    feed(&mut s, &tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1)]));
    // seq 2 and 3 lost.
    feed(&mut s, &tree_rec(GEN, 1, 4, 0, "", &[upd(1, 1, 1)]));
    feed(&mut s, &tree_rec(GEN, 1, 5, 0, "", &[upd(1, 1, 1)]));
    feed(&mut s, &tree_rec(GEN, 1, 6, 0, "", &[upd(1, 1, 1)]));
    assert_eq!(s.take_resync_requests(), vec![PID]);
    assert!(s.take_resync_requests().is_empty(), "once per incident");
    let sum = s.summary(PID).unwrap();
    assert!(!sum.complete);
    assert_eq!(sum.incomplete_reason, "1 threads waiting for a re-send");
    // 2 missing + 2 dropped while broken.
    assert_eq!(sum.records_lost, 4);
    assert_eq!(s.stats().gaps, 1);
    assert_eq!(
        nodes(&s)[0],
        n(0, MAIN, 2, 11),
        "deltas after the gap dropped"
    );
    // The collector writes a new generation; the HELLO and the thread's re-send arrive.
    s.generation_written(PID, GEN + 1);
    let sum = s.summary(PID).unwrap();
    assert_eq!(
        sum.incomplete_reason,
        "waiting for the re-send of the latest generation; 1 threads waiting for a re-send"
    );
    // A delta still built with the old generation: the sender has not seen the new one
    // yet and will re-send by itself, so no new request.
    feed(&mut s, &tree_rec(GEN, 1, 7, 0, "", &[upd(1, 1, 1)]));
    assert!(s.take_resync_requests().is_empty());
    feed(&mut s, &hello_rec(GEN + 1, 1, 1));
    feed(
        &mut s,
        &tree_rec(
            GEN + 1,
            1,
            0,
            FLAG_RESYNC | FLAG_ABSOLUTE,
            "",
            &[
                def(1, 0, 0, 9, 19),
                def(2, 1, 1, 2, 20),
                def(3, 2, 2, 3, 30),
                def(4, 1, 3, 4, 40),
            ],
        ),
    );
    let sum = s.summary(PID).unwrap();
    assert!(sum.complete, "{}", sum.incomplete_reason);
    assert_eq!(nodes(&s)[0], n(0, MAIN, 9, 19));
    // A later gap with the current generation asks again.
    feed(&mut s, &tree_rec(GEN + 1, 1, 3, 0, "", &[upd(1, 1, 1)]));
    assert_eq!(s.take_resync_requests(), vec![PID]);
}

#[test]
fn no_request_before_jpd_wrote_a_generation() {
    // The collector found the process and is about to write its first generation: the
    // re-send it asks for answers this stream too.
    let mut s = JvmStore::new(JvmLimits::default());
    s.process_found(PID, ProcessInfo::default(), t0());
    feed(&mut s, &tree_rec(0, 3, 41, 0, "", &[upd(1, 1, 1)]));
    assert!(s.take_resync_requests().is_empty());
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.records_lost, 1);
    assert!(!sum.complete);
}

#[test]
fn a_stream_first_seen_mid_way_is_not_synced() {
    // jpd attached late: the first record of thread 3 is a delta.
    let mut s = started(1);
    feed(&mut s, &tree_rec(GEN, 3, 41, 0, "", &[upd(1, 1, 1)]));
    assert_eq!(s.take_resync_requests(), vec![PID]);
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.records_lost, 1);
    assert_eq!(sum.nodes, 0);
    assert!(!sum.complete);
}

#[test]
fn a_malformed_record_changes_nothing_and_is_counted_by_reason() {
    let mut s = started(1);
    base_thread(&mut s);
    let before = nodes(&s);
    // Valid entries first, then one for a node never defined: nothing of it applies.
    feed(
        &mut s,
        &tree_rec(
            GEN,
            1,
            1,
            0,
            "",
            &[upd(1, 5, 5), def(6, 1, 2, 1, 1), upd(99, 1, 1)],
        ),
    );
    assert_eq!(nodes(&s), before);
    // A definition under an unknown parent.
    let mut s2 = started(1);
    base_thread(&mut s2);
    feed(&mut s2, &tree_rec(GEN, 1, 1, 0, "", &[def(6, 50, 2, 1, 1)]));
    assert_eq!(nodes(&s2), before);
    // Node 2 defined again as another method.
    let mut s3 = started(1);
    base_thread(&mut s3);
    feed(
        &mut s3,
        &tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1), def(2, 1, 3, 1, 1)]),
    );
    assert_eq!(nodes(&s3), before);
    // The same node defined twice within one re-send.
    let mut s4 = started(1);
    feed(
        &mut s4,
        &resync_rec(1, "", &[def(1, 0, 0, 1, 1), def(1, 0, 1, 1, 1)]),
    );
    assert_eq!(nodes(&s4), vec![]);
    // Cut short: the entry count says 2, one is there.
    let mut s5 = started(1);
    base_thread(&mut s5);
    let mut rec = tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1)]);
    let count_at = wire::HEADER_LEN + 1;
    rec[count_at] = 2;
    feed(&mut s5, &rec);
    assert_eq!(nodes(&s5), before);

    let st = s.stats();
    assert_eq!(st.malformed.get(Malformed::UnknownNode), 1);
    assert_eq!(s2.stats().malformed.get(Malformed::UnknownParent), 1);
    assert_eq!(s3.stats().malformed.get(Malformed::Redefined), 1);
    assert_eq!(s4.stats().malformed.get(Malformed::Redefined), 1);
    assert_eq!(
        s5.stats().malformed.get(Malformed::Wire(WireError::Varint)),
        1
    );
    assert_eq!(st.malformed.by_reason(), vec![("unknown node", 1)]);
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.records_malformed, 1);
    // The stream lost that record: broken until re-sent.
    assert!(!sum.complete);
    assert_eq!(s.take_resync_requests(), vec![PID]);
}

#[test]
fn bad_headers_are_counted_and_never_create_a_jvm() {
    let mut s = JvmStore::new(JvmLimits::default());
    let good = resync_rec(1, "", &[def(1, 0, 0, 1, 1)]);
    let mut bad_magic = good.clone();
    bad_magic[0] ^= 0xff;
    let mut bad_version = good.clone();
    bad_version[4] = 9;
    let mut bad_kind = good.clone();
    bad_kind[6] = 99;
    let mut on_stream0 = good.clone();
    on_stream0[24..32].copy_from_slice(&0u64.to_le_bytes());
    for r in [&bad_magic, &bad_version, &bad_kind, &on_stream0] {
        s.ingest(&ev(5, r), r, t0());
    }
    s.ingest(&ev(5, &good[..10]), &good[..10], t0());
    // The event says more bytes than were handed over.
    let mut e = ev(5, &good);
    e.len += 1;
    s.ingest(&e, &good, t0());
    let st = s.stats();
    assert_eq!(
        st.malformed.by_reason(),
        vec![
            ("truncated", 1),
            ("bad magic", 1),
            ("unknown version", 1),
            ("unknown record kind", 1),
            ("kind not allowed on stream", 1),
            ("event length differs", 1),
        ]
    );
    assert_eq!(st.records, 0);
    assert!(s.list().is_empty());
    // Trailing ring-buffer padding after the record is ignored.
    let mut padded = good.clone();
    padded.extend_from_slice(&[0xAA; 8]);
    s.ingest(&ev(5, &good), &padded, t0());
    assert_eq!(s.stats().records, 1);
    // An unknown tgid's valid record creates an entry with unknown process info.
    let sum = s.summary(5).unwrap();
    assert_eq!((sum.nodes, sum.cmdline.as_str()), (1, ""));
    assert!(!sum.complete);
    assert!(sum.incomplete_reason.starts_with("no HELLO yet"));
}

#[test]
fn events_without_a_record_count_and_leave_silent_streams_suspect() {
    let mut s = started(1);
    base_thread(&mut s);
    let e = EventHeader {
        tgid: PID,
        tid: PID,
        ktime_ns: 0,
        len: 20000,
        status: wire::EVENT_TOO_LONG,
    };
    s.ingest(&e, &[], t0());
    s.ingest(
        &EventHeader {
            status: wire::EVENT_FAULT,
            ..e
        },
        &[],
        t0(),
    );
    let st = s.stats();
    assert_eq!((st.too_long_events, st.fault_events), (1, 1));
    assert_eq!(s.take_resync_requests(), vec![PID]);
    let sum = s.summary(PID).unwrap();
    assert_eq!(
        sum.incomplete_reason,
        "a record was lost (reading the record faulted); 2 streams have not sent since"
    );
    // Both streams send again without a gap: the lost record was none of theirs... but
    // the JVM stream has nothing to send; a new HELLO (asked for) settles it.
    feed(&mut s, &tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1)]));
    assert_eq!(
        s.summary(PID).unwrap().incomplete_reason,
        "a record was lost (reading the record faulted); 1 streams have not sent since"
    );
    s.generation_written(PID, GEN + 1);
    feed(&mut s, &hello_rec(GEN + 1, 1, 1));
    let sum = s.summary(PID).unwrap();
    assert!(sum.complete, "{}", sum.incomplete_reason);
}

#[test]
fn ring_buffer_overflow_marks_running_jvms() {
    let mut s = started(1);
    base_thread(&mut s);
    s.set_kernel_counters(UsdtKernelCounters {
        fired: 10,
        sent: 9,
        ring_full: 1,
        fault: 0,
        too_long: 0,
    });
    assert_eq!(s.stats().kernel.ring_full, 1);
    assert_eq!(s.take_resync_requests(), vec![PID]);
    assert!(!s.summary(PID).unwrap().complete);
    // Unchanged counters: no new incident.
    s.set_kernel_counters(s.stats().kernel);
    assert!(s.take_resync_requests().is_empty());
}

#[test]
fn thread_end_keeps_counts_and_later_records_are_rejected() {
    let mut s = started(1);
    base_thread(&mut s);
    feed(&mut s, &tree_rec(GEN, 1, 1, FLAG_END, "", &[upd(4, 1, 1)]));
    let sum = s.summary(PID).unwrap();
    assert_eq!((sum.threads_live, sum.threads_total), (0, 1));
    assert!(sum.complete, "{}", sum.incomplete_reason);
    assert_eq!(nodes(&s)[3], n(1, H, 5, 41));
    assert!(s.thread_trees(PID).unwrap().is_empty());
    assert_eq!(s.stats().thread_nodes, 0, "the ended thread's map is freed");
    feed(&mut s, &tree_rec(GEN, 1, 2, 0, "", &[upd(4, 1, 1)]));
    assert_eq!(s.stats().malformed.get(Malformed::AfterEnd), 1);
    assert_eq!(nodes(&s)[3], n(1, H, 5, 41));
    // VM death.
    let mut buf = [0u8; 64];
    let h = wire::header(wire::KIND_JVM_END, 7, GEN, 0, 2, FLAG_END);
    let end = Writer::new(&mut buf, &h).unwrap().finish().to_vec();
    feed(&mut s, &end);
    s.process_gone(PID, t0() + Duration::from_secs(1));
    let sum = s.summary(PID).unwrap();
    assert!(sum.finished && sum.complete, "{}", sum.incomplete_reason);
    assert_eq!(sum.exited_at, Some(t0() + Duration::from_secs(1)));
    // Retention.
    s.expire(t0() + Duration::from_secs(3000));
    assert!(s.summary(PID).is_some());
    s.expire(t0() + Duration::from_secs(3602));
    assert!(s.summary(PID).is_none());
}

#[test]
fn a_thread_ending_after_a_loss_leaves_the_jvm_incomplete() {
    let mut s = started(1);
    base_thread(&mut s);
    feed(&mut s, &tree_rec(GEN, 1, 3, FLAG_END, "", &[upd(4, 1, 1)]));
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.threads_live, 0);
    assert_eq!(sum.records_lost, 2);
    assert_eq!(sum.incomplete_reason, "1 threads ended with records lost");
}

#[test]
fn entries_the_collector_never_found_expire_when_silent() {
    let mut s = JvmStore::new(JvmLimits::default());
    let h = hello_rec(1, 0, 1);
    s.ingest(&ev(7, &h), &h, t0());
    s.process_found(8, ProcessInfo::default(), t0());
    s.expire(t0() + Duration::from_secs(3599));
    assert!(s.summary(7).is_some());
    s.expire(t0() + Duration::from_secs(3601));
    assert!(s.summary(7).is_none());
    assert!(
        s.summary(8).is_some(),
        "a found process lives until it is gone"
    );
}

#[test]
fn a_killed_jvm_is_incomplete() {
    let mut s = started(1);
    base_thread(&mut s);
    s.process_gone(PID, t0());
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.incomplete_reason, "process exited without JVM_END");
    assert_eq!(nodes(&s).len(), 4, "data kept");
}

#[test]
fn idle_threads_are_reported_as_unknown() {
    let mut s = started(3);
    base_thread(&mut s);
    assert_eq!(
        s.summary(PID).unwrap().incomplete_reason,
        "2 threads not yet reported"
    );
}

#[test]
fn generation_and_hello() {
    let mut s = JvmStore::new(JvmLimits::default());
    let g0 = s.generation();
    s.generation_written(PID, 1);
    feed(&mut s, &hello_rec(5, 0, 1));
    assert!(s.generation() > g0);
    let j0 = s.jvm_generation(PID).unwrap();
    // Written 1, but the HELLO is of generation 5: an old one.
    s.generation_written(PID, 1);
    let sum = s.summary(PID).unwrap();
    assert_eq!(
        sum.incomplete_reason,
        "waiting for the re-send of the latest generation"
    );
    feed(&mut s, &hello_rec(1, 0, 1));
    assert!(s.summary(PID).unwrap().complete);
    assert!(s.jvm_generation(PID).unwrap() > j0);
    assert_eq!(s.jvm_generation(9), None);
}

#[test]
fn a_new_vm_in_the_same_process_starts_over() {
    let mut s = started(1);
    base_thread(&mut s);
    feed(&mut s, &hello_rec(GEN, 1, 2));
    let sum = s.summary(PID).unwrap();
    assert_eq!((sum.nodes, sum.methods, sum.threads_total), (0, 0, 0));
    assert_eq!(sum.cmdline, "java -jar app.jar");
}

#[test]
fn a_reused_pid_replaces_the_old_process() {
    let mut s = started(1);
    base_thread(&mut s);
    s.process_gone(PID, t0());
    let info = ProcessInfo {
        start_time_ticks: 6,
        ..ProcessInfo::default()
    };
    s.process_found(PID, info.clone(), t0());
    let sum = s.summary(PID).unwrap();
    assert_eq!((sum.nodes, sum.exited_at), (0, None));
    // Found again with the same start time: only the info is updated.
    feed(&mut s, &hello_rec(GEN, 0, 1));
    s.process_found(PID, info, t0());
    assert!(!s.summary(PID).unwrap().jdk_version.is_empty());
}

#[test]
fn records_of_another_process_never_touch_this_one() {
    let mut s = started(1);
    base_thread(&mut s);
    let before = nodes(&s);
    // Same stream, other tgid: a delta it never synced, garbage, and a full tree.
    let other = PID + 1;
    let r = tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1000, 1000)]);
    s.ingest(&ev(other, &r), &r, t0());
    let r = resync_rec(1, "x", &[def(1, 0, 0, 1, 1)]);
    s.ingest(&ev(other, &r), &r, t0());
    s.ingest(&ev(other, &[1, 2, 3]), &[1, 2, 3], t0());
    assert_eq!(nodes(&s), before);
    assert!(s.summary(PID).unwrap().complete);
    assert_eq!(s.summary(other).unwrap().nodes, 1);
}

#[test]
fn absolute_counts_outside_a_resync_are_malformed() {
    let mut s = started(1);
    base_thread(&mut s);
    feed(&mut s, &tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1)]));
    feed(
        &mut s,
        &tree_rec(GEN, 1, 2, FLAG_ABSOLUTE, "", &[upd(1, 100, 100)]),
    );
    assert_eq!(s.stats().malformed.get(Malformed::AbsoluteOutsideResync), 1);
    assert_eq!(nodes(&s)[0], n(0, MAIN, 2, 11));
}

#[test]
fn counters_are_64_bit_and_wrap_exactly_through_a_resync() {
    let mut s = started(1);
    feed(
        &mut s,
        &resync_rec(1, "", &[def(1, 0, 0, u64::MAX - 1, 1 << 40)]),
    );
    feed(&mut s, &tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1 << 40)]));
    assert_eq!(nodes(&s)[0], n(0, MAIN, u64::MAX, 2 << 40));
    feed(&mut s, &resync_rec(1, "", &[def(5, 0, 0, 3, 4)]));
    assert_eq!(nodes(&s)[0], n(0, MAIN, 3, 4));
}

// --- limits ------------------------------------------------------------------

fn limited(l: JvmLimits) -> JvmStore {
    let mut s = JvmStore::new(l);
    s.generation_written(PID, GEN);
    feed(&mut s, &hello_rec(GEN, 0, 1));
    s
}

#[test]
fn the_node_limit_drops_nodes_and_says_so() {
    let mut s = limited(JvmLimits {
        max_nodes_per_jvm: 2,
        ..JvmLimits::default()
    });
    feed(
        &mut s,
        &resync_rec(
            1,
            "",
            &[
                def(1, 0, 0, 1, 1),
                def(2, 1, 1, 1, 1),
                def(3, 1, 2, 1, 1),
                def(4, 3, 2, 1, 1),
            ],
        ),
    );
    // Node 3 has no room, node 4 is below it.
    feed(
        &mut s,
        &tree_rec(GEN, 1, 1, 0, "", &[upd(3, 1, 1), upd(2, 1, 1)]),
    );
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.nodes, 2);
    assert_eq!(sum.limit_drops, 3);
    assert_eq!(sum.calls, 3);
    assert_eq!(
        sum.incomplete_reason,
        "limit max_nodes_per_jvm = 2 reached, data dropped"
    );
    assert!(
        s.take_resync_requests().is_empty(),
        "a re-send would not help"
    );
}

#[test]
fn a_huge_node_id_hits_the_thread_node_limit_without_allocating() {
    let mut s = limited(JvmLimits {
        max_thread_nodes_per_jvm: 1000,
        ..JvmLimits::default()
    });
    let big = (wire::MAX_NODE_ID - 1) as u32;
    feed(
        &mut s,
        &resync_rec(1, "", &[def(1, 0, 0, 1, 1), def(big, 1, 1, 1, 1)]),
    );
    let st = s.stats();
    assert_eq!(st.thread_nodes, 0);
    assert!(st.memory_bytes < 100_000, "{}", st.memory_bytes);
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.nodes, 0, "the whole record is dropped");
    assert_eq!(
        sum.incomplete_reason,
        "1 threads waiting for a re-send; limit max_thread_nodes_per_jvm = 1000 reached, data dropped"
    );
    // Its deltas are dropped as limit drops, without asking for a re-send.
    feed(&mut s, &tree_rec(GEN, 1, 1, 0, "", &[upd(1, 1, 1)]));
    assert_eq!(s.summary(PID).unwrap().limit_drops, 2);
    assert!(s.take_resync_requests().is_empty());
}

#[test]
fn thread_method_and_string_limits() {
    let mut s = limited(JvmLimits {
        max_threads_per_jvm: 1,
        max_methods_per_jvm: 2,
        max_string_bytes_per_jvm: 200,
        ..JvmLimits::default()
    });
    feed(&mut s, &resync_rec(1, "a", &[def(1, 0, 0, 1, 1)]));
    feed(&mut s, &resync_rec(2, "b", &[def(1, 0, 0, 1, 1)]));
    feed(&mut s, &methods_rec(GEN, 1, METHODS));
    let sum = s.summary(PID).unwrap();
    assert_eq!(sum.threads_live, 1);
    assert_eq!(sum.methods, 2);
    assert_eq!(sum.calls, 1);
    assert_eq!(
        sum.incomplete_reason,
        "limit max_threads_per_jvm = 1 reached, data dropped; \
         limit max_methods_per_jvm = 2 reached, data dropped"
    );
    let long = "x".repeat(300);
    feed(&mut s, &methods_rec(GEN, 2, &[(0, &long, "f", "()V", "")]));
    assert!(s
        .summary(PID)
        .unwrap()
        .incomplete_reason
        .contains("max_string_bytes_per_jvm = 200"));
}

#[test]
fn the_jvm_limit_evicts_exited_jvms_first() {
    let mut s = JvmStore::new(JvmLimits {
        max_jvms: 2,
        ..JvmLimits::default()
    });
    let h = hello_rec(1, 0, 1);
    for tgid in [1, 2] {
        s.ingest(&ev(tgid, &h), &h, t0());
    }
    s.ingest(&ev(3, &h), &h, t0());
    assert!(s.summary(3).is_none());
    assert_eq!(s.stats().jvm_limit_drops, 1);
    s.process_gone(1, t0());
    s.ingest(&ev(3, &h), &h, t0());
    assert!(s.summary(3).is_some() && s.summary(1).is_none());
}

// --- queries -----------------------------------------------------------------

#[test]
fn json_export_is_byte_identical_to_the_agents_file() {
    // The paper's example, as the agent's FileProfiler flattens it (pre-order, its
    // child order) and as jpd receives it from two threads in another order.
    let mut s = JvmStore::new(JvmLimits::default());
    s.generation_written(PID, GEN);
    feed(&mut s, &hello_rec(GEN, 0, 1));
    let ms: &[M<'_>] = &[
        (0, "Paper", "main", "([Ljava/lang/String;)V", "Paper.java"),
        (1, "Paper", "f", "()V", "Paper.java"),
        (2, "Paper", "<init>", "()V", "Paper.java"),
        (3, "Paper", "g", "(I)V", "Paper.java"),
        (4, "Paper", "h", "()V", "Paper.java"),
    ];
    feed(&mut s, &methods_rec(GEN, 1, ms));
    feed(
        &mut s,
        &resync_rec(
            1,
            "main",
            &[def(1, 0, 0, 1, 5), def(2, 1, 2, 1, 3), def(3, 1, 1, 1, 100)],
        ),
    );
    feed(
        &mut s,
        &tree_rec(
            GEN,
            1,
            1,
            0,
            "",
            &[upd(3, 0, 6), def(4, 3, 4, 10, 10), def(5, 3, 3, 10, 445)],
        ),
    );
    feed(&mut s, &resync_rec(2, "t", &[def(7, 0, 0, 0, 0)]));
    feed(
        &mut s,
        &tree_rec(
            GEN,
            2,
            1,
            0,
            "",
            &[def(8, 7, 1, 0, 0), def(9, 8, 3, 0, 0), def(6, 9, 4, 55, 55)],
        ),
    );
    let agent = Mct::from_flat(
        "precise",
        &[-1, 0, 1, 2, 3, 2, 1],
        &[-1, 0, 1, 3, 4, 4, 2],
        &[0, 1, 1, 10, 55, 10, 1],
        &[0, 5, 106, 445, 55, 10, 3],
        |id| {
            let (_, class, name, desc, _) = ms[id as usize];
            MethodInfo {
                name: format!("{class}.{name}{desc}").into(),
                file: Some("Paper.java".into()),
            }
        },
    )
    .unwrap();
    let json = |t: &Mct| {
        let mut v = Vec::new();
        jp_mct::write_json(t, &mut v).unwrap();
        v
    };
    let ours = json(&s.mct(PID).unwrap());
    assert_eq!(
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&json(&agent))
    );
    let expected = concat!(
        "{\"format\": \"jp-mct/1\", \"bba\": \"precise\", \"root\": {\"children\": [\n",
        "{\"method\": \"Paper.main([Ljava/lang/String;)V\", \"calls\": 1, \"bytecodes\": 5, \"children\": [\n",
        "{\"method\": \"Paper.<init>()V\", \"calls\": 1, \"bytecodes\": 3, \"children\": []},\n",
        "{\"method\": \"Paper.f()V\", \"calls\": 1, \"bytecodes\": 106, \"children\": [\n",
        "{\"method\": \"Paper.g(I)V\", \"calls\": 10, \"bytecodes\": 445, \"children\": [\n",
        "{\"method\": \"Paper.h()V\", \"calls\": 55, \"bytecodes\": 55, \"children\": []}\n",
        "]},\n",
        "{\"method\": \"Paper.h()V\", \"calls\": 10, \"bytecodes\": 10, \"children\": []}\n",
        "]}\n",
        "]}\n",
        "]}}\n",
    );
    assert_eq!(String::from_utf8(ours).unwrap(), expected);
}

#[test]
fn unknown_methods_are_named_by_id() {
    let mut s = limited(JvmLimits::default());
    feed(&mut s, &resync_rec(1, "", &[def(1, 0, 42, 1, 1)]));
    assert_eq!(nodes(&s), vec![n(0, "?42", 1, 1)]);
}

#[test]
fn top_methods_count_recursion_once() {
    // main(1,10) → f(2,20) → f(3,30) → g(4,40); main → g(5,50)
    let mut s = started(1);
    feed(
        &mut s,
        &resync_rec(
            1,
            "",
            &[
                def(1, 0, 0, 1, 10),
                def(2, 1, 1, 2, 20),
                def(3, 2, 1, 3, 30),
                def(4, 3, 2, 4, 40),
                def(5, 1, 2, 5, 50),
            ],
        ),
    );
    let top = s.top_methods(PID).unwrap();
    let got: Vec<(&str, u64, u64, u64)> = top
        .iter()
        .map(|m| {
            (
                &*m.name,
                m.calls,
                m.exclusive_bytecodes,
                m.inclusive_bytecodes,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![(G, 9, 90, 90), (F, 5, 50, 90), (MAIN, 1, 10, 150),]
    );
    assert_eq!(top[1].file.as_deref(), Some("app/Main.java"));
    assert_eq!(top[1].mid, 1);
}

#[test]
fn stats_sum_over_jvms() {
    let mut s = started(1);
    base_thread(&mut s);
    let st = s.stats();
    assert_eq!((st.jvms_running, st.jvms_exited), (1, 0));
    assert_eq!(st.nodes, 4);
    assert_eq!(st.thread_nodes, 5);
    assert_eq!(st.records, 3);
    assert_eq!(st.events, 3);
    assert!(st.memory_bytes > 0);
    assert_eq!(st.lost, 0);
}

#[test]
fn exits_change_the_jvm_and_requests_queue_once_per_jvm() {
    let mut s = started(1);
    base_thread(&mut s);
    let g = s.jvm_generation(PID).unwrap();
    s.process_gone(PID, t0());
    assert!(s.jvm_generation(PID).unwrap() > g);
    // Two incidents far apart, nobody took the first request: still one entry.
    let mut s = started(1);
    base_thread(&mut s);
    let gap = tree_rec(GEN, 1, 5, 0, "", &[upd(1, 1, 1)]);
    s.ingest(&ev(PID, &gap), &gap, t0());
    let later = t0() + Duration::from_secs(60);
    s.ingest(&ev(PID, &gap), &gap, later);
    assert_eq!(s.stats().resync_requests, 1);
    assert_eq!(s.take_resync_requests(), vec![PID]);
    // Taken and still unanswered after the retry time: asked again.
    s.ingest(&ev(PID, &gap), &gap, later + Duration::from_secs(6));
    assert_eq!(s.take_resync_requests(), vec![PID]);
}

#[test]
fn the_ended_threads_snapshot_replaces_the_ended_threads_own_contributions() {
    // Thread 1 runs and ends while jpd listens; thread 2 lives on. Then jpd asks for a
    // re-send (new generation): the agent sends HELLO, its snapshot of every ended thread
    // (which includes thread 1) and thread 2's whole tree. Thread 1 must count once.
    let mut s = started(2);
    base_thread(&mut s);
    feed(&mut s, &tree_rec(GEN, 1, 1, FLAG_END, "", &[upd(3, 1, 5)]));
    let two = [def(1, 0, 0, 1, 100), def(2, 1, 2, 5, 50)];
    feed(&mut s, &resync_rec(2, "t2", &two));
    let before = nodes(&s);
    assert_eq!(
        before,
        vec![
            n(0, MAIN, 2, 110),
            n(1, F, 2, 20),
            n(2, G, 4, 35),
            n(1, H, 4, 40),
            n(1, G, 5, 50),
        ]
    );

    const GEN2: u64 = GEN + 1;
    s.generation_written(PID, GEN2);
    feed(&mut s, &hello_rec(GEN2, 1, 1));
    feed(&mut s, &methods_rec(GEN2, 1, METHODS));
    // The snapshot holds thread 1's final totals, in its own ids.
    let ended = [
        def(7, 0, 0, 1, 10),
        def(8, 7, 1, 2, 20),
        def(9, 8, 2, 4, 35),
        def(10, 7, 3, 4, 40),
    ];
    feed(
        &mut s,
        &tree_rec(
            GEN2,
            wire::STREAM_ENDED,
            0,
            FLAG_RESYNC | FLAG_ABSOLUTE,
            "",
            &ended,
        ),
    );
    feed(
        &mut s,
        &tree_rec(GEN2, 2, 0, FLAG_RESYNC | FLAG_ABSOLUTE, "", &two),
    );
    assert_eq!(nodes(&s), before, "thread 1 counted once, thread 2 once");
    let sum = s.summary(PID).unwrap();
    assert_eq!((sum.threads_live, sum.threads_total), (1, 2));
    assert!(sum.complete, "{}", sum.incomplete_reason);

    // A third generation (say jpd lost records): the snapshot comes again, unchanged.
    const GEN3: u64 = GEN + 2;
    s.generation_written(PID, GEN3);
    feed(&mut s, &hello_rec(GEN3, 1, 1));
    feed(&mut s, &methods_rec(GEN3, 1, METHODS));
    feed(
        &mut s,
        &tree_rec(
            GEN3,
            wire::STREAM_ENDED,
            0,
            FLAG_RESYNC | FLAG_ABSOLUTE,
            "",
            &ended,
        ),
    );
    assert_eq!(
        nodes(&s),
        before,
        "a repeated snapshot replaces the previous one"
    );
    assert_eq!(s.thread_trees(PID).map(|t| t.len()), Some(1));
}

#[test]
fn a_running_jvm_is_counted_by_the_sampler_with_or_without_announced_threads() {
    let before = JvmStore::new(JvmLimits::default()).context_threads_version();
    let mut s = started(1);
    base_thread(&mut s);
    // No thread announced a context slot: its CPU is still counted, by thread kind.
    assert!(s.context_threads().is_empty());
    assert_eq!(s.context_pids(), vec![PID]);
    let running = s.context_threads_version();
    assert_ne!(running, before, "a new JVM must reach the sampler");
    s.process_gone(PID, t0() + Duration::from_secs(1));
    assert!(s.context_pids().is_empty());
    assert_ne!(
        s.context_threads_version(),
        running,
        "an exit must reach the sampler"
    );
}

/// A `KIND_THREAD` announcement of stream 1 (`fields`: os tid, slot, then a heap
/// context's offsets and cookie, if any).
fn thread_rec(fields: &[u64]) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(wire::KIND_THREAD, PID, GEN, 1, 0, 0);
    let mut w = wire::Writer::new(&mut buf, &h).expect("header fits");
    for f in fields {
        w.varint(*f).expect("fits");
    }
    w.finish().to_vec()
}

#[test]
fn threads_announce_a_slot_or_a_heap_context_and_bad_ones_are_refused() {
    let refused = |s: &JvmStore| {
        s.stats()
            .malformed
            .by_reason()
            .into_iter()
            .find(|(r, _)| *r == "context slot refused")
            .map_or(0, |(_, n)| n)
    };
    let mut s = started(1);
    base_thread(&mut s);
    feed(&mut s, &thread_rec(&[77, 0x7f00_0000_1004]));
    let slot = s.context_threads();
    assert_eq!(slot.len(), 1);
    assert_eq!(
        (slot[0].1.os_tid, slot[0].1.slot, slot[0].1.heap),
        (77, 0x7f00_0000_1004, None)
    );
    feed(
        &mut s,
        &thread_rec(&[77, 0x7f00_0000_2008, 12, 16, 0xabcd_0001]),
    );
    let heap = s.context_threads();
    assert_eq!(
        heap[0].1.heap,
        Some(wire::HeapContext {
            current_offset: 12,
            cookie_offset: 16,
            cookie: 0xabcd_0001
        }),
        "the later announcement replaces the slot"
    );
    assert_eq!(refused(&s), 0);
    // A cell that is not a pointer's, offsets that are not ints' or that are the same
    // field, a current id at offset 0 (the object's header): refused, counted, and the
    // thread keeps what it announced before.
    for bad in [
        &[77, 0x7f00_0000_2004, 12, 16, 1][..],
        &[77, 0x7f00_0000_2008, 14, 16, 1],
        &[77, 0x7f00_0000_2008, 12, 18, 1],
        &[77, 0x7f00_0000_2008, 12, 12, 1],
        &[77, 0x7f00_0000_2008, 0, 16, 1],
    ] {
        feed(&mut s, &thread_rec(bad));
    }
    assert_eq!(refused(&s), 5);
    assert_eq!(s.context_threads(), heap);
}
