//! The new StackMapTable: every original frame as a full frame at its new offset with the
//! rewrite's locals appended, the frames a widened conditional branch needs after it
//! (inferred by `infer`), the catch-all handler's frame and the stubs' frames.

use super::super::cpool::CpAppender;
use super::super::error::RewriteError;
use super::super::frames::{self, Frames, FullFrames, VType};
use super::super::infer;
use super::super::insn::Flow;
use super::layout::Layout;
use super::layout::Parts;
use super::method::Method;

/// A frame to add: (new offset, locals, stack).
pub(super) type Extra = (u32, Vec<VType>, Vec<VType>);

/// The frames needed after widened conditional branches (a class with frames), at the
/// instruction that followed each branch, unless the original already has one there.
/// None if the types there cannot be inferred.
pub(super) fn fallthrough_frames(
    mt: &Method,
    layout: &Layout,
    cpa: &mut CpAppender,
) -> Result<Option<Vec<Extra>>, RewriteError> {
    let mut smt: &[u8] = &[0, 0];
    for attr in mt.attr.attributes() {
        let (name, data) = attr?;
        if mt.code.cp.utf8_bytes(name)? == b"StackMapTable" {
            smt = data;
        }
    }
    let mut fr = Frames::default();
    let mut initial_types = Vec::new();
    frames::initial_locals(&mt.input.sig, cpa, &mut initial_types)?;
    let init = initial_types.clone();
    fr.parse(smt, &mut |v: &mut Vec<VType>| {
        v.extend_from_slice(&init);
        Ok(())
    })?;
    // Instruction index of every frame.
    let mut at: Vec<usize> = Vec::with_capacity(fr.frames.len());
    for &(off, _, _) in &fr.frames {
        match mt.insn_at(off as usize) {
            Some(i) => at.push(i),
            None => return Ok(None),
        }
    }
    let insns = mt.code.insns;
    let mut extra = Vec::new();
    let mut ctx = infer::Ctx {
        cp: mt.code.cp,
        cpa,
        code: mt.code.bytes,
        this_class: mt.input.sig.this_class,
    };
    for (i, ins) in insns.iter().enumerate() {
        if !(layout.wide[i] && ins.flow == Flow::Cond)
            || i + 1 >= insns.len()
            || at.contains(&(i + 1))
        {
            continue;
        }
        // The nearest frame at or before the branch (or the method's entry).
        let k = at.partition_point(|&a| a <= i);
        let inferred = if k == 0 {
            infer::after(&mut ctx, insns, 0, &initial_types, &[], i)?
        } else {
            let (_, loc, stk) = fr.frames[k - 1];
            infer::after(&mut ctx, insns, at[k - 1], fr.span(loc), fr.span(stk), i)?
        };
        match inferred {
            Some((locals, stack)) => extra.push((layout.new_off[i + 1], locals, stack)),
            None => return Ok(None),
        }
    }
    Ok(Some(extra))
}

/// Writes a StackMapTable body: every original frame (`data`) as a full_frame at its new
/// offset, the `extra` frames in order among them, then the catch-all handler's frame and
/// the stubs' frames.
pub(super) fn write_frames(
    p: &Parts,
    data: &[u8],
    extra: &[Extra],
    fr: &mut Frames,
    cpa: &mut CpAppender,
    out: &mut Vec<u8>,
) -> Result<(), RewriteError> {
    let (mt, plan, layout) = (p.method, p.plan, p.layout);
    // The locals the rewrite adds after the original ones: the context, then the pending
    // count.
    let node_and_pending = [VType::Object(plan.helpers.node), VType::Integer];
    let added: &[VType] = if plan.pending {
        &node_and_pending
    } else {
        &node_and_pending[..1]
    };
    fr.parse(data, &mut |v: &mut Vec<VType>| {
        frames::initial_locals(&mt.input.sig, cpa, v)
    })?;
    let remap_uninit = |off: u32| -> Result<u32, RewriteError> {
        match mt.insn_at(off as usize) {
            Some(i) => Ok(layout.ins_off[i]),
            None => Err(RewriteError::Malformed(format!(
                "Uninitialized({off}) is not an instruction"
            ))),
        }
    };
    let stubs = layout.self_cover.len();
    let count = fr.frames.len() + extra.len() + usize::from(plan.catch_all) + 2 * stubs;
    if count > 0xFFFF {
        return Err(RewriteError::Malformed("too many stack map frames".into()));
    }
    super::super::reader::put_u16(out, count as u16);
    let mut w = FullFrames::new(plan.ctx, added, &remap_uninit);
    let mut stub_frames: Vec<Option<(&[VType], &[VType])>> = vec![None; stubs];
    let mut extra = extra.iter().peekable();
    for &(off, loc, stk) in &fr.frames {
        let Some(i) = mt.insn_at(off as usize) else {
            return Err(RewriteError::Malformed(format!(
                "stack map frame at {off} is not at an instruction"
            )));
        };
        let no = layout.new_off[i] as i64;
        while let Some(e) = extra.next_if(|e| (e.0 as i64) < no) {
            w.write(out, e.0 as i64, &e.1, &e.2)?;
        }
        if no <= w.prev() {
            return Err(RewriteError::Malformed(
                "stack map frames out of order".into(),
            ));
        }
        let (locals, stack) = (fr.span(loc), fr.span(stk));
        w.write(out, no, locals, stack)?;
        if let Some(j) = layout.self_cover.iter().position(|&h| h as usize == i) {
            // The handler's original code is now also the target of its stub's goto_w.
            w.write(out, layout.ins_off[i] as i64, locals, stack)?;
            stub_frames[j] = Some((locals, stack));
        }
    }
    for e in extra {
        w.write(out, e.0 as i64, &e.1, &e.2)?;
    }
    if plan.catch_all {
        let throwable = cpa.class(b"java/lang/Throwable")?;
        w.write(out, layout.end as i64, &[], &[VType::Object(throwable)])?;
    }
    for (j, f) in stub_frames.iter().enumerate() {
        let Some((locals, stack)) = f else {
            return Err(RewriteError::Malformed(
                "no stack map frame at a handler".into(),
            ));
        };
        w.write(out, layout.stub(j) as i64, locals, stack)?;
    }
    Ok(())
}
