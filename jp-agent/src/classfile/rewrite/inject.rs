//! Phase 3, inject: the position-independent code the rewrite puts at the method's entry
//! and before each original instruction (see the contract): `Rt.enter` at the entry;
//! `Rt.caught` at a handler; `Rt.tick` (or `tickPending`) at a checkpoint; `Rt.count` (or
//! an `iinc` of the pending count) at a block's start; `Rt.flush` before a block's first
//! call; the context before a call that passes it; `Rt.at` before what may run Java code
//! while the thread's current context is stale; `Rt.exit` (or a variant) before a return.

use super::super::blocks::Block;
use super::super::cpool::CpAppender;
use super::super::error::RewriteError;
use super::super::insn::{self, Flow};
use super::method::Method;
use super::ops::{aload, astore, iinc, iload, invokestatic, istore, push_int};
use super::plan::{Plan, Sites};

/// The injected code of one method (buffers reused across methods).
#[derive(Default)]
pub(super) struct Injected {
    /// The entry sequence, before the first instruction.
    pub entry: Vec<u8>,
    /// What goes before instruction `i`: `prefix[prefix_at[i]..prefix_at[i + 1]]`.
    prefix: Vec<u8>,
    prefix_at: Vec<u32>,
}

impl Injected {
    /// The code injected before instruction `i`.
    pub fn before(&self, i: usize) -> &[u8] {
        &self.prefix[self.prefix_at[i] as usize..self.prefix_at[i + 1] as usize]
    }
}

/// Where the walk over the instructions is, for what it injects.
struct Walk {
    /// With a pending count: whether `acc` may be non-zero here (it is zero after a flush
    /// until the next block adds to it), so a block with several calls flushes once.
    unflushed: bool,
    /// Whether the thread's current context may not be this one here (only tracked when
    /// the body keeps it up to date itself): from a second body's start until an
    /// instruction that may run Java code stores it, on every path (`plan::stale_blocks`).
    stale: bool,
}

/// Generates the entry sequence and every instruction's prefix.
pub(super) fn inject(
    mt: &Method,
    plan: &Plan,
    sites: &Sites,
    cpa: &mut CpAppender,
    out: &mut Injected,
) -> Result<(), RewriteError> {
    out.entry.clear();
    entry_sequence(mt, plan, cpa, &mut out.entry)?;
    out.prefix.clear();
    out.prefix_at.clear();
    let mut walk = Walk {
        unflushed: false,
        stale: plan.second,
    };
    for (i, ins) in mt.code.insns.iter().enumerate() {
        out.prefix_at.push(out.prefix.len() as u32);
        let p = &mut out.prefix;
        if mt.blocks.leader[i] {
            let b = mt.blocks.block_of[i] as usize;
            walk.stale = sites.stale_in[b];
            block_start(&mt.blocks.blocks[b], plan, cpa, &mut walk, p)?;
        }
        if plan.pending && walk.unflushed && insn::is_invoke(ins.op) {
            // The callee may report, or the JVM may end (System.exit) below this frame:
            // the node holds every bytecode this activation ran so far.
            aload(p, plan.ctx);
            iload(p, plan.acc);
            invokestatic(p, plan.helpers.flush);
            istore(p, plan.acc);
            walk.unflushed = false;
        }
        if sites.passed_at[i] != 0 {
            // The context, the second body's last argument.
            aload(p, plan.ctx);
        } else if walk.stale && super::plan::may_run_java(mt.code.bytes, ins, mt.code.cp)? {
            aload(p, plan.ctx);
            invokestatic(p, plan.helpers.at);
            walk.stale = false;
        }
        if ins.flow == Flow::Return {
            before_return(plan, p);
        }
    }
    out.prefix_at.push(out.prefix.len() as u32);
    Ok(())
}

/// `[caller's context] mid ticks Rt.enter* astore ctx [iconst_0 istore acc]`.
fn entry_sequence(
    mt: &Method,
    plan: &Plan,
    cpa: &mut CpAppender,
    out: &mut Vec<u8>,
) -> Result<(), RewriteError> {
    if let Some(caller) = mt.input.second {
        aload(out, caller);
    }
    push_int(out, mt.input.mid as i32, cpa)?;
    push_int(out, mt.entry_ticks as i32, cpa)?;
    invokestatic(out, plan.helpers.enter);
    astore(out, plan.ctx);
    if plan.pending {
        out.push(insn::ICONST_0);
        istore(out, plan.acc);
    }
    Ok(())
}

/// A block's start: `caught` at a handler, the tick at a checkpoint, the count.
fn block_start(
    b: &Block,
    plan: &Plan,
    cpa: &mut CpAppender,
    walk: &mut Walk,
    p: &mut Vec<u8>,
) -> Result<(), RewriteError> {
    let h = &plan.helpers;
    if b.handler {
        aload(p, plan.ctx);
        invokestatic(p, h.caught);
        walk.stale = false;
    }
    if plan.pending {
        if b.checkpoint() {
            aload(p, plan.ctx);
            iload(p, plan.acc);
            push_int(p, b.k as i32, cpa)?;
            invokestatic(p, h.tick_pending);
            istore(p, plan.acc);
        }
        iinc(p, plan.acc, b.count());
        walk.unflushed = true;
    } else {
        if b.checkpoint() {
            aload(p, plan.ctx);
            push_int(p, b.k as i32, cpa)?;
            invokestatic(p, h.tick);
        }
        aload(p, plan.ctx);
        push_int(p, b.count() as i32, cpa)?;
        invokestatic(p, h.count);
    }
    Ok(())
}

/// The exit before a return instruction.
fn before_return(plan: &Plan, p: &mut Vec<u8>) {
    exit_call(plan, plan.helpers.exit, plan.helpers.exit_pending, p);
}

/// `aload ctx [iload acc] invokestatic` of an exit helper: `helper`, or with a pending
/// count `pending_helper`, which also adds it.
pub(super) fn exit_call(plan: &Plan, helper: u16, pending_helper: u16, p: &mut Vec<u8>) {
    aload(p, plan.ctx);
    if plan.pending {
        iload(p, plan.acc);
        invokestatic(p, pending_helper);
    } else {
        invokestatic(p, helper);
    }
}
