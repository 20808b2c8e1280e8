//! The agent's control block (`jp_common::wire::Control`, dynamic symbol
//! `jp_usdt_control`): where it is in a process, and writing a new generation into it
//! through `/proc/PID/mem`, which asks the agent to re-send its whole state.
use std::io;
use std::os::unix::fs::FileExt as _;
use std::time::{SystemTime, UNIX_EPOCH};

use super::elf::{self, ElfError, ElfParts};
use super::{discovery, maps};
use jp_common::wire::{CONTROL_MAGIC, CONTROL_SYMBOL};

/// Bytes of the block jpd reads and writes: `magic`, `generation`.
const USED: u64 = 16;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no dynamic symbol {CONTROL_SYMBOL} in the library")]
    NoSymbol,
    #[error(
        "symbol {CONTROL_SYMBOL} at {0:#x} is not in a part of the library loaded from the file"
    )]
    NotInFile(u64),
    #[error("{0}")]
    Elf(#[from] ElfError),
    #[error("the process has exited")]
    Gone,
    #[error("the control block is not mapped in the process")]
    NotMapped,
    #[error("the control block has magic {0:#018x}, not the agent's")]
    BadMagic(u64),
    #[error("{0}")]
    Io(io::Error),
}

impl From<io::Error> for ControlError {
    fn from(e: io::Error) -> ControlError {
        // A process that exits mid-operation: its /proc entries vanish (ENOENT, ESRCH)
        // or its memory cannot be accessed any more (EIO on a zombie).
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => ControlError::Gone,
            _ => ControlError::Io(e),
        }
    }
}

/// Where the control block is in the library file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlSymbol {
    /// The symbol's link-time address.
    pub vaddr: u64,
    /// Its file offset.
    pub file_offset: u64,
    /// Link-time address of the first `PT_LOAD` segment, page-aligned down: the
    /// mapping of file offset 0 is there, plus the load bias.
    pub base_vaddr: u64,
}

const PAGE: u64 = 4096;

/// The control block of the library image `data`.
pub fn control_symbol(data: &[u8]) -> Result<ControlSymbol, ControlError> {
    control_symbol_of(&elf::read(data)?)
}

/// The control block among the parts read of a library file.
pub fn control_symbol_of(parts: &ElfParts) -> Result<ControlSymbol, ControlError> {
    let vaddr = parts
        .dynamic_symbol(CONTROL_SYMBOL.as_bytes())
        .ok_or(ControlError::NoSymbol)?;
    let base_vaddr = parts
        .loads
        .iter()
        .map(|l| l.vaddr)
        .min()
        .ok_or(ControlError::NotInFile(vaddr))?
        & !(PAGE - 1);
    for load in &parts.loads {
        let Some(delta) = vaddr.checked_sub(load.vaddr) else {
            continue;
        };
        if delta
            .checked_add(USED)
            .is_some_and(|end| end <= load.filesz)
        {
            let file_offset = load
                .offset
                .checked_add(delta)
                .ok_or(ControlError::NotInFile(vaddr))?;
            return Ok(ControlSymbol {
                vaddr,
                file_offset,
                base_vaddr,
            });
        }
    }
    Err(ControlError::NotInFile(vaddr))
}

/// The control block's address in process `pid`, which maps the file (`dev`,
/// `inode`): the load bias (where file offset 0 is mapped) plus the symbol's address,
/// checked against the mapping that holds it. While the loader is still mapping the
/// library (it maps the whole span from offset 0 first, then each segment in place),
/// the check fails with [`ControlError::NotMapped`]: try again later.
pub fn address_in(
    pid: u32,
    dev: (u32, u32),
    inode: u64,
    symbol: &ControlSymbol,
) -> Result<u64, ControlError> {
    let text = maps::read_maps(pid)?;
    let mappings = maps::mappings_of(&text, dev, inode);
    let base = mappings
        .iter()
        .find(|m| m.offset == 0)
        .ok_or(ControlError::NotMapped)?;
    let addr = base
        .start
        .checked_sub(symbol.base_vaddr)
        .and_then(|bias| bias.checked_add(symbol.vaddr))
        .ok_or(ControlError::NotMapped)?;
    let in_place = mappings.iter().any(|m| {
        addr >= m.start
            && addr.checked_add(USED).is_some_and(|end| end <= m.end)
            && m.offset.checked_add(addr - m.start) == Some(symbol.file_offset)
    });
    if in_place {
        Ok(addr)
    } else {
        Err(ControlError::NotMapped)
    }
}

/// Checks the magic at `addr` in process `pid`, the one started at `start_time`, and
/// writes `generation` after it. The start time is checked and the memory opened
/// through one descriptor of `/proc/PID`, so a process given the pid after the first
/// exited never receives the write.
pub fn write_generation(
    pid: u32,
    start_time: u64,
    addr: u64,
    generation: u64,
) -> Result<(), ControlError> {
    let dir = discovery::open_process(pid, start_time)?;
    let mem = discovery::open_in(&dir, c"mem", libc::O_RDWR)?;
    let mut magic = [0u8; 8];
    let n = mem.read_at(&mut magic, addr).map_err(gone_on_eio)?;
    if n != magic.len() {
        return Err(ControlError::Gone);
    }
    let magic = u64::from_le_bytes(magic);
    if magic != CONTROL_MAGIC {
        return Err(ControlError::BadMagic(magic));
    }
    let n = mem
        .write_at(&generation.to_le_bytes(), addr + 8)
        .map_err(gone_on_eio)?;
    if n != 8 {
        return Err(ControlError::Gone);
    }
    Ok(())
}

/// Reads the generation at `addr` (tests, diagnostics).
pub fn read_generation(pid: u32, addr: u64) -> Result<u64, ControlError> {
    let mem = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    let mut value = [0u8; 8];
    mem.read_exact_at(&mut value, addr + 8)
        .map_err(gone_on_eio)?;
    Ok(u64::from_le_bytes(value))
}

/// The memory of an exiting process (no `mm` any more) reads as EIO.
fn gone_on_eio(e: io::Error) -> ControlError {
    if e.raw_os_error() == Some(libc::EIO) {
        ControlError::Gone
    } else {
        ControlError::from(e)
    }
}

/// Generations that are never reused, not even across jpd restarts: the realtime clock
/// in nanoseconds, bumped to stay strictly increasing if the clock stands still or
/// steps back.
#[derive(Debug, Default)]
pub struct GenerationClock {
    last: u64,
}

impl GenerationClock {
    pub fn next_generation(&mut self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.last = now.max(self.last.saturating_add(1));
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_strictly_increase_and_follow_the_clock() {
        let mut clock = GenerationClock::default();
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let mut last = 0;
        for _ in 0..10_000 {
            let g = clock.next_generation();
            assert!(g > last);
            assert!(g >= before);
            last = g;
        }
        let mut stuck = GenerationClock { last: u64::MAX - 1 };
        assert_eq!(stuck.next_generation(), u64::MAX);
    }

    #[test]
    fn own_memory_round_trip() {
        // A control block in this test process, written through /proc/self/mem.
        let block: Box<[u64; 8]> = Box::new([CONTROL_MAGIC, 5, 0, 0, 0, 0, 0, 0]);
        let addr = block.as_ptr() as u64;
        let me = std::process::id();
        let started = discovery::start_time(me).unwrap();
        write_generation(me, started, addr, 77).unwrap();
        assert_eq!(read_generation(me, addr).unwrap(), 77);
        // SAFETY: the block is ours; a volatile read sees what the kernel wrote.
        assert_eq!(unsafe { std::ptr::read_volatile(&block[1]) }, 77);
        let wrong: Box<[u64; 8]> = Box::new([1, 5, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(
            write_generation(me, started, wrong.as_ptr() as u64, 9),
            Err(ControlError::BadMagic(1))
        ));
        assert_eq!(wrong[1], 5);
        assert!(matches!(
            write_generation(u32::MAX - 1, started, addr, 1),
            Err(ControlError::Gone)
        ));
        // The same pid with another start time is another process: not written.
        assert!(matches!(
            write_generation(me, started + 1, addr, 78),
            Err(ControlError::Gone)
        ));
        assert_eq!(read_generation(me, addr).unwrap(), 77);
    }
}
