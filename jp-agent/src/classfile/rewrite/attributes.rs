//! Phase 7, attributes of the `Code` attribute: the debug tables remapped to the new
//! offsets, the StackMapTable rewritten (or added, when the new code needs frames the
//! original did not), the type annotations remapped (dropped if unreadable), anything
//! else copied as it is.

use super::super::api::ClassStats;
use super::super::cpool::CpAppender;
use super::super::error::RewriteError;
use super::super::frames::Frames;
use super::super::reader::{put_u16, put_u32, Reader};
use super::super::typeann;
use super::layout::Parts;
use super::stackmap::{write_frames, Extra};

/// What the attributes need besides the plan and the layout.
pub(super) struct AttrInputs<'a> {
    /// Frames after widened conditional branches.
    pub extra: &'a [Extra],
    /// Where each original exception table entry went.
    pub moved_handlers: &'a [u16],
}

/// Appends the attributes (count first).
pub(super) fn write_attributes(
    p: &Parts,
    inputs: &AttrInputs,
    frames: &mut Frames,
    cpa: &mut CpAppender,
    stats: &mut ClassStats,
    out: &mut Vec<u8>,
) -> Result<(), RewriteError> {
    let mt = p.method;
    let count_at = out.len();
    put_u16(out, 0);
    let mut n_out = 0u16;
    let mut had_frames = false;
    for attr in mt.attr.attributes() {
        let (name_idx, data) = attr?;
        let hdr = out.len();
        put_u16(out, name_idx);
        put_u32(out, 0);
        match mt.code.cp.utf8_bytes(name_idx)? {
            b"LineNumberTable" => line_numbers(p, data, out)?,
            b"LocalVariableTable" | b"LocalVariableTypeTable" => local_variables(p, data, out)?,
            b"StackMapTable" if mt.input.major >= 50 => {
                had_frames = true;
                write_frames(p, data, inputs.extra, frames, cpa, out)?;
            }
            b"RuntimeVisibleTypeAnnotations" | b"RuntimeInvisibleTypeAnnotations" => {
                if type_annotations(p, inputs, data, out).is_err() {
                    // Unreadable: dropped (the JVM does not need them to run the code).
                    out.truncate(hdr);
                    stats.type_annotations_dropped += 1;
                    continue;
                }
                stats.type_annotations_remapped += 1;
            }
            _ => out.extend_from_slice(data),
        }
        end_attribute(out, hdr);
        n_out += 1;
    }
    if mt.input.major >= 50 && !had_frames && (p.plan.catch_all || !inputs.extra.is_empty()) {
        let name_idx = stack_map_table_name(p, cpa)?;
        let hdr = out.len();
        put_u16(out, name_idx);
        put_u32(out, 0);
        write_frames(p, &[0, 0], inputs.extra, frames, cpa, out)?;
        end_attribute(out, hdr);
        n_out += 1;
    }
    out[count_at..count_at + 2].copy_from_slice(&n_out.to_be_bytes());
    Ok(())
}

/// Fills in the length of the attribute whose header starts at `hdr`.
fn end_attribute(out: &mut [u8], hdr: usize) {
    let alen = (out.len() - hdr - 6) as u32;
    out[hdr + 2..hdr + 6].copy_from_slice(&alen.to_be_bytes());
}

/// The pool's Utf8 "StackMapTable", appended once per class if the pool has none.
fn stack_map_table_name(p: &Parts, cpa: &mut CpAppender) -> Result<u16, RewriteError> {
    if let Some(i) = cpa.stack_map_table_name {
        return Ok(i);
    }
    let i = match p.method.code.cp.find_utf8(b"StackMapTable") {
        Some(i) => i,
        None => cpa.utf8(b"StackMapTable")?,
    };
    cpa.stack_map_table_name = Some(i);
    Ok(i)
}

/// The new offset of an original one, for the debug tables: they only need offsets inside
/// the code (the JVM checks no more), so one that is not at an instruction maps to the
/// instruction containing it (or, `round_up`, the next one).
fn lenient(p: &Parts, off: usize, round_up: bool) -> u32 {
    let (map, new_off) = (p.method.map, &p.layout.new_off);
    if off >= p.method.code.bytes.len() {
        return new_off[p.method.code.insns.len()];
    }
    let mut o = off;
    while map[o] == u32::MAX {
        if round_up {
            o += 1;
        } else {
            o -= 1;
        }
    }
    new_off[map[o] as usize]
}

fn line_numbers(p: &Parts, data: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
    let mut a = Reader::new(data, 0);
    let k = a.u16()?;
    put_u16(out, k);
    for _ in 0..k {
        let pc = a.u16()? as usize;
        put_u16(out, lenient(p, pc, false) as u16);
        put_u16(out, a.u16()?);
    }
    Ok(())
}

fn local_variables(p: &Parts, data: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
    let mut a = Reader::new(data, 0);
    let k = a.u16()?;
    put_u16(out, k);
    for _ in 0..k {
        let pc = a.u16()? as usize;
        let len = a.u16()? as usize;
        let ns = lenient(p, pc, false);
        let ne = lenient(p, pc + len, true).max(ns);
        put_u16(out, ns as u16);
        put_u16(out, (ne - ns) as u16);
        out.extend_from_slice(a.bytes(6)?);
    }
    Ok(())
}

fn type_annotations(
    p: &Parts,
    inputs: &AttrInputs,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RewriteError> {
    let insn_at = |off: usize| p.method.insn_at(off).map(|i| p.layout.ins_off[i]);
    let catch_index = |k: u16| inputs.moved_handlers.get(k as usize).copied();
    let lenient = |off: usize, round_up: bool| lenient(p, off, round_up);
    typeann::remap(data, out, &lenient, &insn_at, &catch_index)
}
