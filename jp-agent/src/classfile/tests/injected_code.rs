//! The injected code: entry, counts, ticks, handlers' `caught`, exits, the pending count, the out-of-line entry; empty finalizers left alone.

use super::*;

#[test]
fn injected_code_follows_the_contract() {
    for major in [49, 52] {
        let input = loop_class(major);
        let (out, stats) = rewrite(&input, Bba::Default);
        assert_eq!(stats.methods_instrumented, 1);
        let s = split(&out, "m");
        let calls: Vec<(&str, Option<i32>)> =
            s.calls.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        assert_eq!(
            calls,
            vec![
                ("enter", Some(1)),
                ("count", Some(1)),
                ("tick", Some(6)),
                ("count", Some(1)),
                ("count", Some(5)),
                ("count", Some(1)),
                ("count", Some(2)),
                ("exit", None),
                ("exit", None), // the catch-all
            ]
        );
        assert_eq!(
            s.orig.iter().map(|o| o.1).collect::<Vec<_>>(),
            orig_ops(&code_of(&input, "m").code)
        );
        // ifeq -> iload_0 at 12 (index 8); goto -> ifeq (index 1).
        assert_eq!(s.orig[1].2, vec![8]);
        assert_eq!(s.orig[6].2, vec![1]);
        let cv = code_of(&out, "m");
        assert_eq!((cv.max_stack, cv.max_locals), (4, 2));
        // The catch-all: from after the entry sequence to the end of the original code.
        assert_eq!(
            cv.exc,
            vec![(
                s.prefix_start[0] as u16,
                s.orig_end as u16,
                s.orig_end as u16,
                0
            )]
        );
        if major >= 50 {
            let mut f = Frames::default();
            f.parse(cv.frames.as_ref().unwrap(), &mut |_| {
                panic!("only full frames")
            })
            .unwrap();
            let offs: Vec<u32> = f.frames.iter().map(|x| x.0).collect();
            assert_eq!(
                offs,
                vec![
                    s.prefix_start[1],
                    s.prefix_start[7],
                    s.prefix_start[8],
                    s.orig_end
                ]
            );
            let node = |t: &VType| matches!(t, VType::Object(_));
            for (k, (_, loc, stk)) in f.frames.iter().enumerate() {
                let locals = &f.types[loc.0 as usize..loc.1 as usize];
                assert_eq!(locals.len(), 2);
                assert!(node(&locals[1]));
                let stack = &f.types[stk.0 as usize..stk.1 as usize];
                if k == 3 {
                    assert_eq!(locals[0], VType::Top);
                    assert_eq!(stack.len(), 1);
                } else {
                    assert_eq!(locals[0], VType::Integer);
                    assert!(stack.is_empty());
                }
            }
        } else {
            assert!(cv.frames.is_none());
        }
    }
}

#[test]
fn handlers_get_caught_and_tick() {
    let mut b = ClassBuilder::new(49);
    let code = [
        0x03, // 0: iconst_0
        0x6c, // 1: idiv (needs 2 values; the verifier is not involved here)
        0xac, // 2: ireturn
        0x57, // 3: pop (handler)
        0x03, // 4: iconst_0
        0xac, // 5: ireturn
    ];
    b.method(
        0x0009,
        "m",
        "(I)I",
        Body {
            max_stack: 2,
            max_locals: 1,
            code: &code,
            exc: &[(0, 3, 3, 0)],
            frames: None,
        },
    );
    let input = b.build();
    for bba in [Bba::Default, Bba::Precise] {
        let (out, _) = rewrite(&input, bba);
        let s = split(&out, "m");
        let calls: Vec<&str> = s.calls.iter().map(|(n, _)| n.as_str()).collect();
        let expect: &[&str] = if bba == Bba::Default {
            &[
                "enter", "count", "exit", "caught", "tick", "count", "exit", "exit",
            ]
        } else {
            &[
                "enter", "count", "count", "exit", "caught", "tick", "count", "exit", "exit",
            ]
        };
        assert_eq!(calls, expect);
        let cv = code_of(&out, "m");
        // The original handler keeps its place (first), covering through the ireturn.
        assert_eq!(cv.exc.len(), 2);
        assert_eq!(cv.exc[0].0 as u32, s.prefix_start[0]);
        assert_eq!(cv.exc[0].1 as u32, s.prefix_start[3]);
        assert_eq!(cv.exc[0].2 as u32, s.prefix_start[3]);
        assert_eq!(cv.exc[1].3, 0);
    }
}

#[test]
fn empty_finalizers_stay_empty() {
    // HotSpot registers every instance for finalization unless finalize()V is a lone return.
    let mut b = ClassBuilder::new(52);
    b.method(
        0x0004,
        "finalize",
        "()V",
        Body {
            max_stack: 0,
            max_locals: 1,
            code: &[0xb1],
            exc: &[],
            frames: None,
        },
    );
    b.method(
        0x0009,
        "small",
        "(I)V",
        Body {
            max_stack: 1,
            max_locals: 1,
            code: &[0xb1],
            exc: &[],
            frames: None,
        },
    );
    let (out, stats) = rewrite(&b.build(), Bba::Default);
    assert_eq!(
        (stats.methods_instrumented, stats.methods_empty_finalizers),
        (1, 1)
    );
    assert_eq!(code_of(&out, "finalize").code, [0xb1], "left a lone return");
    assert_ne!(
        code_of(&out, "small").code,
        [0xb1],
        "other methods are instrumented"
    );

    // A finalize() that does something is instrumented: its class is finalizable anyway.
    let mut b = ClassBuilder::new(52);
    b.method(
        0x0004,
        "finalize",
        "()V",
        Body {
            max_stack: 1,
            max_locals: 1,
            code: &[0x00, 0xb1],
            exc: &[],
            frames: None,
        },
    );
    let (out, stats) = rewrite(&b.build(), Bba::Default);
    assert_eq!(
        (stats.methods_instrumented, stats.methods_empty_finalizers),
        (1, 0)
    );
    assert_ne!(code_of(&out, "finalize").code, [0x00, 0xb1]);
}

#[test]
fn the_out_of_line_entry_is_called_when_asked() {
    // static void m() { return }: entered the usual way, never a second body.
    let mut b = ClassBuilder::new(52);
    b.method(
        0x0009,
        "m",
        "()V",
        Body {
            max_stack: 0,
            max_locals: 0,
            code: &[0xb1],
            exc: &[],
            frames: None,
        },
    );
    let input = b.build();
    for (out_of_line_entry, entry) in [(false, "enter"), (true, "enterOutOfLine")] {
        let opts = RewriteOptions {
            bba: Bba::Default,
            pass_context: true,
            out_of_line_entry,
        };
        let (out, _) = rewrite_with(&input, &opts);
        let calls: Vec<String> = split(&out, "m").calls.into_iter().map(|c| c.0).collect();
        // The return's exit, then the catch-all's.
        assert_eq!(calls, vec![entry, "count", "exit", "exit"]);
    }
}

#[test]
fn the_out_of_line_entry_is_enter_copied() {
    // Rt.enterOutOfLine is enter's body copied (a call of enter costs a second call where
    // C2 compiled enter on its own): the two must run the same bytecode, or JDK 17 and
    // JDK 25 would profile differently. Same class, same constant pool: same bytes.
    let rt = std::fs::read(concat!(env!("OUT_DIR"), "/classes/jp/rt/Rt.class"))
        .expect("build.rs compiles jp.rt into OUT_DIR/classes");
    let (copy, original) = (code_of(&rt, "enterOutOfLine"), code_of(&rt, "enter"));
    assert!(!original.code.is_empty());
    assert_eq!(
        copy.code, original.code,
        "enterOutOfLine differs from enter"
    );
    assert_eq!(copy.exc, original.exc);
}

#[test]
fn precise_bba_keeps_a_pending_count_flushed_before_calls() {
    // static void m() { f(); f(); return; } with a static f()V.
    let mut b = ClassBuilder::new(52);
    let f = b.methodref("T", "f", "()V");
    let code = [
        0xb8,
        (f >> 8) as u8,
        f as u8,
        0xb8,
        (f >> 8) as u8,
        f as u8,
        0xb1,
    ];
    b.method(
        0x0009,
        "m",
        "()V",
        Body {
            max_stack: 0,
            max_locals: 0,
            code: &code,
            exc: &[],
            frames: None,
        },
    );
    let input = b.build();
    let (out, _) = rewrite(&input, Bba::Precise);
    let s = split(&out, "m");
    let calls: Vec<(&str, Option<i32>)> = s.calls.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    assert_eq!(
        calls,
        vec![
            ("enter", Some(3)),
            ("count", Some(1)),
            ("flush", None),
            ("count", Some(1)),
            ("flush", None),
            ("count", Some(1)),
            ("exit", None),
            ("exit", None), // the catch-all
        ]
    );
    let cv = code_of(&out, "m");
    // tickPending's three arguments; the context and the pending count.
    assert_eq!((cv.max_stack, cv.max_locals), (3, 2));
    // The default BBA: one block, counted into the node, no pending count.
    let (out, _) = rewrite(&input, Bba::Default);
    let calls: Vec<String> = split(&out, "m").calls.into_iter().map(|c| c.0).collect();
    assert_eq!(calls, vec!["enter", "count", "exit", "exit"]);
    assert_eq!(code_of(&out, "m").max_locals, 1);
}
