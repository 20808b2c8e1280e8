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

/// A carrier of virtual threads announces its slot in its own stream (1 here); while a
/// virtual thread (stream 2) is mounted, the slot's word names stream 2 in its high half:
/// the sample counts under stream 2's context, never stream 1's node of the same wire id. A
/// stream jpd does not know waits, as an unknown id does.
#[test]
fn a_carriers_sample_counts_under_the_mounted_virtual_threads_context() {
    let mut s = started(2);
    base_thread(&mut s);
    feed(&mut s, &resync_rec(2, "", &[def(1, 0, 1, 1, 10)]));
    let key = |id: u64| jp_common::CtxKey {
        tgid: PID,
        kind: jp_common::ctx_kind::USER,
        stream: 1,
        id,
        kip: 0,
    };
    let samples = [(key(2 << 32 | 1), 5), (key(1), 2), (key(9 << 32 | 1), 3)];
    s.add_cpu_samples(1000, &samples, t0());
    let snap = s.snapshot(PID).expect("the JVM");
    let tree = snap.mct();
    let own = snap.cpu().expect("CPU").self_ns(tree.nodes.len());
    let at = |parent: usize, method: &str| {
        let i = (1..tree.nodes.len())
            .find(|&i| tree.nodes[i].parent == Some(parent) && &*tree.nodes[i].method == method)
            .unwrap_or_else(|| panic!("no {method} under node {parent}"));
        own[i]
    };
    let main = (1..tree.nodes.len())
        .find(|&i| &*tree.nodes[i].method == MAIN)
        .expect("main");
    assert_eq!(at(0, F), 5000, "the virtual thread's f(), at its root");
    assert_eq!(at(0, MAIN), 2000, "the carrier's own node 1 (main)");
    assert_eq!(at(main, F), 0, "stream 1's f() got nothing");
    let summary = s.summary(PID).expect("the JVM");
    assert_eq!(summary.cpu_pending_ns, 3000, "stream 9 is not known");
    // The virtual thread ends (it announced no slot of its own); a sample the sampler
    // logged before its end, read after it, still counts under its context.
    let end = tree_rec(GEN, 2, 1, wire::FLAG_END, "", &[]);
    feed(&mut s, &end);
    s.add_cpu_samples(1000, &[(key(2 << 32 | 1), 4)], t0());
    let snap = s.snapshot(PID).expect("the JVM");
    let tree = snap.mct();
    let own = snap.cpu().expect("CPU").self_ns(tree.nodes.len());
    let f = (1..tree.nodes.len())
        .find(|&i| tree.nodes[i].parent == Some(0) && &*tree.nodes[i].method == F)
        .expect("f() at the root");
    assert_eq!(own[f], 9000, "the late sample of the ended virtual thread");
}

#[test]
fn a_carriers_offcpu_time_counts_under_the_mounted_virtual_thread_also_after_its_end() {
    let mut s = started(2);
    base_thread(&mut s);
    feed(&mut s, &resync_rec(2, "", &[def(1, 0, 1, 1, 10)]));
    const REASON: u64 = 0xffff_1000;
    // The carrier (stream 1) blocked while virtual thread 2 was mounted in its node 1: the
    // period carries the carrier's slot word whole, as a CPU sample does.
    let period = |ns: u64| {
        let r = jp_common::OffcpuRecord {
            tgid: PID,
            _pad: 0,
            stream: 1,
            id: 2 << 32 | 1,
            ns,
            reason: REASON,
        };
        (r, 1)
    };
    s.add_offcpu(&[period(5000)], Default::default(), t0());
    // The virtual thread ends (no slot of its own); a period logged before its end and
    // read after it still counts under its context.
    feed(&mut s, &tree_rec(GEN, 2, 1, wire::FLAG_END, "", &[]));
    s.add_offcpu(&[period(4000)], Default::default(), t0());
    let snap = s.snapshot(PID).expect("the JVM");
    let tree = snap.mct();
    let f = (1..tree.nodes.len())
        .find(|&i| tree.nodes[i].parent == Some(0) && &*tree.nodes[i].method == F)
        .expect("f() at the root");
    let offcpu = &snap.cpu().expect("CPU").offcpu;
    let at_f = offcpu.get(&(f as u32, REASON)).copied();
    assert_eq!(
        at_f,
        Some(9000),
        "both periods under the virtual thread's f()"
    );
}

/// A `KIND_UNMOUNTED` record of stream `stream`: (node, why, ns, periods) entries.
fn unmounted_rec(stream: u64, entries: &[(u32, u64, u64, u64)]) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(wire::KIND_UNMOUNTED, PID, GEN, stream, 0, 0);
    let mut w = wire::Writer::new(&mut buf, &h).expect("header fits");
    w.begin_entries().expect("fits");
    for &(node, why, ns, periods) in entries {
        let u = wire::Unmounted {
            node,
            why: why as u8,
            ns,
            periods,
        };
        w.unmounted(&u).expect("fits");
    }
    w.finish().to_vec()
}

#[test]
fn a_virtual_threads_unmounted_time_counts_under_its_context_when_offcpu_is_measured() {
    let sleep = jp_common::offcpu_reason::UNMOUNTED + wire::unmounted::SLEEP;
    let parked = jp_common::offcpu_reason::UNMOUNTED + wire::unmounted::PARKED;
    let run = |measured: bool| {
        let mut s = started(2);
        s.set_offcpu_measured(measured);
        base_thread(&mut s);
        feed(&mut s, &resync_rec(2, "", &[def(1, 0, 1, 1, 10)]));
        let sleep_at_f = (1, wire::unmounted::SLEEP, 7_000, 2);
        let parked_at_root = (0, wire::unmounted::PARKED, 500, 1);
        feed(&mut s, &unmounted_rec(2, &[sleep_at_f, parked_at_root]));
        feed(&mut s, &unmounted_rec(2, &[sleep_at_f]));
        feed(&mut s, &tree_rec(GEN, 2, 1, wire::FLAG_END, "", &[]));
        // After the stream's end: refused, as any record of an ended stream.
        feed(&mut s, &unmounted_rec(2, &[sleep_at_f]));
        s
    };
    let mut s = run(true);
    let snap = s.snapshot(PID).expect("the JVM");
    let tree = snap.mct();
    let f = (1..tree.nodes.len())
        .find(|&i| tree.nodes[i].parent == Some(0) && &*tree.nodes[i].method == F)
        .expect("f() at the root");
    let offcpu = &snap.cpu().expect("CPU").offcpu;
    assert_eq!(offcpu.get(&(f as u32, sleep)).copied(), Some(14_000));
    assert_eq!(offcpu.get(&(0, parked)).copied(), Some(500));
    assert_eq!(offcpu.len(), 2, "nothing else: {offcpu:?}");
    assert_eq!(s.stats().malformed.get(Malformed::AfterEnd), 1);
    // jpd measures no time off CPU: checked, accepted, not counted.
    let mut s = run(false);
    let snap = s.snapshot(PID).expect("the JVM");
    let offcpu = snap.cpu().map(|c| c.offcpu.len()).unwrap_or(0);
    assert_eq!(offcpu, 0);
    assert_eq!(s.stats().malformed.get(Malformed::AfterEnd), 1);
}
