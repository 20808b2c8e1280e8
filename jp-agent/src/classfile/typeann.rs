//! Runtime(In)VisibleTypeAnnotations of a `Code` attribute: the same bytes, with the
//! code offsets in their targets moved to the new code.

use super::error::RewriteError;
use super::reader::{put_u16, Reader};

fn bad(what: &str) -> RewriteError {
    RewriteError::Malformed(format!("type annotation: {what}"))
}

/// Skips one element_value (nesting limited, so hostile input cannot exhaust the stack).
fn skip_element_value(r: &mut Reader, depth: u32) -> Result<(), RewriteError> {
    if depth > 64 {
        return Err(bad("nested too deeply"));
    }
    match r.u8()? {
        b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z' | b's' | b'c' => r.skip(2),
        b'e' => r.skip(4),
        b'@' => skip_annotation_body(r, depth + 1),
        b'[' => {
            for _ in 0..r.u16()? {
                skip_element_value(r, depth + 1)?;
            }
            Ok(())
        }
        _ => Err(bad("unknown element value tag")),
    }
}

/// Skips type_index, then the element-value pairs.
fn skip_annotation_body(r: &mut Reader, depth: u32) -> Result<(), RewriteError> {
    r.skip(2)?;
    for _ in 0..r.u16()? {
        r.skip(2)?;
        skip_element_value(r, depth)?;
    }
    Ok(())
}

/// Rewrites the attribute body `data` into `out`. `pc` maps an original code offset to
/// the new offset of its block (`true`: an end offset, rounded up); `insn` maps the
/// offset of an instruction to the new offset of that instruction itself; `catch_index`
/// maps an exception table index to the new table's (entries may have been split).
pub(crate) fn remap(
    data: &[u8],
    out: &mut Vec<u8>,
    pc: &dyn Fn(usize, bool) -> u32,
    insn: &dyn Fn(usize) -> Option<u32>,
    catch_index: &dyn Fn(u16) -> Option<u16>,
) -> Result<(), RewriteError> {
    let mut r = Reader::new(data, 0);
    let n = r.u16()?;
    put_u16(out, n);
    for _ in 0..n {
        let target = r.u8()?;
        out.push(target);
        match target {
            0x40 | 0x41 => {
                let len = r.u16()?;
                put_u16(out, len);
                for _ in 0..len {
                    let start = r.u16()? as usize;
                    let length = r.u16()? as usize;
                    let index = r.u16()?;
                    let ns = pc(start, false);
                    let ne = pc(start + length, true).max(ns);
                    put_u16(out, ns as u16);
                    put_u16(out, (ne - ns) as u16);
                    put_u16(out, index);
                }
            }
            0x42 => {
                let k = r.u16()?;
                put_u16(
                    out,
                    catch_index(k).ok_or_else(|| bad("no such exception table entry"))?,
                );
            }
            0x43..=0x4b => {
                let off = r.u16()? as usize;
                put_u16(
                    out,
                    insn(off).ok_or_else(|| bad("offset is not an instruction"))? as u16,
                );
                if target >= 0x47 {
                    out.push(r.u8()?);
                }
            }
            _ => return Err(bad("target outside code in a Code attribute")),
        }
        // type_path, then the annotation itself: copied as they are.
        let start = r.pos;
        let path_len = r.u8()? as usize;
        r.skip(2 * path_len)?;
        skip_annotation_body(&mut r, 0)?;
        out.extend_from_slice(&data[start..r.pos]);
    }
    if r.pos != data.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(())
}
