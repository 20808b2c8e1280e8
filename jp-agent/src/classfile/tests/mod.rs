//! Unit tests of the rewriter on hand-built bytecode, by topic; the helpers that read
//! the rewritten code back are here.

mod bad_input;
mod bba_blocks;
mod code_layout;
mod exception_table;
mod injected_code;
mod stack_maps;

use super::frames::{Frames, VType};
use super::insn::{self, Insn};
use super::testutil::{code_of, Body, ClassBuilder};
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

/// An original instruction in the rewritten code: (new offset, opcode, targets).
type Original = (u32, u8, Vec<usize>);

/// The rewritten code split into what was injected and what is original.
#[derive(Debug)]
struct Split {
    /// Calls to Rt in order: (method, int argument if any).
    calls: Vec<(String, Option<i32>)>,
    /// Original instructions: (new offset, opcode, target instruction indices into `orig`).
    orig: Vec<Original>,
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

/// Reads the injected instructions of one rewritten method back.
struct Injected<'a> {
    bytes: &'a [u8],
    code: &'a [u8],
    class: ClassInfo<'a>,
    insns: Vec<Insn>,
    pending: bool,
    /// The context local and the pending count's local.
    l: u32,
    acc: u32,
    /// Per instruction: it was injected.
    injected: Vec<bool>,
    /// Calls to Rt in order: (method, int argument if any).
    calls: Vec<(String, Option<i32>)>,
}

impl Injected<'_> {
    /// The Rt method an instruction calls, if it does.
    fn rt_call(&self, ins: &Insn) -> Option<String> {
        if ins.op != insn::INVOKESTATIC {
            return None;
        }
        let o = ins.off as usize;
        let idx = u16::from_be_bytes([self.code[o + 1], self.code[o + 2]]);
        let cp = &self.class.cp;
        let (owner, name, _) = cp.member(idx).unwrap();
        let owner = cp.utf8(cp.class_name_index(owner).unwrap()).unwrap();
        (owner == "jp/rt/Rt").then(|| String::from_utf8(name.to_vec()).unwrap())
    }

    fn is_aload_l(&self, ins: &Insn) -> bool {
        let l = self.l;
        (l < 4 && ins.op == insn::ALOAD_0 + l as u8)
            || (ins.op == insn::ALOAD && self.code[ins.off as usize + 1] as u32 == l)
    }

    /// The local of a load or store of kind `short`/`op` (any form).
    fn local_of(&self, ins: &Insn, short: u8, op: u8) -> Option<u32> {
        let (o, code) = (ins.off as usize, self.code);
        if (short..short + 4).contains(&ins.op) {
            Some((ins.op - short) as u32)
        } else if ins.op == op {
            Some(code[o + 1] as u32)
        } else if ins.op == insn::WIDE && code[o + 1] == op {
            Some(u16::from_be_bytes([code[o + 2], code[o + 3]]) as u32)
        } else {
            None
        }
    }

    fn is_iload_acc(&self, ins: &Insn) -> bool {
        self.local_of(ins, insn::ILOAD_0, insn::ILOAD) == Some(self.acc)
    }

    fn is_istore_acc(&self, ins: &Insn) -> bool {
        self.local_of(ins, insn::ISTORE_0, insn::ISTORE) == Some(self.acc)
    }

    /// The `iinc` of the pending count: its increment.
    fn pending_iinc(&self, ins: &Insn) -> Option<i32> {
        let (o, code) = (ins.off as usize, self.code);
        match ins.op {
            insn::IINC if code[o + 1] as u32 == self.acc => Some(code[o + 2] as i8 as i32),
            insn::WIDE
                if code[o + 1] == insn::IINC
                    && u16::from_be_bytes([code[o + 2], code[o + 3]]) as u32 == self.acc =>
            {
                Some(i16::from_be_bytes([code[o + 4], code[o + 5]]) as i32)
            }
            _ => None,
        }
    }

    /// The int argument pushed by instruction `i`.
    fn int_at(&self, i: usize) -> Option<i32> {
        int_of(&self.insns[i], self.code, self.bytes)
    }

    fn mark(&mut self, ks: &[usize]) {
        for &k in ks {
            self.injected[k] = true;
        }
    }

    /// Marks every injected instruction and records the Rt calls.
    fn find(&mut self) {
        for i in 0..self.insns.len() {
            if self.pending {
                if let Some(n) = self.pending_iinc(&self.insns[i]) {
                    // A block adding to the pending count is the counting of the contract.
                    self.injected[i] = true;
                    self.calls.push(("count".to_string(), Some(n)));
                    continue;
                }
            }
            if let Some(name) = self.rt_call(&self.insns[i]) {
                self.injected[i] = true;
                self.rt_call_at(i, name);
            }
        }
        // The catch-all's athrow.
        if let Some(last) = self.insns.len().checked_sub(1) {
            if self.insns[last].op == insn::ATHROW && last >= 2 && self.injected[last - 1] {
                self.injected[last] = true;
            }
        }
    }

    /// The call of `Rt.name` at instruction `i`: the instructions around it that belong
    /// to it.
    fn rt_call_at(&mut self, i: usize, name: String) {
        match name.as_str() {
            "enter" | "enterOutOfLine" => {
                self.mark(&[i - 1, i - 2, i + 1]);
                if self.pending {
                    assert_eq!(
                        self.insns[i + 2].op,
                        insn::ICONST_0,
                        "pending count not zeroed"
                    );
                    assert!(
                        self.is_istore_acc(&self.insns[i + 3]),
                        "pending count not stored"
                    );
                    self.mark(&[i + 2, i + 3]);
                }
                let arg = self.int_at(i - 1);
                self.calls.push((name, arg));
            }
            "tickPending" => {
                assert!(
                    self.is_aload_l(&self.insns[i - 3]),
                    "{name} without aload L"
                );
                assert!(
                    self.is_iload_acc(&self.insns[i - 2]),
                    "{name} without iload ACC"
                );
                assert!(
                    self.is_istore_acc(&self.insns[i + 1]),
                    "{name} without istore ACC"
                );
                self.mark(&[i - 3, i - 2, i - 1, i + 1]);
                let arg = self.int_at(i - 1);
                self.calls.push(("tick".into(), arg));
            }
            "flush" | "exitPending" => {
                assert!(
                    self.is_aload_l(&self.insns[i - 2]),
                    "{name} without aload L"
                );
                assert!(
                    self.is_iload_acc(&self.insns[i - 1]),
                    "{name} without iload ACC"
                );
                self.mark(&[i - 1, i - 2]);
                if name == "flush" {
                    assert!(
                        self.is_istore_acc(&self.insns[i + 1]),
                        "flush without istore ACC"
                    );
                    self.mark(&[i + 1]);
                    self.calls.push(("flush".into(), None));
                } else {
                    self.calls.push(("exit".into(), None));
                }
            }
            "count" | "tick" => {
                assert!(
                    self.is_aload_l(&self.insns[i - 2]),
                    "{name} without aload L"
                );
                self.mark(&[i - 1, i - 2]);
                let arg = self.int_at(i - 1);
                self.calls.push((name, arg));
            }
            _ => {
                assert!(
                    self.is_aload_l(&self.insns[i - 1]),
                    "{name} without aload L"
                );
                self.mark(&[i - 1]);
                self.calls.push((name, None));
            }
        }
    }
}

fn split(bytes: &[u8], method: &str) -> Split {
    let cv = code_of(bytes, method);
    let (insns, targets) = decode(&cv.code);
    // With a pending count (bba=precise) the rewrite adds two locals: context, then count.
    let pending = has_pending_count(bytes, method);
    let l = cv.max_locals as u32 - if pending { 2 } else { 1 };
    let mut found = Injected {
        bytes,
        code: &cv.code,
        class: ClassInfo::parse(bytes).unwrap(),
        injected: vec![false; insns.len()],
        insns,
        pending,
        l,
        acc: l + 1,
        calls: Vec::new(),
    };
    found.find();
    let (orig, prefix_start, orig_end) = original_instructions(&found, &targets);
    Split {
        calls: found.calls,
        orig,
        prefix_start,
        orig_end,
    }
}

/// The original instructions (new offset, opcode, target indices into the list), where
/// each one's prefix starts, and the end of the last one.
fn original_instructions(found: &Injected, targets: &[u32]) -> (Vec<Original>, Vec<u32>, u32) {
    let insns = &found.insns;
    let mut index_of_new = std::collections::HashMap::new();
    let mut orig = Vec::new();
    let mut prefix_start = Vec::new();
    let mut group = None;
    let mut orig_end = 0;
    for (i, ins) in insns.iter().enumerate() {
        if found.injected[i] {
            // The entry sequence is the first four instructions (six with a pending count);
            // it belongs to no block.
            if group.is_none() && i >= if found.pending { 6 } else { 4 } {
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
    (orig, prefix_start, orig_end)
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
        Body {
            max_stack: 2,
            max_locals: 1,
            code: &code,
            exc: &[],
            frames: (major >= 50).then_some(&frames[..]),
        },
    );
    b.build()
}
