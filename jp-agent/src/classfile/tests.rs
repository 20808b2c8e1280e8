//! Unit tests on hand-built bytecode.

use super::frames::{Frames, VType};
use super::insn::{self, Insn};
use super::testutil::{code_of, ClassBuilder};
use super::*;

struct Ids;
impl MethodIds for Ids {
    fn method_id(&mut self, _: &str, _: &str, _: &str, _: Option<&str>) -> u32 {
        7
    }
}

fn rewrite(bytes: &[u8], bba: Bba) -> (Vec<u8>, ClassStats) {
    rewrite_with(
        bytes,
        &RewriteOptions {
            bba,
            pass_context: true,
            out_of_line_entry: false,
        },
    )
}

fn rewrite_with(bytes: &[u8], opts: &RewriteOptions) -> (Vec<u8>, ClassStats) {
    match rewrite_class(bytes, opts, &mut Ids).expect("rewrite") {
        Rewritten::Changed { bytes, stats } => (bytes, stats),
        Rewritten::Unchanged { reason } => panic!("unchanged: {reason}"),
    }
}

fn decode(code: &[u8]) -> (Vec<Insn>, Vec<u32>) {
    let (mut insns, mut targets, mut map) = (Vec::new(), Vec::new(), Vec::new());
    insn::decode(code, &|| "test".into(), &mut insns, &mut targets, &mut map).expect("decodes");
    (insns, targets)
}

/// The rewritten code split into what was injected and what is original.
#[derive(Debug)]
struct Split {
    /// Calls to Rt in order: (method, int argument if any).
    calls: Vec<(String, Option<i32>)>,
    /// Original instructions: (new offset, opcode, target instruction indices into `orig`).
    orig: Vec<(u32, u8, Vec<usize>)>,
    /// For every original instruction: where its injected prefix starts.
    prefix_start: Vec<u32>,
    /// End of the last original instruction.
    orig_end: u32,
}

fn int_of(ins: &Insn, code: &[u8], bytes: &[u8]) -> Option<i32> {
    let o = ins.off as usize;
    match ins.op {
        0x02..=0x08 => Some(ins.op as i32 - 3),
        0x10 => Some(code[o + 1] as i8 as i32),
        0x11 => Some(i16::from_be_bytes([code[o + 1], code[o + 2]]) as i32),
        0x12 | 0x13 => {
            let idx = if ins.op == 0x12 {
                code[o + 1] as u16
            } else {
                u16::from_be_bytes([code[o + 1], code[o + 2]])
            };
            let class = ClassInfo::parse(bytes).unwrap();
            let body = class.cp.tag(idx).unwrap();
            assert_eq!(body, cpool::INTEGER);
            None
        }
        _ => None,
    }
}

/// Does `method` keep its bytecode count in a local (calls `Rt.exitPending`)?
fn has_pending_count(bytes: &[u8], method: &str) -> bool {
    let cv = code_of(bytes, method);
    let class = ClassInfo::parse(bytes).unwrap();
    let (insns, _) = decode(&cv.code);
    insns.iter().any(|ins| {
        ins.op == insn::INVOKESTATIC && {
            let o = ins.off as usize;
            let idx = u16::from_be_bytes([cv.code[o + 1], cv.code[o + 2]]);
            let (_, name, _) = class.cp.member(idx).unwrap();
            name == b"exitPending"
        }
    })
}

fn split(bytes: &[u8], method: &str) -> Split {
    let cv = code_of(bytes, method);
    let class = ClassInfo::parse(bytes).unwrap();
    let (insns, targets) = decode(&cv.code);
    // With a pending count (bba=precise) the rewrite adds two locals: context, then count.
    let pending = has_pending_count(bytes, method);
    let l = cv.max_locals as u32 - if pending { 2 } else { 1 };
    let acc = l + 1;
    let is_rt = |ins: &Insn| -> Option<String> {
        if ins.op != insn::INVOKESTATIC {
            return None;
        }
        let idx =
            u16::from_be_bytes([cv.code[ins.off as usize + 1], cv.code[ins.off as usize + 2]]);
        let (owner, name, _) = class.cp.member(idx).unwrap();
        let owner = class
            .cp
            .utf8(class.cp.class_name_index(owner).unwrap())
            .unwrap();
        (owner == "jp/rt/Rt").then(|| String::from_utf8(name.to_vec()).unwrap())
    };
    let is_aload_l = |ins: &Insn| {
        (l < 4 && ins.op == insn::ALOAD_0 + l as u8)
            || (ins.op == insn::ALOAD && cv.code[ins.off as usize + 1] as u32 == l)
    };
    let local_of = |ins: &Insn, short: u8, op: u8| -> Option<u32> {
        let o = ins.off as usize;
        if (short..short + 4).contains(&ins.op) {
            Some((ins.op - short) as u32)
        } else if ins.op == op {
            Some(cv.code[o + 1] as u32)
        } else if ins.op == insn::WIDE && cv.code[o + 1] == op {
            Some(u16::from_be_bytes([cv.code[o + 2], cv.code[o + 3]]) as u32)
        } else {
            None
        }
    };
    let is_iload_acc = |ins: &Insn| local_of(ins, insn::ILOAD_0, insn::ILOAD) == Some(acc);
    let is_istore_acc = |ins: &Insn| local_of(ins, insn::ISTORE_0, insn::ISTORE) == Some(acc);
    let mut injected = vec![false; insns.len()];
    let mut calls = Vec::new();
    for i in 0..insns.len() {
        if pending {
            let o = insns[i].off as usize;
            let iinc = match insns[i].op {
                insn::IINC if cv.code[o + 1] as u32 == acc => Some(cv.code[o + 2] as i8 as i32),
                insn::WIDE
                    if cv.code[o + 1] == insn::IINC
                        && u16::from_be_bytes([cv.code[o + 2], cv.code[o + 3]]) as u32 == acc =>
                {
                    Some(i16::from_be_bytes([cv.code[o + 4], cv.code[o + 5]]) as i32)
                }
                _ => None,
            };
            if let Some(n) = iinc {
                // A block adding to the pending count is the counting of the contract.
                injected[i] = true;
                calls.push(("count".to_string(), Some(n)));
                continue;
            }
        }
        if let Some(name) = is_rt(&insns[i]) {
            injected[i] = true;
            match name.as_str() {
                "enter" | "enterOutOfLine" => {
                    injected[i - 1] = true;
                    injected[i - 2] = true;
                    injected[i + 1] = true;
                    if pending {
                        assert_eq!(insns[i + 2].op, insn::ICONST_0, "pending count not zeroed");
                        assert!(is_istore_acc(&insns[i + 3]), "pending count not stored");
                        injected[i + 2] = true;
                        injected[i + 3] = true;
                    }
                    calls.push((name, int_of(&insns[i - 1], &cv.code, bytes)));
                }
                "tickPending" => {
                    assert!(is_aload_l(&insns[i - 3]), "{name} without aload L");
                    assert!(is_iload_acc(&insns[i - 2]), "{name} without iload ACC");
                    assert!(is_istore_acc(&insns[i + 1]), "{name} without istore ACC");
                    for k in [i - 3, i - 2, i - 1, i + 1] {
                        injected[k] = true;
                    }
                    calls.push(("tick".into(), int_of(&insns[i - 1], &cv.code, bytes)));
                }
                "flush" | "exitPending" => {
                    assert!(is_aload_l(&insns[i - 2]), "{name} without aload L");
                    assert!(is_iload_acc(&insns[i - 1]), "{name} without iload ACC");
                    injected[i - 1] = true;
                    injected[i - 2] = true;
                    if name == "flush" {
                        assert!(is_istore_acc(&insns[i + 1]), "flush without istore ACC");
                        injected[i + 1] = true;
                        calls.push(("flush".into(), None));
                    } else {
                        calls.push(("exit".into(), None));
                    }
                }
                "count" | "tick" => {
                    assert!(is_aload_l(&insns[i - 2]), "{name} without aload L");
                    injected[i - 1] = true;
                    injected[i - 2] = true;
                    calls.push((name, int_of(&insns[i - 1], &cv.code, bytes)));
                }
                _ => {
                    assert!(is_aload_l(&insns[i - 1]), "{name} without aload L");
                    injected[i - 1] = true;
                    calls.push((name, None));
                }
            }
        }
    }
    // The catch-all's athrow.
    if let Some(last) = insns.len().checked_sub(1) {
        if insns[last].op == insn::ATHROW && last >= 2 && injected[last - 1] {
            injected[last] = true;
        }
    }
    let mut index_of_new = std::collections::HashMap::new();
    let mut orig = Vec::new();
    let mut prefix_start = Vec::new();
    let mut group = None;
    let mut orig_end = 0;
    for (i, ins) in insns.iter().enumerate() {
        if injected[i] {
            // The entry sequence is the first four instructions (six with a pending count);
            // it belongs to no block.
            if group.is_none() && i >= if pending { 6 } else { 4 } {
                group = Some(ins.off);
            }
            continue;
        }
        prefix_start.push(group.take().unwrap_or(ins.off));
        index_of_new.insert(*prefix_start.last().unwrap(), orig.len());
        index_of_new.insert(ins.off, orig.len());
        orig.push((
            ins.off,
            ins.op,
            targets[ins.t0 as usize..(ins.t0 + ins.tn) as usize]
                .iter()
                .map(|&t| insns[t as usize].off as usize)
                .collect::<Vec<_>>(),
        ));
        orig_end = ins.off + ins.len;
    }
    // Branch targets: new offsets -> original instruction index, and they must land on
    // the start of the target's prefix.
    for o in orig.iter_mut() {
        let mut idx = Vec::new();
        for &t in &o.2 {
            let j = *index_of_new
                .get(&(t as u32))
                .expect("target is a known instruction");
            assert_eq!(
                prefix_start[j], t as u32,
                "branch lands on the prefix start"
            );
            idx.push(j);
        }
        o.2 = idx;
    }
    Split {
        calls,
        orig,
        prefix_start,
        orig_end,
    }
}

fn orig_ops(code: &[u8]) -> Vec<u8> {
    decode(code).0.iter().map(|i| i.op).collect()
}

/// static int m(int x), see the comments: a loop with an idiv and a dead nop.
fn loop_class(major: u16) -> Vec<u8> {
    let mut b = ClassBuilder::new(major);
    let code = [
        0x1a, // 0: iload_0
        0x99, 0x00, 0x0b, // 1: ifeq 12
        0x1a, // 4: iload_0
        0x05, // 5: iconst_2
        0x6c, // 6: idiv
        0x3b, // 7: istore_0
        0xa7, 0xff, 0xf9, // 8: goto 1
        0x00, // 11: nop (dead)
        0x1a, // 12: iload_0
        0xac, // 13: ireturn
    ];
    // Frames at 1 (loop head, locals [int]), 11 and 12.
    let frames = [0, 3, 0x01, 0x09, 0x00];
    b.method(
        0x0009,
        "m",
        "(I)I",
        2,
        1,
        &code,
        &[],
        (major >= 50).then_some(&frames[..]),
    );
    b.build()
}

#[test]
fn blocks_default_bba() {
    let m = describe_blocks(&loop_class(49), Bba::Default).unwrap();
    assert_eq!(m.len(), 1);
    let got: Vec<(u32, u32, bool, u32)> = m[0]
        .blocks
        .iter()
        .map(|b| (b.offset, b.instructions, b.loop_head, b.ticks))
        .collect();
    // Leaders: 0, 1 (goto target), 4 (after ifeq), 11 (after goto), 12 (ifeq target).
    // Ticks: longest path to the next checkpoint: block 12 = 2, nop = 1 + 2, body = 5 (its
    // successor is the loop head), head = 1 + max(5, 2) = 6; entry = 1 (then the head).
    assert_eq!(
        got,
        vec![
            (0, 1, false, 1),
            (1, 1, true, 6),
            (4, 5, false, 5),
            (11, 1, false, 3),
            (12, 2, false, 2)
        ]
    );
    assert_eq!(m[0].entry_ticks, 1);
}

#[test]
fn blocks_precise_bba() {
    let m = describe_blocks(&loop_class(49), Bba::Precise).unwrap();
    let got: Vec<(u32, u32, bool, u32)> = m[0]
        .blocks
        .iter()
        .map(|b| (b.offset, b.instructions, b.loop_head, b.ticks))
        .collect();
    // idiv may throw: the block 4..8 is split after it.
    assert_eq!(
        got,
        vec![
            (0, 1, false, 1),
            (1, 1, true, 6),
            (4, 3, false, 5),
            (7, 2, false, 2),
            (11, 1, false, 3),
            (12, 2, false, 2)
        ]
    );
}

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
    b.method(0x0009, "m", "(I)I", 2, 1, &code, &[(0, 3, 3, 0)], None);
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
        b.method(0x0009, "m", "(I)I", 1, 1, &code, &[], None);
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
fn far_loop(major: u16, blocks: usize, conditional: bool) -> Vec<u8> {
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
    b.method(0x0009, "m", "()V", 1, 1, &code, &[], frames.as_deref());
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
    b.method(0x0009, "big", "(I)V", 1, 1, &code, &[], None);
    b.method(0x0009, "small", "(I)V", 1, 1, &[0xb1], &[], None);
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
    b.method(0x0009, "big", "(I)V", 1, 1, &code, &[], None);
    match rewrite_class(&b.build(), &RewriteOptions::default(), &mut Ids).unwrap() {
        Rewritten::Unchanged { reason } => assert!(reason.contains("too large"), "{reason}"),
        Rewritten::Changed { .. } => panic!("must not fit"),
    }
}

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
            2,
            3,
            &code,
            &[(4, 6, 7, 0), (7, 10, 7, 0)],
            None,
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
fn empty_finalizers_stay_empty() {
    // HotSpot registers every instance for finalization unless finalize()V is a lone return.
    let mut b = ClassBuilder::new(52);
    b.method(0x0004, "finalize", "()V", 0, 1, &[0xb1], &[], None);
    b.method(0x0009, "small", "(I)V", 1, 1, &[0xb1], &[], None);
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
    b.method(0x0004, "finalize", "()V", 1, 1, &[0x00, 0xb1], &[], None);
    let (out, stats) = rewrite(&b.build(), Bba::Default);
    assert_eq!(
        (stats.methods_instrumented, stats.methods_empty_finalizers),
        (1, 0)
    );
    assert_ne!(code_of(&out, "finalize").code, [0x00, 0xb1]);
}

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
    b.method(0x0009, "m", "(JI)V", 2, 4, &code, &[], Some(&frames));
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
        3,
        0,
        &code,
        &[],
        Some(&frames),
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
    b.method(0x0001, "<init>", "(I)V", 2, 2, &code, &[], None);
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
fn corrupt_inputs_never_panic() {
    let mut inputs = vec![
        loop_class(49),
        loop_class(52),
        far_loop(52, 40, true),
        far_loop(49, 40, false),
    ];
    let mut b = ClassBuilder::new(49);
    b.method(
        0x0009,
        "m",
        "(I)I",
        2,
        1,
        &[0x03, 0x6c, 0xac, 0x57, 0x03, 0xac],
        &[(0, 3, 3, 0)],
        None,
    );
    inputs.push(b.build());
    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut outcomes = [0usize; 3];
    for input in &inputs {
        for cut in 0..input.len() {
            let _ = rewrite_class(&input[..cut], &RewriteOptions::default(), &mut Ids);
        }
        for _ in 0..3000 {
            let mut v = input.clone();
            for _ in 0..(1 + next() % 4) {
                let i = (next() % v.len() as u64) as usize;
                v[i] = next() as u8;
            }
            for bba in [Bba::Default, Bba::Precise] {
                match rewrite_class(
                    &v,
                    &RewriteOptions {
                        bba,
                        pass_context: true,
                        out_of_line_entry: false,
                    },
                    &mut Ids,
                ) {
                    Ok(Rewritten::Changed { bytes, .. }) => {
                        outcomes[0] += 1;
                        // What we produce from a class that still parses must parse too.
                        let _ = describe_blocks(&bytes, bba);
                    }
                    Ok(Rewritten::Unchanged { .. }) => outcomes[1] += 1,
                    Err(_) => outcomes[2] += 1,
                }
            }
        }
    }
    assert!(outcomes[0] > 0 && outcomes[2] > 0, "{outcomes:?}");
}

#[test]
fn undecidable_constructors_have_no_catch_all() {
    // T() { aload_0; astore_1; aload_1; invokespecial Object.<init>; return }: `this` is
    // copied to another local before the super call: the analysis gives up.
    let mut b = ClassBuilder::new(52);
    let sup = b.methodref("java/lang/Object", "<init>", "()V");
    let code = [0x2a, 0x4c, 0x2b, 0xb7, (sup >> 8) as u8, sup as u8, 0xb1];
    b.method(0x0001, "<init>", "()V", 1, 2, &code, &[], None);
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

#[test]
fn the_out_of_line_entry_is_called_when_asked() {
    // static void m() { return }: entered the usual way, never a second body.
    let mut b = ClassBuilder::new(52);
    b.method(0x0009, "m", "()V", 0, 0, &[0xb1], &[], None);
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
fn bad_descriptors_are_errors() {
    // A compressed frame makes the rewriter read the descriptor's types.
    for desc in ["([", "(L", "(Lx", "([[", "(I", "(Q)V"] {
        let mut b = ClassBuilder::new(52);
        let code = [0x03, 0x99, 0x00, 0x03, 0xb1];
        b.method(0x0009, "m", desc, 1, 4, &code, &[], Some(&[0, 1, 4]));
        let r = rewrite_class(&b.build(), &RewriteOptions::default(), &mut Ids);
        assert!(r.is_err(), "{desc}: {r:?}");
    }
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
    b.method(0x0009, "m", "()V", 0, 0, &code, &[], None);
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
