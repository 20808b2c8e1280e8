//! Malformed records, bad headers, events without a record, ring-buffer overflow:
//! counted, and the JVM left incomplete until a re-send.

use super::*;

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
fn a_process_loss_marks_that_jvm_only() {
    let mut s = started(1);
    base_thread(&mut s);
    // A second JVM beside it, running and complete.
    const OTHER: u32 = PID + 1;
    s.process_found(OTHER, ProcessInfo::default(), t0());
    s.generation_written(OTHER, GEN);
    // The global counters alone charge nobody: losses come per process.
    s.set_kernel_counters(UsdtKernelCounters {
        fired: 10,
        sent: 9,
        ring_full: 1,
        ..UsdtKernelCounters::default()
    });
    assert_eq!(s.stats().kernel.ring_full, 1);
    assert!(s.take_resync_requests().is_empty());
    s.process_losses(PID, 3, 1);
    assert_eq!(s.take_resync_requests(), vec![PID]);
    let sum = s.summary(PID).unwrap();
    assert!(!sum.complete);
    assert_eq!((sum.ring_rate_limited, sum.ring_full), (3, 1));
    let other = s.summary(OTHER).unwrap();
    assert_eq!((other.ring_rate_limited, other.ring_full), (0, 0));
    assert!(
        !other.incomplete_reason.contains("lost"),
        "{}",
        other.incomplete_reason
    );
    // A process the store does not hold: nothing to charge.
    s.process_losses(PID + 100, 1, 1);
    assert!(s.take_resync_requests().is_empty());
    assert!(s.summary(PID + 100).is_none());
}
