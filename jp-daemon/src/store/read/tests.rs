//! The read side's own rules: what a window over time counts, and what a reader gets
//! when the JVM is not (or no longer) there.

use std::collections::HashMap;
use std::sync::Mutex;

use super::*;
use crate::store::jvm::tests::{base_thread, ev, feed, started, tree_rec, upd, GEN, PID};
use crate::store::jvm::ContextMark;

/// (path, calls, bytecodes) of every node but the root, sorted.
fn rows(t: &Mct) -> Vec<(String, u64, u64)> {
    let mut out: Vec<(String, u64, u64)> = (1..t.nodes.len())
        .map(|i| {
            let mut path = vec![t.nodes[i].method.to_string()];
            let mut at = t.nodes[i].parent;
            while let Some(p) = at.filter(|&p| p != 0) {
                path.push(t.nodes[p].method.to_string());
                at = t.nodes[p].parent;
            }
            path.reverse();
            (path.join(">"), t.nodes[i].calls, t.nodes[i].bytecodes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn since_gives_growth_saturates_and_restarts() {
    let mut s = Since::<2>::default();
    assert_eq!(
        s.advance([5, 50]),
        [5, 50],
        "the first reading counts whole"
    );
    assert_eq!(s.advance([7, 50]), [2, 0]);
    assert_eq!(
        s.advance([6, 60]),
        [0, 10],
        "a counter that went back counts 0"
    );
    assert_eq!(
        s.advance([8, 60]),
        [2, 0],
        "and counts from its new reading on"
    );
    s.restart();
    assert_eq!(s.advance([3, 1]), [3, 1], "after a restart, whole again");
}

#[test]
fn a_kernel_window_counts_what_grew_since_it_opened() {
    let mut then = KernelCounts::default();
    then.modes.user = 10;
    then.buckets.insert(1, 4);
    then.buckets.insert(2, 9);
    let opened = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(100);
    let since = KernelSince::at(then.clone(), opened);
    let mut now = then;
    now.modes.user = 13;
    now.buckets.insert(1, 6);
    now.buckets.insert(3, 1);
    let (window, start) = since.window(&now);
    assert_eq!(start, opened);
    assert_eq!(window.modes.user, 3);
    assert_eq!(window.buckets.get(&1), Some(&2));
    assert_eq!(
        window.buckets.get(&2),
        None,
        "a key that did not grow is left out"
    );
    assert_eq!(window.buckets.get(&3), Some(&1));
}

#[test]
fn a_jvm_that_is_not_there_names_the_ones_held() {
    let mut store = started(1);
    base_thread(&mut store);
    let jvm = Mutex::new(store);
    assert_eq!(jvm.pids(), [PID]);
    assert!(jvm.snapshot(PID).is_ok());
    assert_eq!(jvm.snapshot(PID + 1).err(), Some(vec![PID]));
    let (summary, snapshot) = jvm.summary_and_snapshot(PID).unwrap();
    assert_eq!(summary.pid, PID);
    assert_eq!(snapshot.mct(), jvm.with_store(|s| s.mct(PID)).unwrap());
    assert_eq!(jvm.summary_and_snapshot(PID + 1).err(), Some(vec![PID]));
    let (list, stats) = jvm.list_and_stats();
    assert_eq!((list, stats), (jvm.list(), jvm.stats()));
}

#[test]
fn an_unchanged_jvm_is_not_read_again() {
    let mut store = started(1);
    base_thread(&mut store);
    let jvm = Mutex::new(store);
    let (seen, _) = jvm.snapshot_if_changed(PID, None).unwrap();
    assert!(jvm.snapshot_if_changed(PID, Some(seen)).is_none());
    feed(
        &mut lock(&jvm),
        &tree_rec(GEN, 1, 1, 0, "", &[upd(3, 1, 5)]),
    );
    let (changed, _) = jvm.snapshot_if_changed(PID, Some(seen)).unwrap();
    assert_ne!(changed, seen);
    assert!(jvm.snapshot_if_changed(PID + 1, None).is_none());
}

#[test]
fn a_trees_window_is_its_growth_per_context() {
    let mut store = started(1);
    base_thread(&mut store);
    let jvm = Mutex::new(store);
    let before = jvm.snapshot(PID).unwrap();
    feed(
        &mut lock(&jvm),
        &tree_rec(GEN, 1, 1, 0, "", &[upd(3, 1, 5), upd(1, 0, 2)]),
    );
    let after = jvm.snapshot(PID).unwrap();
    let (window, cpu) = tree_since(Some(&before.mct()), before.cpu(), &after, None);
    assert!(cpu.is_none(), "the sampler is not joined");
    let main = "app.Main.main([Ljava/lang/String;)V";
    let f = "app.Main.f()V";
    let g = "app.Main.g(I)V";
    let h = "app.Util.h()V";
    assert_eq!(
        rows(&window),
        [
            (main.to_string(), 0, 2),
            (format!("{main}>{f}"), 0, 0),
            (format!("{main}>{f}>{g}"), 1, 5),
            (format!("{main}>{h}"), 0, 0),
        ]
    );
    // Without a reading before, the window is the whole tree.
    let (whole, _) = tree_since(None, None, &after, None);
    assert_eq!(rows(&whole), rows(&after.mct()));
}

#[test]
fn the_join_reads_the_announced_threads_only_when_they_changed() {
    let jvm = Mutex::new(started(1));
    let first = jvm.context_threads_since(None, &HashMap::new()).unwrap();
    assert_eq!(first.pids, [PID]);
    assert_eq!(first.changed.len(), 1);
    assert!(first.changed[0].all && first.changed[0].threads.is_empty());
    assert!(jvm
        .context_threads_since(Some(first.version), &HashMap::new())
        .is_none());
    lock(&jvm).process_gone(PID, SystemTime::now());
    let gone = jvm
        .context_threads_since(Some(first.version), &HashMap::new())
        .unwrap();
    assert!(gone.pids.is_empty() && gone.changed.is_empty());
}

/// JVM `tgid` found, with thread `stream` announcing its context slot for task `tid`.
fn announce(s: &mut JvmStore, tgid: u32, stream: u64, tid: u64) {
    let mut buf = vec![0u8; jp_common::wire::MAX_RECORD];
    let h = jp_common::wire::header(jp_common::wire::KIND_THREAD, tgid, GEN, stream, 0, 0);
    let mut w = jp_common::wire::Writer::new(&mut buf, &h).expect("header fits");
    w.varint(tid).expect("fits");
    w.varint(0x7f00_0000_0000 + 8 * stream).expect("fits");
    let rec = w.finish().to_vec();
    s.ingest(&ev(tgid, &rec), &rec, SystemTime::now());
}

/// (stream, announced tid) of a JVM's threads.
type Announced = Vec<(u64, Option<u32>)>;

/// (stream, announced tid) of what a read gave of JVM `tgid`: (all, threads).
fn read_of(c: &super::super::jvm::ContextThreads, tgid: u32) -> Option<(bool, Announced)> {
    let j = c.changed.iter().find(|j| j.tgid == tgid)?;
    let mut threads: Announced = j
        .threads
        .iter()
        .map(|(s, slot)| (*s, slot.map(|t| t.os_tid)))
        .collect();
    threads.sort_unstable();
    Some((j.all, threads))
}

#[test]
fn one_jvms_announcement_reads_only_its_changed_threads() {
    let mut s = started(1);
    let other = PID + 1;
    s.generation_written(other, GEN);
    for stream in 1..=1000 {
        announce(&mut s, other, stream, 10_000 + stream);
    }
    announce(&mut s, PID, 1, 77);
    let store = Mutex::new(s);
    let first = store.context_threads_since(None, &HashMap::new()).unwrap();
    assert_eq!(read_of(&first, PID), Some((true, vec![(1, Some(77))])));
    assert_eq!(
        read_of(&first, other).map(|(all, t)| (all, t.len())),
        Some((true, 1000))
    );
    let marks: HashMap<u32, ContextMark> = first.changed.iter().map(|j| (j.tgid, j.mark)).collect();
    // The real JVM announces a thread, and one of its threads ends: the other JVM's
    // 1000 threads are not read again, nor the real JVM's other ones.
    announce(&mut lock(&store), PID, 2, 78);
    announce(&mut lock(&store), PID, 3, 79);
    lock(&store).context_slot_refused(PID, 1);
    let next = store
        .context_threads_since(Some(first.version), &marks)
        .unwrap();
    assert_eq!(next.changed.len(), 1, "the other JVM did not change");
    assert_eq!(
        read_of(&next, PID),
        Some((false, vec![(1, None), (2, Some(78)), (3, Some(79))]))
    );
    let mut marks = marks;
    marks.extend(next.changed.iter().map(|j| (j.tgid, j.mark)));
    announce(&mut lock(&store), PID, 3, 80);
    let last = store
        .context_threads_since(Some(next.version), &marks)
        .unwrap();
    assert_eq!(read_of(&last, PID), Some((false, vec![(3, Some(80))])));
}
