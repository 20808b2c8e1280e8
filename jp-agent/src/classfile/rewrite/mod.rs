//! Rebuilds the `Code` attribute of one instrumented method (see the contract): entry
//! sequence, block prefixes, exits, catch-all handler, and every byte offset remapped.
//!
//! In phases, one file each: `parse` the attribute and decode its instructions (then
//! `blocks` splits them), `plan` what the rewrite does (call sites passing their context,
//! catch-all, pending count, runtime helpers), `inject` the code each site gets, `layout`
//! the new code widening far branches, `emit` it, write the exception table (`handlers`)
//! and the attributes (`attributes`, the frames in `stackmap`). Each phase reads the
//! values the earlier ones made: [`Method`] (`method`: the parsed method and its blocks),
//! [`plan::Plan`], [`inject::Injected`], [`layout::Layout`], and the output phases
//! [`Parts`] (all of them together).

mod attributes;
mod emit;
mod handlers;
mod inject;
mod layout;
mod method;
mod ops;
mod parse;
mod plan;
mod stackmap;

use super::api::{Bba, BlockInfo, ClassStats};
use super::blocks::{self, BlockMap};
use super::cpool::{ConstPool, CpAppender};
use super::error::RewriteError;
use super::frames::Frames;
use super::reader::Reader;
use attributes::AttrInputs;
use inject::Injected;
use layout::{Layout, Parts};
use method::Method;
pub(crate) use method::{MethodInput, Passed};
use parse::{CodeAttr, Decoded};
use plan::Sites;

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

/// Block structure of a `Code` attribute body: (entry ticks, blocks).
pub(crate) fn describe(
    body: &[u8],
    cp: &ConstPool,
    bba: Bba,
    label: &dyn Fn() -> String,
    s: &mut Scratch,
) -> Result<(u32, Vec<BlockInfo>), RewriteError> {
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
        .map(|b| BlockInfo {
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
    // The code's offsets (exception table, frames, debug tables) are 16-bit.
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
