//! StackMapTable: every original frame is expanded to its full locals/stack and
//! re-emitted as a `full_frame` at its new offset, with the context local appended.

use super::cpool::CpAppender;
use super::reader::{put_u16, Reader};
use super::RewriteError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VType {
    Top,
    Integer,
    Float,
    Double,
    Long,
    Null,
    UninitializedThis,
    Object(u16),
    /// Offset (original code) of the `new` instruction.
    Uninitialized(u32),
}

impl VType {
    fn slots(self) -> u32 {
        match self {
            VType::Double | VType::Long => 2,
            _ => 1,
        }
    }
    pub fn write(
        self,
        out: &mut Vec<u8>,
        remap: &dyn Fn(u32) -> Result<u32, RewriteError>,
    ) -> Result<(), RewriteError> {
        match self {
            VType::Top => out.push(0),
            VType::Integer => out.push(1),
            VType::Float => out.push(2),
            VType::Double => out.push(3),
            VType::Long => out.push(4),
            VType::Null => out.push(5),
            VType::UninitializedThis => out.push(6),
            VType::Object(c) => {
                out.push(7);
                put_u16(out, c);
            }
            VType::Uninitialized(off) => {
                out.push(8);
                put_u16(out, remap(off)? as u16);
            }
        }
        Ok(())
    }
}

/// A range of `Frames::types`.
pub(crate) type Span = (u32, u32);

/// All frames of a method, expanded: (original offset, locals, stack), the types of a
/// frame being `types[locals.0..locals.1]` and `types[stack.0..stack.1]`.
#[derive(Default)]
pub(crate) struct Frames {
    pub frames: Vec<(u32, Span, Span)>,
    pub types: Vec<VType>,
}

fn read_vtype(r: &mut Reader) -> Result<VType, RewriteError> {
    Ok(match r.u8()? {
        0 => VType::Top,
        1 => VType::Integer,
        2 => VType::Float,
        3 => VType::Double,
        4 => VType::Long,
        5 => VType::Null,
        6 => VType::UninitializedThis,
        7 => VType::Object(r.u16()?),
        8 => VType::Uninitialized(r.u16()? as u32),
        t => {
            return Err(RewriteError::Malformed(format!(
                "bad verification type tag {t}"
            )))
        }
    })
}

/// Initial locals of a method from its descriptor (JVMS 4.10.1.6).
pub(crate) fn initial_locals(
    desc: &[u8],
    is_static: bool,
    is_init: bool,
    this_class: u16,
    this_is_object: bool,
    cp: &mut CpAppender,
    out: &mut Vec<VType>,
) -> Result<(), RewriteError> {
    let bad = || RewriteError::BadDescriptor(String::from_utf8_lossy(desc).into_owned());
    if !is_static {
        out.push(if is_init && !this_is_object {
            VType::UninitializedThis
        } else {
            VType::Object(this_class)
        });
    }
    if desc.first() != Some(&b'(') {
        return Err(bad());
    }
    let mut i = 1;
    loop {
        let c = *desc.get(i).ok_or_else(bad)?;
        match c {
            b')' => return Ok(()),
            b'B' | b'C' | b'I' | b'S' | b'Z' => out.push(VType::Integer),
            b'F' => out.push(VType::Float),
            b'J' => out.push(VType::Long),
            b'D' => out.push(VType::Double),
            b'L' | b'[' => {
                let start = i;
                while desc.get(i) == Some(&b'[') {
                    i += 1;
                }
                let end = if desc.get(i) == Some(&b'L') {
                    i + desc[i..].iter().position(|&b| b == b';').ok_or_else(bad)?
                } else {
                    i
                };
                if end >= desc.len() {
                    return Err(bad());
                }
                // Array class names keep the descriptor form; plain classes lose the L;.
                let name = if c == b'L' {
                    &desc[start + 1..end]
                } else {
                    &desc[start..=end]
                };
                if name.is_empty() {
                    return Err(bad());
                }
                out.push(VType::Object(cp.class(name)?));
                i = end;
            }
            _ => return Err(bad()),
        }
        i += 1;
    }
}

impl Frames {
    /// Expands a StackMapTable. `initial` gives the implicit frame's locals (called once,
    /// only if a compressed frame needs them).
    pub fn parse(
        &mut self,
        data: &[u8],
        initial: &mut dyn FnMut(&mut Vec<VType>) -> Result<(), RewriteError>,
    ) -> Result<(), RewriteError> {
        self.frames.clear();
        self.types.clear();
        let mut r = Reader::new(data, 0);
        let n = r.u16()?;
        let mut prev_locals: Option<(u32, u32)> = None;
        let mut off: i64 = -1;
        let mut scratch: Vec<VType> = Vec::new();
        for _ in 0..n {
            let ft = r.u8()?;
            let get_prev =
                |prev: &mut Option<(u32, u32)>,
                 types: &mut Vec<VType>,
                 initial: &mut dyn FnMut(&mut Vec<VType>) -> Result<(), RewriteError>|
                 -> Result<(u32, u32), RewriteError> {
                    if let Some(p) = *prev {
                        return Ok(p);
                    }
                    let s = types.len() as u32;
                    initial(types)?;
                    let p = (s, types.len() as u32);
                    *prev = Some(p);
                    Ok(p)
                };
            let (delta, locals, stack);
            match ft {
                0..=63 => {
                    delta = ft as i64;
                    locals = get_prev(&mut prev_locals, &mut self.types, initial)?;
                    let s = self.types.len() as u32;
                    stack = (s, s);
                }
                64..=127 | 247 => {
                    delta = if ft == 247 {
                        r.u16()? as i64
                    } else {
                        ft as i64 - 64
                    };
                    locals = get_prev(&mut prev_locals, &mut self.types, initial)?;
                    let s = self.types.len() as u32;
                    self.types.push(read_vtype(&mut r)?);
                    stack = (s, s + 1);
                }
                248..=250 => {
                    delta = r.u16()? as i64;
                    let p = get_prev(&mut prev_locals, &mut self.types, initial)?;
                    let k = 251 - ft as u32;
                    if p.1 - p.0 < k {
                        return Err(RewriteError::Malformed(
                            "chop_frame removes too many locals".into(),
                        ));
                    }
                    locals = (p.0, p.1 - k);
                    let s = self.types.len() as u32;
                    stack = (s, s);
                }
                251 => {
                    delta = r.u16()? as i64;
                    locals = get_prev(&mut prev_locals, &mut self.types, initial)?;
                    let s = self.types.len() as u32;
                    stack = (s, s);
                }
                252..=254 => {
                    delta = r.u16()? as i64;
                    let p = get_prev(&mut prev_locals, &mut self.types, initial)?;
                    scratch.clear();
                    scratch.extend_from_slice(&self.types[p.0 as usize..p.1 as usize]);
                    for _ in 0..(ft - 251) {
                        scratch.push(read_vtype(&mut r)?);
                    }
                    let s = self.types.len() as u32;
                    self.types.extend_from_slice(&scratch);
                    locals = (s, self.types.len() as u32);
                    let e = self.types.len() as u32;
                    stack = (e, e);
                }
                255 => {
                    delta = r.u16()? as i64;
                    let nl = r.u16()?;
                    let s = self.types.len() as u32;
                    for _ in 0..nl {
                        self.types.push(read_vtype(&mut r)?);
                    }
                    locals = (s, self.types.len() as u32);
                    let ns = r.u16()?;
                    let s2 = self.types.len() as u32;
                    for _ in 0..ns {
                        self.types.push(read_vtype(&mut r)?);
                    }
                    stack = (s2, self.types.len() as u32);
                }
                _ => {
                    return Err(RewriteError::Malformed(format!(
                        "bad stack map frame type {ft}"
                    )))
                }
            }
            off = off + delta + 1;
            if off > u16::MAX as i64 {
                return Err(RewriteError::Malformed(
                    "stack map frame offset overflow".into(),
                ));
            }
            prev_locals = Some(locals);
            self.frames.push((off as u32, locals, stack));
        }
        Ok(())
    }
}

/// Writes one full_frame: `locals` padded with Top up to slot `l`, then `added` (the
/// rewrite's own locals).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_full_frame(
    out: &mut Vec<u8>,
    delta: u16,
    locals: &[VType],
    stack: &[VType],
    l: u32,
    added: &[VType],
    remap: &dyn Fn(u32) -> Result<u32, RewriteError>,
) -> Result<(), RewriteError> {
    out.push(255);
    put_u16(out, delta);
    let slots: u32 = locals.iter().map(|t| t.slots()).sum();
    // Trailing Tops may be implicit padding; a frame with more slots than max_locals is invalid.
    let mut locals = locals;
    let mut slots = slots;
    while slots > l {
        match locals.split_last() {
            Some((VType::Top, rest)) => {
                locals = rest;
                slots -= 1;
            }
            _ => {
                return Err(RewriteError::Malformed(
                    "stack map frame has more locals than max_locals".into(),
                ))
            }
        }
    }
    let n = locals.len() as u32 + (l - slots) + added.len() as u32;
    put_u16(out, n as u16);
    for t in locals {
        t.write(out, remap)?;
    }
    for _ in slots..l {
        out.push(0);
    }
    for t in added {
        t.write(out, remap)?;
    }
    put_u16(out, stack.len() as u16);
    for t in stack {
        t.write(out, remap)?;
    }
    Ok(())
}
