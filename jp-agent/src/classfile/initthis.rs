//! Where is `this` initialized in a constructor? A small abstract interpretation that
//! tracks `uninitializedThis` on the operand stack and in local 0, to find the
//! instructions a catch-all handler may cover (JVMS 4.10.1.4: not those where the
//! frame's flagThisUninit is set).

use super::cpool::ConstPool;
use super::insn::{dup_or_swap, Flow, Insn, INVOKESPECIAL};
use super::reader::{u16_at, u8_at};
use super::RewriteError;

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

/// Fills `flags` per instruction. Returns false if the analysis cannot decide (the
/// catch-all is then omitted).
#[allow(clippy::too_many_arguments)]
pub(crate) fn analyze(
    insns: &[Insn],
    targets: &[u32],
    handlers: &[(u32, u32, u32)],
    block_starts: &[u32],
    block_of: &[u32],
    code: &[u8],
    cp: &ConstPool,
    this_is_object: bool,
    flags: &mut Vec<u8>,
) -> Result<bool, RewriteError> {
    let n = insns.len();
    flags.clear();
    flags.resize(n, 0);
    if n == 0 {
        return Ok(true);
    }
    let nb = block_starts.len();
    let mut entry: Vec<Option<State>> = vec![None; nb];
    let mut work: Vec<u32> = vec![0];
    entry[0] = Some(State {
        uninit: !this_is_object,
        local0_this: !this_is_object,
        stack: Vec::new(),
    });
    let ret_targets: Vec<u32> = (0..n)
        .filter(|&i| insns[i].flow == Flow::Jsr && i + 1 < n)
        .map(|i| i as u32 + 1)
        .collect();
    // Merge `s` into the entry of the block starting at instruction `t`.
    fn merge(entry: &mut [Option<State>], work: &mut Vec<u32>, b: usize, s: &State) -> bool {
        match &entry[b] {
            Some(e) => e == s,
            None => {
                entry[b] = Some(s.clone());
                work.push(b as u32);
                true
            }
        }
    }
    while let Some(b) = work.pop() {
        let b = b as usize;
        let Some(mut st) = entry[b].clone() else {
            continue;
        };
        let end = if b + 1 < nb {
            block_starts[b + 1] as usize
        } else {
            n
        };
        for i in block_starts[b] as usize..end {
            let ins = &insns[i];
            flags[i] = if st.uninit { 2 } else { REACHED_INIT };
            for &(s, e, h) in handlers {
                if (s as usize) <= i && i < e as usize {
                    let hs = State {
                        uninit: st.uninit,
                        local0_this: st.local0_this,
                        stack: vec![OTHER],
                    };
                    if !merge(&mut entry, &mut work, block_of[h as usize] as usize, &hs) {
                        return Ok(false);
                    }
                }
            }
            let op = ins.op;
            let local_of = |op: u8| -> Option<u32> {
                match op {
                    0x19 | 0x3a => code.get(ins.off as usize + 1).map(|&v| v as u32),
                    0x2a..=0x2d => Some((op - 0x2a) as u32),
                    0x4b..=0x4e => Some((op - 0x4b) as u32),
                    _ => None,
                }
            };
            let wide_local = || u16_at(code, ins.off as usize + 2).map(|v| v as u32);
            match op {
                0x19 | 0x2a..=0x2d => {
                    let l = local_of(op).unwrap_or(u32::MAX);
                    st.stack.push(if l == 0 && st.local0_this {
                        THIS
                    } else {
                        OTHER
                    });
                }
                0x3a | 0x4b..=0x4e => {
                    let l = local_of(op).unwrap_or(u32::MAX);
                    let Some(v) = st.stack.pop() else {
                        return Ok(false);
                    };
                    if v == THIS && l != 0 {
                        return Ok(false);
                    }
                    if l == 0 {
                        st.local0_this = v == THIS;
                    }
                }
                0xc4 if matches!(u8_at(code, ins.off as usize + 1)?, 0x19 | 0x3a) => {
                    let l = wide_local()?;
                    if u8_at(code, ins.off as usize + 1)? == 0x19 {
                        st.stack.push(if l == 0 && st.local0_this {
                            THIS
                        } else {
                            OTHER
                        });
                    } else {
                        let Some(v) = st.stack.pop() else {
                            return Ok(false);
                        };
                        if v == THIS && l != 0 {
                            return Ok(false);
                        }
                        if l == 0 {
                            st.local0_this = v == THIS;
                        }
                    }
                }
                0x59..=0x5f => {
                    if !dup_or_swap(op, &mut st.stack) {
                        return Ok(false);
                    }
                }
                INVOKESPECIAL => {
                    let (_, name, d) = cp.member(u16_at(code, ins.off as usize + 1)?)?;
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
                }
                _ => {
                    let Some((pop, push)) = effect(ins, code, cp)? else {
                        return Ok(false);
                    };
                    let len = st.stack.len();
                    if len < pop as usize {
                        return Ok(false);
                    }
                    st.stack.truncate(len - pop as usize);
                    // Stores into local 0 of a non-reference overwrite `this`.
                    if matches!(op, 0x36..=0x39 | 0x3b | 0x3f | 0x43 | 0x47)
                        && (local_of(0x3a).is_some_and(|l| l == 0) && matches!(op, 0x36..=0x39)
                            || matches!(op, 0x3b | 0x3f | 0x43 | 0x47))
                    {
                        st.local0_this = false;
                    }
                    if op == 0xc4
                        && wide_local()? == 0
                        && matches!(u8_at(code, ins.off as usize + 1)?, 0x36..=0x39)
                    {
                        st.local0_this = false;
                    }
                    st.stack.extend(std::iter::repeat_n(OTHER, push as usize));
                }
            }
            if st.stack.len() > 0xFFFF {
                return Ok(false);
            }
            let ts = &targets[ins.t0 as usize..(ins.t0 + ins.tn) as usize];
            let fall = match ins.flow {
                Flow::Next | Flow::Cond => true,
                Flow::Goto | Flow::Switch | Flow::Return | Flow::Athrow => false,
                Flow::Jsr => false,
                Flow::Ret => {
                    for &t in &ret_targets {
                        if !merge(&mut entry, &mut work, block_of[t as usize] as usize, &st) {
                            return Ok(false);
                        }
                    }
                    false
                }
            };
            for &t in ts {
                if !merge(&mut entry, &mut work, block_of[t as usize] as usize, &st) {
                    return Ok(false);
                }
            }
            if ins.flow == Flow::Jsr {
                // The return address is consumed by the subroutine's astore.
                st.stack.pop();
            }
            if i + 1 == end && fall && end < n && !merge(&mut entry, &mut work, b + 1, &st) {
                return Ok(false);
            }
            if !fall {
                break;
            }
        }
    }
    Ok(true)
}
