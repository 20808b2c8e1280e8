//! StackMapTable: every original frame is expanded to its full locals/stack and
//! re-emitted as a `full_frame` at its new offset, with the context local appended.

use super::cpool::CpAppender;
use super::error::RewriteError;
use super::reader::{put_u16, Reader};

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

/// What a method's implicit first frame depends on (JVMS 4.10.1.6).
#[derive(Clone, Copy)]
pub(crate) struct Signature<'a> {
    /// The method descriptor.
    pub desc: &'a [u8],
    pub is_static: bool,
    /// The method is a constructor (`<init>`).
    pub is_init: bool,
    /// The class's Class entry.
    pub this_class: u16,
    /// The class is `java/lang/Object` (whose constructor starts with `this` initialized).
    pub this_is_object: bool,
}

/// Initial locals of a method from its descriptor (JVMS 4.10.1.6).
pub(crate) fn initial_locals(
    sig: &Signature,
    cp: &mut CpAppender,
    out: &mut Vec<VType>,
) -> Result<(), RewriteError> {
    let Signature {
        desc,
        is_static,
        is_init,
        this_class,
        this_is_object,
    } = *sig;
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
    /// The types of a range of `types`.
    pub fn span(&self, s: Span) -> &[VType] {
        &self.types[s.0 as usize..s.1 as usize]
    }

    /// Expands a StackMapTable. `initial` gives the implicit frame's locals (called once,
    /// only if a compressed frame needs them).
    pub fn parse(&mut self, data: &[u8], initial: &mut Initial) -> Result<(), RewriteError> {
        self.frames.clear();
        self.types.clear();
        let mut r = Reader::new(data, 0);
        let n = r.u16()?;
        let mut prev_locals: Option<Span> = None;
        let mut off: i64 = -1;
        let mut scratch: Vec<VType> = Vec::new();
        for _ in 0..n {
            let ft = r.u8()?;
            let mut prev = Previous {
                locals: &mut prev_locals,
                initial: &mut *initial,
            };
            let (delta, locals, stack) = self.frame(&mut r, ft, &mut prev, &mut scratch)?;
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

    /// One frame of type `ft`: (offset delta, locals, stack).
    fn frame(
        &mut self,
        r: &mut Reader,
        ft: u8,
        prev: &mut Previous,
        scratch: &mut Vec<VType>,
    ) -> Result<(i64, Span, Span), RewriteError> {
        let empty = |types: &Vec<VType>| (types.len() as u32, types.len() as u32);
        Ok(match ft {
            0..=63 => {
                let locals = prev.get(&mut self.types)?;
                (ft as i64, locals, empty(&self.types))
            }
            64..=127 | 247 => {
                let delta = if ft == 247 {
                    r.u16()? as i64
                } else {
                    ft as i64 - 64
                };
                let locals = prev.get(&mut self.types)?;
                let s = self.types.len() as u32;
                self.types.push(read_vtype(r)?);
                (delta, locals, (s, s + 1))
            }
            248..=250 => {
                let delta = r.u16()? as i64;
                let p = prev.get(&mut self.types)?;
                let k = 251 - ft as u32;
                if p.1 - p.0 < k {
                    return Err(RewriteError::Malformed(
                        "chop_frame removes too many locals".into(),
                    ));
                }
                (delta, (p.0, p.1 - k), empty(&self.types))
            }
            251 => {
                let delta = r.u16()? as i64;
                let locals = prev.get(&mut self.types)?;
                (delta, locals, empty(&self.types))
            }
            252..=254 => {
                let delta = r.u16()? as i64;
                let p = prev.get(&mut self.types)?;
                scratch.clear();
                scratch.extend_from_slice(&self.types[p.0 as usize..p.1 as usize]);
                for _ in 0..(ft - 251) {
                    scratch.push(read_vtype(r)?);
                }
                let s = self.types.len() as u32;
                self.types.extend_from_slice(scratch);
                (delta, (s, self.types.len() as u32), empty(&self.types))
            }
            255 => self.full_frame(r)?,
            _ => {
                return Err(RewriteError::Malformed(format!(
                    "bad stack map frame type {ft}"
                )))
            }
        })
    }

    /// A full_frame: (offset delta, locals, stack).
    fn full_frame(&mut self, r: &mut Reader) -> Result<(i64, Span, Span), RewriteError> {
        let delta = r.u16()? as i64;
        let nl = r.u16()?;
        let s = self.types.len() as u32;
        for _ in 0..nl {
            self.types.push(read_vtype(r)?);
        }
        let locals = (s, self.types.len() as u32);
        let ns = r.u16()?;
        let s2 = self.types.len() as u32;
        for _ in 0..ns {
            self.types.push(read_vtype(r)?);
        }
        Ok((delta, locals, (s2, self.types.len() as u32)))
    }
}

/// Gives the implicit initial frame's locals.
pub(crate) type Initial<'i> = dyn FnMut(&mut Vec<VType>) -> Result<(), RewriteError> + 'i;

/// The previous frame's locals, for the compressed frames.
struct Previous<'p, 'i> {
    locals: &'p mut Option<Span>,
    initial: &'p mut Initial<'i>,
}

impl Previous<'_, '_> {
    /// The previous frame's locals; at the first frame, the implicit frame's (appended
    /// to `types` then).
    fn get(&mut self, types: &mut Vec<VType>) -> Result<Span, RewriteError> {
        if let Some(p) = *self.locals {
            return Ok(p);
        }
        let s = types.len() as u32;
        (self.initial)(types)?;
        let p = (s, types.len() as u32);
        *self.locals = Some(p);
        Ok(p)
    }
}

/// Writes frames as `full_frame`s in offset order, each with the rewrite's own locals
/// appended after the method's.
pub(crate) struct FullFrames<'a> {
    /// The offset of the previous frame written (-1: none yet).
    prev: i64,
    /// The original max_locals: the frame's locals are padded with Top up to it.
    max_locals: u32,
    /// The rewrite's own locals.
    added: &'a [VType],
    /// New offset of an `Uninitialized` type's original `new`.
    remap: &'a dyn Fn(u32) -> Result<u32, RewriteError>,
}

impl<'a> FullFrames<'a> {
    pub fn new(
        max_locals: u32,
        added: &'a [VType],
        remap: &'a dyn Fn(u32) -> Result<u32, RewriteError>,
    ) -> Self {
        FullFrames {
            prev: -1,
            max_locals,
            added,
            remap,
        }
    }

    /// The offset of the last frame written (-1: none yet).
    pub fn prev(&self) -> i64 {
        self.prev
    }

    /// Writes the frame at new offset `at`.
    pub fn write(
        &mut self,
        out: &mut Vec<u8>,
        at: i64,
        locals: &[VType],
        stack: &[VType],
    ) -> Result<(), RewriteError> {
        let delta = if self.prev < 0 {
            at
        } else {
            at - self.prev - 1
        };
        self.prev = at;
        out.push(255);
        put_u16(out, delta as u16);
        self.write_locals(out, locals)?;
        put_u16(out, stack.len() as u16);
        for t in stack {
            t.write(out, self.remap)?;
        }
        Ok(())
    }

    /// `locals` padded with Top up to `max_locals`, then the added ones (count first).
    fn write_locals(&self, out: &mut Vec<u8>, locals: &[VType]) -> Result<(), RewriteError> {
        let l = self.max_locals;
        let slots: u32 = locals.iter().map(|t| t.slots()).sum();
        // Trailing Tops may be implicit padding; a frame with more slots than max_locals
        // is invalid.
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
        let n = locals.len() as u32 + (l - slots) + self.added.len() as u32;
        put_u16(out, n as u16);
        for t in locals {
            t.write(out, self.remap)?;
        }
        for _ in slots..l {
            out.push(0);
        }
        for t in self.added {
            t.write(out, self.remap)?;
        }
        Ok(())
    }
}
