//! Decoding of the instruction stream of a `Code` attribute.

use super::cpool::ConstPool;
use super::error::RewriteError;
use super::reader::{i32_at, u8_at};

pub(crate) const ICONST_0: u8 = 0x03;
pub(crate) const ILOAD: u8 = 0x15;
pub(crate) const ILOAD_0: u8 = 0x1a;
pub(crate) const ISTORE: u8 = 0x36;
pub(crate) const ISTORE_0: u8 = 0x3b;
pub(crate) const IINC: u8 = 0x84;
pub(crate) const ALOAD: u8 = 0x19;
pub(crate) const ALOAD_0: u8 = 0x2a;
pub(crate) const ASTORE: u8 = 0x3a;
pub(crate) const ASTORE_0: u8 = 0x4b;
pub(crate) const IRETURN: u8 = 0xac;
pub(crate) const RETURN: u8 = 0xb1;
pub(crate) const GOTO: u8 = 0xa7;
pub(crate) const JSR: u8 = 0xa8;
pub(crate) const RET: u8 = 0xa9;
pub(crate) const TABLESWITCH: u8 = 0xaa;
pub(crate) const LOOKUPSWITCH: u8 = 0xab;
pub(crate) const INVOKEVIRTUAL: u8 = 0xb6;
pub(crate) const INVOKESPECIAL: u8 = 0xb7;
pub(crate) const INVOKESTATIC: u8 = 0xb8;
pub(crate) const ATHROW: u8 = 0xbf;
pub(crate) const WIDE: u8 = 0xc4;
pub(crate) const GOTO_W: u8 = 0xc8;
pub(crate) const JSR_W: u8 = 0xc9;

/// invokevirtual, invokespecial, invokestatic, invokeinterface, invokedynamic.
pub(crate) fn is_invoke(op: u8) -> bool {
    (0xb6..=0xba).contains(&op)
}

/// Instructions besides the invokes that may run Java code on this thread: resolving their
/// constant pool entry may load a class through a class loader written in Java, and
/// getstatic, putstatic and new may initialize a class. (`ldc` only for the entries that
/// resolve to something other than a number or a string: the caller checks the tag.)
pub(crate) fn may_resolve(op: u8) -> bool {
    matches!(
        op,
        0x12 | 0x13 | 0xb2..=0xb5 | 0xbb | 0xbd | 0xc0 | 0xc1 | 0xc5
    )
}

/// How control leaves an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Falls through to the next instruction only.
    Next,
    /// Conditional branch (16-bit offset): target or next.
    Cond,
    /// goto / goto_w.
    Goto,
    /// jsr / jsr_w: to the target; the next instruction is reached by a `ret`.
    Jsr,
    Switch,
    Return,
    Athrow,
    Ret,
}

/// One decoded instruction. Branch targets are in `Code::targets[t0..t0 + tn]`, as
/// instruction indices once resolved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Insn {
    pub off: u32,
    pub len: u32,
    pub op: u8,
    pub flow: Flow,
    pub t0: u32,
    pub tn: u32,
}

/// One method's decoded code, as the analyses (`blocks`, `initthis`, the rewrite) read it.
#[derive(Clone, Copy)]
pub(crate) struct Code<'a> {
    /// The original code.
    pub bytes: &'a [u8],
    pub insns: &'a [Insn],
    /// Branch targets as instruction indices ([`Code::targets_of`]).
    pub targets: &'a [u32],
    /// The exception table as (start, end, handler) instruction indices.
    pub handlers: &'a [(u32, u32, u32)],
    pub cp: &'a ConstPool<'a>,
}

impl<'a> Code<'a> {
    /// The branch targets of `ins` (instruction indices).
    pub fn targets_of(&self, ins: &Insn) -> &'a [u32] {
        &self.targets[ins.t0 as usize..(ins.t0 + ins.tn) as usize]
    }
}

/// Length of an instruction with a fixed length, 0 for variable-length ones, None if
/// the opcode does not exist.
fn fixed_len(op: u8) -> Option<u32> {
    Some(match op {
        0x00..=0x0f => 1,
        0x10 => 2,
        0x11 => 3,
        0x12 => 2,
        0x13 | 0x14 => 3,
        0x15..=0x19 => 2,
        0x1a..=0x35 => 1,
        0x36..=0x3a => 2,
        0x3b..=0x83 => 1,
        0x84 => 3,
        0x85..=0x98 => 1,
        0x99..=0xa8 => 3,
        0xa9 => 2,
        0xaa | 0xab => 0,
        0xac..=0xb1 => 1,
        0xb2..=0xb8 => 3,
        0xb9 | 0xba => 5,
        0xbb => 3,
        0xbc => 2,
        0xbd => 3,
        0xbe | 0xbf => 1,
        0xc0 | 0xc1 => 3,
        0xc2 | 0xc3 => 1,
        0xc4 => 0,
        0xc5 => 4,
        0xc6 | 0xc7 => 3,
        0xc8 | 0xc9 => 5,
        _ => return None,
    })
}

/// Applies one of `dup dup_x1 dup_x2 dup2 dup2_x1 dup2_x2 swap` (0x59..=0x5f) to a
/// stack of one-slot entries (a long or double takes two). False if the stack is too
/// short for it: the caller gives up on the method.
pub(crate) fn dup_or_swap<T: Copy>(op: u8, stack: &mut Vec<T>) -> bool {
    let len = stack.len();
    if op == 0x5f {
        if len < 2 {
            return false;
        }
        stack.swap(len - 1, len - 2);
        return true;
    }
    let (nd, under) = match op {
        0x59 => (1, 0),
        0x5a => (1, 1),
        0x5b => (1, 2),
        0x5c => (2, 0),
        0x5d => (2, 1),
        _ => (2, 2),
    };
    if len < nd + under {
        return false;
    }
    let at = len - nd - under;
    let top = [stack[len - nd], stack[len - 1]];
    for (k, &v) in top[2 - nd..].iter().enumerate() {
        stack.insert(at + k, v);
    }
    true
}

pub(crate) fn switch_pad(off: u32) -> u32 {
    (4 - (off + 1) % 4) % 4
}

/// Decodes `code` into `insns`, collecting raw branch targets (absolute original offsets)
/// into `targets`. `map` gets, for every byte offset, the index of the instruction that
/// starts there or `u32::MAX`; it has `code.len() + 1` entries (the last one = end).
pub(crate) fn decode(
    code: &[u8],
    method: &dyn Fn() -> String,
    insns: &mut Vec<Insn>,
    targets: &mut Vec<u32>,
    map: &mut Vec<u32>,
) -> Result<(), RewriteError> {
    insns.clear();
    targets.clear();
    map.clear();
    map.resize(code.len() + 1, u32::MAX);
    let mut off = 0usize;
    while off < code.len() {
        let op = code[off];
        let t0 = targets.len() as u32;
        let mut at = At {
            code,
            off,
            method,
            targets,
        };
        let (len, flow) = at.decode()?;
        if off + len as usize > code.len() {
            return Err(RewriteError::Truncated {
                offset: off,
                needed: len as usize,
            });
        }
        map[off] = insns.len() as u32;
        insns.push(Insn {
            off: off as u32,
            len,
            op,
            flow,
            t0,
            tn: targets.len() as u32 - t0,
        });
        off += len as usize;
    }
    map[code.len()] = insns.len() as u32;
    // Resolve targets to instruction indices.
    for t in targets.iter_mut() {
        let i = map[*t as usize];
        if i == u32::MAX || i as usize >= insns.len() {
            return Err(RewriteError::BadCode {
                method: method(),
                what: format!("branch target {t} is not an instruction"),
            });
        }
        *t = i;
    }
    Ok(())
}

/// The instruction being decoded, at `off`; its raw branch targets go to `targets`.
struct At<'a> {
    code: &'a [u8],
    off: usize,
    method: &'a dyn Fn() -> String,
    targets: &'a mut Vec<u32>,
}

impl At<'_> {
    fn bad(&self, what: String) -> RewriteError {
        RewriteError::BadCode {
            method: (self.method)(),
            what,
        }
    }

    /// A branch target at `rel` from the instruction.
    fn push_target(&mut self, rel: i64) -> Result<(), RewriteError> {
        let off = self.off;
        let t = off as i64 + rel;
        if t < 0 || t >= self.code.len() as i64 {
            return Err(self.bad(format!("branch at {off} to {t} outside the code")));
        }
        self.targets.push(t as u32);
        Ok(())
    }

    /// A 16-bit branch offset at `off + 1`.
    fn branch16(&mut self) -> Result<(), RewriteError> {
        let (code, off) = (self.code, self.off);
        let rel = i16::from_be_bytes([u8_at(code, off + 1)?, u8_at(code, off + 2)?]);
        self.push_target(rel as i64)
    }

    /// (length, flow) of the instruction.
    fn decode(&mut self) -> Result<(u32, Flow), RewriteError> {
        let (code, off) = (self.code, self.off);
        let op = code[off];
        Ok(match op {
            0x99..=0xa6 | 0xc6 | 0xc7 => {
                self.branch16()?;
                (3, Flow::Cond)
            }
            GOTO | JSR => {
                self.branch16()?;
                (3, if op == GOTO { Flow::Goto } else { Flow::Jsr })
            }
            GOTO_W | JSR_W => {
                let rel = i32_at(code, off + 1)?;
                self.push_target(rel as i64)?;
                (5, if op == GOTO_W { Flow::Goto } else { Flow::Jsr })
            }
            TABLESWITCH => (self.tableswitch()?, Flow::Switch),
            LOOKUPSWITCH => (self.lookupswitch()?, Flow::Switch),
            WIDE => {
                let inner = u8_at(code, off + 1)?;
                match inner {
                    0x84 => (6, Flow::Next),
                    0x15..=0x19 | 0x36..=0x3a => (4, Flow::Next),
                    RET => (4, Flow::Ret),
                    _ => return Err(self.bad(format!("wide with opcode {inner:#04x} at {off}"))),
                }
            }
            IRETURN..=RETURN => (1, Flow::Return),
            ATHROW => (1, Flow::Athrow),
            RET => (2, Flow::Ret),
            _ => match fixed_len(op) {
                Some(l) if l > 0 => (l, Flow::Next),
                _ => {
                    return Err(RewriteError::UnknownOpcode {
                        method: (self.method)(),
                        opcode: op,
                        offset: off as u32,
                    })
                }
            },
        })
    }

    /// A tableswitch's targets; its length.
    fn tableswitch(&mut self) -> Result<u32, RewriteError> {
        let (code, off) = (self.code, self.off);
        let base = off + 1 + switch_pad(off as u32) as usize;
        let def = i32_at(code, base)?;
        let low = i32_at(code, base + 4)?;
        let high = i32_at(code, base + 8)?;
        if high < low {
            return Err(self.bad(format!("tableswitch at {off}: high < low")));
        }
        let count = (high as i64 - low as i64 + 1) as usize;
        if count > code.len() {
            return Err(self.bad(format!("tableswitch at {off}: too many entries")));
        }
        self.push_target(def as i64)?;
        for k in 0..count {
            self.push_target(i32_at(code, base + 12 + 4 * k)? as i64)?;
        }
        Ok((base + 12 + 4 * count - off) as u32)
    }

    /// A lookupswitch's targets; its length.
    fn lookupswitch(&mut self) -> Result<u32, RewriteError> {
        let (code, off) = (self.code, self.off);
        let base = off + 1 + switch_pad(off as u32) as usize;
        let def = i32_at(code, base)?;
        let npairs = i32_at(code, base + 4)?;
        if npairs < 0 || npairs as usize > code.len() {
            return Err(self.bad(format!("lookupswitch at {off}: bad npairs {npairs}")));
        }
        self.push_target(def as i64)?;
        for k in 0..npairs as usize {
            self.push_target(i32_at(code, base + 12 + 8 * k)? as i64)?;
        }
        Ok((base + 8 + 8 * npairs as usize - off) as u32)
    }
}
