//! The store's queries: the exported tree, per-method totals, stats, change counters.

use super::*;

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
