//! BPF array maps created with `BPF_F_MMAPABLE`, mapped into jpd's memory so that a
//! periodic pass reads them without a syscall: readprofile's counter arrays
//! (`text_counts`) and the arrays with one value, or one row of values, per CPU
//! ([`CpuSlots`]).
use std::marker::PhantomData;
use std::os::fd::{AsRawFd as _, BorrowedFd};

use anyhow::{bail, Context as _};

/// A shared, read-write mapping of a BPF array map's values.
pub(super) struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through atomics or
// volatile reads of whole aligned words.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the first `bytes` of the array's values.
    pub(super) fn new(fd: BorrowedFd<'_>, bytes: usize, what: &str) -> anyhow::Result<Mapping> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = bytes.div_ceil(page) * page;
        // SAFETY: mapping a BPF_F_MMAPABLE array fd at offset 0 maps its values; the
        // kernel checks the length against the map's size.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot map {what}"));
        }
        Ok(Mapping { ptr, len })
    }

    pub(super) fn ptr(&self) -> *mut libc::c_void {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing borrows it past
        // the owner's life.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// An array with `row` values of `T` per CPU, CPU after CPU (CPU `c`'s values at
/// `c * row ..`), that the eBPF side writes on each CPU and jpd reads through its
/// mapping: `row` is 1 for the arrays with one value per CPU (`cpu_slot` in jp-ebpf).
pub(super) struct CpuSlots<T> {
    mapping: Mapping,
    cpus: usize,
    row: usize,
    _values: PhantomData<T>,
}

impl<T: aya::Pod> CpuSlots<T> {
    /// Maps `cpus` values of the array `fd` (sized to exactly that many at load).
    pub(super) fn map(fd: BorrowedFd<'_>, cpus: usize, what: &str) -> anyhow::Result<Self> {
        Self::map_rows(fd, cpus, 1, what)
    }

    /// Maps `cpus` rows of `row` values of the array `fd` (sized to that at load).
    pub(super) fn map_rows(
        fd: BorrowedFd<'_>,
        cpus: usize,
        row: usize,
        what: &str,
    ) -> anyhow::Result<Self> {
        if !std::mem::size_of::<T>().is_multiple_of(8) {
            bail!(
                "{what}: a value of {} bytes is not whole words",
                std::mem::size_of::<T>()
            );
        }
        Ok(CpuSlots {
            mapping: Mapping::new(fd, cpus * row * std::mem::size_of::<T>(), what)?,
            cpus,
            row,
            _values: PhantomData,
        })
    }

    /// Every CPU's (first) value as it is now. Each u64 in it is read whole; the values
    /// as a whole are not a snapshot (the eBPF side goes on counting), as with per-CPU
    /// maps. Everything the caller reads after this is read after these values (the
    /// order the collector's counts rely on, which a syscall per read used to give).
    pub(super) fn read(&self) -> Vec<T> {
        let values = (0..self.cpus)
            .filter_map(|cpu| self.value(cpu, 0))
            .collect();
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        values
    }

    /// The first `n` values of every CPU's row (at most `row`), as `[i][cpu]`, read as
    /// `read` reads.
    pub(super) fn columns(&self, n: usize) -> Vec<Vec<T>> {
        let values = (0..n.min(self.row))
            .map(|i| {
                (0..self.cpus)
                    .filter_map(|cpu| self.value(cpu, i))
                    .collect()
            })
            .collect();
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        values
    }

    /// Value `i` of CPU `cpu`'s row, read as `read` reads (without its fence); `None`
    /// out of range.
    pub(super) fn value(&self, cpu: usize, i: usize) -> Option<T> {
        if cpu >= self.cpus || i >= self.row {
            return None;
        }
        let base = self.mapping.ptr() as *const T;
        // SAFETY: `cpu < cpus` and `i < row` (checked above), and the mapping holds
        // `cpus * row` values of T (the array's value size is size_of::<T>(), a multiple
        // of 8, so values are packed); T is Pod, so any bytes are a valid T. Volatile:
        // the eBPF side writes it concurrently, and aligned 8-byte words are read whole.
        Some(unsafe { std::ptr::read_volatile(base.add(cpu * self.row + i)) })
    }
}
