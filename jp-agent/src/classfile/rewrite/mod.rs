//! Rebuilds the `Code` attribute of one instrumented method (see the contract): entry
//! sequence, block prefixes, exits, catch-all handler, and every byte offset remapped.
//!
//! In phases, one file each: `parse` the attribute and decode its instructions (then
//! `blocks` splits them), `plan` what the rewrite does (call sites passing their context,
//! catch-all, pending count, runtime helpers), `inject` the code each site gets, `layout`
//! the new code widening far branches, `emit` it, write the exception table (`handlers`)
//! and the attributes (`attributes`, the frames in `stackmap`). Each phase reads the
//! values the earlier ones made: [`Method`], [`plan::Plan`], [`inject::Injected`],
//! [`layout::Layout`].

mod attributes;
mod emit;
mod handlers;
mod inject;
mod layout;
mod ops;
mod parse;
mod plan;
mod stackmap;

use super::blocks::{self, BlockMap};
use super::cpool::{ConstPool, CpAppender};
use super::frames::{Frames, Signature};
use super::insn::Code;
use super::reader::Reader;
use super::{Bba, ClassStats, RewriteError};
use attributes::AttrInputs;
use inject::Injected;
use layout::Layout;
use parse::{CodeAttr, Decoded};
use plan::{Plan, Sites};

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
    /// The method's descriptor and what its implicit first frame depends on.
    pub sig: Signature<'a>,
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
    decoded: Decoded,
    blocks: BlockMap,
    sites: Sites,
    injected: Injected,
    layout: Layout,
    frames: Frames,
}

/// The parsed and analysed method, as the phases after parsing read it.
struct Method<'a> {
    pub input: &'a MethodInput<'a>,
    pub attr: &'a CodeAttr<'a>,
    pub code: Code<'a>,
    /// Per original offset: the instruction there (see [`Decoded::map`]).
    pub map: &'a [u32],
    pub blocks: &'a BlockMap,
    /// Activation ticks passed to `Rt.enter`.
    pub entry_ticks: u32,
}

impl Method<'_> {
    /// The instruction starting at an original offset, if one does.
    pub fn insn_at(&self, off: usize) -> Option<usize> {
        match self.map.get(off) {
            Some(&i) if (i as usize) < self.code.insns.len() => Some(i as usize),
            _ => None,
        }
    }
}

/// What the output phases read: the method, its plan and its layout.
struct Parts<'a> {
    pub method: &'a Method<'a>,
    pub plan: &'a Plan,
    pub sites: &'a Sites,
    pub layout: &'a Layout,
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
    s.decoded.decode(code, exc, label)?;
    let entry = blocks::split(&s.decoded.view(code, cp), bba, &mut s.blocks)?;
    let insns = &s.decoded.insns;
    let infos = s
        .blocks
        .blocks
        .iter()
        .map(|b| super::BlockInfo {
            offset: insns[b.start as usize].off,
            instructions: b.count(),
            loop_head: b.loop_head,
            handler: b.handler,
            ticks: b.k,
        })
        .collect();
    Ok((entry, infos))
}

/// Rewrites the body of a `Code` attribute.
pub(crate) fn rewrite_code(
    body: &[u8],
    m: &MethodInput,
    cpa: &mut CpAppender,
    s: &mut Scratch,
    stats: &mut ClassStats,
) -> Result<Outcome, RewriteError> {
    let attr = CodeAttr::parse(body, m.label)?;
    if attr.too_large_to_grow() {
        return Ok(Outcome::TooLarge);
    }
    s.decoded.decode(attr.code, attr.exc, m.label)?;
    let code = s.decoded.view(attr.code, m.cp);
    let entry_ticks = blocks::split(&code, m.bba, &mut s.blocks)?;
    let method = Method {
        input: m,
        attr: &attr,
        code,
        map: &s.decoded.map,
        blocks: &s.blocks,
        entry_ticks,
    };
    let Some(plan) = plan::plan(&method, &mut s.sites, cpa, stats)? else {
        return Ok(Outcome::NoSecondBody);
    };
    inject::inject(&method, &plan, &s.sites, cpa, &mut s.injected)?;
    if !layout::lay_out(&method, &s.injected, &plan, &mut s.layout) {
        return Ok(Outcome::TooLarge);
    }
    let extra = match widened_branch_frames(&method, &s.layout, cpa)? {
        Some(extra) => extra,
        None => return Ok(Outcome::Unwidenable),
    };
    if s.layout.total > 65535 {
        return Ok(Outcome::TooLarge);
    }
    let parts = Parts {
        method: &method,
        plan: &plan,
        sites: &s.sites,
        layout: &s.layout,
    };
    let mut out = Vec::with_capacity(body.len() + s.layout.total as usize + 64);
    emit::emit(&parts, &s.injected, &mut out)?;
    let Some(moved_handlers) = handlers::write_exception_table(&parts, &mut out) else {
        return Ok(Outcome::TooLarge);
    };
    let inputs = AttrInputs {
        extra: &extra,
        moved_handlers: &moved_handlers,
    };
    attributes::write_attributes(&parts, &inputs, &mut s.frames, cpa, stats, &mut out)?;
    if m.second.is_none() {
        // A second body is the same original code once more.
        stats.code_bytes_before += attr.code.len() as u64;
    }
    stats.code_bytes_after += s.layout.total as u64;
    stats.call_sites_passed += plan.passes as u32;
    Ok(Outcome::Rewritten(out))
}

/// The frames after widened conditional branches: none needed before version 50 (no
/// frames) or without such a branch; None if one cannot be inferred.
fn widened_branch_frames(
    mt: &Method,
    layout: &Layout,
    cpa: &mut CpAppender,
) -> Result<Option<Vec<stackmap::Extra>>, RewriteError> {
    let widened_conditional = mt
        .code
        .insns
        .iter()
        .zip(&layout.wide)
        .any(|(ins, &w)| w && ins.flow == super::insn::Flow::Cond);
    if mt.input.major >= 50 && widened_conditional {
        stackmap::fallthrough_frames(mt, layout, cpa)
    } else {
        Ok(Some(Vec::new()))
    }
}
