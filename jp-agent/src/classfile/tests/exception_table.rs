//! The exception table: self-covering handlers' stubs, the constructors' catch-all.

use super::*;

#[test]
fn self_covering_handlers_leave_their_injected_code_uncovered() {
    // javac's synchronized block: the `any` handler at 7 also covers its own monitorexit.
    let code = [
        0x2a, 0x59, 0x4c, 0xc2, // 0: aload_0 dup astore_1 monitorenter
        0x2b, 0xc3, 0xb1, // 4: aload_1 monitorexit return
        0x4d, 0x2b, 0xc3, 0x2c, 0xbf, // 7: astore_2 aload_1 monitorexit aload_2 athrow
    ];
    for bba in [Bba::Default, Bba::Precise] {
        let mut b = ClassBuilder::new(49);
        b.method(
            0x0009,
            "m",
            "(Ljava/lang/Object;)V",
            Body {
                max_stack: 2,
                max_locals: 3,
                code: &code,
                exc: &[(4, 6, 7, 0), (7, 10, 7, 0)],
                frames: None,
            },
        );
        let (out, _) = rewrite(&b.build(), bba);
        let view = code_of(&out, "m");
        let handler = view.exc[0].2;
        let covers = |e: &(u16, u16, u16, u16), at: u16| (e.0..e.1).contains(&at);
        assert!(
            view.exc.iter().all(|e| !covers(e, e.2)),
            "{bba:?}: no entry covers its own handler: {:?}",
            view.exc
        );
        // What the handler's injected first block throws goes to a stub, `goto_w` back to
        // the handler's original code (astore_2), which is still covered by the handler.
        let to_stub = view
            .exc
            .iter()
            .find(|e| covers(e, handler) && e.2 != handler)
            .expect("the injected block is covered");
        let stub = to_stub.2 as usize;
        assert_eq!(view.code[stub], 0xc8, "{bba:?}: the stub is a goto_w");
        let delta = i32::from_be_bytes(view.code[stub + 1..stub + 5].try_into().unwrap());
        let original = (stub as i64 + i64::from(delta)) as u16;
        assert_eq!(
            to_stub.1, original,
            "{bba:?}: the stub covers just the injected block"
        );
        assert_eq!(
            view.code[original as usize], 0x4d,
            "{bba:?}: lands on astore_2"
        );
        for at in original..original + 3 {
            assert!(
                view.exc.iter().any(|e| e.2 == handler && covers(e, at)),
                "{bba:?}: original handler code at {at} still covered: {:?}",
                view.exc
            );
        }
        assert_eq!(
            view.exc.last().map(|e| e.3),
            Some(0),
            "the catch-all is last"
        );
    }
}

#[test]
fn constructors_catch_all_starts_after_super() {
    // T(int x) { if-free: aload_0; iload_1; ifeq L; nop; L: invokespecial Object.<init>;
    // return } -- the handler must not cover the code before the super call.
    let mut b = ClassBuilder::new(49);
    let sup = b.methodref("java/lang/Object", "<init>", "()V");
    let code = [
        0x2a, // 0: aload_0
        0x1b, // 1: iload_1
        0x99,
        0x00,
        0x04, // 2: ifeq 6
        0x00, // 5: nop
        0xb7,
        (sup >> 8) as u8,
        sup as u8, // 6: invokespecial
        0x2a,      // 9: aload_0
        0x57,      // 10: pop
        0xb1,      // 11: return
    ];
    b.method(
        0x0001,
        "<init>",
        "(I)V",
        Body {
            max_stack: 2,
            max_locals: 2,
            code: &code,
            exc: &[],
            frames: None,
        },
    );
    let input = b.build();
    let (out, stats) = rewrite(&input, Bba::Default);
    assert_eq!(stats.methods_without_catch_all, 0);
    let cv = code_of(&out, "<init>");
    let s = split(&out, "<init>");
    assert_eq!(
        cv.exc,
        vec![(
            s.prefix_start[5] as u16,
            s.orig_end as u16,
            s.orig_end as u16,
            0
        )]
    );
}

#[test]
fn undecidable_constructors_have_no_catch_all() {
    // T() { aload_0; astore_1; aload_1; invokespecial Object.<init>; return }: `this` is
    // copied to another local before the super call: the analysis gives up.
    let mut b = ClassBuilder::new(52);
    let sup = b.methodref("java/lang/Object", "<init>", "()V");
    let code = [0x2a, 0x4c, 0x2b, 0xb7, (sup >> 8) as u8, sup as u8, 0xb1];
    b.method(
        0x0001,
        "<init>",
        "()V",
        Body {
            max_stack: 1,
            max_locals: 2,
            code: &code,
            exc: &[],
            frames: None,
        },
    );
    let input = b.build();
    let (out, stats) = rewrite(&input, Bba::Default);
    assert_eq!(
        (stats.methods_instrumented, stats.methods_without_catch_all),
        (1, 1)
    );
    let cv = code_of(&out, "<init>");
    assert!(cv.exc.is_empty());
    assert!(
        cv.frames.is_none(),
        "no handler, no branch: no frame needed"
    );
    let calls: Vec<String> = split(&out, "<init>")
        .calls
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(calls, vec!["enter", "count", "exit"]);
}
