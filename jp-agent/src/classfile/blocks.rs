//! Basic blocks (JP's two BBAs), checkpoints (loop heads and handler starts) and the
//! activation ticks: the longest path, in original bytecodes, from a checkpoint (or the
//! method entry) to the next checkpoint or the method's exit.

use super::cpool::{ConstPool, CLASS, DYNAMIC, METHOD_HANDLE, METHOD_TYPE};
use super::insn::{Flow, Insn};
use super::{Bba, RewriteError};

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

/// Splits the method into blocks and computes the checkpoints' ticks.
/// `handlers` are (start, end, handler) instruction indices of the exception table.
/// Returns the entry's ticks.
#[allow(clippy::too_many_arguments)]
pub(crate) fn split(
    insns: &[Insn],
    targets: &[u32],
    handlers: &[(u32, u32, u32)],
    code: &[u8],
    cp: &ConstPool,
    bba: Bba,
    leader: &mut Vec<bool>,
    blocks: &mut Vec<Block>,
    block_of: &mut Vec<u32>,
    longest: &mut Vec<u32>,
) -> Result<u32, RewriteError> {
    let n = insns.len();
    leader.clear();
    leader.resize(n, false);
    if n == 0 {
        blocks.clear();
        return Ok(0);
    }
    leader[0] = true;
    for (i, ins) in insns.iter().enumerate() {
        for &t in &targets[ins.t0 as usize..(ins.t0 + ins.tn) as usize] {
            leader[t as usize] = true;
        }
        let ends = match ins.flow {
            Flow::Next => bba == Bba::Precise && may_throw(ins, code, cp),
            _ => true,
        };
        if ends && i + 1 < n {
            leader[i + 1] = true;
        }
    }
    for &(_, _, h) in handlers {
        leader[h as usize] = true;
    }
    blocks.clear();
    block_of.clear();
    block_of.resize(n, 0);
    for i in 0..n {
        if leader[i] {
            if let Some(b) = blocks.last_mut() {
                b.end = i as u32;
            }
            blocks.push(Block {
                start: i as u32,
                end: n as u32,
                ..Block::default()
            });
        }
        block_of[i] = blocks.len() as u32 - 1;
    }
    for &(_, _, h) in handlers {
        blocks[block_of[h as usize] as usize].handler = true;
    }
    // Instructions a `ret` may return to (conservatively: after every jsr).
    let mut ret_targets: Vec<u32> = Vec::new();
    for (i, ins) in insns.iter().enumerate() {
        if ins.flow == Flow::Jsr && i + 1 < n {
            ret_targets.push(i as u32 + 1);
        }
    }
    // Loop heads: targets of backward edges (branches, switches, jsr, ret).
    for (i, ins) in insns.iter().enumerate() {
        let ts: &[u32] = if ins.flow == Flow::Ret {
            &ret_targets
        } else {
            &targets[ins.t0 as usize..(ins.t0 + ins.tn) as usize]
        };
        for &t in ts {
            if t as usize <= i {
                blocks[block_of[t as usize] as usize].loop_head = true;
            }
        }
    }
    // Longest path to the next checkpoint: every edge into a non-checkpoint goes forward
    // (backward edges end at loop heads, exception edges at handlers), so one pass from the
    // last block to the first sees every successor before its predecessors.
    let nb = blocks.len();
    longest.clear();
    longest.resize(nb, 0);
    for b in (0..nb).rev() {
        let blk = blocks[b];
        let last = &insns[blk.end as usize - 1];
        let mut best = 0u32;
        let consider = |t: u32, best: &mut u32| {
            let tb = block_of[t as usize] as usize;
            if tb > b && !blocks[tb].checkpoint() {
                *best = (*best).max(longest[tb]);
            }
        };
        if matches!(last.flow, Flow::Next | Flow::Cond) && (blk.end as usize) < n {
            consider(blk.end, &mut best);
        }
        if last.flow == Flow::Ret {
            for &t in &ret_targets {
                consider(t, &mut best);
            }
        } else {
            for &t in &targets[last.t0 as usize..(last.t0 + last.tn) as usize] {
                consider(t, &mut best);
            }
        }
        longest[b] = blk.count().saturating_add(best);
    }
    for (b, blk) in blocks.iter_mut().enumerate() {
        blk.k = longest[b];
    }
    Ok(if blocks[0].checkpoint() {
        0
    } else {
        longest[0]
    })
}
