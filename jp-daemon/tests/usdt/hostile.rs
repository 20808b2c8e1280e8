//! Malformed and hostile ELF files: truncated and corrupted copies of real binaries
//! give errors, never a panic (the parser reads files of any process on the host).

use crate::support::usdt::{build_probe_program, LIBJVM};
use jp_daemon::usdt::notes;

#[test]
fn every_truncation_of_a_probe_program_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "pie", &["-O2"]);
    let data = std::fs::read(&bin).unwrap();
    assert_eq!(notes::parse(&data).unwrap().len(), 4);
    // The section headers are at the end of the file: any shorter copy lacks them.
    for len in 0..data.len() {
        assert!(
            notes::parse(&data[..len]).is_err(),
            "truncated to {len} bytes parsed"
        );
    }
}

#[test]
fn truncated_libjvm_is_an_error() {
    let data = std::fs::read(LIBJVM)
        .unwrap_or_else(|e| panic!("{LIBJVM}: {e}: install Debian openjdk-17-jdk-headless"));
    let len = data.len();
    for cut in [64, 4096, len / 2, len - 4096, len - 1] {
        assert!(notes::parse(&data[..cut]).is_err(), "cut at {cut}");
    }
}

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Byte ranges worth corrupting: the ELF header, program headers, section headers and
/// the note section (by readelf-independent arithmetic on the header fields).
fn interesting_ranges(data: &[u8]) -> Vec<(usize, usize)> {
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, shoff) = (u64_at(0x20), u64_at(0x28));
    let (phnum, shnum) = (u16_at(0x38), u16_at(0x3c));
    let mut ranges = vec![
        (0, 64),
        (phoff, phoff + 56 * phnum),
        (shoff, shoff + 64 * shnum),
    ];
    // Every section's contents, the notes among them.
    for i in 0..shnum {
        let sh = shoff + 64 * i;
        let (offset, size) = (u64_at(sh + 24), u64_at(sh + 32));
        if offset + size <= data.len() && size > 0 {
            ranges.push((offset, offset + size));
        }
    }
    ranges
}

#[test]
fn random_corruption_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut outcomes = [0usize; 2];
    for (name, flags) in [("pie", &["-O2"][..]), ("nopie", &["-O0", "-no-pie"][..])] {
        let bin = build_probe_program(dir.path(), name, flags);
        let data = std::fs::read(&bin).unwrap();
        let ranges = interesting_ranges(&data);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let mut copy = data.clone();
            for _ in 0..1 + rng.below(4) {
                let (start, end) = ranges[rng.below(ranges.len())];
                let at = start + rng.below(end - start);
                copy[at] = match rng.below(4) {
                    0 => 0,
                    1 => 0xff,
                    2 => copy[at] ^ (1 << rng.below(8)),
                    _ => rng.next() as u8,
                };
            }
            outcomes[usize::from(notes::parse(&copy).is_ok())] += 1;
        }
    }
    // Both outcomes occur: corruption that misses what the parser reads is harmless,
    // the rest is reported.
    println!(
        "corrupted copies: {} errors, {} parsed",
        outcomes[0], outcomes[1]
    );
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
}

/// Sets the field of every SDT note at `field` (0 namesz, 4 descsz) to `value`.
fn patch_notes(data: &mut [u8], field: usize, value: u32) -> usize {
    let needle = b"stapsdt\0";
    let mut patched = 0;
    let mut at = 0;
    while let Some(pos) = data[at..].windows(needle.len()).position(|w| w == needle) {
        let name = at + pos;
        at = name + needle.len();
        // A note header is namesz, descsz, type = 3, then the name.
        if name >= 12 && data[name - 4..name] == 3u32.to_le_bytes() {
            let header = name - 12;
            data[header + field..header + field + 4].copy_from_slice(&value.to_le_bytes());
            patched += 1;
        }
    }
    patched
}

#[test]
fn hostile_note_sizes_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "pie", &["-O2"]);
    let data = std::fs::read(&bin).unwrap();
    for (field, value) in [
        (4, u32::MAX),
        (4, 0x7fff_fff0),
        (0, u32::MAX),
        (4, 8),
        (4, 0),
    ] {
        let mut copy = data.clone();
        assert_eq!(patch_notes(&mut copy, field, value), 4);
        assert!(
            notes::parse(&copy).is_err(),
            "field {field} = {value:#x} parsed"
        );
    }
    // Strings without their NUL: overwrite the last note's trailing NULs.
    let mut copy = data.clone();
    let noargs = copy.windows(7).rposition(|w| w == b"noargs\0").unwrap();
    copy[noargs + 6] = b'x';
    copy[noargs + 7] = b'y';
    let err = notes::parse(&copy).unwrap_err().to_string();
    assert!(err.contains("NUL") || err.contains("note"), "{err}");
}

#[test]
fn probe_outside_any_segment_is_an_error() {
    // Point the first note's pc far beyond every PT_LOAD.
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "pie", &["-O2"]);
    let mut data = std::fs::read(&bin).unwrap();
    let name = data.windows(8).position(|w| w == b"stapsdt\0").unwrap();
    let desc = name + 8;
    data[desc..desc + 8].copy_from_slice(&0x7fff_0000_0000u64.to_le_bytes());
    let err = notes::parse(&data).unwrap_err().to_string();
    assert!(err.contains("not in a loaded part"), "{err}");
    // So is a semaphore that no segment maps from the file.
    let mut data = std::fs::read(&bin).unwrap();
    data[desc + 16..desc + 24].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = notes::parse(&data).unwrap_err().to_string();
    assert!(err.contains("semaphore"), "{err}");
}

#[test]
fn huge_files_cost_only_their_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.so");
    // Sparse: reading it whole would page in a gigabyte of zeros; its first bytes
    // alone say it is not ELF.
    let file = std::fs::File::create(&path).unwrap();
    file.set_len((1 << 30) + 1).unwrap();
    let err = notes::read_file(&path).unwrap_err();
    assert!(matches!(err, notes::NoteError::NotElf), "{err}");
}

#[test]
fn fifos_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libjpagent.so");
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // No writer ever comes: a blocking open would wait here for good.
    let err = notes::read_file(&path).unwrap_err();
    assert!(matches!(err, notes::NoteError::NotRegular { .. }), "{err}");
}
