//! Phase 5, emit: the new code — the header (max_stack, max_locals, length), the entry
//! sequence, every original instruction after its prefix with its branch offsets
//! remapped (widened where the layout says), the catch-all handler and the stubs.

use super::super::error::RewriteError;
use super::super::insn::{self, Insn};
use super::super::reader::{put_u16, put_u32};
use super::inject::{exit_call, Injected};
use super::layout::Parts;
use super::ops::invert;

/// Appends the `Code` attribute's header and code to `out` (which starts empty).
pub(super) fn emit(p: &Parts, injected: &Injected, out: &mut Vec<u8>) -> Result<(), RewriteError> {
    let (plan, layout) = (p.plan, p.layout);
    // tickPending and enterFrom take three stack slots, the other helpers two.
    let grow_stack = if plan.pending || plan.second { 3 } else { 2 };
    put_u16(out, (p.method.attr.max_stack + grow_stack) as u16);
    put_u16(out, (plan.ctx + if plan.pending { 2 } else { 1 }) as u16);
    put_u32(out, layout.total);
    let cstart = out.len();
    out.extend_from_slice(&injected.entry);
    for (i, ins) in p.method.code.insns.iter().enumerate() {
        out.extend_from_slice(injected.before(i));
        let pos = (out.len() - cstart) as u32;
        instruction(p, i, ins, pos, out);
    }
    if out.len() - cstart != layout.end as usize {
        return Err(layout_mismatch(p));
    }
    if plan.catch_all {
        catch_all_handler(p, out);
    }
    for &hp in &layout.self_cover {
        let at = (out.len() - cstart) as i64;
        out.push(insn::GOTO_W);
        put_u32(out, (layout.ins_off[hp as usize] as i64 - at) as i32 as u32);
    }
    if out.len() - cstart != layout.total as usize {
        return Err(layout_mismatch(p));
    }
    Ok(())
}

fn layout_mismatch(p: &Parts) -> RewriteError {
    RewriteError::BadCode {
        method: (p.method.input.label)(),
        what: "internal layout mismatch".to_string(),
    }
}

/// Instruction `i` at new offset `pos`.
fn instruction(p: &Parts, i: usize, ins: &Insn, pos: u32, out: &mut Vec<u8>) {
    let code = p.method.code;
    let o = ins.off as usize;
    // The distance to branch target `k` of the instruction.
    let tgt =
        |k: u32| p.layout.new_off[code.targets[(ins.t0 + k) as usize] as usize] as i64 - pos as i64;
    match ins.op {
        insn::TABLESWITCH | insn::LOOKUPSWITCH => switch(code.bytes, ins, pos, &tgt, out),
        insn::GOTO_W | insn::JSR_W => {
            out.push(ins.op);
            put_u32(out, tgt(0) as i32 as u32);
        }
        _ if p.sites.passed_at[i] != 0 => {
            out.push(ins.op);
            put_u16(out, p.sites.passed_at[i]);
        }
        _ if ins.tn == 1 => branch(ins.op, p.layout.wide[i], tgt(0), out),
        _ => out.extend_from_slice(&code.bytes[o..o + ins.len as usize]),
    }
}

/// A tableswitch or lookupswitch: new padding, remapped offsets.
fn switch(code: &[u8], ins: &Insn, pos: u32, tgt: &dyn Fn(u32) -> i64, out: &mut Vec<u8>) {
    out.push(ins.op);
    out.extend(std::iter::repeat_n(0u8, insn::switch_pad(pos) as usize));
    let base = ins.off as usize + 1 + insn::switch_pad(ins.off) as usize;
    put_u32(out, tgt(0) as i32 as u32);
    if ins.op == insn::TABLESWITCH {
        out.extend_from_slice(&code[base + 4..base + 12]);
        for k in 1..ins.tn {
            put_u32(out, tgt(k) as i32 as u32);
        }
    } else {
        out.extend_from_slice(&code[base + 4..base + 8]);
        for k in 1..ins.tn {
            let kb = base + 8 + 8 * (k as usize - 1);
            out.extend_from_slice(&code[kb..kb + 4]);
            put_u32(out, tgt(k) as i32 as u32);
        }
    }
}

/// A 16-bit branch over distance `d`: as it was, or widened.
fn branch(op: u8, wide: bool, d: i64, out: &mut Vec<u8>) {
    if !wide {
        out.push(op);
        out.extend_from_slice(&(d as i16).to_be_bytes());
    } else if op == insn::GOTO || op == insn::JSR {
        out.push(if op == insn::GOTO {
            insn::GOTO_W
        } else {
            insn::JSR_W
        });
        put_u32(out, d as i32 as u32);
    } else {
        // The inverted branch jumps over the goto_w to the next instruction.
        out.extend_from_slice(&[invert(op), 0, 8, insn::GOTO_W]);
        put_u32(out, (d - 3) as i32 as u32);
    }
}

/// `aload ctx [iload acc] Rt.thrown* athrow`: the exit on an exception.
fn catch_all_handler(p: &Parts, out: &mut Vec<u8>) {
    let h = &p.plan.helpers;
    exit_call(p.plan, h.thrown, h.thrown_pending, out);
    out.push(insn::ATHROW);
}
