//! The verification types after one instruction, found by simulating the instructions
//! from the nearest stack map frame before it (the type checker's own linear walk: after
//! an unconditional jump a frame must follow, so that frame's types are exact).
//!
//! Only needed to widen a far conditional branch in a class with frames: the inverted
//! branch jumps over a `goto_w` to the instruction that followed the original branch,
//! which then needs a frame of its own.

use super::cpool::{ConstPool, CpAppender, CLASS, DYNAMIC, INTEGER, METHOD_HANDLE, METHOD_TYPE};
use super::error::RewriteError;
use super::frames::VType;
use super::insn::{dup_or_swap, Flow, Insn};
use super::reader::{u16_at, u8_at};

/// Everything the simulation reads.
pub(crate) struct Ctx<'a, 'c> {
    pub cp: &'a ConstPool<'a>,
    pub cpa: &'c mut CpAppender,
    pub code: &'a [u8],
    pub this_class: u16,
}

fn two(t: VType) -> bool {
    matches!(t, VType::Long | VType::Double)
}

/// Verification type of a field descriptor (or a method's return type).
fn of_desc(d: &[u8], cpa: &mut CpAppender) -> Result<Option<VType>, RewriteError> {
    Ok(Some(match d.first() {
        Some(b'B' | b'C' | b'I' | b'S' | b'Z') => VType::Integer,
        Some(b'F') => VType::Float,
        Some(b'J') => VType::Long,
        Some(b'D') => VType::Double,
        Some(b'L') if d.len() > 2 => VType::Object(cpa.class(&d[1..d.len() - 1])?),
        Some(b'[') => VType::Object(cpa.class(d)?),
        _ => return Ok(None),
    }))
}

/// A class name (Class entry of the original or the appended pool).
fn class_name(ctx: &Ctx, idx: u16) -> Option<Vec<u8>> {
    if idx < ctx.cp.count() {
        ctx.cp
            .utf8_bytes(ctx.cp.class_name_index(idx).ok()?)
            .ok()
            .map(|b| b.to_vec())
    } else {
        ctx.cpa.class_name(idx).map(|b| b.to_vec())
    }
}

/// (locals, stack) of a frame.
pub(crate) type Types = (Vec<VType>, Vec<VType>);

struct State {
    locals: Vec<VType>,
    stack: Vec<VType>,
}

impl State {
    fn push(&mut self, t: VType) {
        self.stack.push(t);
        if two(t) {
            self.stack.push(VType::Top);
        }
    }
    fn pop(&mut self, slots: usize) -> Option<()> {
        let n = self.stack.len().checked_sub(slots)?;
        self.stack.truncate(n);
        Some(())
    }
    fn set_local(&mut self, i: usize, t: VType) {
        let need = i + if two(t) { 2 } else { 1 };
        if self.locals.len() < need {
            self.locals.resize(need, VType::Top);
        }
        if i > 0 && two(self.locals[i - 1]) {
            self.locals[i - 1] = VType::Top;
        }
        self.locals[i] = t;
        if two(t) {
            self.locals[i + 1] = VType::Top;
        }
    }
    fn local(&self, i: usize) -> VType {
        self.locals.get(i).copied().unwrap_or(VType::Top)
    }
}

/// Expands frame types (long/double as one entry) to slots.
fn expand(types: &[VType], out: &mut Vec<VType>) {
    for &t in types {
        out.push(t);
        if two(t) {
            out.push(VType::Top);
        }
    }
}

/// Compresses slots back to frame types.
fn compress(slots: &[VType]) -> Vec<VType> {
    let mut v = Vec::with_capacity(slots.len());
    let mut i = 0;
    while i < slots.len() {
        v.push(slots[i]);
        i += if two(slots[i]) { 2 } else { 1 };
    }
    while v.last() == Some(&VType::Top) {
        v.pop();
    }
    v
}

/// (locals, stack) as frame types after instruction `upto`, simulating from instruction
/// `from` whose incoming types are `locals`/`stack`. None if the simulation cannot tell.
pub(crate) fn after(
    ctx: &mut Ctx,
    insns: &[Insn],
    from: usize,
    locals: &[VType],
    stack: &[VType],
    upto: usize,
) -> Result<Option<Types>, RewriteError> {
    let mut st = State {
        locals: Vec::new(),
        stack: Vec::new(),
    };
    expand(locals, &mut st.locals);
    expand(stack, &mut st.stack);
    for (i, ins) in insns.iter().enumerate().take(upto + 1).skip(from) {
        if i < upto && !matches!(ins.flow, Flow::Next | Flow::Cond) {
            return Ok(None);
        }
        if step(ctx, ins, &mut st)?.is_none() {
            return Ok(None);
        }
    }
    Ok(Some((compress(&st.locals), compress(&st.stack))))
}

/// What one instruction's simulation gives: Ok(None) when it cannot tell.
type Step = Result<Option<()>, RewriteError>;

/// Pops `$n` slots, or gives up on the simulation.
macro_rules! pop {
    ($st:expr, $n:expr) => {
        if $st.pop($n).is_none() {
            return Ok(None);
        }
    };
}

/// Unwraps an Option, or gives up on the simulation.
macro_rules! or_give_up {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

fn step(ctx: &mut Ctx, ins: &Insn, st: &mut State) -> Step {
    let op = ins.op;
    if let Some(t) = pushed(op) {
        st.push(t);
        return Ok(Some(()));
    }
    match op {
        0x00 | 0x84 => {}
        0x12..=0x14 => return ldc(ctx, ins, st),
        0x19 | 0x2a..=0x2d => {
            let i = if op == 0x19 {
                u8_at(ctx.code, ins.off as usize + 1)? as usize
            } else {
                (op - 0x2a) as usize
            };
            let t = st.local(i);
            st.push(t);
        }
        0x2e..=0x35 => return array_load(ctx, op, st),
        0x36..=0x4e => return store(ctx, ins, st),
        0x4f | 0x51 | 0x53..=0x56 => pop!(st, 3),
        0x50 | 0x52 => pop!(st, 4),
        0x57 => pop!(st, 1),
        0x58 => pop!(st, 2),
        0x59..=0x5f => {
            if !dup_or_swap(op, &mut st.stack) {
                return Ok(None);
            }
        }
        0x60..=0x98 => return arithmetic(op, st),
        0x99..=0x9e | 0xc6 | 0xc7 => pop!(st, 1),
        0x9f..=0xa6 => pop!(st, 2),
        0xb2..=0xb5 => return field(ctx, ins, st),
        0xb6..=0xba => return invoke(ctx, ins, st),
        0xbb..=0xbd | 0xc0 | 0xc5 => return new_object(ctx, ins, st),
        0xbe | 0xc1 => {
            pop!(st, 1);
            st.push(VType::Integer);
        }
        0xc2 | 0xc3 => pop!(st, 1),
        0xc4 => return wide(ctx, ins, st),
        _ => return Ok(None),
    }
    Ok(Some(()))
}

/// The type an instruction that only pushes (a constant, a load of a primitive local)
/// pushes.
fn pushed(op: u8) -> Option<VType> {
    use VType::*;
    Some(match op {
        0x01 => Null,
        0x02..=0x08 | 0x10 | 0x11 => Integer,
        0x09 | 0x0a => Long,
        0x0b..=0x0d => Float,
        0x0e | 0x0f => Double,
        0x15 | 0x1a..=0x1d => Integer,
        0x16 | 0x1e..=0x21 => Long,
        0x17 | 0x22..=0x25 => Float,
        0x18 | 0x26..=0x29 => Double,
        _ => return None,
    })
}

/// `ldc`, `ldc_w`, `ldc2_w`: the type of the constant.
fn ldc(ctx: &mut Ctx, ins: &Insn, st: &mut State) -> Step {
    use VType::*;
    let off = ins.off as usize;
    let i = if ins.op == 0x12 {
        u8_at(ctx.code, off + 1)? as u16
    } else {
        u16_at(ctx.code, off + 1)?
    };
    let t = match ctx.cp.tag(i)? {
        INTEGER => Integer,
        4 => Float,
        5 => Long,
        6 => Double,
        8 => Object(ctx.cpa.class(b"java/lang/String")?),
        CLASS => Object(ctx.cpa.class(b"java/lang/Class")?),
        METHOD_TYPE => Object(ctx.cpa.class(b"java/lang/invoke/MethodType")?),
        METHOD_HANDLE => Object(ctx.cpa.class(b"java/lang/invoke/MethodHandle")?),
        DYNAMIC => {
            let (_, _, d) = ctx.cp.member(i)?;
            or_give_up!(of_desc(d, ctx.cpa)?)
        }
        _ => return Ok(None),
    };
    st.push(t);
    Ok(Some(()))
}

/// `*aload`: the element type (of `aaload`, from the array's class).
fn array_load(ctx: &mut Ctx, op: u8, st: &mut State) -> Step {
    use VType::*;
    let t = match op {
        0x2e | 0x33..=0x35 => Integer,
        0x2f => Long,
        0x30 => Float,
        0x31 => Double,
        _ => {
            let arr = *or_give_up!(st.stack.len().checked_sub(2).and_then(|i| st.stack.get(i)));
            pop!(st, 2);
            let t = match arr {
                Null => Null,
                Object(c) => {
                    let name = or_give_up!(class_name(ctx, c));
                    match name.get(1) {
                        Some(b'L') if name.len() > 3 => {
                            Object(ctx.cpa.class(&name[2..name.len() - 1])?)
                        }
                        Some(b'[') => Object(ctx.cpa.class(&name[1..])?),
                        _ => return Ok(None),
                    }
                }
                _ => return Ok(None),
            };
            st.push(t);
            return Ok(Some(()));
        }
    };
    pop!(st, 2);
    st.push(t);
    Ok(Some(()))
}

/// `*store` (byte index or short form).
fn store(ctx: &mut Ctx, ins: &Insn, st: &mut State) -> Step {
    let op = ins.op;
    let (i, kind) = if op <= 0x3a {
        (u8_at(ctx.code, ins.off as usize + 1)? as usize, op - 0x36)
    } else {
        (((op - 0x3b) % 4) as usize, (op - 0x3b) / 4)
    };
    store_local(st, i, kind)
}

/// Stores the top of the stack into local `i`; `kind`: 0 int, 1 long, 2 float, 3 double,
/// 4 reference.
fn store_local(st: &mut State, i: usize, kind: u8) -> Step {
    use VType::*;
    let t = match kind {
        0 => Integer,
        1 => Long,
        2 => Float,
        3 => Double,
        _ => *or_give_up!(st.stack.last()),
    };
    pop!(st, if two(t) { 2 } else { 1 });
    st.set_local(i, t);
    Ok(Some(()))
}

/// Arithmetic, shifts, logic, conversions and comparisons.
fn arithmetic(op: u8, st: &mut State) -> Step {
    use VType::*;
    let (pops, t) = match op {
        0x60..=0x77 => {
            let t = [Integer, Long, Float, Double][((op - 0x60) % 4) as usize];
            let operands = if op >= 0x74 { 1 } else { 2 };
            (operands * if two(t) { 2 } else { 1 }, t)
        }
        0x78..=0x7d => {
            let long = (op - 0x78) % 2 == 1;
            (if long { 3 } else { 2 }, if long { Long } else { Integer })
        }
        0x7e..=0x83 => {
            let long = (op - 0x7e) % 2 == 1;
            (if long { 4 } else { 2 }, if long { Long } else { Integer })
        }
        0x85..=0x93 => conversion(op),
        0x94 | 0x97 | 0x98 => (4, Integer),
        0x95 | 0x96 => (2, Integer),
        _ => return Ok(None),
    };
    pop!(st, pops);
    st.push(t);
    Ok(Some(()))
}

/// A conversion: (slots popped, type pushed).
fn conversion(op: u8) -> (usize, VType) {
    use VType::*;
    match op {
        0x85 => (1, Long),
        0x86 => (1, Float),
        0x87 => (1, Double),
        0x88 => (2, Integer),
        0x89 => (2, Float),
        0x8a => (2, Double),
        0x8b => (1, Integer),
        0x8c => (1, Long),
        0x8d => (1, Double),
        0x8e => (2, Integer),
        0x8f => (2, Long),
        0x90 => (2, Float),
        _ => (1, Integer),
    }
}

/// getstatic, putstatic, getfield, putfield.
fn field(ctx: &mut Ctx, ins: &Insn, st: &mut State) -> Step {
    let (_, _, d) = ctx.cp.member(u16_at(ctx.code, ins.off as usize + 1)?)?;
    let t = or_give_up!(of_desc(d, ctx.cpa)?);
    let size = if two(t) { 2 } else { 1 };
    match ins.op {
        0xb2 => st.push(t),
        0xb3 => pop!(st, size),
        0xb4 => {
            pop!(st, 1);
            st.push(t);
        }
        _ => pop!(st, size + 1),
    }
    Ok(Some(()))
}

/// The invokes: arguments and receiver popped (a constructor call initializes its
/// receiver everywhere), the result pushed.
fn invoke(ctx: &mut Ctx, ins: &Insn, st: &mut State) -> Step {
    use VType::*;
    let op = ins.op;
    let (_, name, d) = ctx.cp.member(u16_at(ctx.code, ins.off as usize + 1)?)?;
    let (args, _) = or_give_up!(super::initthis::method_slots(d));
    pop!(st, args as usize);
    if op != 0xb8 && op != 0xba {
        let recv = or_give_up!(st.stack.pop());
        if op == 0xb7 && name == b"<init>" {
            let init = match recv {
                UninitializedThis => Object(ctx.this_class),
                Uninitialized(at) => Object(u16_at(ctx.code, at as usize + 1)?),
                _ => recv,
            };
            for t in st.locals.iter_mut().chain(st.stack.iter_mut()) {
                if *t == recv {
                    *t = init;
                }
            }
        }
    }
    let ret = &d[d.iter().position(|&b| b == b')').map_or(d.len(), |p| p + 1)..];
    if ret != b"V" {
        let t = or_give_up!(of_desc(ret, ctx.cpa)?);
        st.push(t);
    }
    Ok(Some(()))
}

/// new, newarray, anewarray, checkcast, multianewarray.
fn new_object(ctx: &mut Ctx, ins: &Insn, st: &mut State) -> Step {
    use VType::*;
    let (code, off) = (ctx.code, ins.off as usize);
    match ins.op {
        0xbb => st.push(Uninitialized(ins.off)),
        0xbc => {
            pop!(st, 1);
            let name: &[u8] = match u8_at(code, off + 1)? {
                4 => b"[Z",
                5 => b"[C",
                6 => b"[F",
                7 => b"[D",
                8 => b"[B",
                9 => b"[S",
                10 => b"[I",
                11 => b"[J",
                _ => return Ok(None),
            };
            st.push(Object(ctx.cpa.class(name)?));
        }
        0xbd => {
            pop!(st, 1);
            let elem = or_give_up!(class_name(ctx, u16_at(code, off + 1)?));
            let mut name = vec![b'['];
            if elem.first() == Some(&b'[') {
                name.extend_from_slice(&elem);
            } else {
                name.push(b'L');
                name.extend_from_slice(&elem);
                name.push(b';');
            }
            st.push(Object(ctx.cpa.class(&name)?));
        }
        0xc0 => {
            pop!(st, 1);
            st.push(Object(u16_at(code, off + 1)?));
        }
        _ => {
            pop!(st, u8_at(code, off + 3)? as usize);
            st.push(Object(u16_at(code, off + 1)?));
        }
    }
    Ok(Some(()))
}

/// `wide` loads, stores and iinc.
fn wide(ctx: &mut Ctx, ins: &Insn, st: &mut State) -> Step {
    use VType::*;
    let off = ins.off as usize;
    let inner = u8_at(ctx.code, off + 1)?;
    let i = u16_at(ctx.code, off + 2)? as usize;
    match inner {
        0x15 => st.push(Integer),
        0x16 => st.push(Long),
        0x17 => st.push(Float),
        0x18 => st.push(Double),
        0x19 => {
            let t = st.local(i);
            st.push(t);
        }
        0x36..=0x3a => return store_local(st, i, inner - 0x36),
        0x84 => {}
        _ => return Ok(None),
    }
    Ok(Some(()))
}
