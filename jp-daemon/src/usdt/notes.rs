//! SystemTap SDT probe sites of an ELF file, from its `.note.stapsdt` notes.
//!
//! Each note (owner `stapsdt`, type [`NT_STAPSDT`]) holds the probe's address, the
//! link-time address of `.stapsdt.base`, the semaphore's address (0 if none), each a
//! target word, then three NUL-terminated strings: provider, name, argument specs.
//! A uprobe is attached by *file offset*, and the kernel's USDT semaphore support
//! (`ref_ctr_offset`) takes a file offset too, so both addresses are converted through
//! the `PT_LOAD` segment that contains them. The file is untrusted: every field is
//! checked and a malformed file gives an error, never a panic; only the parts needed are
//! read, with caps ([`elf`]), so a file costs its headers and notes whatever its size.

use std::fs::File;
use std::path::Path;

use object::elf::FileHeader64;
use object::read::elf::NoteIterator;
use object::{Endian as _, Endianness};

use super::elf::{self, ElfError, ElfParts, Load};

/// ELF note type of SDT probe descriptors (version 3 of `sys/sdt.h`).
pub const NT_STAPSDT: u32 = 3;
/// Owner (note name) of SDT notes.
pub const STAPSDT_OWNER: &[u8] = b"stapsdt";
/// More probe sites than this in one file are refused (libjvm.so has 531).
pub const MAX_PROBES: usize = 1 << 16;
/// Longest provider, name or argument string accepted, in bytes.
pub const MAX_STRING: usize = 1024;

/// One probe site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub provider: String,
    pub name: String,
    /// The argument specs as written in the note (`-8@%rax 8@-16(%rbp)`), possibly empty.
    pub args: String,
    /// The probe address as recorded in the note (readelf's "Location").
    pub note_pc: u64,
    /// The address of `.stapsdt.base` as recorded in the note (readelf's "Base").
    pub note_base: u64,
    /// The semaphore address as recorded in the note (readelf's "Semaphore"), 0 if none.
    pub note_semaphore: u64,
    /// The probe's virtual address (link-time), after prelink adjustment.
    pub addr: u64,
    /// Where to attach the uprobe: the file offset of [`addr`](Self::addr).
    pub file_offset: u64,
    /// The semaphore's virtual address after prelink adjustment, if the probe has one.
    pub semaphore_addr: Option<u64>,
    /// The semaphore's file offset (the kernel's `ref_ctr_offset`), if the probe has one.
    pub semaphore_offset: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum NoteError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a regular file")]
    NotRegular { path: String },
    #[error("not an ELF file")]
    NotElf,
    /// A part of the file over the caps of [`elf`]: its size alone refuses it.
    #[error("{0}")]
    TooLarge(ElfError),
    #[error("{0}")]
    Elf(ElfError),
    #[error("malformed notes: {0}")]
    Notes(#[from] object::read::Error),
    #[error("SDT note #{index}: {reason}")]
    BadNote { index: usize, reason: String },
    #[error("more than {MAX_PROBES} SDT probes")]
    TooManyProbes,
    #[error("probe {provider}:{name}: {reason}")]
    BadProbe {
        provider: String,
        name: String,
        reason: String,
    },
}

impl From<ElfError> for NoteError {
    fn from(e: ElfError) -> NoteError {
        match e {
            ElfError::NotElf => NoteError::NotElf,
            ElfError::TooLarge { .. } => NoteError::TooLarge(e),
            e => NoteError::Elf(e),
        }
    }
}

/// Opens `path` (without blocking on a FIFO or device), checks it is a regular file
/// and returns its probe sites (empty if it has no `.note.stapsdt`).
pub fn read_file(path: &Path) -> Result<Vec<Probe>, NoteError> {
    let shown = || path.display().to_string();
    let file = open_regular(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::InvalidInput => NoteError::NotRegular { path: shown() },
        _ => NoteError::Read {
            path: shown(),
            source,
        },
    })?;
    probes_of(&elf::read(&file)?)
}

/// Opens `path` for reading without blocking (`O_NONBLOCK`: a FIFO or a device opens
/// at once) and checks the open file, not the path, is a regular file: the kind
/// `InvalidInput` if it is not.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Probe sites of the ELF image `data` (empty if it has no `.note.stapsdt`).
pub fn parse(data: &[u8]) -> Result<Vec<Probe>, NoteError> {
    probes_of(&elf::read(data)?)
}

/// The note's fixed part, before the strings.
struct Addresses {
    pc: u64,
    base: u64,
    semaphore: u64,
}

/// Probe sites among the parts read of an ELF file.
pub fn probes_of(parts: &ElfParts) -> Result<Vec<Probe>, NoteError> {
    let endian = parts.endian;
    let word = parts.word;
    let Some(section) = &parts.notes else {
        return Ok(Vec::new());
    };
    // The note header is three 32-bit words in either class.
    let mut notes =
        NoteIterator::<FileHeader64<Endianness>>::new(endian, section.align, &section.data)?;
    let loads = &parts.loads;
    let base_section = parts.stapsdt_base;
    let mut probes = Vec::new();
    let mut index = 0;
    while let Some(note) = notes.next()? {
        index += 1;
        if note.name() != STAPSDT_OWNER || note.n_type(endian) != NT_STAPSDT {
            continue;
        }
        if probes.len() >= MAX_PROBES {
            return Err(NoteError::TooManyProbes);
        }
        let bad = |reason: &str| NoteError::BadNote {
            index,
            reason: reason.to_owned(),
        };
        let desc = note.desc();
        let fixed = desc
            .get(..3 * word)
            .ok_or_else(|| bad("descriptor too short"))?;
        let read_word = |i: usize| -> u64 {
            let mut bytes = [0u8; 8];
            let field = &fixed[i * word..(i + 1) * word];
            if word == 8 {
                bytes.copy_from_slice(field);
                endian.read_u64(bytes)
            } else {
                let mut short = [0u8; 4];
                short.copy_from_slice(field);
                u64::from(endian.read_u32(short))
            }
        };
        let addrs = Addresses {
            pc: read_word(0),
            base: read_word(1),
            semaphore: read_word(2),
        };
        let mut rest = &desc[3 * word..];
        let mut strings = [String::new(), String::new(), String::new()];
        for (slot, what) in strings.iter_mut().zip(["provider", "name", "arguments"]) {
            // Old `sys/sdt.h` versions omit the argument string of a probe without
            // arguments.
            if what == "arguments" && rest.is_empty() {
                break;
            }
            let end = rest
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| bad(&format!("{what} is not NUL-terminated")))?;
            if end > MAX_STRING {
                return Err(bad(&format!("{what} longer than {MAX_STRING} bytes")));
            }
            *slot = std::str::from_utf8(&rest[..end])
                .map_err(|_| bad(&format!("{what} is not UTF-8")))?
                .to_owned();
            rest = &rest[end + 1..];
        }
        let [provider, name, args] = strings;
        probes.push(locate(
            provider,
            name,
            args,
            &addrs,
            base_section,
            loads,
            parts.file_size,
        )?);
    }
    Ok(probes)
}

/// The file offset of `addr`, if a loaded segment maps it from the file (not from the
/// zero-filled tail beyond `p_filesz`) and `len` bytes there lie inside the file.
fn file_offset(loads: &[Load], addr: u64, len: u64, file_len: u64) -> Option<(u64, &Load)> {
    loads.iter().find_map(|load| {
        let delta = addr.checked_sub(load.vaddr)?;
        if delta.checked_add(len)? > load.filesz {
            return None;
        }
        let offset = load.offset.checked_add(delta)?;
        (offset.checked_add(len)? <= file_len).then_some((offset, load))
    })
}

fn locate(
    provider: String,
    name: String,
    args: String,
    addrs: &Addresses,
    base_section: Option<u64>,
    loads: &[Load],
    file_len: u64,
) -> Result<Probe, NoteError> {
    // A prelinked file was moved after the notes were written; the notes are not
    // relocated, but `.stapsdt.base` is, so the difference is the move.
    let shift = base_section.map_or(0, |base| base.wrapping_sub(addrs.base));
    let addr = addrs.pc.wrapping_add(shift);
    let bad = |reason: String| NoteError::BadProbe {
        provider: provider.clone(),
        name: name.clone(),
        reason,
    };
    // The probe is a one-byte nop the kernel replaces by int3.
    let (offset, load) = file_offset(loads, addr, 1, file_len).ok_or_else(|| {
        bad(format!(
            "address {addr:#x} is not in a loaded part of the file"
        ))
    })?;
    if !load.exec {
        return Err(bad(format!(
            "address {addr:#x} is not in an executable segment"
        )));
    }
    let (semaphore_addr, semaphore_offset) = if addrs.semaphore == 0 {
        (None, None)
    } else {
        let sema = addrs.semaphore.wrapping_add(shift);
        // Semaphores are `unsigned short` counters.
        let (sema_offset, _) = file_offset(loads, sema, 2, file_len).ok_or_else(|| {
            bad(format!(
                "semaphore {sema:#x} is not in a loaded part of the file"
            ))
        })?;
        (Some(sema), Some(sema_offset))
    };
    Ok(Probe {
        provider,
        name,
        args,
        note_pc: addrs.pc,
        note_base: addrs.base,
        note_semaphore: addrs.semaphore,
        addr,
        file_offset: offset,
        semaphore_addr,
        semaphore_offset,
    })
}
