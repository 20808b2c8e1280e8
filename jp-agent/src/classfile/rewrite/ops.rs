//! Writers of the few instructions the rewriter injects (shortest encodings).

use super::super::cpool::CpAppender;
use super::super::error::RewriteError;
use super::super::insn;
use super::super::reader::put_u16;

/// Pushes an int constant: `iconst`, `bipush`, `sipush`, else `ldc`/`ldc_w` of an
/// appended Integer entry.
pub(super) fn push_int(out: &mut Vec<u8>, v: i32, cp: &mut CpAppender) -> Result<(), RewriteError> {
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

/// A load or store of local `l`: the one-byte form, the byte-index form or `wide`.
pub(super) fn local_op(out: &mut Vec<u8>, short_base: u8, op: u8, l: u32) {
    if l < 4 {
        out.push(short_base + l as u8);
    } else if l < 256 {
        out.extend_from_slice(&[op, l as u8]);
    } else {
        out.extend_from_slice(&[insn::WIDE, op]);
        put_u16(out, l as u16);
    }
}

/// Bytes of [`local_op`] for local `l`.
pub(super) fn local_op_len(l: u32) -> usize {
    if l < 4 {
        1
    } else if l < 256 {
        2
    } else {
        4
    }
}

pub(super) fn aload(out: &mut Vec<u8>, l: u32) {
    local_op(out, insn::ALOAD_0, insn::ALOAD, l);
}

pub(super) fn astore(out: &mut Vec<u8>, l: u32) {
    local_op(out, insn::ASTORE_0, insn::ASTORE, l);
}

pub(super) fn iload(out: &mut Vec<u8>, l: u32) {
    local_op(out, insn::ILOAD_0, insn::ILOAD, l);
}

pub(super) fn istore(out: &mut Vec<u8>, l: u32) {
    local_op(out, insn::ISTORE_0, insn::ISTORE, l);
}

/// `local += n` (n ≥ 0), in as few `iinc`s as its size needs.
pub(super) fn iinc(out: &mut Vec<u8>, l: u32, mut n: u32) {
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

pub(super) fn invokestatic(out: &mut Vec<u8>, m: u16) {
    out.push(insn::INVOKESTATIC);
    put_u16(out, m);
}

/// The conditional branch taken exactly when `op` is not.
pub(super) fn invert(op: u8) -> u8 {
    match op {
        0xc6 => 0xc7,
        0xc7 => 0xc6,
        _ if (op - 0x99).is_multiple_of(2) => op + 1,
        _ => op - 1,
    }
}
