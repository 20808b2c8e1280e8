//! `.note.stapsdt` parsing and argument specs on real binaries, checked probe by probe
//! against `readelf` (binutils) and the bytes of the file: libjvm.so of Debian's
//! OpenJDK 17, and a C program with semaphores compiled at test time (needs gcc and
//! systemtap-sdt-dev).

use std::path::Path;

use crate::support::usdt::{
    build_probe_program, nm_address, readelf_loads, readelf_probes, LIBJVM,
};
use jp_common::usdt::{x86_64_reg as reg, USDT_ARG_CONST, USDT_ARG_REG, USDT_ARG_REG_DEREF};
use jp_daemon::usdt::notes::{self, Probe};
use jp_daemon::usdt::spec;

/// File offset of `addr` by readelf's program headers, and whether that segment maps
/// it at a different offset than its address.
fn oracle_offset(loads: &[(u64, u64, u64, String)], addr: u64) -> (u64, bool) {
    let (offset, vaddr, _, _) = loads
        .iter()
        .find(|(_, vaddr, filesz, _)| addr >= *vaddr && addr < vaddr + filesz)
        .unwrap_or_else(|| panic!("{addr:#x} in no PT_LOAD"));
    (addr - vaddr + offset, vaddr != offset)
}

/// Checks every probe of `file` against readelf and the file's bytes; returns the
/// probes and how many addresses were converted through a segment with
/// `p_vaddr != p_offset`.
fn check_against_readelf(file: &Path) -> (Vec<Probe>, usize) {
    let probes = notes::read_file(file).unwrap();
    let expected = readelf_probes(file);
    let loads = readelf_loads(file);
    let data = std::fs::read(file).unwrap();
    assert_eq!(
        probes.len(),
        expected.len(),
        "probe count of {}",
        file.display()
    );
    let mut shifted = 0;
    for (probe, want) in probes.iter().zip(&expected) {
        let what = format!("{}:{}", want.provider, want.name);
        assert_eq!(probe.provider, want.provider);
        assert_eq!(probe.name, want.name);
        assert_eq!(probe.note_pc, want.location, "{what}");
        assert_eq!(probe.note_base, want.base, "{what}");
        assert_eq!(probe.note_semaphore, want.semaphore, "{what}");
        assert_eq!(probe.args.trim(), want.args, "{what}");
        // Not prelinked: nothing moves.
        assert_eq!(probe.addr, want.location, "{what}");
        let (offset, moved) = oracle_offset(&loads, want.location);
        assert_eq!(probe.file_offset, offset, "{what}");
        shifted += usize::from(moved);
        // Every SDT site is a one-byte nop, which the kernel's uprobe replaces.
        assert_eq!(
            data[offset as usize], 0x90,
            "{what}: no nop at file offset {offset:#x}"
        );
        if want.semaphore == 0 {
            assert_eq!(
                (probe.semaphore_addr, probe.semaphore_offset),
                (None, None),
                "{what}"
            );
        } else {
            let (offset, moved) = oracle_offset(&loads, want.semaphore);
            assert_eq!(probe.semaphore_addr, Some(want.semaphore), "{what}");
            assert_eq!(probe.semaphore_offset, Some(offset), "{what}");
            shifted += usize::from(moved);
        }
        let args = spec::parse_args(&probe.args).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(args.len(), want.args.split_whitespace().count(), "{what}");
        let map = spec::usdt_spec(&probe.args, 0).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(map.arg_count as usize, args.len());
    }
    (probes, shifted)
}

#[test]
fn libjvm_every_probe_matches_readelf() {
    let path = Path::new(LIBJVM);
    assert!(
        path.exists(),
        "{LIBJVM} missing: install Debian openjdk-17-jdk-headless"
    );
    let (probes, _) = check_against_readelf(path);
    assert!(
        probes.len() >= 500,
        "only {} probes in libjvm.so",
        probes.len()
    );
    // Debian's build has two hs_private probes besides the documented providers.
    let mut providers = std::collections::BTreeMap::<&str, usize>::new();
    for probe in &probes {
        *providers.entry(probe.provider.as_str()).or_default() += 1;
    }
    let names: Vec<&str> = providers.keys().copied().collect();
    assert_eq!(names, ["hotspot", "hotspot_jni", "hs_private"]);
    let args: usize = probes
        .iter()
        .map(|p| p.args.split_whitespace().count())
        .sum();
    println!(
        "libjvm.so: {} probes {providers:?}, {args} argument specs, all parsed",
        probes.len()
    );
}

#[test]
fn libjvm_spec_values() {
    // `method__compile__end` carries a register with a 32-bit alias and a byte read
    // through a pointer: decode a readelf-checked spec field by field.
    let probes = notes::read_file(Path::new(LIBJVM)).unwrap();
    let probe = probes
        .iter()
        .find(|p| p.name == "method__compile__end")
        .unwrap();
    let spec = spec::usdt_spec(&probe.args, 9).unwrap();
    let want = readelf_probes(Path::new(LIBJVM))
        .into_iter()
        .find(|p| p.name == "method__compile__end")
        .unwrap();
    for (i, text) in want.args.split_whitespace().enumerate() {
        let arg = spec.args[i];
        let (size, operand) = text.split_once('@').unwrap();
        assert_eq!(
            i64::from(arg.size) * if arg.signed == 1 { -1 } else { 1 },
            size.parse::<i64>().unwrap()
        );
        if let Some(name) = operand.strip_prefix('%') {
            assert_eq!(arg.kind, USDT_ARG_REG, "{text}");
            let expected = match name {
                "r10" => reg::R10,
                "rax" => reg::RAX,
                "rdx" => reg::RDX,
                "ecx" => reg::RCX,
                "rsi" => reg::RSI,
                "edi" => reg::RDI,
                "r8" => reg::R8,
                "r9d" => reg::R9,
                other => panic!("register {other} not in this table; extend the test"),
            };
            assert_eq!(arg.reg, expected, "{text}");
        } else if let Some((disp, base)) = operand.split_once('(') {
            assert_eq!(arg.kind, USDT_ARG_REG_DEREF, "{text}");
            assert_eq!(arg.val_off as i64, disp.parse::<i64>().unwrap());
            assert_eq!(base, "%r14)");
            assert_eq!(arg.reg, reg::R14);
        } else {
            assert_eq!(arg.kind, USDT_ARG_CONST, "{text}");
        }
    }
    assert_eq!(
        spec.arg_count as usize,
        want.args.split_whitespace().count()
    );
}

#[test]
fn probe_program_matches_readelf_and_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let mut shifted_total = 0;
    for (name, flags) in [
        ("pie", &["-O2", "-pie", "-fPIE"][..]),
        ("nopie", &["-O0", "-no-pie"][..]),
    ] {
        let bin = build_probe_program(dir.path(), name, flags);
        let (probes, shifted) = check_against_readelf(&bin);
        shifted_total += shifted;
        let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["tick", "wide", "plain", "noargs"], "{name}");
        let by_name = |n: &str| probes.iter().find(|p| p.name == n).unwrap();
        let data = std::fs::read(&bin).unwrap();
        for (probe, symbol) in [
            ("tick", "jp_test_tick_semaphore"),
            ("wide", "jp_test_wide_semaphore"),
        ] {
            let probe = by_name(probe);
            assert_eq!(
                probe.semaphore_addr,
                Some(nm_address(&bin, symbol)),
                "{name} {symbol}"
            );
            let offset = probe.semaphore_offset.unwrap() as usize;
            assert_eq!(
                &data[offset..offset + 2],
                [0, 0],
                "{name}: semaphores start at 0"
            );
        }
        assert_eq!(by_name("plain").semaphore_addr, None);
        assert_eq!(by_name("noargs").args, "");
        // Constants are exact whatever the optimisation level.
        let tick = spec::usdt_spec(&by_name("tick").args, 1).unwrap();
        assert_eq!(tick.arg_count, 3);
        assert_eq!(
            (
                tick.args[2].kind,
                tick.args[2].val_off as i64,
                tick.args[2].size,
                tick.args[2].signed
            ),
            (USDT_ARG_CONST, -5, 4, 1)
        );
        let wide = spec::usdt_spec(&by_name("wide").args, 2).unwrap();
        assert_eq!(wide.arg_count, 7);
        assert_eq!(
            (wide.args[6].kind, wide.args[6].val_off),
            (USDT_ARG_CONST, 1_234_567_890_123)
        );
        // Sizes and signedness follow the C types: long, int, short, signed char,
        // unsigned char, pointer.
        let sizes: Vec<(u8, u8)> = wide.args[..6].iter().map(|a| (a.size, a.signed)).collect();
        assert_eq!(
            sizes,
            [(8, 1), (4, 1), (2, 1), (1, 1), (1, 0), (8, 0)],
            "{name}: {}",
            by_name("wide").args
        );
    }
    // The PIE's semaphores and everything of the non-PIE lie where p_vaddr != p_offset.
    assert!(
        shifted_total >= 2 + 6,
        "only {shifted_total} converted addresses were shifted"
    );
}

/// Offset of the section header field `sh_addr` of section `name` (64-bit ELF).
fn sh_addr_field(data: &[u8], name: &str) -> usize {
    use object::read::elf::{FileHeader, SectionHeader};
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, data).unwrap();
    let (index, section) = sections.section_by_name(endian, name.as_bytes()).unwrap();
    let shoff = header.e_shoff.get(endian) as usize;
    let field = shoff + index.0 * 64 + 16;
    assert_eq!(
        u64::from_le_bytes(data[field..field + 8].try_into().unwrap()),
        section.sh_addr(endian)
    );
    field
}

#[test]
fn prelinked_base_moves_probe_and_semaphore() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "nopie", &["-O0", "-no-pie"]);
    let original = notes::read_file(&bin).unwrap();
    let mut data = std::fs::read(&bin).unwrap();
    // Pretend the file was prelinked 16 bytes lower: .stapsdt.base moved, notes did not.
    let field = sh_addr_field(&data, ".stapsdt.base");
    let base = u64::from_le_bytes(data[field..field + 8].try_into().unwrap());
    data[field..field + 8].copy_from_slice(&(base - 16).to_le_bytes());
    let moved = notes::parse(&data).unwrap();
    assert_eq!(moved.len(), original.len());
    for (m, o) in moved.iter().zip(&original) {
        assert_eq!((m.note_pc, m.note_base), (o.note_pc, o.note_base));
        assert_eq!(m.addr, o.addr - 16);
        assert_eq!(m.file_offset, o.file_offset - 16);
        assert_eq!(m.semaphore_addr, o.semaphore_addr.map(|a| a - 16));
        assert_eq!(m.semaphore_offset, o.semaphore_offset.map(|a| a - 16));
    }
    assert!(moved.iter().any(|p| p.semaphore_addr.is_some()));
}

#[test]
fn no_stapsdt_section_means_no_probes() {
    let probes = notes::read_file(Path::new("/bin/true")).unwrap();
    assert!(readelf_probes(Path::new("/bin/true")).is_empty());
    assert_eq!(probes, []);
}

#[test]
fn not_elf_and_missing_files_are_errors() {
    assert!(matches!(notes::parse(b""), Err(notes::NoteError::NotElf)));
    assert!(matches!(
        notes::parse(b"#!/bin/sh\n"),
        Err(notes::NoteError::NotElf)
    ));
    assert!(matches!(
        notes::read_file(Path::new("/nonexistent/libjpagent.so")),
        Err(notes::NoteError::Read { .. })
    ));
}
