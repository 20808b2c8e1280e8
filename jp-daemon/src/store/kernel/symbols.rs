//! Kernel symbols from `/proc/kallsyms`: core text and `[module]` symbols (including
//! the pseudo-modules `[bpf]` for JIT-compiled BPF programs and
//! `[__builtin__ftrace]`), looked up by address with a binary search.
//!
//! Rules (readprofile's, applied to kallsyms):
//! - only text symbols (`t`, `T`, `w`, `W`) are functions;
//! - a function's length is the distance to the next symbol of any kind at a higher
//!   address (so `_etext` ends the last core function); the last symbol has length 0
//!   (unknown); `_etext` only marks the end of core text and is not a function;
//! - several names at one address: the last one listed is kept (readprofile gives the
//!   earlier aliases length 0, so they never get a tick).
use std::path::Path;

use anyhow::{bail, Context as _};

/// One function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub addr: u64,
    /// Bytes to the next symbol; 0 if unknown (the very last symbol).
    pub len: u64,
    pub name: String,
    /// `None` for core kernel symbols, else the name inside `[…]`.
    pub module: Option<String>,
}

/// A snapshot of `/proc/kallsyms`.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    /// Functions, sorted by address, one per address.
    functions: Vec<Symbol>,
    /// `_stext`.
    pub text_start: u64,
    /// `_etext`.
    pub text_end: u64,
}

impl Symbols {
    /// Reads `/proc/kallsyms`. Addresses are only visible to root (or with
    /// `kernel.kptr_restrict=0`); all-zero addresses are reported as an error.
    pub fn load() -> anyhow::Result<Symbols> {
        Self::load_from(Path::new("/proc/kallsyms"))
    }

    pub fn load_from(path: &Path) -> anyhow::Result<Symbols> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses kallsyms text: `ADDR TYPE NAME [\t[MODULE]]` per line.
    pub fn parse(text: &str) -> anyhow::Result<Symbols> {
        // (addr, is_function, name, module) for every symbol, in file order.
        let mut all: Vec<(u64, bool, &str, Option<&str>)> = Vec::new();
        let mut text_start = None;
        let mut text_end = None;
        for (n, line) in text.lines().enumerate() {
            let mut fields = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                if line.trim().is_empty() {
                    continue;
                }
                bail!("line {}: expected `ADDRESS TYPE NAME`, got {line:?}", n + 1);
            };
            let addr = u64::from_str_radix(addr, 16)
                .with_context(|| format!("line {}: bad address {addr:?}", n + 1))?;
            let module = match fields.next() {
                Some(m) => Some(
                    m.strip_prefix('[')
                        .and_then(|m| m.strip_suffix(']'))
                        .with_context(|| format!("line {}: bad module field {m:?}", n + 1))?,
                ),
                None => None,
            };
            if module.is_none() {
                match name {
                    "_stext" => text_start = Some(addr),
                    "_etext" => text_end = Some(addr),
                    _ => {}
                }
            }
            let is_function = matches!(kind, "t" | "T" | "w" | "W");
            all.push((addr, is_function, name, module));
        }
        let text_start = text_start.context("no _stext symbol")?;
        let text_end = text_end.context("no _etext symbol")?;
        if text_start == 0 || text_end <= text_start {
            bail!(
                "_stext {text_start:#x} / _etext {text_end:#x} are not a text range \
                 (addresses hidden? run as root or set kernel.kptr_restrict=0)"
            );
        }

        // Stable sort keeps file order among equal addresses, so "last listed wins" holds.
        all.sort_by_key(|s| s.0);
        // `_etext` is a marker that ends core text, not code.
        let is_function =
            |s: &(u64, bool, &str, Option<&str>)| s.1 && !(s.3.is_none() && s.2 == "_etext");
        let mut functions: Vec<Symbol> = Vec::new();
        for (i, sym) in all.iter().enumerate() {
            let &(addr, _, name, module) = sym;
            if !is_function(sym) {
                continue;
            }
            // Skip earlier aliases: the last function at this address is kept.
            if all[i + 1..]
                .iter()
                .take_while(|n| n.0 == addr)
                .any(is_function)
            {
                continue;
            }
            let next = all[i + 1..].iter().find(|s| s.0 > addr).map(|s| s.0);
            functions.push(Symbol {
                addr,
                len: next.map_or(0, |next| next - addr),
                name: name.to_string(),
                module: module.map(str::to_string),
            });
        }
        Ok(Symbols {
            functions,
            text_start,
            text_end,
        })
    }

    /// The function containing `addr`: the last function starting at or before it,
    /// if `addr` is within its length (a symbol of unknown length only matches its
    /// own start address).
    pub fn lookup(&self, addr: u64) -> Option<&Symbol> {
        let i = self.functions.partition_point(|s| s.addr <= addr);
        let s = self.functions.get(i.checked_sub(1)?)?;
        (addr - s.addr < s.len || addr == s.addr).then_some(s)
    }

    /// The function called `name` (the first one, for names used more than once).
    pub fn by_name(&self, name: &str) -> Option<&Symbol> {
        self.functions.iter().find(|s| s.name == name)
    }

    /// Functions sorted by address.
    pub fn functions(&self) -> &[Symbol] {
        &self.functions
    }

    /// `name` or `name [module]`, the way kallsyms users print a function; for an IRQ
    /// handler address (`irqaction->handler`) this is the handler function.
    pub fn name_of(&self, addr: u64) -> Option<String> {
        self.lookup(addr).map(display_name)
    }
}

/// `name`, or `name [module]` for module symbols.
pub fn display_name(s: &Symbol) -> String {
    match &s.module {
        Some(m) => format!("{} [{m}]", s.name),
        None => s.name.clone(),
    }
}

/// The function at `addr` (with its module), or the address itself when `symbols` has
/// none there.
pub fn function_name(symbols: Option<&Symbols>, addr: u64) -> String {
    match symbols.and_then(|s| s.lookup(addr)) {
        Some(sym) => display_name(sym),
        None => format!("{addr:#x}"),
    }
}

/// Symbolizes one address with a fresh read of `/proc/kallsyms`. Convenient for one-off
/// use; the collector keeps a loaded [`Symbols`] instead.
pub fn kallsyms_name(addr: u64) -> anyhow::Result<Option<String>> {
    Ok(Symbols::load()?.name_of(addr))
}

/// What decides whether the symbols must be reloaded: the module list (absent when
/// the kernel has no module support) and the set of loaded BPF programs, whose JIT
/// images appear in kallsyms as `[bpf]` symbols.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolsStamp {
    pub modules: Option<String>,
    pub bpf_programs: Vec<u32>,
}

impl SymbolsStamp {
    pub fn current() -> SymbolsStamp {
        let modules = std::fs::read_to_string("/proc/modules").ok();
        SymbolsStamp {
            modules,
            bpf_programs: bpf_program_ids(),
        }
    }
}

/// Ids of every loaded BPF program, ascending: one `BPF_PROG_GET_NEXT_ID` per program
/// (aya's `loaded_programs` also opens each program and reads its info).
fn bpf_program_ids() -> Vec<u32> {
    const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
    #[repr(C)]
    struct NextIdAttr {
        start_id: u32,
        next_id: u32,
        open_flags: u32,
    }
    let mut ids = Vec::new();
    let mut attr = NextIdAttr {
        start_id: 0,
        next_id: 0,
        open_flags: 0,
    };
    loop {
        // SAFETY: `attr` is a valid bpf_attr prefix of the size we pass; the kernel only
        // writes `next_id`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_GET_NEXT_ID,
                &mut attr as *mut NextIdAttr,
                std::mem::size_of::<NextIdAttr>() as libc::c_uint,
            )
        };
        // ENOENT ends the list; another error leaves it as far as it got (the stamp then
        // differs and symbols are reloaded, which is harmless).
        if rc != 0 || ids.len() > 1 << 20 {
            return ids;
        }
        ids.push(attr.next_id);
        attr.start_id = attr.next_id;
    }
}

/// A small kernel for the unit tests of the store's readers (the API and the
/// exporters): core text from `_stext` at 0xffffffff81000000 to `_etext` 0x400 above
/// it, with `read_iter_zero` (bucket 0), `clear_user_rep_good` (bucket 0x10) and
/// `vring_interrupt`, and the module `e1000` at 0xffffffffc0001000 (`e1000_intr`,
/// `e1000_other`).
#[cfg(test)]
pub(crate) fn test_symbols() -> Symbols {
    const MAP: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T read_iter_zero
ffffffff81000100 T clear_user_rep_good
ffffffff81000200 T vring_interrupt
ffffffff81000400 T _etext
ffffffffc0001000 t e1000_intr\t[e1000]
ffffffffc0001100 t e1000_other\t[e1000]
";
    match Symbols::parse(MAP) {
        Ok(s) => s,
        Err(e) => panic!("the test kallsyms does not parse: {e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000040 t secondary_startup
ffffffff81000100 T read_zero
ffffffff81000140 D some_data
ffffffff81000180 W weak_fn
ffffffff81000200 T _etext
ffffffffc0000000 t virtblk_done\t[virtio_blk]
ffffffffc0000080 t virtblk_probe\t[virtio_blk]
ffffffffc0001000 t bpf_prog_6deef7357e7b4530_jp_sample\t[bpf]
";

    #[test]
    fn parses_core_and_module_functions_with_lengths() {
        let s = Symbols::parse(FIXTURE).unwrap();
        assert_eq!(s.text_start, 0xffffffff81000000);
        assert_eq!(s.text_end, 0xffffffff81000200);
        let got: Vec<(u64, u64, &str, Option<&str>)> = s
            .functions()
            .iter()
            .map(|f| (f.addr, f.len, f.name.as_str(), f.module.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                // `_stext` and `startup_64` share an address: the last one listed is kept.
                (0xffffffff81000000, 0x40, "startup_64", None),
                (0xffffffff81000040, 0xc0, "secondary_startup", None),
                // The data symbol ends read_zero but is not a function itself.
                (0xffffffff81000100, 0x40, "read_zero", None),
                (0xffffffff81000180, 0x80, "weak_fn", None),
                (0xffffffffc0000000, 0x80, "virtblk_done", Some("virtio_blk")),
                (
                    0xffffffffc0000080,
                    0xf80,
                    "virtblk_probe",
                    Some("virtio_blk")
                ),
                (
                    0xffffffffc0001000,
                    0,
                    "bpf_prog_6deef7357e7b4530_jp_sample",
                    Some("bpf")
                ),
            ]
        );
    }

    #[test]
    fn lookup_finds_the_containing_function() {
        let s = Symbols::parse(FIXTURE).unwrap();
        let name = |a| s.lookup(a).map(|f| f.name.clone());
        assert_eq!(name(0xffffffff80ffffff), None);
        assert_eq!(
            s.by_name("read_zero").map(|f| f.addr),
            Some(0xffffffff81000100)
        );
        assert!(s.by_name("nope").is_none());
        assert_eq!(name(0xffffffff81000000).as_deref(), Some("startup_64"));
        assert_eq!(name(0xffffffff8100003f).as_deref(), Some("startup_64"));
        assert_eq!(
            name(0xffffffff81000040).as_deref(),
            Some("secondary_startup")
        );
        assert_eq!(name(0xffffffff81000120).as_deref(), Some("read_zero"));
        // Inside the data symbol's range: no function there.
        assert_eq!(name(0xffffffff81000150), None);
        assert_eq!(name(0xffffffffc0000090).as_deref(), Some("virtblk_probe"));
        assert_eq!(
            s.name_of(0xffffffffc0000004).as_deref(),
            Some("virtblk_done [virtio_blk]")
        );
        // The last symbol has no known length: only its own address matches.
        assert!(s.lookup(0xffffffffc0001000).is_some());
        assert_eq!(name(0xffffffffc0001001), None);
    }

    #[test]
    fn rejects_hidden_addresses_and_garbage() {
        let hidden = "0000000000000000 T _stext\n0000000000000000 T _etext\n";
        let e = Symbols::parse(hidden).unwrap_err();
        assert!(format!("{e:#}").contains("kptr_restrict"), "{e:#}");
        assert!(Symbols::parse("zzzz T _stext\n").is_err());
        assert!(Symbols::parse("ffff T\n").is_err());
        assert!(Symbols::parse("ffff T f (oops)\n").is_err());
        assert!(Symbols::parse("ffff T f\n").is_err(), "no _stext/_etext");
    }
}
