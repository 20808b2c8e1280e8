//! What hostile but well-formed records cost: far node ids, ended threads' maps, the
//! store's byte budget shared by all JVMs, and which JVMs the table admits.
//!
//! The refusal counts are process-wide: each kind asserted here is counted by one test
//! only, so its delta is exact.

use super::*;
use crate::refusals;
use crate::store::jvm::admission::{NO_HELLO_EVICTED, UID_QUOTA};
use crate::store::jvm::budget::{GROWTH_PER_BYTE, OVER_BUDGET};

/// A `KIND_THREAD` announcement of `stream` (a native slot).
fn slot_rec(stream: u64) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(wire::KIND_THREAD, PID, GEN, stream, 0, 0);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    for f in [stream + 100, 0x7f00_0000_1000 + 4 * stream] {
        w.varint(f).unwrap();
    }
    w.finish().to_vec()
}

#[test]
fn far_node_ids_cost_a_bounded_multiple_of_their_records() {
    // The attack: per thread, announce a context slot, define a node id far beyond any
    // used, end the thread (its map is kept for late samples).
    const FAR: u32 = 15_000_000;
    let mut s = started(0);
    for t in 1..=13u64 {
        let before = s.stats().memory_bytes;
        let recs = [
            slot_rec(t),
            tree_rec(
                GEN,
                t,
                0,
                FLAG_RESYNC | FLAG_ABSOLUTE | FLAG_END,
                "",
                &[def(1, 0, 0, 1, 1), def(FAR + t as u32, 1, 1, 1, 1)],
            ),
        ];
        let mut sent = 0;
        for r in &recs {
            feed(&mut s, r);
            sent += r.len() as u64;
        }
        let grown = s.stats().memory_bytes.saturating_sub(before);
        assert!(
            grown <= GROWTH_PER_BYTE * sent,
            "thread {t}: {sent} bytes of records grew the store by {grown}"
        );
    }
    // Every node was taken, with its counts.
    assert_eq!(nodes(&s), vec![n(0, MAIN, 13, 13), n(1, F, 13, 13)]);
    let sum = s.summary(PID).unwrap();
    assert_eq!((sum.limit_drops, sum.threads_total), (0, 13));
    assert!(sum.memory_bytes < 1 << 20, "{}", sum.memory_bytes);
}

/// Memory the store holds once thread 1 defined `n` nodes and ended, having announced
/// a context slot or not.
fn after_thread_ended(n: u32, announce: bool) -> u64 {
    let mut s = started(0);
    if announce {
        feed(&mut s, &slot_rec(1));
    }
    let all: Vec<TreeEntry> = (1..=n).map(|i| def(i, 0, i, 1, 1)).collect();
    let parts: Vec<&[TreeEntry]> = all.chunks(1000).collect();
    for (seq, part) in parts.iter().enumerate() {
        let mut flags = if seq == 0 {
            FLAG_RESYNC | FLAG_ABSOLUTE
        } else {
            0
        };
        if seq + 1 == parts.len() {
            flags |= FLAG_END;
        }
        feed(&mut s, &tree_rec(GEN, 1, seq as u32, flags, "", part));
    }
    let sum = s.summary(PID).unwrap();
    assert_eq!((sum.nodes, sum.threads_live), (u64::from(n), 0));
    s.stats().memory_bytes
}

#[test]
fn ended_threads_maps_count_in_memory_bytes() {
    // An announced thread's wire ids stay mapped after its end (for the sampler's late
    // samples): 4 bytes per id, which memory_bytes must show.
    const N: u32 = 4000;
    let kept = after_thread_ended(N, true);
    let freed = after_thread_ended(N, false);
    assert!(
        kept >= freed + 4 * u64::from(N),
        "with the map kept {kept}, without {freed}"
    );
}

/// A store of budget `mib` MiB that saw JVMs `pids` start (HELLO of generation GEN).
fn store_of(mib: usize, pids: &[u32]) -> JvmStore {
    let mut s = JvmStore::new(JvmLimits {
        max_store_bytes: mib << 20,
        ..JvmLimits::default()
    });
    for &p in pids {
        found(&mut s, p, None, 0);
        s.generation_written(p, GEN);
        hello_from(&mut s, p);
    }
    s
}

/// `count` definitions of thread 1's nodes from `first` on, as record `seq`.
fn wide_rec(pid_seq: u32, first: u32, count: u32) -> Vec<u8> {
    let entries: Vec<TreeEntry> = (first..first + count).map(|i| def(i, 0, i, 1, 1)).collect();
    let flags = if pid_seq == 0 {
        FLAG_RESYNC | FLAG_ABSOLUTE
    } else {
        0
    };
    tree_rec(GEN, 1, pid_seq, flags, "", &entries)
}

#[test]
fn the_store_budget_is_shared_by_all_jvms_and_keeps_what_is_stored() {
    const A: u32 = 1000;
    const B: u32 = 2000;
    let refused_before = refusals::get(OVER_BUDGET);
    let mut s = store_of(4, &[A, B]);
    // A grows until the budget refuses: its records are taken while they fit.
    let mut refused_at = None;
    for seq in 0..200u32 {
        let rec = wide_rec(seq, 1 + seq * 500, 500);
        s.ingest(&ev(A, &rec), &rec, t0());
        if !s.summary(A).unwrap().complete {
            refused_at = Some(seq);
            break;
        }
    }
    let seq = refused_at.expect("the budget must refuse A's growth");
    let a = s.summary(A).unwrap();
    assert_eq!(a.nodes, u64::from(seq) * 500, "A keeps every node it had");
    assert_eq!(a.calls, u64::from(seq) * 500);
    assert_eq!(
        a.incomplete_reason,
        "1 threads waiting for a re-send; limit max_store_mib = 4 reached, data dropped"
    );
    assert!(s.held_bytes() <= 4 << 20, "{}", s.held_bytes());
    // B's new thread is refused too: the budget is the store's, not A's.
    let rec = wide_rec(0, 1, 10);
    s.ingest(&ev(B, &rec), &rec, t0());
    let b = s.summary(B).unwrap();
    assert_eq!((b.nodes, b.limit_drops), (0, 1));
    assert_eq!(
        b.incomplete_reason,
        "limit max_store_mib = 4 reached, data dropped"
    );
    assert_eq!(refusals::get(OVER_BUDGET) - refused_before, 2);
    assert_eq!(s.summary(A).unwrap().nodes, a.nodes);
    // A exits and expires: B's re-send fits now.
    s.process_gone(A, t0());
    s.expire(t0() + Duration::from_secs(7200));
    assert!(s.summary(A).is_none());
    s.ingest(&ev(B, &rec), &rec, t0());
    assert_eq!(s.summary(B).unwrap().nodes, 10);
    assert_eq!(s.held_bytes(), s.summary(B).unwrap().memory_bytes);
}

fn found(s: &mut JvmStore, tgid: u32, uid: Option<u32>, at_s: u64) {
    let info = ProcessInfo {
        start_time_ticks: u64::from(tgid),
        uid,
        ..ProcessInfo::default()
    };
    s.process_found(tgid, info, t0() + Duration::from_secs(at_s));
}

fn hello_from(s: &mut JvmStore, tgid: u32) {
    let h = hello_rec(GEN, 0, 1);
    s.ingest(&ev(tgid, &h), &h, t0());
}

#[test]
fn jvms_that_never_say_hello_are_evicted_for_a_real_one() {
    let evicted_before = refusals::get(NO_HELLO_EVICTED);
    let mut s = JvmStore::new(JvmLimits {
        max_jvms: 3,
        ..JvmLimits::default()
    });
    for fake in [1, 2, 3] {
        found(&mut s, fake, None, u64::from(fake));
    }
    // A real JVM: found, then its HELLO. The oldest silent entry made room.
    found(&mut s, 10, None, 10);
    hello_from(&mut s, 10);
    let kept: Vec<u32> = s.list().iter().map(|j| j.pid).collect();
    assert_eq!(kept, vec![2, 3, 10]);
    assert_eq!(s.summary(10).unwrap().jdk_version, "17.0.9+9");
    assert_eq!(refusals::get(NO_HELLO_EVICTED) - evicted_before, 1);
    // Once every kept JVM runs and said HELLO, a new one waits outside.
    hello_from(&mut s, 2);
    hello_from(&mut s, 3);
    found(&mut s, 11, None, 11);
    assert!(s.summary(11).is_none());
    assert_eq!(refusals::get(NO_HELLO_EVICTED) - evicted_before, 1);
}

#[test]
fn one_uid_keeps_at_most_its_quota_of_running_jvms() {
    let quota_before = refusals::get(UID_QUOTA);
    let mut s = JvmStore::new(JvmLimits {
        max_jvms_per_uid: 2,
        ..JvmLimits::default()
    });
    for tgid in [1, 2, 3] {
        found(&mut s, tgid, Some(1000), 0);
    }
    found(&mut s, 4, Some(2000), 0);
    assert_eq!(refusals::get(UID_QUOTA) - quota_before, 1);
    // The refused process's records are dropped until it exits.
    hello_from(&mut s, 3);
    let kept: Vec<u32> = s.list().iter().map(|j| j.pid).collect();
    assert_eq!(kept, vec![1, 2, 4]);
    assert_eq!(s.stats().jvm_limit_drops, 2);
    // An exit frees a place for the uid's next JVM.
    s.process_gone(1, t0());
    s.process_gone(3, t0());
    found(&mut s, 5, Some(1000), 1);
    let kept: Vec<u32> = s.list().iter().map(|j| j.pid).collect();
    assert_eq!(kept, vec![1, 2, 4, 5]);
    assert_eq!(refusals::get(UID_QUOTA) - quota_before, 1);
}
