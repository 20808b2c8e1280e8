//! The kernel's BTF (`/sys/kernel/btf/vmlinux`), read just far enough to find a type's id
//! by name: what a `tp_btf` program names as its attach point.
use anyhow::{bail, Context, Result};

const BTF_MAGIC: u16 = 0xeb9f;

/// The id of the type named `name` (the first with that name).
pub(super) fn type_id(name: &str) -> Result<u32> {
    let btf = std::fs::read("/sys/kernel/btf/vmlinux").context("cannot read the kernel's BTF")?;
    let u16_at = |at: usize| {
        btf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        btf.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if u16_at(0) != Some(BTF_MAGIC) {
        bail!("the kernel's BTF is not little-endian BTF");
    }
    let field = |at: usize| u32_at(at).map(|v| v as usize).context("short BTF header");
    let hdr_len = field(4)?;
    let (type_off, type_len) = (field(8)?, field(12)?);
    let str_off = field(16)?;
    let types = hdr_len + type_off;
    let strings = hdr_len + str_off;
    let mut at = types;
    let mut id = 1u32;
    while at < types + type_len {
        let (name_off, info) = (field(at)?, field(at + 4)? as u32);
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let start = strings + name_off;
        let named = btf
            .get(start..)
            .and_then(|s| s.split(|&b| b == 0).next())
            .unwrap_or(&[]);
        if named == name.as_bytes() {
            return Ok(id);
        }
        at += 12 + extra_bytes(kind, vlen);
        id += 1;
    }
    bail!("no type {name} in the kernel's BTF")
}

/// What follows a `btf_type` of `kind` with `vlen` members (uapi/linux/btf.h).
fn extra_bytes(kind: u32, vlen: usize) -> usize {
    match kind {
        // INT, VAR, DECL_TAG
        1 | 14 | 17 => 4,
        // ARRAY
        3 => 12,
        // STRUCT, UNION, DATASEC, ENUM64
        4 | 5 | 15 | 19 => 12 * vlen,
        // ENUM, FUNC_PROTO
        6 | 13 => 8 * vlen,
        _ => 0,
    }
}
