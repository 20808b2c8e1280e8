//! Publishing the current context on the JVM's heap (CPU per context): jpd's sampler reads a
//! thread's `ThreadState.current` itself, so the entries and exits that store it anyway
//! publish it without a store of their own (a context slot costs one `Unsafe.putInt` to
//! native memory per context change).
//!
//! The sampler finds the object through the cell of the thread's JNI global reference to
//! its state (bound at attach, deleted at thread end), which the collector updates when it
//! moves the object. That holds for collectors that move objects only while Java threads
//! are stopped (G1, Parallel, Serial; Epsilon never moves them): a thread the sampler
//! interrupts in Java code then sees its state where the cell says. ZGC and Shenandoah
//! move objects while threads run, and a cell may name a stale copy for a while: their
//! JVMs publish in context slots.
use super::{guard, AGENT};
use crate::ffi::jni::{Env, JClass, JInt, JLong, JObject, RawEnv};

/// Thread name prefixes (`comm`) of the collectors that move objects while threads run.
const CONCURRENT_MOVERS: [&str; 3] = ["Shenandoah", "ZDirector", "ZDriver"];

/// The name of the JVM's collector if it moves objects while threads run (found by its
/// threads' names, which both have from VM start), None if it does not. Asked once, at VM
/// init, where `publish=true` becomes the heap or slots for the JVM's life.
pub(super) fn concurrent_mover() -> Option<&'static str> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    for t in tasks.flatten() {
        let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else {
            continue;
        };
        if let Some(p) = CONCURRENT_MOVERS.iter().find(|p| comm.starts_with(**p)) {
            return Some(if p.starts_with('Z') {
                "ZGC"
            } else {
                "Shenandoah"
            });
        }
    }
    None
}

/// `Rt.heapCell(state, cookieOffset, cookie)`: see its Java comment. Runs on the thread
/// whose state it is.
pub(super) unsafe extern "system" fn native_heap_cell(
    raw: RawEnv,
    _cls: JClass,
    state: JObject,
    cookie_offset: JInt,
    cookie: JInt,
) -> JLong {
    guard(0, || {
        // SAFETY: the JVM passes this thread's JNIEnv to a native method.
        let (Some(env), Some(agent)) = (unsafe { Env::from_raw(raw) }, AGENT.get()) else {
            return 0;
        };
        let bound = agent.jvmti.thread_local(std::ptr::null_mut());
        if bound.is_null() || !env.is_same_object(bound, state) {
            return 0;
        }
        // A global reference points at its cell, which holds an 8-byte address and so is
        // 8-aligned; newer JDKs may tag the reference in its low bits.
        let cell = (bound as u64) & !7;
        let Ok(offset) = u64::try_from(cookie_offset) else {
            return 0;
        };
        // Read the way the sampler will: the cell, then the cookie in the object it names.
        // A mismatch (a JDK whose references are not cells, or the object moved between
        // the two reads) leaves the thread to a context slot.
        match read_u64(cell).and_then(|object| read_u32(object.wrapping_add(offset))) {
            Some(c) if c == cookie as u32 => i64::try_from(cell).unwrap_or(0),
            _ => 0,
        }
    })
}

fn read_u64(address: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_own(address, &mut b).then(|| u64::from_ne_bytes(b))
}

fn read_u32(address: u64) -> Option<u32> {
    let mut b = [0u8; 4];
    read_own(address, &mut b).then(|| u32::from_ne_bytes(b))
}

/// Reads this process's memory at `address` without faulting on a bad address: through
/// `process_vm_readv` on ourselves, which fails where a plain load would crash the JVM.
fn read_own(address: u64, out: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` is `out`, writable for its length; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    usize::try_from(n).is_ok_and(|n| n == out.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_memory_reads_and_bad_addresses_fail_without_faulting() {
        let v: u64 = 0x1234_5678_9abc_def0;
        let at = std::ptr::addr_of!(v) as u64;
        assert_eq!(read_u64(at), Some(v));
        assert_eq!(read_u32(at), Some(0x9abc_def0));
        assert_eq!(read_u64(0), None);
        assert_eq!(read_u64(8), None);
    }

    #[test]
    fn this_process_has_no_concurrent_mover() {
        assert_eq!(concurrent_mover(), None);
    }
}
