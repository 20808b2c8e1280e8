//! Basic blocks (JP's two BBAs), checkpoints (loop heads and handler starts) and the
//! activation ticks: the longest path, in original bytecodes, from a checkpoint (or the
//! method entry) to the next checkpoint or the method's exit.

use super::api::Bba;
use super::cpool::{ConstPool, CLASS, DYNAMIC, METHOD_HANDLE, METHOD_TYPE};
use super::error::RewriteError;
use super::insn::{Code, Flow, Insn};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Block {
    /// First instruction index.
    pub start: u32,
    /// One past the last instruction index.
    pub end: u32,
    /// Starts an original exception handler.
    pub handler: bool,
    /// Target of a backward edge.
    pub loop_head: bool,
    /// Activation ticks (only meaningful at checkpoints).
    pub k: u32,
}

impl Block {
    pub fn checkpoint(&self) -> bool {
        self.handler || self.loop_head
    }
    pub fn count(&self) -> u32 {
        self.end - self.start
    }
}

/// Does `insn` end a block under the precise BBA because it may throw?
pub(crate) fn may_throw(insn: &Insn, code: &[u8], cp: &ConstPool) -> bool {
    match insn.op {
        0x2e..=0x35 | 0x4f..=0x56 // *aload, *astore
        | 0x6c | 0x70 | 0x6d | 0x71 // idiv irem ldiv lrem
        | 0xb2..=0xb5 // get/put field/static
        | 0xb6..=0xba // invoke*
        | 0xbb..=0xbf // new newarray anewarray arraylength athrow
        | 0xc0 | 0xc1 | 0xc2 | 0xc3 | 0xc5 => true,
        0x12..=0x14 => {
            let off = insn.off as usize;
            let idx = if insn.op == 0x12 {
                code.get(off + 1).map(|&b| b as u16)
            } else {
                match (code.get(off + 1), code.get(off + 2)) {
                    (Some(&a), Some(&b)) => Some(u16::from_be_bytes([a, b])),
                    _ => None,
                }
            };
            // An unreadable index cannot verify anyway; be conservative.
            idx.and_then(|i| cp.tag(i).ok())
                .is_none_or(|t| matches!(t, CLASS | METHOD_HANDLE | METHOD_TYPE | DYNAMIC))
        }
        _ => false,
    }
}

/// The blocks of one method (buffers reused across methods).
#[derive(Default)]
pub(crate) struct BlockMap {
    /// Per instruction: it starts a block.
    pub leader: Vec<bool>,
    pub blocks: Vec<Block>,
    /// Per instruction: the index of its block.
    pub block_of: Vec<u32>,
    /// Per block: the longest path from it to the next checkpoint, in bytecodes.
    longest: Vec<u32>,
}

/// Splits the method into blocks and computes the checkpoints' ticks. Returns the
/// entry's ticks.
pub(crate) fn split(code: &Code, bba: Bba, out: &mut BlockMap) -> Result<u32, RewriteError> {
    let n = code.insns.len();
    out.leader.clear();
    out.leader.resize(n, false);
    if n == 0 {
        out.blocks.clear();
        return Ok(0);
    }
    mark_leaders(code, bba, &mut out.leader);
    out.blocks.clear();
    out.block_of.clear();
    out.block_of.resize(n, 0);
    for i in 0..n {
        if out.leader[i] {
            if let Some(b) = out.blocks.last_mut() {
                b.end = i as u32;
            }
            out.blocks.push(Block {
                start: i as u32,
                end: n as u32,
                ..Block::default()
            });
        }
        out.block_of[i] = out.blocks.len() as u32 - 1;
    }
    for &(_, _, h) in code.handlers {
        out.blocks[out.block_of[h as usize] as usize].handler = true;
    }
    // Instructions a `ret` may return to (conservatively: after every jsr).
    let ret_targets: Vec<u32> = (0..n)
        .filter(|&i| code.insns[i].flow == Flow::Jsr && i + 1 < n)
        .map(|i| i as u32 + 1)
        .collect();
    mark_loop_heads(code, &ret_targets, out);
    longest_paths(code, &ret_targets, out);
    Ok(if out.blocks[0].checkpoint() {
        0
    } else {
        out.longest[0]
    })
}

/// The first instruction, branch targets, what follows a block's end (a jump, or under
/// the precise BBA an instruction that may throw) and handlers start blocks.
fn mark_leaders(code: &Code, bba: Bba, leader: &mut [bool]) {
    let n = code.insns.len();
    leader[0] = true;
    for (i, ins) in code.insns.iter().enumerate() {
        for &t in code.targets_of(ins) {
            leader[t as usize] = true;
        }
        let ends = match ins.flow {
            Flow::Next => bba == Bba::Precise && may_throw(ins, code.bytes, code.cp),
            _ => true,
        };
        if ends && i + 1 < n {
            leader[i + 1] = true;
        }
    }
    for &(_, _, h) in code.handlers {
        leader[h as usize] = true;
    }
}

/// Loop heads: targets of backward edges (branches, switches, jsr, ret).
fn mark_loop_heads(code: &Code, ret_targets: &[u32], out: &mut BlockMap) {
    for (i, ins) in code.insns.iter().enumerate() {
        let ts: &[u32] = if ins.flow == Flow::Ret {
            ret_targets
        } else {
            code.targets_of(ins)
        };
        for &t in ts {
            if t as usize <= i {
                out.blocks[out.block_of[t as usize] as usize].loop_head = true;
            }
        }
    }
}

/// Longest path to the next checkpoint: every edge into a non-checkpoint goes forward
/// (backward edges end at loop heads, exception edges at handlers), so one pass from the
/// last block to the first sees every successor before its predecessors.
fn longest_paths(code: &Code, ret_targets: &[u32], out: &mut BlockMap) {
    let n = code.insns.len();
    let nb = out.blocks.len();
    out.longest.clear();
    out.longest.resize(nb, 0);
    for b in (0..nb).rev() {
        let blk = out.blocks[b];
        let last = &code.insns[blk.end as usize - 1];
        let mut best = 0u32;
        let consider = |t: u32, best: &mut u32| {
            let tb = out.block_of[t as usize] as usize;
            if tb > b && !out.blocks[tb].checkpoint() {
                *best = (*best).max(out.longest[tb]);
            }
        };
        if matches!(last.flow, Flow::Next | Flow::Cond) && (blk.end as usize) < n {
            consider(blk.end, &mut best);
        }
        let successors = if last.flow == Flow::Ret {
            ret_targets
        } else {
            code.targets_of(last)
        };
        for &t in successors {
            consider(t, &mut best);
        }
        out.longest[b] = blk.count().saturating_add(best);
    }
    for (b, blk) in out.blocks.iter_mut().enumerate() {
        blk.k = out.longest[b];
    }
}
