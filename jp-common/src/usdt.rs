//! USDT (SystemTap SDT) probe argument descriptions, decoded by jpd from the
//! `.note.stapsdt` argument strings (`-8@%rax`, `8@-16(%rbp)`, `-4@$5`…) and stored in
//! a BPF map; the uprobe's attach cookie selects the probe's [`UsdtSpec`]. The eBPF
//! side fetches each argument the way libbpf's `usdt.bpf.h` does: read the register as
//! `*(u64 *)(ctx + 8 * reg)` with `bpf_probe_read_kernel` (a `pt_regs` field chosen at
//! run time cannot be read directly: the verifier rejects modified context pointers),
//! add the offset and read user memory for a dereference, then [`UsdtArg::extend`].

/// Most arguments an SDT probe site may have (`sys/sdt.h` allows 12).
pub const USDT_MAX_ARGS: usize = 12;

/// [`UsdtArg::kind`]: the value is [`UsdtArg::val_off`] itself.
pub const USDT_ARG_CONST: u32 = 0;
/// [`UsdtArg::kind`]: the value is register [`UsdtArg::reg`].
pub const USDT_ARG_REG: u32 = 1;
/// [`UsdtArg::kind`]: the value is read from user memory at `reg + val_off`.
pub const USDT_ARG_REG_DEREF: u32 = 2;
/// [`UsdtArg::kind`]: the value is read from user memory at
/// `reg + (index_reg << scale_shift) + val_off` (x86 scale-index-base addressing).
pub const USDT_ARG_SIB: u32 = 3;

/// Indices of the 64-bit slots of x86-64's `struct pt_regs` (the uprobe context):
/// the value of register `r` is `*(u64 *)(ctx + 8 * r)`.
pub mod x86_64_reg {
    pub const R15: u16 = 0;
    pub const R14: u16 = 1;
    pub const R13: u16 = 2;
    pub const R12: u16 = 3;
    pub const RBP: u16 = 4;
    pub const RBX: u16 = 5;
    pub const R11: u16 = 6;
    pub const R10: u16 = 7;
    pub const R9: u16 = 8;
    pub const R8: u16 = 9;
    pub const RAX: u16 = 10;
    pub const RCX: u16 = 11;
    pub const RDX: u16 = 12;
    pub const RSI: u16 = 13;
    pub const RDI: u16 = 14;
    pub const ORIG_RAX: u16 = 15;
    pub const RIP: u16 = 16;
    pub const CS: u16 = 17;
    pub const EFLAGS: u16 = 18;
    pub const RSP: u16 = 19;
    pub const SS: u16 = 20;
    /// Number of 64-bit slots in `struct pt_regs`; every register index is below it.
    pub const COUNT: u16 = 21;
}

/// How to fetch one probe argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtArg {
    /// The constant ([`USDT_ARG_CONST`]) or the displacement added to the address
    /// (dereferencing kinds), two's complement.
    pub val_off: u64,
    /// One of `USDT_ARG_*`.
    pub kind: u32,
    /// Base register, an index into `pt_regs` ([`x86_64_reg`]); unused for constants.
    pub reg: u16,
    /// Index register of [`USDT_ARG_SIB`].
    pub index_reg: u16,
    /// `log2` of the scale (1, 2, 4 or 8) of [`USDT_ARG_SIB`].
    pub scale_shift: u8,
    /// Size of the value in bytes: 1, 2, 4 or 8.
    pub size: u8,
    /// 1 if the value is signed (sign-extended to 64 bits), 0 if zero-extended.
    pub signed: u8,
    pub _pad: [u8; 5],
}

impl UsdtArg {
    pub const ZERO: UsdtArg = UsdtArg {
        val_off: 0,
        kind: USDT_ARG_CONST,
        reg: 0,
        index_reg: 0,
        scale_shift: 0,
        size: 8,
        signed: 0,
        _pad: [0; 5],
    };

    /// Keeps the low [`size`](Self::size) bytes of `raw` (a whole register, or eight
    /// bytes read from memory) and sign- or zero-extends them to 64 bits. A size that is
    /// not 1, 2 or 4 keeps all 64 bits.
    #[inline(always)]
    pub fn extend(&self, raw: u64) -> u64 {
        let shift: u32 = match self.size {
            1 => 56,
            2 => 48,
            4 => 32,
            _ => 0,
        };
        if self.signed != 0 {
            (((raw << shift) as i64) >> shift) as u64
        } else {
            (raw << shift) >> shift
        }
    }
}

/// [`UsdtArg::fetch`] met a `kind` it does not know (a corrupted or newer map entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownArgKind(pub u32);

impl UsdtArg {
    /// The argument's value, sign- or zero-extended to 64 bits: the reference semantics
    /// of the spec, for the eBPF program and for user-space tests alike. `reg(i)` reads
    /// slot `i` of `pt_regs` (in eBPF: `bpf_probe_read_kernel` of `ctx + 8 * i`, bounds
    /// checked against [`x86_64_reg::COUNT`]); `mem(addr, size)` reads `size` bytes of the
    /// traced process's memory, little-endian, zero-extended.
    #[inline(always)]
    pub fn fetch<E: From<UnknownArgKind>>(
        &self,
        mut reg: impl FnMut(u16) -> Result<u64, E>,
        mut mem: impl FnMut(u64, u8) -> Result<u64, E>,
    ) -> Result<u64, E> {
        let raw = match self.kind {
            USDT_ARG_CONST => self.val_off,
            USDT_ARG_REG => reg(self.reg)?,
            USDT_ARG_REG_DEREF => mem(reg(self.reg)?.wrapping_add(self.val_off), self.size)?,
            USDT_ARG_SIB => {
                let index = reg(self.index_reg)? << (self.scale_shift & 3);
                mem(
                    reg(self.reg)?
                        .wrapping_add(index)
                        .wrapping_add(self.val_off),
                    self.size,
                )?
            }
            other => return Err(UnknownArgKind(other).into()),
        };
        Ok(self.extend(raw))
    }
}

/// Value of the spec map: every argument of one probe site.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtSpec {
    pub args: [UsdtArg; USDT_MAX_ARGS],
    /// Caller-chosen meaning of the probe (which report point fired), passed on to the
    /// program's event so that user space need not map sites back to probes.
    pub probe_id: u64,
    /// Number of valid entries in `args` (at most [`USDT_MAX_ARGS`]).
    pub arg_count: u32,
    pub _pad: u32,
}

impl UsdtSpec {
    pub const ZERO: UsdtSpec = UsdtSpec {
        args: [UsdtArg::ZERO; USDT_MAX_ARGS],
        probe_id: 0,
        arg_count: 0,
        _pad: 0,
    };
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), made only of integers and arrays of integers, without implicit
    // padding (explicit `_pad` fields; sizes checked by the tests), so every bit pattern
    // is a valid value.
    unsafe impl aya::Pod for super::UsdtArg {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UsdtSpec {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, size_of};

    #[test]
    fn no_implicit_padding() {
        assert_eq!(size_of::<UsdtArg>(), 8 + 4 + 2 + 2 + 1 + 1 + 1 + 5);
        assert_eq!(align_of::<UsdtArg>(), 8);
        assert_eq!(size_of::<UsdtSpec>(), USDT_MAX_ARGS * 24 + 8 + 4 + 4);
    }

    fn arg(size: u8, signed: bool) -> UsdtArg {
        UsdtArg {
            size,
            signed: u8::from(signed),
            ..UsdtArg::ZERO
        }
    }

    #[test]
    fn fetch_by_kind() {
        // Registers hold 100 + slot; memory holds the address itself.
        let reg = |i: u16| Ok::<u64, UnknownArgKind>(100 + u64::from(i));
        let mem = |addr: u64, size: u8| {
            assert!(matches!(size, 1 | 2 | 4 | 8));
            Ok::<u64, UnknownArgKind>(addr)
        };
        let base = UsdtArg {
            size: 8,
            ..UsdtArg::ZERO
        };
        let konst = UsdtArg {
            kind: USDT_ARG_CONST,
            val_off: -5i64 as u64,
            size: 4,
            signed: 1,
            ..base
        };
        assert_eq!(konst.fetch(reg, mem), Ok(-5i64 as u64));
        let register = UsdtArg {
            kind: USDT_ARG_REG,
            reg: x86_64_reg::RDI,
            ..base
        };
        assert_eq!(register.fetch(reg, mem), Ok(114));
        let deref = UsdtArg {
            kind: USDT_ARG_REG_DEREF,
            reg: x86_64_reg::RBP,
            val_off: -16i64 as u64,
            ..base
        };
        assert_eq!(deref.fetch(reg, mem), Ok(104 - 16));
        let sib = UsdtArg {
            kind: USDT_ARG_SIB,
            reg: x86_64_reg::RBP,
            index_reg: x86_64_reg::RAX,
            scale_shift: 2,
            val_off: 8,
            ..base
        };
        assert_eq!(sib.fetch(reg, mem), Ok(104 + 110 * 4 + 8));
        let bad = UsdtArg { kind: 9, ..base };
        assert_eq!(bad.fetch(reg, mem), Err(UnknownArgKind(9)));
    }

    #[test]
    fn extend_truncates_and_extends_by_size_and_sign() {
        let raw = 0x1234_5678_9abc_def0_u64;
        assert_eq!(arg(1, false).extend(raw), 0xf0);
        assert_eq!(arg(1, true).extend(raw), 0xffff_ffff_ffff_fff0);
        assert_eq!(arg(2, false).extend(raw), 0xdef0);
        assert_eq!(arg(2, true).extend(raw), 0xffff_ffff_ffff_def0);
        assert_eq!(arg(4, false).extend(raw), 0x9abc_def0);
        assert_eq!(arg(4, true).extend(raw), 0xffff_ffff_9abc_def0);
        assert_eq!(arg(8, false).extend(raw), raw);
        assert_eq!(arg(8, true).extend(raw), raw);
        // Positive values are unchanged by sign extension.
        assert_eq!(arg(4, true).extend(0xdead_0000_7fff_ffff), 0x7fff_ffff);
    }
}
