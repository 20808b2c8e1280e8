//! Rebuilds the `Code` attribute of one instrumented method (see the contract): entry
//! sequence, block prefixes, exits, catch-all handler, and every byte offset remapped.

use super::blocks::{self, Block};
use super::cpool::{self, ConstPool, CpAppender};
use super::frames::{self, Frames, VType};
use super::infer;
use super::initthis;
use super::insn::{self, Flow, Insn};
use super::reader::{put_u16, put_u32, Reader};
use super::typeann;
use super::{Bba, ClassStats, RewriteError};

/// What one method became.
pub(crate) enum Outcome {
    /// The new `Code` attribute body (everything after attribute_length).
    Rewritten(Vec<u8>),
    TooLarge,
    Unwidenable,
    /// A second body is not possible: the first instruction is a branch target, whose
    /// frame may type the slot the passed context arrives in.
    NoSecondBody,
}

/// A method of the class with a second body `NAME$jp(ARGS, jp/rt/Node)`, which the class's
/// own call sites to it call instead, passing their context.
pub(crate) struct Passed {
    pub name: Vec<u8>,
    pub desc: Vec<u8>,
    pub is_static: bool,
    /// The Methodref of the second body.
    pub methodref: u16,
}

/// The class-level facts a method rewrite needs.
pub(crate) struct MethodInput<'a> {
    pub cp: &'a ConstPool<'a>,
    pub major: u16,
    pub this_class: u16,
    pub this_is_object: bool,
    pub is_static: bool,
    pub is_init: bool,
    pub desc: &'a [u8],
    pub label: &'a dyn Fn() -> String,
    pub bba: Bba,
    /// Enter through `Rt.enterOutOfLine` (see `RewriteOptions`).
    pub out_of_line_entry: bool,
    pub mid: u32,
    /// The second body: Some(the local slot of the caller's context, right after the
    /// arguments); None for the method's own body.
    pub second: Option<u32>,
    /// The class's methods that have a second body (their call sites pass the context).
    pub passed: &'a [Passed],
    /// The class's name (the owner of the call sites that may pass the context).
    pub class_name: &'a [u8],
    /// Test only: widen every branch (exercises goto_w and the inferred frames everywhere).
    pub force_wide: bool,
}

/// Buffers reused across methods (no allocation per instruction).
#[derive(Default)]
pub(crate) struct Scratch {
    insns: Vec<Insn>,
    targets: Vec<u32>,
    map: Vec<u32>,
    leader: Vec<bool>,
    blocks: Vec<Block>,
    block_of: Vec<u32>,
    handlers: Vec<(u32, u32, u32)>,
    flags: Vec<u8>,
    frames: Frames,
    prefix: Vec<u8>,
    prefix_at: Vec<u32>,
    new_off: Vec<u32>,
    ins_off: Vec<u32>,
    wide: Vec<bool>,
    block_starts: Vec<u32>,
    longest: Vec<u32>,
    /// Handlers (instruction indices) that get a stub: catch-any, covering themselves.
    self_cover: Vec<u32>,
    /// Per instruction: the second body's Methodref a call site calls instead (0: none).
    passed_at: Vec<u16>,
    /// Per block of a second body: whether it may start with the thread's current context
    /// not yet the body's own.
    stale_in: Vec<bool>,
    /// Per block: whether it stores the current context (an instruction that may run Java).
    clears: Vec<bool>,
    work: Vec<u32>,
}

struct Refs {
    enter: u16,
    count: u16,
    tick: u16,
    caught: u16,
    exit: u16,
    node: u16,
    /// The pending-count helpers (0 when the method keeps no pending count).
    flush: u16,
    tick_pending: u16,
    exit_pending: u16,
    /// The catch-all's exit: `exit` and `exit_pending`, but in a second body the helpers
    /// that leave the current context alone (the frame that catches the exception stores
    /// it, and smaller code keeps a throw a few passed calls up inlined as a jump).
    thrown: u16,
    thrown_pending: u16,
    /// Rt.at, when the method keeps the thread's current context up to date itself.
    at: u16,
}

fn push_int(out: &mut Vec<u8>, v: i32, cp: &mut CpAppender) -> Result<(), RewriteError> {
    match v {
        -1..=5 => out.push((0x03 + v) as u8),
        -128..=127 => out.extend_from_slice(&[0x10, v as i8 as u8]),
        -32768..=32767 => {
            out.push(0x11);
            out.extend_from_slice(&(v as i16).to_be_bytes());
        }
        _ => {
            let i = cp.int(v)?;
            if i <= 255 {
                out.extend_from_slice(&[0x12, i as u8]);
            } else {
                out.push(0x13);
                put_u16(out, i);
            }
        }
    }
    Ok(())
}

fn local_op(out: &mut Vec<u8>, short_base: u8, op: u8, l: u32) {
    if l < 4 {
        out.push(short_base + l as u8);
    } else if l < 256 {
        out.extend_from_slice(&[op, l as u8]);
    } else {
        out.extend_from_slice(&[insn::WIDE, op]);
        put_u16(out, l as u16);
    }
}

fn aload(out: &mut Vec<u8>, l: u32) {
    local_op(out, insn::ALOAD_0, insn::ALOAD, l);
}

fn iload(out: &mut Vec<u8>, l: u32) {
    local_op(out, insn::ILOAD_0, insn::ILOAD, l);
}

fn istore(out: &mut Vec<u8>, l: u32) {
    local_op(out, insn::ISTORE_0, insn::ISTORE, l);
}

/// `local += n` (n ≥ 0), in as few `iinc`s as its size needs.
fn iinc(out: &mut Vec<u8>, l: u32, mut n: u32) {
    while n > 0 {
        let step = n.min(i16::MAX as u32);
        if l < 256 && step <= i8::MAX as u32 {
            out.extend_from_slice(&[insn::IINC, l as u8, step as u8]);
        } else {
            out.extend_from_slice(&[insn::WIDE, insn::IINC]);
            put_u16(out, l as u16);
            put_u16(out, step as u16);
        }
        n -= step;
    }
}

fn invokestatic(out: &mut Vec<u8>, m: u16) {
    out.push(insn::INVOKESTATIC);
    put_u16(out, m);
}

fn invert(op: u8) -> u8 {
    match op {
        0xc6 => 0xc7,
        0xc7 => 0xc6,
        _ if (op - 0x99).is_multiple_of(2) => op + 1,
        _ => op - 1,
    }
}

/// The second body a call site calls instead, passing its context: an invokestatic,
/// invokespecial or invokevirtual of a Methodref of this very class naming one of its
/// methods that has a second body (static for invokestatic, private otherwise). 0: none.
fn passed_target(code: &[u8], ins: &Insn, m: &MethodInput) -> Result<u16, RewriteError> {
    if m.passed.is_empty()
        || !matches!(
            ins.op,
            insn::INVOKESTATIC | insn::INVOKESPECIAL | insn::INVOKEVIRTUAL
        )
    {
        return Ok(0);
    }
    let o = ins.off as usize;
    let idx = u16::from_be_bytes([code[o + 1], code[o + 2]]);
    if m.cp.tag(idx)? != cpool::METHODREF {
        return Ok(0);
    }
    let (owner, name, desc) = m.cp.member(idx)?;
    if m.cp.utf8_bytes(m.cp.class_name_index(owner)?)? != m.class_name {
        return Ok(0);
    }
    let is_static = ins.op == insn::INVOKESTATIC;
    Ok(m.passed
        .iter()
        .find(|p| p.is_static == is_static && p.name == name && p.desc == desc)
        .map_or(0, |p| p.methodref))
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

/// Which blocks of a second body may start with the thread's current context not its own
/// (`s.stale_in`): those reached from the body's start through blocks where no instruction
/// stores it (`Rt.at` goes before each instruction that may run Java code, including every
/// call that does not pass the context; a call that passes it leaves it as it was, and a
/// handler's `Rt.caught` stores it). All false for other bodies. With subroutines (`ret`
/// returns to any caller), every block counts as stale. Returns whether the body stores it
/// anywhere with `Rt.at` (a stale block with an instruction that may run Java code).
fn stale_blocks(
    s: &mut Scratch,
    code: &[u8],
    cp: &ConstPool,
    second: bool,
) -> Result<bool, RewriteError> {
    let n = s.blocks.len();
    s.stale_in.clear();
    s.stale_in.resize(n, false);
    if !second || n == 0 {
        return Ok(false);
    }
    if s.insns
        .iter()
        .any(|ins| matches!(ins.flow, Flow::Jsr | Flow::Ret))
    {
        s.stale_in.fill(true);
        return Ok(true);
    }
    s.clears.clear();
    for b in &s.blocks {
        let mut clears = false;
        for i in b.start as usize..b.end as usize {
            if s.passed_at[i] == 0 && may_run_java(code, &s.insns[i], cp)? {
                clears = true;
                break;
            }
        }
        s.clears.push(clears);
    }
    let entry = s.block_of[0];
    s.stale_in[entry as usize] = true;
    s.work.clear();
    s.work.push(entry);
    while let Some(b) = s.work.pop() {
        let b = b as usize;
        if s.clears[b] {
            continue;
        }
        let end = s.blocks[b].end as usize;
        let last = &s.insns[end - 1];
        let falls = matches!(last.flow, Flow::Next | Flow::Cond) && end < s.insns.len();
        let targets = &s.targets[last.t0 as usize..(last.t0 + last.tn) as usize];
        for t in targets
            .iter()
            .map(|&t| t as usize)
            .chain(falls.then_some(end))
        {
            let c = s.block_of[t] as usize;
            if !s.blocks[c].handler && !s.stale_in[c] {
                s.stale_in[c] = true;
                s.work.push(c as u32);
            }
        }
    }
    Ok(s.stale_in
        .iter()
        .zip(&s.clears)
        .any(|(&stale, &clears)| stale && clears))
}

/// Whether an instruction may run Java code on this thread (a call, or a class loaded or
/// initialized while it resolves): where a method entered the usual way could start.
fn may_run_java(code: &[u8], ins: &Insn, cp: &ConstPool) -> Result<bool, RewriteError> {
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

/// Block structure of a `Code` attribute body: (entry ticks, blocks).
pub(crate) fn describe(
    body: &[u8],
    cp: &ConstPool,
    bba: Bba,
    label: &dyn Fn() -> String,
    s: &mut Scratch,
) -> Result<(u32, Vec<super::BlockInfo>), RewriteError> {
    let mut r = Reader::new(body, 4);
    let code_len = r.u32()? as usize;
    let code = r.bytes(code_len)?;
    let n_exc = r.u16()? as usize;
    let exc = r.bytes(8 * n_exc)?;
    insn::decode(code, label, &mut s.insns, &mut s.targets, &mut s.map)?;
    resolve_handlers(exc, s, label)?;
    let entry = blocks::split(
        &s.insns,
        &s.targets,
        &s.handlers,
        code,
        cp,
        bba,
        &mut s.leader,
        &mut s.blocks,
        &mut s.block_of,
        &mut s.longest,
    )?;
    let infos = s
        .blocks
        .iter()
        .map(|b| super::BlockInfo {
            offset: s.insns[b.start as usize].off,
            instructions: b.count(),
            loop_head: b.loop_head,
            handler: b.handler,
            ticks: b.k,
        })
        .collect();
    Ok((entry, infos))
}

/// Instruction index of an original offset (`allow_end`: the code's end is allowed).
fn index_of(
    s: &Scratch,
    off: usize,
    allow_end: bool,
    label: &dyn Fn() -> String,
) -> Result<u32, RewriteError> {
    let n = s.insns.len();
    match s.map.get(off) {
        Some(&i) if i != u32::MAX && (allow_end || (i as usize) < n) => Ok(i),
        _ => Err(RewriteError::BadCode {
            method: label(),
            what: format!("offset {off} is not an instruction"),
        }),
    }
}

fn resolve_handlers(
    exc: &[u8],
    s: &mut Scratch,
    label: &dyn Fn() -> String,
) -> Result<(), RewriteError> {
    s.handlers.clear();
    for e in exc.chunks_exact(8) {
        let sp = index_of(s, u16::from_be_bytes([e[0], e[1]]) as usize, false, label)?;
        let ep = index_of(s, u16::from_be_bytes([e[2], e[3]]) as usize, true, label)?;
        let hp = index_of(s, u16::from_be_bytes([e[4], e[5]]) as usize, false, label)?;
        if sp >= ep {
            return Err(RewriteError::BadCode {
                method: label(),
                what: "empty exception range".into(),
            });
        }
        s.handlers.push((sp, ep, hp));
    }
    Ok(())
}

/// Rewrites the body of a `Code` attribute.
pub(crate) fn rewrite_code(
    body: &[u8],
    m: &MethodInput,
    cpa: &mut CpAppender,
    s: &mut Scratch,
    stats: &mut ClassStats,
) -> Result<Outcome, RewriteError> {
    let cp = m.cp;
    let bad = |what: &str| RewriteError::BadCode {
        method: (m.label)(),
        what: what.to_string(),
    };
    let mut r = Reader::new(body, 0);
    let max_stack = r.u16()? as u32;
    let max_locals = r.u16()? as u32;
    let code_len = r.u32()? as usize;
    if code_len == 0 || code_len > 65535 {
        return Err(bad("code length 0 or over 65535"));
    }
    let code = r.bytes(code_len)?;
    let n_exc = r.u16()? as usize;
    let exc = r.bytes(8 * n_exc)?;
    let n_attrs = r.u16()?;
    let attrs_start = r.pos;
    for _ in 0..n_attrs {
        r.skip(2)?;
        let len = r.u32()? as usize;
        r.skip(len)?;
    }
    if r.pos != body.len() {
        return Err(bad("Code attribute length mismatch"));
    }
    if max_stack + 3 > 0xFFFF || max_locals + 2 > 0xFFFF {
        return Ok(Outcome::TooLarge);
    }
    let l = max_locals;

    insn::decode(code, m.label, &mut s.insns, &mut s.targets, &mut s.map)?;
    let n = s.insns.len();
    resolve_handlers(exc, s, m.label)?;
    let entry_k = blocks::split(
        &s.insns,
        &s.targets,
        &s.handlers,
        code,
        cp,
        m.bba,
        &mut s.leader,
        &mut s.blocks,
        &mut s.block_of,
        &mut s.longest,
    )?;

    // Call sites that pass the context, and whether this body must keep the thread's current
    // context up to date itself (jp-agent/README-dev.md, "Passed contexts"): a second body
    // never sets it at entry. A call that passes the context leaves it as it was (the
    // callee's exit puts back what the callee stored), so other bodies never need to.
    s.passed_at.clear();
    for ins in &s.insns {
        let t = passed_target(code, ins, m)?;
        s.passed_at.push(t);
    }
    let passes = s.passed_at.iter().filter(|&&t| t != 0).count();
    if m.second.is_some() && (s.targets.contains(&0) || s.handlers.iter().any(|h| h.2 == 0)) {
        return Ok(Outcome::NoSecondBody);
    }
    let keeps_current = m.second.is_some();
    let stores = stale_blocks(s, code, cp, keeps_current)?;
    // Whether a second body's current context may be its own when it returns, so that its
    // exit must put the caller's back: it stores it (`Rt.at`, a handler's `caught`) or a
    // callee it passed the context to put it back to this body's. A leaf that does neither
    // returns with `thrownFrom` (nothing to put back: a load and a compare less a call).
    let restores = stores || passes > 0 || !s.handlers.is_empty();

    // Which instructions the catch-all covers.
    let mut catch_all = true;
    if m.is_init {
        s.block_starts.clear();
        s.block_starts.extend(s.blocks.iter().map(|b| b.start));
        let ok = initthis::analyze(
            &s.insns,
            &s.targets,
            &s.handlers,
            &s.block_starts,
            &s.block_of,
            code,
            cp,
            m.this_is_object,
            &mut s.flags,
        )?;
        if !ok {
            catch_all = false;
            stats.methods_without_catch_all += 1;
        } else if !s.flags.contains(&initthis::REACHED_INIT) {
            catch_all = false;
        }
    }

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
    // slower (README-dev.md, "Performance work").
    let pending = m.bba == Bba::Precise && catch_all && !m.is_init;
    let acc = l + 1;
    let second = m.second.is_some();
    let refs = Refs {
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
        flush: if pending {
            cpa.rt_method("flush", "(Ljp/rt/Node;I)I")?
        } else {
            0
        },
        tick_pending: if pending {
            cpa.rt_method("tickPending", "(Ljp/rt/Node;II)I")?
        } else {
            0
        },
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
        at: if keeps_current {
            cpa.rt_method("at", "(Ljp/rt/Node;)V")?
        } else {
            0
        },
    };

    // Position-independent code inserted before each instruction.
    let mut entry = Vec::with_capacity(16);
    if let Some(caller) = m.second {
        aload(&mut entry, caller);
    }
    push_int(&mut entry, m.mid as i32, cpa)?;
    push_int(&mut entry, entry_k as i32, cpa)?;
    invokestatic(&mut entry, refs.enter);
    local_op(&mut entry, insn::ASTORE_0, insn::ASTORE, l);
    if pending {
        entry.push(insn::ICONST_0);
        istore(&mut entry, acc);
    }
    s.prefix.clear();
    s.prefix_at.clear();
    // With a pending count: whether `acc` may be non-zero here (it is zero after a flush
    // until the next block adds to it), so a block with several calls flushes once.
    let mut unflushed = false;
    // Whether the thread's current context may not be this one here (only tracked when the
    // body keeps it up to date itself): from a second body's start until an instruction that
    // may run Java code stores it, on every path (`stale_blocks`).
    let mut stale = second;
    for (i, ins) in s.insns.iter().enumerate() {
        s.prefix_at.push(s.prefix.len() as u32);
        if s.leader[i] {
            let b = s.blocks[s.block_of[i] as usize];
            stale = s.stale_in[s.block_of[i] as usize];
            if b.handler {
                aload(&mut s.prefix, l);
                invokestatic(&mut s.prefix, refs.caught);
                stale = false;
            }
            if pending {
                if b.checkpoint() {
                    aload(&mut s.prefix, l);
                    iload(&mut s.prefix, acc);
                    push_int(&mut s.prefix, b.k as i32, cpa)?;
                    invokestatic(&mut s.prefix, refs.tick_pending);
                    istore(&mut s.prefix, acc);
                }
                iinc(&mut s.prefix, acc, b.count());
                unflushed = true;
            } else {
                if b.checkpoint() {
                    aload(&mut s.prefix, l);
                    push_int(&mut s.prefix, b.k as i32, cpa)?;
                    invokestatic(&mut s.prefix, refs.tick);
                }
                aload(&mut s.prefix, l);
                push_int(&mut s.prefix, b.count() as i32, cpa)?;
                invokestatic(&mut s.prefix, refs.count);
            }
        }
        if pending && unflushed && insn::is_invoke(ins.op) {
            // The callee may report, or the JVM may end (System.exit) below this frame:
            // the node holds every bytecode this activation ran so far.
            aload(&mut s.prefix, l);
            iload(&mut s.prefix, acc);
            invokestatic(&mut s.prefix, refs.flush);
            istore(&mut s.prefix, acc);
            unflushed = false;
        }
        if s.passed_at[i] != 0 {
            // The context, the second body's last argument.
            aload(&mut s.prefix, l);
        } else if stale && may_run_java(code, ins, cp)? {
            aload(&mut s.prefix, l);
            invokestatic(&mut s.prefix, refs.at);
            stale = false;
        }
        if ins.flow == Flow::Return {
            aload(&mut s.prefix, l);
            if pending {
                iload(&mut s.prefix, acc);
                invokestatic(&mut s.prefix, refs.exit_pending);
            } else {
                invokestatic(&mut s.prefix, refs.exit);
            }
        }
    }
    s.prefix_at.push(s.prefix.len() as u32);

    // Layout, widening branches until every offset fits.
    s.wide.clear();
    s.wide.clear();
    s.wide.extend(
        s.insns
            .iter()
            .map(|ins| m.force_wide && ins.len == 3 && ins.tn == 1),
    );
    s.new_off.clear();
    s.new_off.resize(n + 1, 0);
    s.ins_off.clear();
    s.ins_off.resize(n, 0);
    // Frames for the instructions after widened conditional branches.
    let mut extra: Vec<Extra> = Vec::new();
    let end = loop {
        let mut pos = entry.len() as u64;
        for (i, ins) in s.insns.iter().enumerate() {
            s.new_off[i] = pos as u32;
            pos += (s.prefix_at[i + 1] - s.prefix_at[i]) as u64;
            s.ins_off[i] = pos as u32;
            pos += match ins.op {
                insn::TABLESWITCH | insn::LOOKUPSWITCH => {
                    let rest = ins.len - 1 - insn::switch_pad(ins.off);
                    1 + insn::switch_pad(pos as u32) + rest
                }
                insn::GOTO | insn::JSR if s.wide[i] => 5,
                _ if ins.flow == Flow::Cond && s.wide[i] => 8,
                _ => ins.len,
            } as u64;
            if pos > 0x10_0000 {
                return Ok(Outcome::TooLarge);
            }
        }
        s.new_off[n] = pos as u32;
        let mut changed = false;
        if pos > 0x7FFF {
            for (i, ins) in s.insns.iter().enumerate() {
                if ins.len == 3 && ins.tn == 1 && !s.wide[i] {
                    let t = s.targets[ins.t0 as usize] as usize;
                    let d = s.new_off[t] as i64 - s.ins_off[i] as i64;
                    if d < i16::MIN as i64 || d > i16::MAX as i64 {
                        s.wide[i] = true;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break pos as u32;
        }
    };
    if m.major >= 50
        && s.insns
            .iter()
            .zip(&s.wide)
            .any(|(ins, &w)| w && ins.flow == Flow::Cond)
    {
        match fallthrough_frames(body, attrs_start, n_attrs, code, m, s, cpa)? {
            Some(f) => extra = f,
            None => return Ok(Outcome::Unwidenable),
        }
    }
    let local_op_len = |l: u32| -> usize {
        if l < 4 {
            1
        } else if l < 256 {
            2
        } else {
            4
        }
    };
    let catch_all_code = if catch_all {
        4 + local_op_len(l) + if pending { local_op_len(acc) } else { 0 }
    } else {
        0
    };
    // Handlers that catch anything and cover their own first instruction (javac's handler
    // around a synchronized block's monitorexit). Their injected first block (caught, tick,
    // count: calls, which may throw) must not be covered by the handler itself, or C1
    // refuses the method ("exception handler covers itself") and it runs interpreted until
    // C2 takes it, much later. Nor may it be left to the catch-all: that handler is also
    // reached with no monitor held, and HotSpot then finds the monitors unbalanced and
    // compiles the method with neither compiler. So a 5-byte stub (`goto_w` to the
    // original handler code) catches what the injected block throws, with the monitors of
    // the handler: one stub per such handler, after the catch-all.
    s.self_cover.clear();
    for (k, &(sp, ep, hp)) in s.handlers.iter().enumerate() {
        if (sp..ep).contains(&hp)
            && exc[8 * k + 6..8 * k + 8] == [0, 0]
            && !s.self_cover.contains(&hp)
        {
            s.self_cover.push(hp);
        }
    }
    let stubs_at = end as usize + catch_all_code;
    let total = stubs_at + 5 * s.self_cover.len();
    if total > 65535 {
        return Ok(Outcome::TooLarge);
    }

    // Emit the code.
    let mut out = Vec::with_capacity(body.len() + total + 64);
    // tickPending and enterFrom take three stack slots, the other helpers two.
    put_u16(
        &mut out,
        (max_stack + if pending || second { 3 } else { 2 }) as u16,
    );
    put_u16(&mut out, (l + if pending { 2 } else { 1 }) as u16);
    put_u32(&mut out, total as u32);
    let cstart = out.len();
    out.extend_from_slice(&entry);
    for (i, ins) in s.insns.iter().enumerate() {
        out.extend_from_slice(&s.prefix[s.prefix_at[i] as usize..s.prefix_at[i + 1] as usize]);
        let pos = (out.len() - cstart) as u32;
        let o = ins.off as usize;
        let tgt = |k: u32| s.new_off[s.targets[(ins.t0 + k) as usize] as usize] as i64 - pos as i64;
        match ins.op {
            insn::TABLESWITCH | insn::LOOKUPSWITCH => {
                out.push(ins.op);
                out.extend(std::iter::repeat_n(0u8, insn::switch_pad(pos) as usize));
                let base = o + 1 + insn::switch_pad(ins.off) as usize;
                put_u32(&mut out, tgt(0) as i32 as u32);
                if ins.op == insn::TABLESWITCH {
                    out.extend_from_slice(&code[base + 4..base + 12]);
                    for k in 1..ins.tn {
                        put_u32(&mut out, tgt(k) as i32 as u32);
                    }
                } else {
                    out.extend_from_slice(&code[base + 4..base + 8]);
                    for k in 1..ins.tn {
                        let kb = base + 8 + 8 * (k as usize - 1);
                        out.extend_from_slice(&code[kb..kb + 4]);
                        put_u32(&mut out, tgt(k) as i32 as u32);
                    }
                }
            }
            insn::GOTO_W | insn::JSR_W => {
                out.push(ins.op);
                put_u32(&mut out, tgt(0) as i32 as u32);
            }
            _ if s.passed_at[i] != 0 => {
                out.push(ins.op);
                put_u16(&mut out, s.passed_at[i]);
            }
            _ if ins.tn == 1 => {
                if !s.wide[i] {
                    out.push(ins.op);
                    out.extend_from_slice(&(tgt(0) as i16).to_be_bytes());
                } else if ins.op == insn::GOTO || ins.op == insn::JSR {
                    out.push(if ins.op == insn::GOTO {
                        insn::GOTO_W
                    } else {
                        insn::JSR_W
                    });
                    put_u32(&mut out, tgt(0) as i32 as u32);
                } else {
                    out.extend_from_slice(&[invert(ins.op), 0, 8, insn::GOTO_W]);
                    put_u32(&mut out, (tgt(0) - 3) as i32 as u32);
                }
            }
            _ => out.extend_from_slice(&code[o..o + ins.len as usize]),
        }
    }
    if out.len() - cstart != end as usize {
        return Err(bad("internal layout mismatch"));
    }
    if catch_all {
        aload(&mut out, l);
        if pending {
            iload(&mut out, acc);
            invokestatic(&mut out, refs.thrown_pending);
        } else {
            invokestatic(&mut out, refs.thrown);
        }
        out.push(insn::ATHROW);
    }
    for &hp in &s.self_cover {
        let at = (out.len() - cstart) as i64;
        out.push(insn::GOTO_W);
        put_u32(&mut out, (s.ins_off[hp as usize] as i64 - at) as i32 as u32);
    }
    if out.len() - cstart != total {
        return Err(bad("internal layout mismatch"));
    }

    // Exception table: originals first (remapped), the catch-all last.
    let exc_count_at = out.len();
    put_u16(&mut out, 0);
    let mut n_out = 0u32;
    // Where each original entry went (a self-covering one becomes several).
    let mut exc_index: Vec<u16> = Vec::with_capacity(s.handlers.len());
    for (k, &(sp, ep, hp)) in s.handlers.iter().enumerate() {
        exc_index.push(n_out as u16);
        let catch_type = &exc[8 * k + 6..8 * k + 8];
        let handler = s.new_off[hp as usize];
        let mut put = |range: (u32, u32), handler: u32, catch_type: &[u8], out: &mut Vec<u8>| {
            put_u16(out, range.0 as u16);
            put_u16(out, range.1 as u16);
            put_u16(out, handler as u16);
            out.extend_from_slice(catch_type);
            n_out += 1;
        };
        let (start, end_pc) = (s.new_off[sp as usize], s.new_off[ep as usize]);
        match s.self_cover.iter().position(|&h| h == hp) {
            Some(j) if (sp..ep).contains(&hp) => {
                // The injected first block goes to its stub; the rest as it was.
                let original = s.ins_off[hp as usize];
                let stub = (stubs_at + 5 * j) as u32;
                put((handler, original), stub, &[0, 0], &mut out);
                if start < handler {
                    put((start, handler), handler, catch_type, &mut out);
                }
                put((original, end_pc), handler, catch_type, &mut out);
            }
            _ => put((start, end_pc), handler, catch_type, &mut out),
        }
    }
    if catch_all {
        let mut push_range = |a: u32, b: u32, out: &mut Vec<u8>| {
            put_u16(out, a as u16);
            put_u16(out, b as u16);
            put_u16(out, end as u16);
            put_u16(out, 0);
            n_out += 1;
        };
        if m.is_init {
            let mut i = 0;
            while i < n {
                if s.flags[i] == initthis::REACHED_INIT {
                    let a = i;
                    while i < n && s.flags[i] == initthis::REACHED_INIT {
                        i += 1;
                    }
                    push_range(s.new_off[a], s.new_off[i], &mut out);
                } else {
                    i += 1;
                }
            }
        } else {
            push_range(s.new_off[0], end, &mut out);
        }
    }
    if n_out > 0xFFFF {
        return Ok(Outcome::TooLarge);
    }
    out[exc_count_at..exc_count_at + 2].copy_from_slice(&(n_out as u16).to_be_bytes());

    // Attributes of the Code attribute.
    let mut frames = std::mem::take(&mut s.frames);
    // Debug tables only need offsets inside the code (the JVM checks no more): one that is
    // not at an instruction maps to the instruction containing it (or the next one).
    let lenient = |off: usize, round_up: bool| -> u32 {
        let n = s.insns.len();
        if off >= code_len {
            return s.new_off[n];
        }
        let mut o = off;
        while s.map[o] == u32::MAX {
            if round_up {
                o += 1;
            } else {
                o -= 1;
            }
        }
        s.new_off[s.map[o] as usize]
    };
    let attr_count_at = out.len();
    put_u16(&mut out, 0);
    let mut n_attr_out = 0u16;
    let mut had_frames = false;
    let mut r = Reader::new(body, attrs_start);
    for _ in 0..n_attrs {
        let name_idx = r.u16()?;
        let len = r.u32()? as usize;
        let data = r.bytes(len)?;
        let name = cp.utf8_bytes(name_idx)?;
        let hdr = out.len();
        put_u16(&mut out, name_idx);
        put_u32(&mut out, 0);
        match name {
            b"LineNumberTable" => {
                let mut a = Reader::new(data, 0);
                let k = a.u16()?;
                put_u16(&mut out, k);
                for _ in 0..k {
                    let pc = a.u16()? as usize;
                    put_u16(&mut out, lenient(pc, false) as u16);
                    put_u16(&mut out, a.u16()?);
                }
            }
            b"LocalVariableTable" | b"LocalVariableTypeTable" => {
                let mut a = Reader::new(data, 0);
                let k = a.u16()?;
                put_u16(&mut out, k);
                for _ in 0..k {
                    let pc = a.u16()? as usize;
                    let len = a.u16()? as usize;
                    let ns = lenient(pc, false);
                    let ne = lenient(pc + len, true).max(ns);
                    put_u16(&mut out, ns as u16);
                    put_u16(&mut out, (ne - ns) as u16);
                    out.extend_from_slice(a.bytes(6)?);
                }
            }
            b"StackMapTable" if m.major >= 50 => {
                had_frames = true;
                write_frames(
                    data,
                    m,
                    s,
                    &mut frames,
                    &extra,
                    &refs,
                    cpa,
                    catch_all,
                    end,
                    stubs_at as u32,
                    l,
                    pending,
                    &mut out,
                )?;
            }
            b"RuntimeVisibleTypeAnnotations" | b"RuntimeInvisibleTypeAnnotations" => {
                let insn_at = |off: usize| match s.map.get(off) {
                    Some(&i) if (i as usize) < s.insns.len() => Some(s.ins_off[i as usize]),
                    _ => None,
                };
                let catch_index = |k: u16| exc_index.get(k as usize).copied();
                if typeann::remap(data, &mut out, &lenient, &insn_at, &catch_index).is_err() {
                    // Unreadable: dropped (the JVM does not need them to run the code).
                    out.truncate(hdr);
                    stats.type_annotations_dropped += 1;
                    continue;
                }
                stats.type_annotations_remapped += 1;
            }
            _ => out.extend_from_slice(data),
        }
        let alen = (out.len() - hdr - 6) as u32;
        out[hdr + 2..hdr + 6].copy_from_slice(&alen.to_be_bytes());
        n_attr_out += 1;
    }
    if m.major >= 50 && !had_frames && (catch_all || !extra.is_empty()) {
        let name_idx = match cpa.stack_map_table_name {
            Some(i) => i,
            None => {
                let i = match cp.find_utf8(b"StackMapTable") {
                    Some(i) => i,
                    None => cpa.utf8(b"StackMapTable")?,
                };
                cpa.stack_map_table_name = Some(i);
                i
            }
        };
        let hdr = out.len();
        put_u16(&mut out, name_idx);
        put_u32(&mut out, 0);
        write_frames(
            &[0, 0],
            m,
            s,
            &mut frames,
            &extra,
            &refs,
            cpa,
            catch_all,
            end,
            stubs_at as u32,
            l,
            pending,
            &mut out,
        )?;
        let alen = (out.len() - hdr - 6) as u32;
        out[hdr + 2..hdr + 6].copy_from_slice(&alen.to_be_bytes());
        n_attr_out += 1;
    }
    out[attr_count_at..attr_count_at + 2].copy_from_slice(&n_attr_out.to_be_bytes());
    s.frames = frames;
    if !second {
        // A second body is the same original code once more.
        stats.code_bytes_before += code_len as u64;
    }
    stats.code_bytes_after += total as u64;
    stats.call_sites_passed += passes as u32;
    Ok(Outcome::Rewritten(out))
}

/// A frame to add: (new offset, locals, stack).
type Extra = (u32, Vec<VType>, Vec<VType>);

/// The frames needed after widened conditional branches (a class with frames), at the
/// instruction that followed each branch, unless the original already has one there.
/// None if the types there cannot be inferred.
fn fallthrough_frames(
    body: &[u8],
    attrs_start: usize,
    n_attrs: u16,
    code: &[u8],
    m: &MethodInput,
    s: &Scratch,
    cpa: &mut CpAppender,
) -> Result<Option<Vec<Extra>>, RewriteError> {
    let mut smt: &[u8] = &[0, 0];
    let mut r = Reader::new(body, attrs_start);
    for _ in 0..n_attrs {
        let name = r.u16()?;
        let len = r.u32()? as usize;
        let data = r.bytes(len)?;
        if m.cp.utf8_bytes(name)? == b"StackMapTable" {
            smt = data;
        }
    }
    let mut fr = Frames::default();
    let mut initial_types = Vec::new();
    frames::initial_locals(
        m.desc,
        m.is_static,
        m.is_init,
        m.this_class,
        m.this_is_object,
        cpa,
        &mut initial_types,
    )?;
    let init = initial_types.clone();
    fr.parse(smt, &mut |v: &mut Vec<VType>| {
        v.extend_from_slice(&init);
        Ok(())
    })?;
    // Instruction index of every frame.
    let mut at: Vec<usize> = Vec::with_capacity(fr.frames.len());
    for &(off, _, _) in &fr.frames {
        match s.map.get(off as usize) {
            Some(&i) if (i as usize) < s.insns.len() => at.push(i as usize),
            _ => return Ok(None),
        }
    }
    let mut extra = Vec::new();
    let mut ctx = infer::Ctx {
        cp: m.cp,
        cpa,
        code,
        this_class: m.this_class,
    };
    for (i, ins) in s.insns.iter().enumerate() {
        if !(s.wide[i] && ins.flow == Flow::Cond) || i + 1 >= s.insns.len() || at.contains(&(i + 1))
        {
            continue;
        }
        // The nearest frame at or before the branch (or the method's entry).
        let k = at.partition_point(|&a| a <= i);
        let inferred = if k == 0 {
            infer::after(&mut ctx, &s.insns, 0, &initial_types, &[], i)?
        } else {
            let (_, loc, stk) = fr.frames[k - 1];
            infer::after(
                &mut ctx,
                &s.insns,
                at[k - 1],
                &fr.types[loc.0 as usize..loc.1 as usize],
                &fr.types[stk.0 as usize..stk.1 as usize],
                i,
            )?
        };
        match inferred {
            Some((locals, stack)) => extra.push((s.new_off[i + 1], locals, stack)),
            None => return Ok(None),
        }
    }
    Ok(Some(extra))
}

/// Writes a StackMapTable body: every original frame as a full_frame at its new
/// offset, then the catch-all handler's frame.
#[allow(clippy::too_many_arguments)]
fn write_frames(
    data: &[u8],
    m: &MethodInput,
    s: &Scratch,
    fr: &mut Frames,
    extra: &[Extra],
    refs: &Refs,
    cpa: &mut CpAppender,
    catch_all: bool,
    end: u32,
    stubs_at: u32,
    l: u32,
    pending: bool,
    out: &mut Vec<u8>,
) -> Result<(), RewriteError> {
    // The locals the rewrite adds after the original ones: the context, then the pending
    // count.
    let node_and_pending = [VType::Object(refs.node), VType::Integer];
    let added: &[VType] = if pending {
        &node_and_pending
    } else {
        &node_and_pending[..1]
    };
    let mut initial = |v: &mut Vec<VType>| {
        frames::initial_locals(
            m.desc,
            m.is_static,
            m.is_init,
            m.this_class,
            m.this_is_object,
            cpa,
            v,
        )
    };
    fr.parse(data, &mut initial)?;
    let n = s.insns.len();
    let map = &s.map;
    let ins_off = &s.ins_off;
    let remap_uninit = |off: u32| -> Result<u32, RewriteError> {
        match map.get(off as usize) {
            Some(&i) if (i as usize) < n => Ok(ins_off[i as usize]),
            _ => Err(RewriteError::Malformed(format!(
                "Uninitialized({off}) is not an instruction"
            ))),
        }
    };
    let count = fr.frames.len() + extra.len() + usize::from(catch_all) + 2 * s.self_cover.len();
    if count > 0xFFFF {
        return Err(RewriteError::Malformed("too many stack map frames".into()));
    }
    put_u16(out, count as u16);
    let mut prev: i64 = -1;
    let mut stub_frames: Vec<Option<(Vec<VType>, Vec<VType>)>> = vec![None; s.self_cover.len()];
    let mut extra = extra.iter().peekable();
    for &(off, loc, stk) in &fr.frames {
        let i = match map.get(off as usize) {
            Some(&i) if (i as usize) < n => i as usize,
            _ => {
                return Err(RewriteError::Malformed(format!(
                    "stack map frame at {off} is not at an instruction"
                )))
            }
        };
        let no = s.new_off[i] as i64;
        while let Some(e) = extra.next_if(|e| (e.0 as i64) < no) {
            let delta = if prev < 0 {
                e.0 as i64
            } else {
                e.0 as i64 - prev - 1
            };
            prev = e.0 as i64;
            frames::write_full_frame(out, delta as u16, &e.1, &e.2, l, added, &remap_uninit)?;
        }
        if no <= prev {
            return Err(RewriteError::Malformed(
                "stack map frames out of order".into(),
            ));
        }
        let delta = if prev < 0 { no } else { no - prev - 1 };
        prev = no;
        let (locals, stack) = (
            &fr.types[loc.0 as usize..loc.1 as usize],
            &fr.types[stk.0 as usize..stk.1 as usize],
        );
        frames::write_full_frame(out, delta as u16, locals, stack, l, added, &remap_uninit)?;
        if let Some(j) = s.self_cover.iter().position(|&h| h as usize == i) {
            // The handler's original code is now also the target of its stub's goto_w.
            let at = ins_off[i] as i64;
            frames::write_full_frame(
                out,
                (at - prev - 1) as u16,
                locals,
                stack,
                l,
                added,
                &remap_uninit,
            )?;
            prev = at;
            stub_frames[j] = Some((locals.to_vec(), stack.to_vec()));
        }
    }
    for e in extra {
        let delta = if prev < 0 {
            e.0 as i64
        } else {
            e.0 as i64 - prev - 1
        };
        prev = e.0 as i64;
        frames::write_full_frame(out, delta as u16, &e.1, &e.2, l, added, &remap_uninit)?;
    }
    if catch_all {
        let throwable = cpa.class(b"java/lang/Throwable")?;
        let no = end as i64;
        let delta = if prev < 0 { no } else { no - prev - 1 };
        frames::write_full_frame(
            out,
            delta as u16,
            &[],
            &[VType::Object(throwable)],
            l,
            added,
            &remap_uninit,
        )?;
        prev = no;
    }
    for (j, f) in stub_frames.iter().enumerate() {
        let Some((locals, stack)) = f else {
            return Err(RewriteError::Malformed(
                "no stack map frame at a handler".into(),
            ));
        };
        let no = (stubs_at + 5 * j as u32) as i64;
        let delta = if prev < 0 { no } else { no - prev - 1 };
        prev = no;
        frames::write_full_frame(out, delta as u16, locals, stack, l, added, &remap_uninit)?;
    }
    Ok(())
}
