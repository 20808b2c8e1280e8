//! Full sends, deltas, threads merged by calling context, and re-sends replacing what
//! a thread (or the agent's snapshot of ended threads) contributed.

use super::*;

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
