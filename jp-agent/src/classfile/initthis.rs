//! Where is `this` initialized in a constructor? A small abstract interpretation that
//! tracks `uninitializedThis` on the operand stack and in local 0, to find the
//! instructions a catch-all handler may cover (JVMS 4.10.1.4: not those where the
//! frame's flagThisUninit is set).

use super::blocks::BlockMap;
use super::cpool::ConstPool;
use super::error::RewriteError;
use super::insn::{dup_or_swap, Code, Flow, Insn, INVOKESPECIAL};
use super::reader::{u16_at, u8_at};

/// Per instruction: 0 = unreached, 1 = `this` initialized, 2 = `this` uninitialized.
pub(crate) const REACHED_INIT: u8 = 1;

const OTHER: u8 = 0;
const THIS: u8 = 1;

#[derive(Clone, PartialEq, Eq)]
struct State {
    uninit: bool,
    local0_this: bool,
    stack: Vec<u8>,
}

/// Slots of a field descriptor / return type.
fn type_slots(d: &[u8]) -> u32 {
    match d.first() {
        Some(b'J') | Some(b'D') => 2,
        Some(b'V') | None => 0,
        _ => 1,
    }
}

/// (argument slots, return slots) of a method descriptor.
pub(crate) fn method_slots(d: &[u8]) -> Option<(u32, u32)> {
    if d.first() != Some(&b'(') {
        return None;
    }
    let mut i = 1;
    let mut args = 0;
    while *d.get(i)? != b')' {
        match d[i] {
            b'J' | b'D' => args += 2,
            b'L' => {
                args += 1;
                i += d[i..].iter().position(|&b| b == b';')?;
            }
            b'[' => {
                args += 1;
                while *d.get(i)? == b'[' {
                    i += 1;
                }
                if d[i] == b'L' {
                    i += d[i..].iter().position(|&b| b == b';')?;
                }
            }
            _ => args += 1,
        }
        i += 1;
    }
    Some((args, type_slots(&d[i + 1..])))
}

/// (pops, pushes) in slots for instructions without special handling.
fn effect(ins: &Insn, code: &[u8], cp: &ConstPool) -> Result<Option<(u32, u32)>, RewriteError> {
    let off = ins.off as usize;
    let idx = || u16_at(code, off + 1);
    Ok(Some(match ins.op {
        0x00 => (0, 0),
        0x01..=0x08 => (0, 1),
        0x09 | 0x0a => (0, 2),
        0x0b..=0x0d => (0, 1),
        0x0e | 0x0f => (0, 2),
        0x10..=0x13 => (0, 1),
        0x14 => (0, 2),
        0x15 | 0x17 => (0, 1),
        0x16 | 0x18 => (0, 2),
        0x1a..=0x1d | 0x22..=0x25 => (0, 1),
        0x1e..=0x21 | 0x26..=0x29 => (0, 2),
        0x2e | 0x30 | 0x32..=0x35 => (2, 1),
        0x2f | 0x31 => (2, 2),
        0x36 | 0x38 => (1, 0),
        0x37 | 0x39 => (2, 0),
        0x3b..=0x3e | 0x43..=0x46 => (1, 0),
        0x3f..=0x42 | 0x47..=0x4a => (2, 0),
        0x4f | 0x51 | 0x53..=0x56 => (3, 0),
        0x50 | 0x52 => (4, 0),
        0x57 => (1, 0),
        0x58 => (2, 0),
        0x60..=0x73 => {
            if (ins.op - 0x60).is_multiple_of(2) {
                (2, 1)
            } else {
                (4, 2)
            }
        }
        0x74 | 0x76 => (1, 1),
        0x75 | 0x77 => (2, 2),
        0x78 | 0x7a | 0x7c => (2, 1),
        0x79 | 0x7b | 0x7d => (3, 2),
        0x7e | 0x80 | 0x82 => (2, 1),
        0x7f | 0x81 | 0x83 => (4, 2),
        0x84 => (0, 0),
        0x85 | 0x87 | 0x8c | 0x8d => (1, 2),
        0x86 | 0x8b | 0x91..=0x93 => (1, 1),
        0x88 | 0x89 | 0x8e | 0x90 => (2, 1),
        0x8a | 0x8f => (2, 2),
        0x94 | 0x97 | 0x98 => (4, 1),
        0x95 | 0x96 => (2, 1),
        0x99..=0x9e => (1, 0),
        0x9f..=0xa6 => (2, 0),
        0xa7 | 0xa9 | 0xc8 => (0, 0),
        0xa8 | 0xc9 => (0, 1),
        0xaa | 0xab => (1, 0),
        0xac | 0xae | 0xb0 => (1, 0),
        0xad | 0xaf => (2, 0),
        0xb1 => (0, 0),
        0xb2..=0xb5 => {
            let (_, _, d) = cp.member(idx()?)?;
            let s = type_slots(d);
            match ins.op {
                0xb2 => (0, s),
                0xb3 => (s, 0),
                0xb4 => (1, s),
                _ => (1 + s, 0),
            }
        }
        0xb6..=0xba => {
            let (_, _, d) = cp.member(idx()?)?;
            let Some((a, r)) = method_slots(d) else {
                return Err(RewriteError::BadDescriptor(
                    String::from_utf8_lossy(d).into_owned(),
                ));
            };
            (
                if ins.op >= 0xb8 && ins.op != 0xb9 {
                    a
                } else {
                    a + 1
                },
                r,
            )
        }
        0xbb => (0, 1),
        0xbc..=0xbe => (1, 1),
        0xbf => (1, 0),
        0xc0 | 0xc1 => (1, 1),
        0xc2 | 0xc3 => (1, 0),
        0xc5 => (u8_at(code, off + 3)? as u32, 1),
        0xc6 | 0xc7 => (1, 0),
        0xc4 => {
            let inner = u8_at(code, off + 1)?;
            match inner {
                0x15 | 0x17 => (0, 1),
                0x16 | 0x18 => (0, 2),
                0x36 | 0x38 => (1, 0),
                0x37 | 0x39 => (2, 0),
                _ => (0, 0),
            }
        }
        _ => return Ok(None),
    }))
}

impl State {
    /// `aload l`.
    fn load(&mut self, l: u32) {
        self.stack.push(if l == 0 && self.local0_this {
            THIS
        } else {
            OTHER
        });
    }

    /// `astore l`; false if undecidable (`this` stored elsewhere than local 0).
    fn store(&mut self, l: u32) -> bool {
        let Some(v) = self.stack.pop() else {
            return false;
        };
        if v == THIS && l != 0 {
            return false;
        }
        if l == 0 {
            self.local0_this = v == THIS;
        }
        true
    }
}

/// The block entry states found so far, and the blocks still to walk.
struct Entries {
    entry: Vec<Option<State>>,
    work: Vec<u32>,
}

impl Entries {
    /// Merges `s` into the entry of block `b`; false if it differs from the one there.
    fn merge(&mut self, b: usize, s: &State) -> bool {
        match &self.entry[b] {
            Some(e) => e == s,
            None => {
                self.entry[b] = Some(s.clone());
                self.work.push(b as u32);
                true
            }
        }
    }
}

/// The walk over one constructor's code.
struct Walk<'a> {
    code: &'a Code<'a>,
    blocks: &'a BlockMap,
    /// Instructions a `ret` may return to (conservatively: after every jsr).
    ret_targets: Vec<u32>,
    entries: Entries,
}

/// Fills `flags` per instruction. Returns false if the analysis cannot decide (the
/// catch-all is then omitted).
pub(crate) fn analyze(
    code: &Code,
    blocks: &BlockMap,
    this_is_object: bool,
    flags: &mut Vec<u8>,
) -> Result<bool, RewriteError> {
    let n = code.insns.len();
    flags.clear();
    flags.resize(n, 0);
    if n == 0 {
        return Ok(true);
    }
    let mut walk = Walk {
        code,
        blocks,
        ret_targets: (0..n)
            .filter(|&i| code.insns[i].flow == Flow::Jsr && i + 1 < n)
            .map(|i| i as u32 + 1)
            .collect(),
        entries: Entries {
            entry: vec![None; blocks.blocks.len()],
            work: vec![0],
        },
    };
    walk.entries.entry[0] = Some(State {
        uninit: !this_is_object,
        local0_this: !this_is_object,
        stack: Vec::new(),
    });
    while let Some(b) = walk.entries.work.pop() {
        let b = b as usize;
        let Some(st) = walk.entries.entry[b].clone() else {
            continue;
        };
        if !walk.block(b, st, flags)? {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Walk<'_> {
    /// Walks block `b` from its entry state `st`; false if undecidable.
    fn block(&mut self, b: usize, mut st: State, flags: &mut [u8]) -> Result<bool, RewriteError> {
        let blk = self.blocks.blocks[b];
        let (start, end) = (blk.start as usize, blk.end as usize);
        for (i, flag) in flags.iter_mut().enumerate().take(end).skip(start) {
            let ins = &self.code.insns[i];
            *flag = if st.uninit { 2 } else { REACHED_INIT };
            if !self.merge_into_handlers(i, &st) || !step(self.code, ins, &mut st)? {
                return Ok(false);
            }
            if st.stack.len() > 0xFFFF {
                return Ok(false);
            }
            let Some(fall) = self.merge_into_successors(b, i, ins, &mut st) else {
                return Ok(false);
            };
            if !fall {
                break;
            }
        }
        Ok(true)
    }

    /// The handlers covering instruction `i` are entered with the exception alone on
    /// the stack.
    fn merge_into_handlers(&mut self, i: usize, st: &State) -> bool {
        for &(s, e, h) in self.code.handlers {
            if (s as usize) <= i && i < e as usize {
                let hs = State {
                    uninit: st.uninit,
                    local0_this: st.local0_this,
                    stack: vec![OTHER],
                };
                if !self
                    .entries
                    .merge(self.blocks.block_of[h as usize] as usize, &hs)
                {
                    return false;
                }
            }
        }
        true
    }

    /// Passes the state after instruction `i` (the last of block `b` or not) to where
    /// control goes. Some(whether it falls through to the next instruction), None if a
    /// merge disagrees.
    fn merge_into_successors(
        &mut self,
        b: usize,
        i: usize,
        ins: &Insn,
        st: &mut State,
    ) -> Option<bool> {
        let block_of = &self.blocks.block_of;
        let fall = match ins.flow {
            Flow::Next | Flow::Cond => true,
            Flow::Goto | Flow::Switch | Flow::Return | Flow::Athrow => false,
            Flow::Jsr => false,
            Flow::Ret => {
                for &t in &self.ret_targets {
                    if !self.entries.merge(block_of[t as usize] as usize, st) {
                        return None;
                    }
                }
                false
            }
        };
        for &t in self.code.targets_of(ins) {
            if !self.entries.merge(block_of[t as usize] as usize, st) {
                return None;
            }
        }
        if ins.flow == Flow::Jsr {
            // The return address is consumed by the subroutine's astore.
            st.stack.pop();
        }
        let end = self.blocks.blocks[b].end as usize;
        if i + 1 == end && fall && end < self.code.insns.len() && !self.entries.merge(b + 1, st) {
            return None;
        }
        Some(fall)
    }
}

/// The local an `aload`/`astore` (short or byte-index form) names.
fn local_of(code: &[u8], ins: &Insn) -> Option<u32> {
    match ins.op {
        0x19 | 0x3a => code.get(ins.off as usize + 1).map(|&v| v as u32),
        0x2a..=0x2d => Some((ins.op - 0x2a) as u32),
        0x4b..=0x4e => Some((ins.op - 0x4b) as u32),
        _ => None,
    }
}

/// One instruction's effect on the state; false if undecidable.
fn step(code: &Code, ins: &Insn, st: &mut State) -> Result<bool, RewriteError> {
    let bytes = code.bytes;
    let off = ins.off as usize;
    Ok(match ins.op {
        0x19 | 0x2a..=0x2d => {
            st.load(local_of(bytes, ins).unwrap_or(u32::MAX));
            true
        }
        0x3a | 0x4b..=0x4e => st.store(local_of(bytes, ins).unwrap_or(u32::MAX)),
        0xc4 if matches!(u8_at(bytes, off + 1)?, 0x19 | 0x3a) => {
            let l = u16_at(bytes, off + 2)? as u32;
            if u8_at(bytes, off + 1)? == 0x19 {
                st.load(l);
                true
            } else {
                st.store(l)
            }
        }
        0x59..=0x5f => dup_or_swap(ins.op, &mut st.stack),
        INVOKESPECIAL => invokespecial(code, ins, st)?,
        _ => other_instruction(code, ins, st)?,
    })
}

/// `invokespecial`: a `<init>` on `this` initializes it.
fn invokespecial(code: &Code, ins: &Insn, st: &mut State) -> Result<bool, RewriteError> {
    let (_, name, d) = code.cp.member(u16_at(code.bytes, ins.off as usize + 1)?)?;
    let Some((a, r)) = method_slots(d) else {
        return Ok(false);
    };
    let len = st.stack.len();
    if len < a as usize + 1 {
        return Ok(false);
    }
    let recv = st.stack[len - a as usize - 1];
    st.stack.truncate(len - a as usize - 1);
    if name == b"<init>" && recv == THIS {
        st.uninit = false;
        st.local0_this = false;
        for v in st.stack.iter_mut() {
            *v = OTHER;
        }
    }
    st.stack.extend(std::iter::repeat_n(OTHER, r as usize));
    Ok(true)
}

/// Any other instruction: its pops and pushes; a store of a non-reference into local 0
/// overwrites `this`.
fn other_instruction(code: &Code, ins: &Insn, st: &mut State) -> Result<bool, RewriteError> {
    let (bytes, op, off) = (code.bytes, ins.op, ins.off as usize);
    let Some((pop, push)) = effect(ins, bytes, code.cp)? else {
        return Ok(false);
    };
    let len = st.stack.len();
    if len < pop as usize {
        return Ok(false);
    }
    st.stack.truncate(len - pop as usize);
    if (matches!(op, 0x36..=0x39) && bytes.get(off + 1) == Some(&0))
        || matches!(op, 0x3b | 0x3f | 0x43 | 0x47)
    {
        st.local0_this = false;
    }
    if op == 0xc4 && u16_at(bytes, off + 2)? == 0 && matches!(u8_at(bytes, off + 1)?, 0x36..=0x39) {
        st.local0_this = false;
    }
    st.stack.extend(std::iter::repeat_n(OTHER, push as usize));
    Ok(true)
}
