//! The sampler's side: running JVMs counted by kind, threads announcing where they
//! publish their context, and refused announcements.

use super::*;

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
