//! The few parts of an untrusted ELF file that jpd needs, read piece by piece with a
//! cap on each read and on the whole file: the file header, the program headers (the
//! `PT_LOAD` segments, to turn addresses into file offsets), the section headers and
//! their names, `.note.stapsdt` (the probe sites), the address of `.stapsdt.base`, and
//! `.dynsym` with its strings (the agent's control block).
//!
//! A library file named like the agent can be anything a local user wants it to be: a
//! sparse file of a gigabyte, headers claiming sections far past its end. Nothing else
//! of the file is read, so it costs at most [`MAX_FILE_READ`] bytes of memory for an
//! instant, whatever its size. The same reader serves an image already in memory, so
//! the parsers are the same for both.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use object::elf::{
    FileHeader32, FileHeader64, PF_X, PT_LOAD, SHN_UNDEF, SHN_XINDEX, SHT_DYNSYM, SHT_NOBITS,
    SHT_NOTE,
};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::{Endian as _, Endianness, FileKind};

/// Most bytes one read may take (libjvm.so's largest needed section, `.note.stapsdt`,
/// is 52 KiB).
pub const MAX_READ: u64 = 4 << 20;
/// Most bytes read from one file in all.
pub const MAX_FILE_READ: u64 = 8 << 20;
/// The first bytes, enough for either class's file header.
const HEADER_BYTES: u64 = 64;

/// Section holding the SDT notes.
const NOTE_SECTION: &[u8] = b".note.stapsdt";
/// Section whose link-time address each note records, to detect prelinking.
const BASE_SECTION: &[u8] = b".stapsdt.base";

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    #[error("not an ELF file")]
    NotElf,
    #[error("malformed ELF: {0}")]
    Object(#[from] object::read::Error),
    #[error("malformed ELF: {0}")]
    Malformed(&'static str),
    #[error("{what} is {size} bytes, more than the {limit} read from a file")]
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
}

/// Where the bytes come from: an open file (read with `pread`) or an image in memory.
pub trait Source {
    fn size(&self) -> io::Result<u64>;
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl Source for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl Source for [u8] {
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let bytes = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

/// Reads with the caps: each read at most [`MAX_READ`], all of them at most
/// [`MAX_FILE_READ`], and never past the end of the file.
struct Reader<'a, S: Source + ?Sized> {
    source: &'a S,
    size: u64,
    left: u64,
}

impl<S: Source + ?Sized> Reader<'_, S> {
    fn read(&mut self, what: &'static str, offset: u64, len: u64) -> Result<Vec<u8>, ElfError> {
        let too_large = |limit| ElfError::TooLarge {
            what,
            size: len,
            limit,
        };
        if len > MAX_READ {
            return Err(too_large(MAX_READ));
        }
        if len > self.left {
            return Err(too_large(MAX_FILE_READ));
        }
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(ElfError::Malformed("a part lies past the end of the file"));
        }
        self.left -= len;
        let mut buf = vec![0; len as usize];
        self.source.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
}

/// A `PT_LOAD` segment, widened to 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub exec: bool,
}

/// The section `.note.stapsdt`: its bytes and alignment.
#[derive(Debug)]
pub struct NoteSection {
    pub data: Vec<u8>,
    pub align: u64,
}

/// The dynamic symbol table and its strings.
#[derive(Debug, Default)]
struct DynamicSymbols {
    symbols: Vec<u8>,
    strings: Vec<u8>,
}

/// What jpd reads of an ELF file.
#[derive(Debug)]
pub struct ElfParts {
    pub endian: Endianness,
    /// Bytes of a target word: 8 for ELF64, 4 for ELF32.
    pub word: usize,
    pub file_size: u64,
    pub loads: Vec<Load>,
    /// The link-time address of `.stapsdt.base`, if the file has it.
    pub stapsdt_base: Option<u64>,
    /// `.note.stapsdt`, if the file has it.
    pub notes: Option<NoteSection>,
    dynamic: Option<DynamicSymbols>,
}

/// Reads the parts of the ELF file `source`.
pub fn read<S: Source + ?Sized>(source: &S) -> Result<ElfParts, ElfError> {
    let size = source.size()?;
    let mut reader = Reader {
        source,
        size,
        left: MAX_FILE_READ,
    };
    let head = reader.read("the ELF header", 0, HEADER_BYTES.min(size))?;
    match FileKind::parse(&head[..]) {
        Ok(FileKind::Elf64) => read_parts::<FileHeader64<Endianness>, S>(&head, &mut reader),
        Ok(FileKind::Elf32) => read_parts::<FileHeader32<Endianness>, S>(&head, &mut reader),
        _ => Err(ElfError::NotElf),
    }
}

fn read_parts<Elf: FileHeader<Endian = Endianness>, S: Source + ?Sized>(
    head: &[u8],
    reader: &mut Reader<'_, S>,
) -> Result<ElfParts, ElfError> {
    let header = Elf::parse(head)?;
    let endian = header.endian()?;
    let loads = read_loads::<Elf, S>(header, endian, reader)?;
    let mut parts = ElfParts {
        endian,
        word: if header.is_class_64() { 8 } else { 4 },
        file_size: reader.size,
        loads,
        stapsdt_base: None,
        notes: None,
        dynamic: None,
    };
    let shoff: u64 = header.e_shoff(endian).into();
    if shoff == 0 {
        return Ok(parts);
    }
    let count = u64::from(header.e_shnum(endian));
    // Extended numbering (more than 65279 sections) is for object files, not libraries.
    if count == 0 || header.e_shstrndx(endian) == SHN_XINDEX {
        return Err(ElfError::Malformed("extended section numbering"));
    }
    if usize::from(header.e_shentsize(endian)) != size_of::<Elf::SectionHeader>() {
        return Err(ElfError::Malformed("unexpected section header size"));
    }
    let bytes = reader.read(
        "the section headers",
        shoff,
        count * size_of::<Elf::SectionHeader>() as u64,
    )?;
    let (sections, _) = object::pod::slice_from_bytes::<Elf::SectionHeader>(&bytes, count as usize)
        .map_err(|()| ElfError::Malformed("section headers"))?;
    let names_index = usize::from(header.e_shstrndx(endian));
    if names_index == usize::from(SHN_UNDEF) {
        return Ok(parts);
    }
    let names = section_data(sections, names_index, endian, reader, "the section names")?;
    for section in sections {
        let name = name_at(&names, section.sh_name(endian));
        if name == Some(BASE_SECTION) {
            parts.stapsdt_base = Some(section.sh_addr(endian).into());
        } else if name == Some(NOTE_SECTION) && parts.notes.is_none() {
            if section.sh_type(endian) != SHT_NOTE {
                return Err(ElfError::Malformed(
                    "section .note.stapsdt is not a note section",
                ));
            }
            let data = data_of(section, endian, reader, "section .note.stapsdt")?;
            let align = section.sh_addralign(endian).into();
            parts.notes = Some(NoteSection { data, align });
        } else if section.sh_type(endian) == SHT_DYNSYM && parts.dynamic.is_none() {
            let symbols = data_of(section, endian, reader, "section .dynsym")?;
            let link = section.sh_link(endian) as usize;
            let strings = section_data(sections, link, endian, reader, "section .dynstr")?;
            parts.dynamic = Some(DynamicSymbols { symbols, strings });
        }
    }
    Ok(parts)
}

fn read_loads<Elf: FileHeader<Endian = Endianness>, S: Source + ?Sized>(
    header: &Elf,
    endian: Endianness,
    reader: &mut Reader<'_, S>,
) -> Result<Vec<Load>, ElfError> {
    let phoff: u64 = header.e_phoff(endian).into();
    let count = header.e_phnum(endian);
    if phoff == 0 || count == 0 {
        return Ok(Vec::new());
    }
    if usize::from(header.e_phentsize(endian)) != size_of::<Elf::ProgramHeader>() {
        return Err(ElfError::Malformed("unexpected program header size"));
    }
    let len = u64::from(count) * size_of::<Elf::ProgramHeader>() as u64;
    let bytes = reader.read("the program headers", phoff, len)?;
    let (segments, _) =
        object::pod::slice_from_bytes::<Elf::ProgramHeader>(&bytes, usize::from(count))
            .map_err(|()| ElfError::Malformed("program headers"))?;
    Ok(segments
        .iter()
        .filter(|ph| ph.p_type(endian) == PT_LOAD)
        .map(|ph| Load {
            vaddr: ph.p_vaddr(endian).into(),
            offset: ph.p_offset(endian).into(),
            filesz: ph.p_filesz(endian).into(),
            exec: ph.p_flags(endian) & PF_X != 0,
        })
        .collect())
}

/// The bytes of section number `index`.
fn section_data<Section: SectionHeader<Endian = Endianness>, S: Source + ?Sized>(
    sections: &[Section],
    index: usize,
    endian: Endianness,
    reader: &mut Reader<'_, S>,
    what: &'static str,
) -> Result<Vec<u8>, ElfError> {
    let section = sections
        .get(index)
        .ok_or(ElfError::Malformed("a section index is out of range"))?;
    data_of(section, endian, reader, what)
}

fn data_of<Section: SectionHeader<Endian = Endianness>, S: Source + ?Sized>(
    section: &Section,
    endian: Endianness,
    reader: &mut Reader<'_, S>,
    what: &'static str,
) -> Result<Vec<u8>, ElfError> {
    if section.sh_type(endian) == SHT_NOBITS {
        return Ok(Vec::new());
    }
    reader.read(
        what,
        section.sh_offset(endian).into(),
        section.sh_size(endian).into(),
    )
}

/// The NUL-terminated string at `offset` in a string table.
fn name_at(strings: &[u8], offset: u32) -> Option<&[u8]> {
    let tail = strings.get(offset as usize..)?;
    let end = tail.iter().position(|&b| b == 0)?;
    Some(&tail[..end])
}

impl ElfParts {
    /// The value (link-time address) of the defined dynamic symbol `name`.
    pub fn dynamic_symbol(&self, name: &[u8]) -> Option<u64> {
        let dynamic = self.dynamic.as_ref()?;
        // Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64;
        // Elf32_Sym: name u32, value u32, size u32, info u8, other u8, shndx u16.
        let (entry, shndx_at, value_at) = if self.word == 8 {
            (24, 6, 8)
        } else {
            (16, 14, 4)
        };
        dynamic.symbols.chunks_exact(entry).find_map(|sym| {
            let u32_at = |at: usize| {
                let mut bytes = [0; 4];
                bytes.copy_from_slice(&sym[at..at + 4]);
                self.endian.read_u32(bytes)
            };
            let shndx = self.endian.read_u16([sym[shndx_at], sym[shndx_at + 1]]);
            if shndx == SHN_UNDEF || name_at(&dynamic.strings, u32_at(0)) != Some(name) {
                return None;
            }
            Some(if self.word == 8 {
                let mut bytes = [0; 8];
                bytes.copy_from_slice(&sym[value_at..value_at + 8]);
                self.endian.read_u64(bytes)
            } else {
                u64::from(u32_at(value_at))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_executable_parts_match_a_full_parse() {
        use object::{Object as _, ObjectSection as _, ObjectSegment as _};
        let data = std::fs::read("/proc/self/exe").unwrap();
        let file = File::open("/proc/self/exe").unwrap();
        let parts = read(&file).unwrap();
        let full = object::File::parse(&*data).unwrap();
        let loads: Vec<(u64, u64, u64)> = parts
            .loads
            .iter()
            .map(|l| (l.vaddr, l.offset, l.filesz))
            .collect();
        let expected: Vec<(u64, u64, u64)> = full
            .segments()
            .map(|s| (s.address(), s.file_range().0, s.file_range().1))
            .collect();
        assert_eq!(loads, expected);
        assert_eq!(
            parts.stapsdt_base,
            full.section_by_name(".stapsdt.base").map(|s| s.address())
        );
        let from_memory = read(&data[..]).unwrap();
        assert_eq!(from_memory.loads, parts.loads);
    }

    #[test]
    fn sparse_and_lying_files_cost_only_their_headers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse.so");
        File::create(&path).unwrap().set_len(1 << 30).unwrap();
        let file = File::open(&path).unwrap();
        assert!(matches!(read(&file), Err(ElfError::NotElf)));

        // A header whose section names claim a gigabyte.
        let image = lying_image(1 << 30);
        let err = read(&image[..]).unwrap_err();
        assert!(matches!(err, ElfError::TooLarge { .. }), "{err}");
        // … or lie past the end of the file.
        let err = read(&lying_image(4096)[..]).unwrap_err();
        assert!(matches!(err, ElfError::Malformed(_)), "{err}");
        assert!(matches!(read(&[][..]), Err(ElfError::NotElf)));
    }

    /// An ELF64 header, a null section and a string table of `names_size` bytes at
    /// offset 0, as section names.
    fn lying_image(names_size: u64) -> Vec<u8> {
        let mut image = vec![0u8; 64 + 2 * 64];
        image[..8].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
        image[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        image[20..24].copy_from_slice(&1u32.to_le_bytes());
        image[40..48].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
        image[52..54].copy_from_slice(&64u16.to_le_bytes());
        image[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        image[60..62].copy_from_slice(&2u16.to_le_bytes()); // e_shnum
        image[62..64].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
        let names = 128;
        image[names + 4..names + 8].copy_from_slice(&3u32.to_le_bytes()); // SHT_STRTAB
        image[names + 32..names + 40].copy_from_slice(&names_size.to_le_bytes());
        image
    }
}
