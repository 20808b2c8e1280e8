//! Limits on what one JVM and the store hold: data dropped, and said so.

use super::*;

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
fn a_huge_node_id_takes_one_slot() {
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
    assert_eq!(st.thread_nodes, 3, "the root's slot, node 1 and the far id");
    assert!(st.memory_bytes < 100_000, "{}", st.memory_bytes);
    let sum = s.summary(PID).unwrap();
    assert_eq!((sum.nodes, sum.calls, sum.limit_drops), (2, 2, 0));
    feed(&mut s, &tree_rec(GEN, 1, 1, 0, "", &[upd(big, 1, 1)]));
    assert_eq!(s.summary(PID).unwrap().calls, 3);
}

#[test]
fn the_thread_node_limit_counts_far_ids_too() {
    let mut s = limited(JvmLimits {
        max_thread_nodes_per_jvm: 3,
        ..JvmLimits::default()
    });
    let far = |i: u32| 1_000_000 + i;
    feed(
        &mut s,
        &resync_rec(
            1,
            "",
            &[
                def(1, 0, 0, 1, 1),
                def(far(1), 1, 1, 1, 1),
                def(far(2), 1, 2, 1, 1),
            ],
        ),
    );
    let sum = s.summary(PID).unwrap();
    assert_eq!(
        (sum.nodes, sum.limit_drops),
        (0, 1),
        "the whole record is dropped"
    );
    assert_eq!(
        sum.incomplete_reason,
        "1 threads waiting for a re-send; limit max_thread_nodes_per_jvm = 3 reached, data dropped"
    );
    assert_eq!(s.stats().thread_nodes, 0);
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
