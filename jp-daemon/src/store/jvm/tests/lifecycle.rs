//! Threads ending, processes found, exiting, expiring, restarting or replaced behind
//! the same pid.

use super::*;

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
