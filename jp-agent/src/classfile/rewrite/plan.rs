//! Phase 2, plan: what the rewrite of one method does before any byte is laid out — the
//! call sites that pass their context, which blocks must store the thread's current
//! context, whether a catch-all handler exists and what it covers, whether a pending count
//! is kept, and which runtime helpers the injected code calls.

use super::super::api::{Bba, ClassStats};
use super::super::blocks::BlockMap;
use super::super::cpool::{self, ConstPool, CpAppender};
use super::super::error::RewriteError;
use super::super::initthis;
use super::super::insn::{self, Code, Flow, Insn};
use super::method::{Method, MethodInput};

/// The Methodrefs of the runtime helpers (`jp/rt/Rt`) the injected code calls.
pub(super) struct Helpers {
    pub enter: u16,
    pub count: u16,
    pub tick: u16,
    pub caught: u16,
    pub exit: u16,
    /// The Class `jp/rt/Node` (the type of the context local in frames).
    pub node: u16,
    /// The pending-count helpers (0 when the method keeps no pending count).
    pub flush: u16,
    pub tick_pending: u16,
    pub exit_pending: u16,
    /// The catch-all's exit: `exit` and `exit_pending`, but in a second body the helpers
    /// that leave the current context alone (the frame that catches the exception stores
    /// it, and smaller code keeps a throw a few passed calls up inlined as a jump).
    pub thrown: u16,
    pub thrown_pending: u16,
    /// Rt.at, when the method keeps the thread's current context up to date itself.
    pub at: u16,
}

/// The decisions for one method.
pub(super) struct Plan {
    /// The local of the context (the original max_locals).
    pub ctx: u32,
    /// The local of the pending count, right after the context (used when `pending`).
    pub acc: u32,
    /// This is a second body (entered with its caller's context).
    pub second: bool,
    /// A catch-all handler ends the method's code (exits on an exception).
    pub catch_all: bool,
    /// Blocks add their bytecodes to the local `acc`, not to the node.
    pub pending: bool,
    /// Call sites that call a second body, passing their context.
    pub passes: usize,
    pub helpers: Helpers,
}

/// Per instruction and per block facts of the plan (buffers reused across methods).
#[derive(Default)]
pub(super) struct Sites {
    /// Per instruction: the second body's Methodref a call site calls instead (0: none).
    pub passed_at: Vec<u16>,
    /// Per block of a second body: whether it may start with the thread's current context
    /// not yet the body's own.
    pub stale_in: Vec<bool>,
    /// Per block: whether it stores the current context (an instruction that may run Java).
    clears: Vec<bool>,
    work: Vec<u32>,
    /// Per instruction of a constructor: `initthis` flags (whether `this` is initialized).
    pub this_init: Vec<u8>,
}

/// Plans the rewrite of `mt`. None: a second body is not possible (the first instruction
/// is a branch target, whose frame may type the slot the passed context arrives in).
pub(super) fn plan(
    mt: &Method,
    sites: &mut Sites,
    cpa: &mut CpAppender,
    stats: &mut ClassStats,
) -> Result<Option<Plan>, RewriteError> {
    let m = mt.input;
    let code = &mt.code;
    // Call sites that pass the context, and whether this body must keep the thread's current
    // context up to date itself (docs/agent-design.md, "Second bodies: passed contexts"): a second body
    // never sets it at entry. A call that passes the context leaves it as it was (the
    // callee's exit puts back what the callee stored), so other bodies never need to.
    sites.passed_at.clear();
    for ins in code.insns {
        let t = passed_target(code, ins, m)?;
        sites.passed_at.push(t);
    }
    let passes = sites.passed_at.iter().filter(|&&t| t != 0).count();
    if m.second.is_some() && (code.targets.contains(&0) || code.handlers.iter().any(|h| h.2 == 0)) {
        return Ok(None);
    }
    let second = m.second.is_some();
    let stores = stale_blocks(sites, code, mt.blocks, second)?;
    // Whether a second body's current context may be its own when it returns, so that its
    // exit must put the caller's back: it stores it (`Rt.at`, a handler's `caught`) or a
    // callee it passed the context to put it back to this body's. A leaf that does neither
    // returns with `thrownFrom` (nothing to put back: a load and a compare less a call).
    let restores = stores || passes > 0 || !code.handlers.is_empty();
    let catch_all = catch_all_exists(mt, sites, stats)?;

    // The pending count: blocks add their bytecodes to an int local (`acc`, after the
    // context) instead of the node's field; it goes into the node before every call (first
    // call of a block), at loop heads and handlers when the thread reports or the local
    // grows large, at returns and in the catch-all. So every way out of the method must pass
    // through code that adds it: the returns, and the catch-all for exceptions (a handler
    // of the method itself keeps the local: an exception midway through a block loses
    // nothing). Constructors whose catch-all cannot cover the code before the super
    // call, and methods without one, count into the node at every block instead.
    // Only with the precise BBA, where blocks end at every instruction that may throw (a
    // count per field or array access): with the default BBA the pending count measured
    // slower (docs/journal/pending-count.md).
    let pending = m.bba == Bba::Precise && catch_all && !m.sig.is_init;
    let helpers = helpers(m, cpa, restores, pending)?;
    let ctx = mt.attr.max_locals;
    Ok(Some(Plan {
        ctx,
        acc: ctx + 1,
        second,
        catch_all,
        pending,
        passes,
        helpers,
    }))
}

/// Whether the method gets a catch-all handler: always, but in a constructor only if the
/// code after the super call is known (and reached).
fn catch_all_exists(
    mt: &Method,
    sites: &mut Sites,
    stats: &mut ClassStats,
) -> Result<bool, RewriteError> {
    if !mt.input.sig.is_init {
        return Ok(true);
    }
    let decided = initthis::analyze(
        &mt.code,
        mt.blocks,
        mt.input.sig.this_is_object,
        &mut sites.this_init,
    )?;
    if !decided {
        stats.methods_without_catch_all += 1;
        return Ok(false);
    }
    Ok(sites.this_init.contains(&initthis::REACHED_INIT))
}

/// The helpers of `Rt` the method calls (appended to the constant pool in this order).
fn helpers(
    m: &MethodInput,
    cpa: &mut CpAppender,
    restores: bool,
    pending: bool,
) -> Result<Helpers, RewriteError> {
    let second = m.second.is_some();
    let if_pending = |cpa: &mut CpAppender, name: &'static str, desc: &'static str| {
        if pending {
            cpa.rt_method(name, desc)
        } else {
            Ok(0)
        }
    };
    Ok(Helpers {
        enter: if second {
            cpa.rt_method("enterFrom", "(Ljp/rt/Node;II)Ljp/rt/Node;")?
        } else if m.out_of_line_entry {
            cpa.rt_method("enterOutOfLine", "(II)Ljp/rt/Node;")?
        } else {
            cpa.rt_method("enter", "(II)Ljp/rt/Node;")?
        },
        count: cpa.rt_method("count", "(Ljp/rt/Node;I)V")?,
        tick: cpa.rt_method("tick", "(Ljp/rt/Node;I)V")?,
        caught: cpa.rt_method("caught", "(Ljp/rt/Node;)V")?,
        exit: exit_helper(cpa, second, restores, false)?,
        node: cpa.class(b"jp/rt/Node")?,
        flush: if_pending(cpa, "flush", "(Ljp/rt/Node;I)I")?,
        tick_pending: if_pending(cpa, "tickPending", "(Ljp/rt/Node;II)I")?,
        exit_pending: if pending {
            exit_helper(cpa, second, restores, true)?
        } else {
            0
        },
        thrown: exit_helper(cpa, second, false, false)?,
        thrown_pending: if pending {
            exit_helper(cpa, second, false, true)?
        } else {
            0
        },
        // A second body keeps the thread's current context up to date itself.
        at: if second {
            cpa.rt_method("at", "(Ljp/rt/Node;)V")?
        } else {
            0
        },
    })
}

/// The helper that leaves a body (`pending`: the one that also adds the pending count):
/// `Rt.exit` for a body entered the usual way; for a second body `Rt.exitFrom`, which puts
/// the caller's current context back (`restore`), or `Rt.thrownFrom`, which leaves it alone.
fn exit_helper(
    cpa: &mut CpAppender,
    second: bool,
    restore: bool,
    pending: bool,
) -> Result<u16, RewriteError> {
    let name = match (second, restore, pending) {
        (false, _, false) => "exit",
        (false, _, true) => "exitPending",
        (true, true, false) => "exitFrom",
        (true, true, true) => "exitFromPending",
        (true, false, false) => "thrownFrom",
        (true, false, true) => "thrownFromPending",
    };
    let desc = if pending {
        "(Ljp/rt/Node;I)V"
    } else {
        "(Ljp/rt/Node;)V"
    };
    cpa.rt_method(name, desc)
}

/// The second body a call site calls instead, passing its context: an invokestatic,
/// invokespecial or invokevirtual of a Methodref of this very class naming one of its
/// methods that has a second body (static for invokestatic, private otherwise). 0: none.
fn passed_target(code: &Code, ins: &Insn, m: &MethodInput) -> Result<u16, RewriteError> {
    if m.passed.is_empty()
        || !matches!(
            ins.op,
            insn::INVOKESTATIC | insn::INVOKESPECIAL | insn::INVOKEVIRTUAL
        )
    {
        return Ok(0);
    }
    let o = ins.off as usize;
    let idx = u16::from_be_bytes([code.bytes[o + 1], code.bytes[o + 2]]);
    if code.cp.tag(idx)? != cpool::METHODREF {
        return Ok(0);
    }
    let (owner, name, desc) = code.cp.member(idx)?;
    if code.cp.utf8_bytes(code.cp.class_name_index(owner)?)? != m.class_name {
        return Ok(0);
    }
    let is_static = ins.op == insn::INVOKESTATIC;
    Ok(m.passed
        .iter()
        .find(|p| p.is_static == is_static && p.name == name && p.desc == desc)
        .map_or(0, |p| p.methodref))
}

/// Which blocks of a second body may start with the thread's current context not its own
/// (`sites.stale_in`): those reached from the body's start through blocks where no
/// instruction stores it (`Rt.at` goes before each instruction that may run Java code,
/// including every call that does not pass the context; a call that passes it leaves it
/// as it was, and a handler's `Rt.caught` stores it). All false for other bodies. With
/// subroutines (`ret` returns to any caller), every block counts as stale. Returns whether
/// the body stores it anywhere with `Rt.at` (a stale block with an instruction that may
/// run Java code).
fn stale_blocks(
    sites: &mut Sites,
    code: &Code,
    blocks: &BlockMap,
    second: bool,
) -> Result<bool, RewriteError> {
    let n = blocks.blocks.len();
    sites.stale_in.clear();
    sites.stale_in.resize(n, false);
    if !second || n == 0 {
        return Ok(false);
    }
    if code
        .insns
        .iter()
        .any(|ins| matches!(ins.flow, Flow::Jsr | Flow::Ret))
    {
        sites.stale_in.fill(true);
        return Ok(true);
    }
    sites.clears.clear();
    for b in &blocks.blocks {
        let mut clears = false;
        for i in b.start as usize..b.end as usize {
            if sites.passed_at[i] == 0 && may_run_java(code.bytes, &code.insns[i], code.cp)? {
                clears = true;
                break;
            }
        }
        sites.clears.push(clears);
    }
    spread_stale(sites, code, blocks);
    Ok(sites
        .stale_in
        .iter()
        .zip(&sites.clears)
        .any(|(&stale, &clears)| stale && clears))
}

/// Marks stale every block reached from the entry through blocks that do not store the
/// current context (handlers excepted: `Rt.caught` stores it).
fn spread_stale(sites: &mut Sites, code: &Code, blocks: &BlockMap) {
    let entry = blocks.block_of[0];
    sites.stale_in[entry as usize] = true;
    sites.work.clear();
    sites.work.push(entry);
    while let Some(b) = sites.work.pop() {
        let b = b as usize;
        if sites.clears[b] {
            continue;
        }
        let end = blocks.blocks[b].end as usize;
        let last = &code.insns[end - 1];
        let falls = matches!(last.flow, Flow::Next | Flow::Cond) && end < code.insns.len();
        for t in code
            .targets_of(last)
            .iter()
            .map(|&t| t as usize)
            .chain(falls.then_some(end))
        {
            let c = blocks.block_of[t] as usize;
            if !blocks.blocks[c].handler && !sites.stale_in[c] {
                sites.stale_in[c] = true;
                sites.work.push(c as u32);
            }
        }
    }
}

/// Whether an instruction may run Java code on this thread (a call, or a class loaded or
/// initialized while it resolves): where a method entered the usual way could start.
pub(super) fn may_run_java(code: &[u8], ins: &Insn, cp: &ConstPool) -> Result<bool, RewriteError> {
    if insn::is_invoke(ins.op) {
        return Ok(true);
    }
    if !insn::may_resolve(ins.op) {
        return Ok(false);
    }
    let o = ins.off as usize;
    let idx = match ins.op {
        0x12 => code[o + 1] as u16,
        0x13 | 0x14 => u16::from_be_bytes([code[o + 1], code[o + 2]]),
        _ => return Ok(true),
    };
    // ldc of a number or a string resolves without Java code.
    Ok(matches!(
        cp.tag(idx)?,
        cpool::CLASS | cpool::METHOD_HANDLE | cpool::METHOD_TYPE | cpool::DYNAMIC
    ))
}
