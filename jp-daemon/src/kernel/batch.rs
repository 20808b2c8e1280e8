//! Reads a whole per-CPU map with `BPF_MAP_LOOKUP_BATCH` (kernel ≥ 5.6): a few
//! syscalls per read instead of two per key, which keeps jpd's own CPU share small when
//! the histograms hold thousands of buckets. aya 0.14 has no batch API.
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd as _, BorrowedFd};

use aya::Pod;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// Elements per batch syscall.
const MAX_CHUNK: usize = 1024;

/// The `batch` member of `union bpf_attr` (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every (key, per-CPU values) of a per-CPU hash or array map. `ncpus` is the number of
/// *possible* CPUs (the kernel's per-CPU value layout), `V` the map's value type,
/// `max_entries` the map's size: it bounds the buffers, which for a small array would
/// otherwise be mostly zeroing (the batch is at most `MAX_CHUNK` elements).
pub fn read_percpu<K: Pod, V: Pod>(
    fd: BorrowedFd<'_>,
    ncpus: usize,
    max_entries: usize,
) -> io::Result<Vec<(K, Vec<V>)>> {
    // Per-CPU values are laid out 8-byte aligned, one after the other.
    let stride = size_of::<V>().div_ceil(8) * 8;
    let mut chunk: usize = max_entries.clamp(1, MAX_CHUNK);
    let mut out = Vec::new();
    // The batch token is opaque: a u32 bucket index for hash maps, the key for arrays.
    let mut token_in = [0u8; 16];
    let mut token_out = [0u8; 16];
    let mut first = true;
    loop {
        let mut keys = vec![0u8; chunk * size_of::<K>()];
        let mut values = vec![0u8; chunk * stride * ncpus];
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { token_in.as_ptr() as u64 },
            out_batch: token_out.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: u32::try_from(chunk).unwrap_or(u32::MAX),
            map_fd: u32::try_from(fd.as_raw_fd())
                .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?,
            ..BatchAttr::default()
        };
        // SAFETY: `attr` is a valid bpf_attr prefix of the size we pass; the key and
        // value buffers hold `count` elements of the map's key and per-CPU value sizes,
        // and the token buffers are larger than any token the kernel writes.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                size_of::<BatchAttr>() as libc::c_uint,
            )
        };
        let err = (rc < 0).then(io::Error::last_os_error);
        match err.as_ref().and_then(io::Error::raw_os_error) {
            // ENOSPC: one hash bucket holds more elements than `count`; retry bigger.
            Some(libc::ENOSPC) if attr.count == 0 => {
                chunk *= 2;
                if chunk > 1 << 22 {
                    return Err(io::Error::other("BPF_MAP_LOOKUP_BATCH: bucket too large"));
                }
                continue;
            }
            None | Some(libc::ENOENT) => {}
            Some(_) => return Err(err.unwrap_or_else(io::Error::last_os_error)),
        }
        let n = (attr.count as usize).min(chunk);
        for i in 0..n {
            // SAFETY: the kernel filled `n` keys and values; Pod types accept any bytes,
            // and read_unaligned copes with the byte buffers' alignment.
            let key =
                unsafe { (keys.as_ptr().add(i * size_of::<K>()) as *const K).read_unaligned() };
            let vals = (0..ncpus)
                .map(|cpu| {
                    let off = (i * ncpus + cpu) * stride;
                    // SAFETY: as above, `off + size_of::<V>() <= values.len()`.
                    unsafe { (values.as_ptr().add(off) as *const V).read_unaligned() }
                })
                .collect();
            out.push((key, vals));
        }
        // ENOENT: that was the last batch. A map cannot hold more than `max_entries`
        // keys, so once that many are read (an array always, in its first batch) the
        // call that would only say ENOENT is saved.
        if err.is_some() || out.len() >= max_entries {
            return Ok(out);
        }
        token_in = token_out;
        first = false;
    }
}
