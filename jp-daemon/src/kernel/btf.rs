//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): just enough to find
//! struct member offsets, so that the eBPF programs never carry
//! hard-coded kernel layouts.
//!
//! Format (include/uapi/linux/btf.h): a header, a type section of `btf_type` records
//! (12 bytes each, followed by kind-specific data) and a string section. Type ids start
//! at 1 in file order.
use std::collections::HashMap;

use anyhow::{bail, ensure, Context as _};

const BTF_MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

/// One struct or union: its members as (name, type id, byte offset).
#[derive(Debug, Default)]
struct Composite {
    members: Vec<(String, u32, u32)>,
}

/// What jpd needs from BTF: structs and unions, with their members.
#[derive(Debug, Default)]
pub struct Btf {
    /// Type id → composite, for the structs and unions.
    composites: HashMap<u32, Composite>,
    /// Type id → the type it refers to, for typedef/const/volatile/restrict/type tags,
    /// so that anonymous members declared through them can be followed.
    aliases: HashMap<u32, u32>,
    /// Struct name → type id (the first struct of that name).
    struct_ids: HashMap<String, u32>,
}

impl Btf {
    pub fn load_vmlinux() -> anyhow::Result<Btf> {
        let path = "/sys/kernel/btf/vmlinux";
        let data = std::fs::read(path).with_context(|| {
            format!("cannot read {path} (kernel built without CONFIG_DEBUG_INFO_BTF?)")
        })?;
        Btf::parse(&data).with_context(|| format!("cannot parse {path}"))
    }

    pub fn parse(data: &[u8]) -> anyhow::Result<Btf> {
        let r = Reader { data };
        ensure!(r.u16(0)? == BTF_MAGIC, "bad magic (not little-endian BTF)");
        let hdr_len = r.u32(4)? as usize;
        let type_off = r.u32(8)? as usize;
        let type_len = r.u32(12)? as usize;
        let str_off = r.u32(16)? as usize;
        let str_len = r.u32(20)? as usize;
        let types_start = hdr_len.checked_add(type_off).context("header overflow")?;
        let types_end = types_start
            .checked_add(type_len)
            .context("header overflow")?;
        let strs_start = hdr_len.checked_add(str_off).context("header overflow")?;
        let strs_end = strs_start.checked_add(str_len).context("header overflow")?;
        ensure!(
            types_end <= data.len() && strs_end <= data.len(),
            "sections past end of data"
        );
        let strings = &data[strs_start..strs_end];
        let name = |off: u32| -> anyhow::Result<&str> {
            let s = strings
                .get(off as usize..)
                .context("string offset out of range")?;
            let end = s
                .iter()
                .position(|&b| b == 0)
                .context("unterminated string")?;
            std::str::from_utf8(&s[..end]).context("string is not UTF-8")
        };

        let mut btf = Btf::default();
        let mut pos = types_start;
        let mut id = 0u32;
        while pos < types_end {
            id += 1;
            let name_off = r.u32(pos)?;
            let info = r.u32(pos + 4)?;
            let size_or_type = r.u32(pos + 8)?;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let body = pos + 12;
            let extra = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
                KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
                // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
                2 | 7..=12 | 16 | 18 => 0,
                other => bail!("unknown BTF kind {other} at offset {pos}"),
            };
            match kind {
                KIND_STRUCT | KIND_UNION => {
                    let mut c = Composite::default();
                    for m in 0..vlen {
                        let mpos = body + 12 * m;
                        let mname = name(r.u32(mpos)?)?;
                        let mtype = r.u32(mpos + 4)?;
                        let raw = r.u32(mpos + 8)?;
                        // With kind_flag, the top 8 bits are a bitfield size.
                        let bits = if kind_flag { raw & 0x00ff_ffff } else { raw };
                        if bits % 8 == 0 {
                            c.members.push((mname.to_string(), mtype, bits / 8));
                        }
                    }
                    if kind == KIND_STRUCT && name_off != 0 {
                        btf.struct_ids
                            .entry(name(name_off)?.to_string())
                            .or_insert(id);
                    }
                    btf.composites.insert(id, c);
                }
                // TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG
                8..=11 | 18 => {
                    btf.aliases.insert(id, size_or_type);
                }
                _ => {}
            }
            pos = body + extra;
        }
        ensure!(
            pos == types_end,
            "type section does not end on a record boundary"
        );
        Ok(btf)
    }

    /// Byte offset of `member` in `struct name`, looking through anonymous struct and
    /// union members (e.g. x86's `pt_regs.cs`, inside a union since FRED).
    pub fn member_offset(&self, name: &str, member: &str) -> anyhow::Result<u32> {
        let id = self
            .struct_ids
            .get(name)
            .with_context(|| format!("no struct {name} in BTF"))?;
        self.find_member(*id, member, 0)
            .with_context(|| format!("no member {member} in struct {name}"))
    }

    fn find_member(&self, id: u32, member: &str, depth: u32) -> Option<u32> {
        // Anonymous nesting is shallow in practice; the bound guards against cycles.
        if depth > 8 {
            return None;
        }
        let c = self.composites.get(&self.resolve(id))?;
        if let Some((_, _, off)) = c.members.iter().find(|(n, _, _)| n == member) {
            return Some(*off);
        }
        c.members
            .iter()
            .filter(|(n, _, _)| n.is_empty())
            .find_map(|(_, t, off)| Some(off + self.find_member(*t, member, depth + 1)?))
    }

    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..16 {
            match self.aliases.get(&id) {
                Some(&next) => id = next,
                None => break,
            }
        }
        id
    }
}

struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> anyhow::Result<[u8; N]> {
        let end = at.checked_add(N).context("offset overflow")?;
        let b = self
            .data
            .get(at..end)
            .with_context(|| format!("truncated at offset {at}"))?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
    fn u16(&self, at: usize) -> anyhow::Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(at)?))
    }
    fn u32(&self, at: usize) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(at)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob: `struct s { int a; long b; union { int c; int d; }; }`, an
    /// int, a FUNC `f`.
    fn fixture() -> Vec<u8> {
        let strings = b"\0s\0a\0b\0int\0f\0c\0d\0".to_vec();
        let (s_s, s_a, s_b, s_int, s_f, s_c, s_d) = (1u32, 3u32, 5u32, 7u32, 11u32, 13u32, 15u32);
        let mut types = Vec::new();
        let mut rec = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        // [1] int: name, info(kind INT), size, int encoding
        rec(&[s_int, KIND_INT << 24, 4, 32]);
        // [2] struct s, 3 members, size 24: members (name, type, bit offset)
        rec(&[
            s_s,
            (KIND_STRUCT << 24) | 3,
            24,
            s_a,
            1,
            0,
            s_b,
            1,
            64,
            0,
            5,
            128,
        ]);
        // [3] func proto, 0 params; [4] func f
        rec(&[0, KIND_FUNC_PROTO << 24, 0]);
        rec(&[s_f, 12 << 24, 3]);
        // [5] const [6]; [6] anonymous union { int c; int d; }
        rec(&[0, 10 << 24, 6]);
        rec(&[0, (KIND_UNION << 24) | 2, 4, s_c, 1, 0, s_d, 1, 0]);
        let mut out = Vec::new();
        let hdr_len = 24u32;
        out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        for w in [
            hdr_len,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn finds_member_offsets_and_functions() {
        let btf = Btf::parse(&fixture()).unwrap();
        assert_eq!(btf.member_offset("s", "a").unwrap(), 0);
        assert_eq!(btf.member_offset("s", "b").unwrap(), 8);
        assert_eq!(
            btf.member_offset("s", "c").unwrap(),
            16,
            "through const + anonymous union"
        );
        assert_eq!(btf.member_offset("s", "d").unwrap(), 16);
        assert!(btf.member_offset("s", "e").is_err());
        assert!(btf.member_offset("t", "a").is_err());
    }

    #[test]
    fn truncated_or_foreign_data_is_an_error_not_a_panic() {
        let data = fixture();
        for len in 0..data.len() {
            assert!(
                Btf::parse(&data[..len]).is_err(),
                "prefix of {len} bytes accepted"
            );
        }
        let mut bad = data.clone();
        bad[0] = 0;
        assert!(Btf::parse(&bad).is_err());
    }
}
