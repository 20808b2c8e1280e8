//! x86-64 SystemTap SDT argument specs (`-8@%rax 8@-16(%rbp) -4@$5`), decoded into the
//! [`UsdtArg`]s that the eBPF side evaluates.
//!
//! Each space-separated spec is `[-]SIZE@OPERAND`, `-` meaning signed, SIZE 1, 2, 4
//! or 8, and OPERAND in AT&T syntax: `$CONST`, `%REG`, `DISP(%BASE)`, or
//! `DISP(%BASE,%INDEX,SCALE)`. A symbol as displacement (`sym+8(%rip)`) is recognised
//! but cannot be turned into a [`UsdtArg`] yet: it would need the symbol's address and
//! the load bias.

use jp_common::usdt::{
    x86_64_reg as reg, UsdtArg, UsdtSpec, USDT_ARG_CONST, USDT_ARG_REG, USDT_ARG_REG_DEREF,
    USDT_ARG_SIB, USDT_MAX_ARGS,
};

/// A register operand: its `pt_regs` slot and how many low bytes the name covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Register {
    /// Index of the 64-bit slot in `struct pt_regs` ([`reg`]).
    pub index: u16,
    /// Width of the named register in bytes (`%rax` 8, `%eax` 4, `%ax` 2, `%al` 1).
    pub width: u8,
}

/// Where an argument's value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `$-5`.
    Const(i64),
    /// `%rax`.
    Reg(Register),
    /// `-16(%rbp)`: memory at base + offset.
    Deref { base: Register, offset: i64 },
    /// `8(%rax,%rbx,4)`: memory at base + index × scale + offset.
    Sib {
        base: Register,
        index: Register,
        scale: u8,
        offset: i64,
    },
    /// `sym+8(%rip)`: memory at a symbol's run-time address (plus offset).
    Symbol {
        symbol: String,
        offset: i64,
        base: Register,
    },
}

/// One decoded argument spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    /// Size of the value in bytes: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    pub location: Location,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("argument spec {spec:?}: {reason}")]
    Bad { spec: String, reason: String },
    #[error("{count} argument specs, more than the {USDT_MAX_ARGS} a probe may have")]
    TooMany { count: usize },
}

fn bad(spec: &str, reason: impl Into<String>) -> SpecError {
    SpecError::Bad {
        spec: spec.to_owned(),
        reason: reason.into(),
    }
}

/// Decodes every spec of a probe's argument string (empty for a probe without
/// arguments).
pub fn parse_args(args: &str) -> Result<Vec<Arg>, SpecError> {
    let count = args.split_whitespace().count();
    if count > USDT_MAX_ARGS {
        return Err(SpecError::TooMany { count });
    }
    args.split_whitespace().map(parse_arg).collect()
}

/// Decodes one spec such as `-4@%edi`.
pub fn parse_arg(spec: &str) -> Result<Arg, SpecError> {
    let (size, operand) = spec
        .split_once('@')
        .ok_or_else(|| bad(spec, "no '@' between size and operand"))?;
    let (signed, size) = match size.strip_prefix('-') {
        Some(magnitude) => (true, magnitude),
        None => (false, size),
    };
    let size = match size {
        "1" => 1,
        "2" => 2,
        "4" => 4,
        "8" => 8,
        _ => return Err(bad(spec, "size is not 1, 2, 4 or 8")),
    };
    let location = if let Some(constant) = operand.strip_prefix('$') {
        Location::Const(parse_int(constant).ok_or_else(|| bad(spec, "constant is not an integer"))?)
    } else if let Some(name) = operand.strip_prefix('%') {
        Location::Reg(register(spec, name)?)
    } else {
        memory(spec, operand)?
    };
    Ok(Arg {
        size,
        signed,
        location,
    })
}

/// `DISP(%BASE)` or `DISP(%BASE,%INDEX[,SCALE])`, DISP numeric, empty, or a symbol with
/// an optional numeric addend when the base is `%rip`.
fn memory(spec: &str, operand: &str) -> Result<Location, SpecError> {
    let (disp, rest) = operand
        .split_once('(')
        .ok_or_else(|| bad(spec, "operand is not $, % or memory"))?;
    let inner = rest
        .strip_suffix(')')
        .ok_or_else(|| bad(spec, "no ')' at the end"))?;
    let mut parts = inner.split(',');
    let base = parts.next().unwrap_or_default();
    let base = register(
        spec,
        base.strip_prefix('%')
            .ok_or_else(|| bad(spec, "memory operand without a base register"))?,
    )?;
    let index = parts.next();
    let scale = parts.next();
    if parts.next().is_some() {
        return Err(bad(spec, "more than base, index and scale"));
    }
    if let Some(offset) = parse_disp(disp) {
        let Some(index) = index else {
            return Ok(Location::Deref { base, offset });
        };
        let index = register(
            spec,
            index
                .strip_prefix('%')
                .ok_or_else(|| bad(spec, "index is not a register"))?,
        )?;
        let scale = match scale.unwrap_or("1") {
            "1" => 1,
            "2" => 2,
            "4" => 4,
            "8" => 8,
            _ => return Err(bad(spec, "scale is not 1, 2, 4 or 8")),
        };
        return Ok(Location::Sib {
            base,
            index,
            scale,
            offset,
        });
    }
    // `sym`, `sym+8` or `sym-8`, relative to %rip only (position-independent data).
    if base.index != reg::RIP || index.is_some() {
        return Err(bad(spec, "displacement is not a number"));
    }
    let (symbol, offset) = match disp.find(['+', '-']) {
        Some(at) => {
            let offset =
                parse_int(&disp[at..]).ok_or_else(|| bad(spec, "symbol addend is not a number"))?;
            (&disp[..at], offset)
        }
        None => (disp, 0),
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '@');
    if symbol.is_empty() || !symbol.chars().all(valid) {
        return Err(bad(spec, "displacement is neither a number nor a symbol"));
    }
    Ok(Location::Symbol {
        symbol: symbol.to_owned(),
        offset,
        base,
    })
}

/// Empty (0) or an integer.
fn parse_disp(disp: &str) -> Option<i64> {
    if disp.is_empty() {
        Some(0)
    } else {
        parse_int(disp)
    }
}

/// Decimal or `0x` hexadecimal, optionally signed; values above `i64::MAX` (written
/// as unsigned 64-bit constants) keep their bits.
fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    // `from_str_radix` accepts a sign itself; a second one is not an integer.
    if digits.starts_with(['+', '-']) {
        return None;
    }
    let value = magnitude as i64;
    if negative {
        if magnitude > i64::MAX as u64 + 1 {
            return None;
        }
        Some(value.wrapping_neg())
    } else {
        Some(value)
    }
}

/// Register names of x86-64 (without `%`), with every 64/32/16/8-bit alias.
fn register(spec: &str, name: &str) -> Result<Register, SpecError> {
    let (index, width) = match name {
        "rax" => (reg::RAX, 8),
        "eax" => (reg::RAX, 4),
        "ax" => (reg::RAX, 2),
        "al" => (reg::RAX, 1),
        "rbx" => (reg::RBX, 8),
        "ebx" => (reg::RBX, 4),
        "bx" => (reg::RBX, 2),
        "bl" => (reg::RBX, 1),
        "rcx" => (reg::RCX, 8),
        "ecx" => (reg::RCX, 4),
        "cx" => (reg::RCX, 2),
        "cl" => (reg::RCX, 1),
        "rdx" => (reg::RDX, 8),
        "edx" => (reg::RDX, 4),
        "dx" => (reg::RDX, 2),
        "dl" => (reg::RDX, 1),
        "rsi" => (reg::RSI, 8),
        "esi" => (reg::RSI, 4),
        "si" => (reg::RSI, 2),
        "sil" => (reg::RSI, 1),
        "rdi" => (reg::RDI, 8),
        "edi" => (reg::RDI, 4),
        "di" => (reg::RDI, 2),
        "dil" => (reg::RDI, 1),
        "rbp" => (reg::RBP, 8),
        "ebp" => (reg::RBP, 4),
        "bp" => (reg::RBP, 2),
        "bpl" => (reg::RBP, 1),
        "rsp" => (reg::RSP, 8),
        "esp" => (reg::RSP, 4),
        "sp" => (reg::RSP, 2),
        "spl" => (reg::RSP, 1),
        "rip" => (reg::RIP, 8),
        "eip" => (reg::RIP, 4),
        "ah" | "bh" | "ch" | "dh" => {
            return Err(bad(
                spec,
                format!("high-byte register %{name} is not supported"),
            ))
        }
        _ => {
            return numbered_register(name)
                .ok_or_else(|| bad(spec, format!("unknown register %{name}")))
        }
    };
    Ok(Register { index, width })
}

/// `r8` … `r15` with the suffixes `d` (32 bits), `w` (16) and `b` (8).
fn numbered_register(name: &str) -> Option<Register> {
    let rest = name.strip_prefix('r')?;
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(digits_end);
    let index = match number {
        "8" => reg::R8,
        "9" => reg::R9,
        "10" => reg::R10,
        "11" => reg::R11,
        "12" => reg::R12,
        "13" => reg::R13,
        "14" => reg::R14,
        "15" => reg::R15,
        _ => return None,
    };
    let width = match suffix {
        "" => 8,
        "d" => 4,
        "w" => 2,
        "b" => 1,
        _ => return None,
    };
    Some(Register { index, width })
}

impl Arg {
    /// The map form of this argument. A register operand narrower than the declared size
    /// keeps only the register's width (the rest of the 64-bit slot is unrelated).
    pub fn to_usdt_arg(&self) -> Result<UsdtArg, SpecError> {
        let mut arg = UsdtArg {
            size: self.size,
            signed: u8::from(self.signed),
            ..UsdtArg::ZERO
        };
        match &self.location {
            Location::Const(value) => {
                arg.kind = USDT_ARG_CONST;
                arg.val_off = *value as u64;
            }
            Location::Reg(register) => {
                arg.kind = USDT_ARG_REG;
                arg.reg = register.index;
                arg.size = self.size.min(register.width);
            }
            Location::Deref { base, offset } => {
                arg.kind = USDT_ARG_REG_DEREF;
                arg.reg = base.index;
                arg.val_off = *offset as u64;
            }
            Location::Sib {
                base,
                index,
                scale,
                offset,
            } => {
                arg.kind = USDT_ARG_SIB;
                arg.reg = base.index;
                arg.index_reg = index.index;
                arg.scale_shift = scale.trailing_zeros() as u8;
                arg.val_off = *offset as u64;
            }
            Location::Symbol { symbol, .. } => {
                return Err(SpecError::Bad {
                    spec: symbol.clone(),
                    reason: "symbol-relative arguments are not supported yet".to_owned(),
                })
            }
        }
        Ok(arg)
    }
}

/// The map value for a probe with argument string `args`.
pub fn usdt_spec(args: &str, probe_id: u64) -> Result<UsdtSpec, SpecError> {
    let parsed = parse_args(args)?;
    let mut spec = UsdtSpec {
        probe_id,
        ..UsdtSpec::ZERO
    };
    for (slot, arg) in spec.args.iter_mut().zip(&parsed) {
        *slot = arg.to_usdt_arg()?;
    }
    spec.arg_count = parsed.len() as u32;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(index: u16, width: u8) -> Register {
        Register { index, width }
    }

    #[test]
    fn operand_forms() {
        let cases = [
            ("-8@%rax", 8, true, Location::Reg(r(reg::RAX, 8))),
            ("4@%edi", 4, false, Location::Reg(r(reg::RDI, 4))),
            (
                "8@-16(%rbp)",
                8,
                false,
                Location::Deref {
                    base: r(reg::RBP, 8),
                    offset: -16,
                },
            ),
            ("-4@$5", 4, true, Location::Const(5)),
            ("-4@$-1", 4, true, Location::Const(-1)),
            ("8@$0x10", 8, false, Location::Const(16)),
            (
                "8@(%rsp)",
                8,
                false,
                Location::Deref {
                    base: r(reg::RSP, 8),
                    offset: 0,
                },
            ),
            (
                "8@0x10(%rip)",
                8,
                false,
                Location::Deref {
                    base: r(reg::RIP, 8),
                    offset: 16,
                },
            ),
            (
                "1@37(%r14)",
                1,
                false,
                Location::Deref {
                    base: r(reg::R14, 8),
                    offset: 37,
                },
            ),
            (
                "-4@-1204(%rbp,%rax,4)",
                4,
                true,
                Location::Sib {
                    base: r(reg::RBP, 8),
                    index: r(reg::RAX, 8),
                    scale: 4,
                    offset: -1204,
                },
            ),
            (
                "8@(%rdi,%rcx)",
                8,
                false,
                Location::Sib {
                    base: r(reg::RDI, 8),
                    index: r(reg::RCX, 8),
                    scale: 1,
                    offset: 0,
                },
            ),
            (
                "8@counter+8(%rip)",
                8,
                false,
                Location::Symbol {
                    symbol: "counter".into(),
                    offset: 8,
                    base: r(reg::RIP, 8),
                },
            ),
            (
                "2@_ZN3foo.bar(%rip)",
                2,
                false,
                Location::Symbol {
                    symbol: "_ZN3foo.bar".into(),
                    offset: 0,
                    base: r(reg::RIP, 8),
                },
            ),
            ("8@$18446744073709551615", 8, false, Location::Const(-1)),
            (
                "-8@$-9223372036854775808",
                8,
                true,
                Location::Const(i64::MIN),
            ),
        ];
        for (spec, size, signed, location) in cases {
            assert_eq!(
                parse_arg(spec),
                Ok(Arg {
                    size,
                    signed,
                    location
                }),
                "{spec}"
            );
        }
    }

    #[test]
    fn every_register_alias() {
        let families: [(&[&str; 4], u16); 16] = [
            (&["rax", "eax", "ax", "al"], reg::RAX),
            (&["rbx", "ebx", "bx", "bl"], reg::RBX),
            (&["rcx", "ecx", "cx", "cl"], reg::RCX),
            (&["rdx", "edx", "dx", "dl"], reg::RDX),
            (&["rsi", "esi", "si", "sil"], reg::RSI),
            (&["rdi", "edi", "di", "dil"], reg::RDI),
            (&["rbp", "ebp", "bp", "bpl"], reg::RBP),
            (&["rsp", "esp", "sp", "spl"], reg::RSP),
            (&["r8", "r8d", "r8w", "r8b"], reg::R8),
            (&["r9", "r9d", "r9w", "r9b"], reg::R9),
            (&["r10", "r10d", "r10w", "r10b"], reg::R10),
            (&["r11", "r11d", "r11w", "r11b"], reg::R11),
            (&["r12", "r12d", "r12w", "r12b"], reg::R12),
            (&["r13", "r13d", "r13w", "r13b"], reg::R13),
            (&["r14", "r14d", "r14w", "r14b"], reg::R14),
            (&["r15", "r15d", "r15w", "r15b"], reg::R15),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (names, index) in families {
            for (name, width) in names.iter().zip([8, 4, 2, 1]) {
                let spec = format!("8@%{name}");
                assert_eq!(
                    parse_arg(&spec).map(|a| a.location),
                    Ok(Location::Reg(r(index, width)))
                );
            }
            seen.insert(index);
        }
        // The 16 general-purpose registers are 16 distinct pt_regs slots, none of them
        // orig_rax, rip, cs, eflags or ss.
        assert_eq!(seen.len(), 16);
        for special in [reg::ORIG_RAX, reg::RIP, reg::CS, reg::EFLAGS, reg::SS] {
            assert!(!seen.contains(&special));
        }
        assert!(seen.iter().all(|&i| i < reg::COUNT));
    }

    #[test]
    fn malformed_specs_are_errors() {
        for spec in [
            "",
            "8",
            "@%rax",
            "3@%rax",
            "16@%rax",
            "--8@%rax",
            "8@%",
            "8@%xyz",
            "8@%r16",
            "8@%r8x",
            "8@%ah",
            "8@$",
            "8@$abc",
            "8@$--5",
            "8@$-+5",
            "8@$0x",
            "8@-16(%rbp",
            "8@-16%rbp)",
            "8@(rbp)",
            "8@()",
            "8@x(%rbp)",
            "8@(%rbp,%rax,3)",
            "8@(%rbp,rax,2)",
            "8@(%rbp,%rax,2,1)",
            "8@sym(%rbp)",
            "8@a b(%rip)",
            "8@+(%rip)",
            "8@rax",
            "8@$99999999999999999999",
            "-8@$-9223372036854775809",
        ] {
            assert!(
                matches!(parse_arg(spec), Err(SpecError::Bad { .. })),
                "{spec:?} parsed"
            );
        }
        let thirteen = vec!["8@%rax"; 13].join(" ");
        assert_eq!(parse_args(&thirteen), Err(SpecError::TooMany { count: 13 }));
    }

    #[test]
    fn mutated_specs_never_panic() {
        // Specs come from any ELF file on the host: valid specs with random characters
        // replaced, inserted or deleted (some non-ASCII) give an answer, never a panic.
        let seeds = [
            "-8@%rax",
            "4@%r9d",
            "8@-16(%rbp)",
            "-4@$-5",
            "8@(%rsp)",
            "8@sym+8(%rip)",
            "-4@-1204(%rbp,%rax,4)",
            "1@%sil",
            "8@$0x10",
        ];
        let alphabet: Vec<char> = "-+@$%(),0123456789abcdefxlrspdiwq .é€".chars().collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut parsed, mut refused) = (0, 0);
        for _ in 0..100_000 {
            let mut text: Vec<char> = seeds[next(seeds.len())].chars().collect();
            for _ in 0..next(4) {
                let at = next(text.len() + 1);
                let c = alphabet[next(alphabet.len())];
                match next(3) {
                    0 if at < text.len() => text[at] = c,
                    1 if at < text.len() => {
                        text.remove(at);
                    }
                    _ => text.insert(at, c),
                }
            }
            let text: String = text.into_iter().collect();
            match parse_arg(&text) {
                Ok(arg) => {
                    parsed += 1;
                    let _ = arg.to_usdt_arg();
                }
                Err(_) => refused += 1,
            }
            let _ = parse_args(&text);
        }
        assert!(
            parsed > 0 && refused > 0,
            "{parsed} parsed, {refused} refused"
        );
    }

    #[test]
    fn map_form() {
        let spec = usdt_spec("-4@%r9d 8@-16(%rbp) -2@$-3 8@4(%rax,%rdx,8) 8@%al", 77).unwrap();
        assert_eq!(spec.arg_count, 5);
        assert_eq!(spec.probe_id, 77);
        let a = spec.args;
        assert_eq!(
            (a[0].kind, a[0].reg, a[0].size, a[0].signed),
            (USDT_ARG_REG, reg::R9, 4, 1)
        );
        assert_eq!(
            (a[1].kind, a[1].reg, a[1].val_off as i64),
            (USDT_ARG_REG_DEREF, reg::RBP, -16)
        );
        assert_eq!(
            (a[2].kind, a[2].val_off as i64, a[2].size),
            (USDT_ARG_CONST, -3, 2)
        );
        assert_eq!(a[2].extend(a[2].val_off) as i64, -3);
        assert_eq!(
            (
                a[3].kind,
                a[3].reg,
                a[3].index_reg,
                a[3].scale_shift,
                a[3].val_off
            ),
            (USDT_ARG_SIB, reg::RAX, reg::RDX, 3, 4)
        );
        // %al declared 8 bytes wide: only the low byte of rax is the value.
        assert_eq!(
            (a[4].kind, a[4].reg, a[4].size),
            (USDT_ARG_REG, reg::RAX, 1)
        );
        assert!(a[5..].iter().all(|arg| *arg == UsdtArg::ZERO));
        assert!(matches!(
            usdt_spec("8@sym(%rip)", 0),
            Err(SpecError::Bad { .. })
        ));
        assert_eq!(usdt_spec("", 1).map(|s| s.arg_count), Ok(0));
    }
}
