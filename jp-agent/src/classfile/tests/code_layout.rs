//! The layout: switch padding, far branches widened (with inferred frames), methods too large to instrument.

use super::*;

#[test]
fn switch_padding_is_recomputed() {
    // tableswitch at offset 1 (pad 2) and lookupswitch, for several entry lengths.
    let mut code = vec![0x1a, insn::TABLESWITCH, 0, 0];
    // default -> 36, low 0, high 1: -> 36, 37
    for v in [35i32, 0, 1, 35, 36] {
        code.extend_from_slice(&v.to_be_bytes());
    }
    assert_eq!(code.len(), 24);
    code.push(0x1a); // 24: iload_0
    code.push(insn::LOOKUPSWITCH); // 25, pad 2
    code.extend_from_slice(&[0, 0]);
    for v in [11i32, 1, 7, 12] {
        code.extend_from_slice(&v.to_be_bytes()); // default 36, 1 pair: 7 -> 37
    }
    assert_eq!(code.len(), 44);
    // Fix the lookupswitch offsets relative to 25: 36 -> 11, 37 -> 12. Tableswitch at 1:
    // 36 -> 35... the code below ends at 44: retarget both switches to 44 and 45.
    code[4..8].copy_from_slice(&43i32.to_be_bytes());
    code[16..20].copy_from_slice(&43i32.to_be_bytes());
    code[20..24].copy_from_slice(&44i32.to_be_bytes());
    code[28..32].copy_from_slice(&19i32.to_be_bytes());
    code[40..44].copy_from_slice(&20i32.to_be_bytes());
    code.push(0x1a); // 44: iload_0
    code.push(0xac); // 45: ireturn
    let (_, targets) = decode(&code);
    assert_eq!(targets.len(), 5);
    for mid in [3u32, 100, 1000, 100_000] {
        struct One(u32);
        impl MethodIds for One {
            fn method_id(&mut self, _: &str, _: &str, _: &str, _: Option<&str>) -> u32 {
                self.0
            }
        }
        let mut b = ClassBuilder::new(49);
        b.method(
            0x0009,
            "m",
            "(I)I",
            Body {
                max_stack: 1,
                max_locals: 1,
                code: &code,
                exc: &[],
                frames: None,
            },
        );
        let input = b.build();
        let Rewritten::Changed { bytes: out, .. } =
            rewrite_class(&input, &RewriteOptions::default(), &mut One(mid)).unwrap()
        else {
            panic!()
        };
        let cv = code_of(&out, "m");
        let s = split(&out, "m");
        for &(off, op, ref ts) in &s.orig {
            if op == insn::TABLESWITCH || op == insn::LOOKUPSWITCH {
                let pad = insn::switch_pad(off) as usize;
                assert!(cv.code[off as usize + 1..off as usize + 1 + pad]
                    .iter()
                    .all(|&b| b == 0));
                assert_eq!((off as usize + 1 + pad) % 4, 0);
                assert_eq!(
                    ts,
                    &if op == insn::TABLESWITCH {
                        vec![4, 4, 5]
                    } else {
                        vec![4, 5]
                    }
                );
            }
        }
    }
}

/// A loop with `blocks` small blocks, then a backward branch to its head.
pub(super) fn far_loop(major: u16, blocks: usize, conditional: bool) -> Vec<u8> {
    let mut code = vec![0x03, 0x3b]; // iconst_0, istore_0
    let head = code.len();
    for _ in 0..blocks {
        code.extend_from_slice(&[0x84, 0, 1, 0x1a, 0x99, 0, 3]); // iinc 0 1; iload_0; ifeq +3
    }
    let back = code.len();
    let rel = (head as i64 - back as i64 - if conditional { 1 } else { 0 }) as i16;
    if conditional {
        code.push(0x1a);
        code.push(0x9a); // ifne head
    } else {
        code.push(insn::GOTO);
    }
    code.extend_from_slice(&rel.to_be_bytes());
    code.push(0xb1);
    let mut b = ClassBuilder::new(major);
    let frames = if major >= 50 {
        // A same frame at the head and after every ifeq (delta 6 each), full frames at the
        // branch and at the return are not needed beyond the head for this test's goto.
        let mut f = Vec::new();
        // The head, every block start, and (after a goto) the return.
        let n = 1 + blocks + usize::from(!conditional);
        f.extend_from_slice(&(n as u16).to_be_bytes());
        f.extend_from_slice(&[255, 0, head as u8, 0, 1, 1, 0, 0]);
        f.extend(std::iter::repeat_n(6, blocks));
        if !conditional {
            f.push(2);
        }
        Some(f)
    } else {
        None
    };
    b.method(
        0x0009,
        "m",
        "()V",
        Body {
            max_stack: 1,
            max_locals: 1,
            code: &code,
            exc: &[],
            frames: frames.as_deref(),
        },
    );
    b.build()
}

#[test]
fn far_branches_are_widened() {
    // 4000 blocks of 7 bytes: 28 KiB of original code, over 32 KiB once counted.
    for conditional in [false, true] {
        let input = far_loop(49, 4000, conditional);
        let orig = code_of(&input, "m");
        assert!(orig.code.len() < 32768);
        let (out, stats) = rewrite(&input, Bba::Default);
        assert_eq!(stats.methods_instrumented, 1);
        let cv = code_of(&out, "m");
        assert!(
            cv.code.len() > 65536 / 2 + 1000,
            "the method grew past 32 KiB"
        );
        let s = split(&out, "m");
        let ops: Vec<u8> = s.orig.iter().map(|o| o.1).collect();
        let mut expect = orig_ops(&orig.code);
        let back = expect.len() - 2;
        if conditional {
            // ifne far -> ifeq +8; goto_w far
            expect[back] = 0x99;
            expect.insert(back + 1, insn::GOTO_W);
        } else {
            expect[back] = insn::GOTO_W;
        }
        assert_eq!(ops, expect);
        let w = if conditional { back + 1 } else { back };
        assert_eq!(s.orig[w].2, vec![2], "goto_w goes to the loop head");
        if conditional {
            assert_eq!(
                s.orig[back].2,
                vec![back + 2],
                "the inverted branch skips the goto_w"
            );
        }
    }
}

#[test]
fn far_conditional_with_frames_gets_an_inferred_frame() {
    let input = far_loop(52, 4000, true);
    let (out, stats) = rewrite(&input, Bba::Default);
    assert_eq!(
        (stats.methods_instrumented, stats.methods_unwidenable),
        (1, 0)
    );
    let s = split(&out, "m");
    let n = s.orig.len();
    // iload_0; ifeq over the goto_w; goto_w head; return.
    assert_eq!(
        s.orig[n - 4..].iter().map(|o| o.1).collect::<Vec<_>>(),
        vec![0x1a, 0x99, insn::GOTO_W, 0xb1]
    );
    assert_eq!(s.orig[n - 3].2, vec![n - 1]);
    let cv = code_of(&out, "m");
    let mut f = Frames::default();
    f.parse(cv.frames.as_ref().unwrap(), &mut |_| panic!("full frames"))
        .unwrap();
    let (_, loc, stk) = *f
        .frames
        .iter()
        .find(|fr| fr.0 == s.prefix_start[n - 1])
        .expect("a frame where the inverted branch lands");
    let locals = &f.types[loc.0 as usize..loc.1 as usize];
    assert_eq!(locals[0], VType::Integer);
    assert!(matches!(locals[1], VType::Object(_)));
    assert_eq!(stk.0, stk.1, "empty stack");
    // An unconditional far branch is fine with frames.
    let input = far_loop(52, 4000, false);
    let (out, stats) = rewrite(&input, Bba::Default);
    assert_eq!(
        (stats.methods_instrumented, stats.methods_unwidenable),
        (1, 0)
    );
    let s = split(&out, "m");
    assert_eq!(s.orig[s.orig.len() - 2].1, insn::GOTO_W);
}

#[test]
fn too_large_methods_are_counted() {
    // 16000 blocks `iload_0; ifeq +3`: 64000 bytes, far over 65535 once counted.
    let mut code = Vec::new();
    for _ in 0..16000 {
        code.extend_from_slice(&[0x1a, 0x99, 0, 3]);
    }
    code.push(0xb1);
    let mut b = ClassBuilder::new(49);
    b.method(
        0x0009,
        "big",
        "(I)V",
        Body {
            max_stack: 1,
            max_locals: 1,
            code: &code,
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
    let input = b.build();
    let (out, stats) = rewrite(&input, Bba::Default);
    assert_eq!(
        (stats.methods_instrumented, stats.methods_too_large),
        (1, 1)
    );
    assert_eq!(
        code_of(&out, "big").code,
        code,
        "left byte for byte as it was"
    );
    let mut b = ClassBuilder::new(49);
    b.method(
        0x0009,
        "big",
        "(I)V",
        Body {
            max_stack: 1,
            max_locals: 1,
            code: &code,
            exc: &[],
            frames: None,
        },
    );
    match rewrite_class(&b.build(), &RewriteOptions::default(), &mut Ids).unwrap() {
        Rewritten::Unchanged { reason } => assert!(reason.contains("too large"), "{reason}"),
        Rewritten::Changed { .. } => panic!("must not fit"),
    }
}
