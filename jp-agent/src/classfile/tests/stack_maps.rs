//! Stack map frames: compressed frames expanded, `Uninitialized` offsets moved.

use super::*;

#[test]
fn compressed_frames_become_full_frames() {
    // static void m(long a, int b): frames: append [int] at 3 (after istore_3),
    // same_locals_1_stack_item [int] at 5, chop 1 at 8, same at 9.
    let mut b = ClassBuilder::new(52);
    let code = [
        0x03, // 0: iconst_0
        0x3e, // 1: istore_3
        0x00, // 2: nop
        0x00, // 3: nop          <- append [int]
        0x03, // 4: iconst_0
        0x00, // 5: nop          <- same_locals_1 [int]
        0x57, // 6: pop
        0x00, // 7: nop
        0x00, // 8: nop          <- chop 1
        0xb1, // 9: return       <- same
    ];
    // Each frame at an instruction that is not a leader stays where it is.
    let frames = [0, 4, 252, 0, 3, 1, 64 + 1, 1, 250, 0, 2, 0];
    b.method(
        0x0009,
        "m",
        "(JI)V",
        Body {
            max_stack: 2,
            max_locals: 4,
            code: &code,
            exc: &[],
            frames: Some(&frames),
        },
    );
    let input = b.build();
    let (out, _) = rewrite(&input, Bba::Default);
    let cv = code_of(&out, "m");
    assert_eq!(cv.max_locals, 5);
    let raw = cv.frames.unwrap();
    // Every frame is a full_frame (255).
    let mut f = Frames::default();
    f.parse(&raw, &mut |_| panic!("full frames need no initial locals"))
        .unwrap();
    assert_eq!(f.frames.len(), 5);
    let types = |r: (u32, u32)| f.types[r.0 as usize..r.1 as usize].to_vec();
    let is_node = |t: &VType| matches!(t, VType::Object(_));
    // Locals: long (2 slots) + int = 3 slots; + int = 4 = L; then Node.
    let l0 = types(f.frames[0].1);
    assert_eq!(&l0[..3], &[VType::Long, VType::Integer, VType::Integer]);
    assert!(is_node(&l0[3]));
    assert_eq!(types(f.frames[1].2), vec![VType::Integer]);
    let l2 = types(f.frames[2].1);
    assert_eq!(&l2[..3], &[VType::Long, VType::Integer, VType::Top]);
    assert!(is_node(&l2[3]));
    assert_eq!(types(f.frames[3].1), l2);
    // The catch-all frame: Top x L, Node; stack [Throwable].
    let last = types(f.frames[4].1);
    assert_eq!(&last[..4], &[VType::Top; 4]);
    assert!(is_node(&last[4]));
    let mut off = -1i64;
    for (o, _, _) in &f.frames {
        assert!(*o as i64 > off);
        off = *o as i64;
    }
}

#[test]
fn uninitialized_offsets_follow_their_new() {
    // static Object m(): new T; dup; invokespecial T.<init>; areturn with a frame between
    // new and the call whose stack holds Uninitialized(0).
    let mut b = ClassBuilder::new(52);
    let init = b.methodref("T", "<init>", "()V");
    let code = [
        0xbb,
        0x00,
        0x02, // 0: new T
        0x59, // 3: dup
        0x04, // 4: iconst_1
        0x99,
        0x00,
        0x03, // 5: ifeq 8
        0xb7,
        (init >> 8) as u8,
        init as u8, // 8: invokespecial
        0xb0,       // 11: areturn
    ];
    let frames = [0, 1, 255, 0, 8, 0, 0, 0, 2, 8, 0, 0, 8, 0, 0];
    b.method(
        0x0009,
        "m",
        "()Ljava/lang/Object;",
        Body {
            max_stack: 3,
            max_locals: 0,
            code: &code,
            exc: &[],
            frames: Some(&frames),
        },
    );
    let input = b.build();
    for bba in [Bba::Default, Bba::Precise] {
        let (out, _) = rewrite(&input, bba);
        let s = split(&out, "m");
        let cv = code_of(&out, "m");
        let mut f = Frames::default();
        f.parse(cv.frames.as_ref().unwrap(), &mut |_| panic!())
            .unwrap();
        let stack = &f.types[f.frames[0].2 .0 as usize..f.frames[0].2 .1 as usize];
        // Uninitialized points at the `new` itself, not at the prefix before it.
        assert_eq!(
            stack,
            &[
                VType::Uninitialized(s.orig[0].0),
                VType::Uninitialized(s.orig[0].0)
            ]
        );
        assert_ne!(s.orig[0].0, s.prefix_start[0]);
        assert_eq!(f.frames[0].0, s.prefix_start[4]);
    }
}
