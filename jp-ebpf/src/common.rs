//! Helpers shared by the probe families: configuration, counters, histograms.
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        generated::bpf_probe_read_user,
    },
    maps::{Array, PerCpuArray, PerCpuHashMap},
    Global,
};
use jp_common::{
    mode, CpuModes, JvmThread, ProbeConfig, TextBlock, TEXT_BLOCK_BUCKETS, TEXT_PAGE_BUCKETS,
};

/// `BPF_F_MMAPABLE`: jpd maps the core-text counters instead of reading them by syscall.
pub const MMAPABLE: u32 = 1 << 10;

/// Declares one of jp's maps as its `jp_common::maps` spec says, with the spec's size
/// and under the spec's name. aya's `#[map]` exports a static under its identifier (its
/// `name = "…"` takes only a literal, not a constant), so the identifier is checked
/// against the spec's name at compile time: a map jpd would not find does not build.
///
/// `jp_map!(/// doc… JP_NAME: Type = maps::SPEC, flags);` for maps sized in entries,
/// `jp_map!(/// doc… ring JP_NAME = maps::SPEC, flags);` for a ring buffer (in bytes).
macro_rules! jp_map {
    ($(#[$attr:meta])* $vis:vis $name:ident: $ty:ty = $spec:expr, $flags:expr) => {
        const _: () = assert!(
            $spec.is_named(stringify!($name)),
            "the static's identifier differs from its jp_common::maps name"
        );
        $(#[$attr])*
        #[aya_ebpf::macros::map]
        $vis static $name: $ty = <$ty>::with_max_entries($spec.max_entries, $flags);
    };
    ($(#[$attr:meta])* ring $name:ident = $spec:expr, $flags:expr) => {
        const _: () = assert!(
            $spec.is_named(stringify!($name)),
            "the static's identifier differs from its jp_common::maps name"
        );
        $(#[$attr])*
        #[aya_ebpf::macros::map]
        static $name: aya_ebpf::maps::RingBuf =
            aya_ebpf::maps::RingBuf::with_byte_size($spec.max_entries, $flags);
    };
}
pub(crate) use jp_map;

/// Set by jpd at load time (`EbpfLoader::override_global`); see `ProbeConfig`.
#[unsafe(no_mangle)]
pub static JP_CONFIG: Global<ProbeConfig> = Global::new(ProbeConfig::ZERO);

#[inline(always)]
pub fn config() -> ProbeConfig {
    JP_CONFIG.load()
}

/// Adds one to this CPU's slot `idx` of a counter array.
#[inline(always)]
pub fn bump(counters: &PerCpuArray<u64>, idx: u32) -> u64 {
    match counters.get_ptr_mut(idx) {
        Some(p) => {
            // SAFETY: the pointer is this CPU's slot of a per-CPU array, valid for the
            // program's run; only this program family writes this slot on this CPU and
            // such programs do not nest on one CPU, so the read-modify-write is not torn.
            unsafe {
                *p += 1;
                *p
            }
        }
        None => 0,
    }
}

/// This CPU's value of an array with one value per CPU (`jp_common::CpuModes` says
/// why jpd maps those instead of reading per-CPU maps).
#[inline(always)]
pub fn cpu_slot<T>(slots: &Array<T>) -> Option<*mut T> {
    slots.get_ptr_mut(this_cpu())
}

/// The number of the CPU the program runs on.
#[inline(always)]
pub fn this_cpu() -> u32 {
    // SAFETY: bpf_get_smp_processor_id takes no arguments and cannot fail.
    unsafe { bpf_get_smp_processor_id() }
}

/// Value `i` of CPU `cpu`'s row in an array with `row` values per CPU, CPU after CPU
/// (`JP_IRQ_LINES`, `JP_CTX_LOG`); `None` past the array's end.
#[inline(always)]
pub fn row_slot<T>(values: &Array<T>, cpu: u32, row: u32, i: u32) -> Option<*mut T> {
    values.get_ptr_mut(cpu.checked_mul(row)?.checked_add(i)?)
}

/// Adds one to mode counter `idx` of this CPU; returns its new value (0 if the array
/// has no slot for this CPU, which jpd sizes it never to lack).
#[inline(always)]
pub fn count_mode(modes: &Array<CpuModes>, idx: u32) -> u64 {
    let Some(p) = cpu_slot(modes) else {
        return 0;
    };
    // SAFETY: this CPU's value, valid for the program's run; only this program family
    // writes it, only on this CPU, and such programs do not nest on one CPU, so the
    // read-modify-write is not torn. jpd reads it through its mapping, and an aligned
    // u64 store is seen whole.
    let Some(c) = unsafe { &mut (*p).counts }.get_mut(idx as usize) else {
        return 0;
    };
    *c += 1;
    *c
}

/// Adds one to `key`'s count on this CPU. Returns false when the sample could not be
/// recorded (the map is full).
#[inline(always)]
pub fn hist_add<K>(map: &PerCpuHashMap<K, u64>, key: &K) -> bool {
    if let Some(p) = map.get_ptr_mut(key) {
        // SAFETY: this CPU's value slot, see `bump`. Entries are never deleted, so the
        // preallocated element cannot be reused under us.
        unsafe { *p += 1 };
        return true;
    }
    if map.insert(key, 1u64, u64::from(BPF_NOEXIST)).is_ok() {
        return true;
    }
    // Another CPU may have created the key between our lookup and insert (EEXIST);
    // our own slot of it is then zero and ours to increment.
    match map.get_ptr_mut(key) {
        Some(p) => {
            // SAFETY: as above.
            unsafe { *p += 1 };
            true
        }
        None => false,
    }
}

/// readprofile's array for core text: one counter per bucket (see
/// `jp_common::TEXT_BLOCK_BUCKETS`), plus one dirty flag per page of counters that jpd
/// clears when it has read the page. Both arrays are sized by jpd at load time.
pub struct TextCounters {
    pub counts: &'static Array<TextBlock>,
    pub dirty: &'static Array<u64>,
}

impl TextCounters {
    /// Adds one to `bucket`. False if the bucket is beyond the arrays (they are sized
    /// from the same `_stext`/`_etext` as `cfg`, so only if jpd sized them wrong).
    #[inline(always)]
    fn add(&self, bucket: u32) -> bool {
        let Some(block) = self.counts.get_ptr_mut(bucket / TEXT_BLOCK_BUCKETS) else {
            return false;
        };
        // SAFETY: `block` points into the array's value memory, valid for the program's
        // run; other CPUs and jpd (through its mapping) access the same u32s, so it is
        // only ever touched atomically.
        let slot = unsafe { &mut *block }.get_mut((bucket % TEXT_BLOCK_BUCKETS) as usize);
        let Some(slot) = slot else {
            return false;
        };
        // The BPF target has no `AtomicU32`, but BPF has a 32-bit atomic add (readprofile
        // counts in 32 bits too, and jpd diffs with wrapping arithmetic).
        // SAFETY: `slot` is a valid, 4-byte aligned u32 (see above).
        unsafe { atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(slot, 1) };
        // Read before writing: a hot page's flag stays set, so its cache line is not
        // bounced between CPUs on every sample. jpd clears it with an atomic exchange
        // before reading the page, so an increment after that read sets it again.
        if let Some(flag) = self.dirty.get_ptr_mut(bucket / TEXT_PAGE_BUCKETS) {
            // SAFETY: the flag's u64 in the dirty array's value memory.
            unsafe {
                if core::ptr::read_volatile(flag) == 0 {
                    core::ptr::write_volatile(flag, 1);
                }
            }
        }
        true
    }
}

/// A kernel IP goes to the readprofile array if it is in core text, else to the
/// exact-address map (modules, BPF JIT, trampolines) so that user space can symbolize
/// it. `modes` counts the second kind (`mode::OTHER_IPS`, after the map is written:
/// jpd reads the map only when it moved), the samples that could not be recorded
/// (`mode::LOST`) and, last, every kernel sample (`mode::KERNEL`); returns this CPU's
/// lost count when this one was lost, else 0.
#[inline(always)]
pub fn record_kernel_ip(
    cfg: &ProbeConfig,
    ip: u64,
    text: &TextCounters,
    others: &PerCpuHashMap<u64, u64>,
    modes: &Array<CpuModes>,
) -> u64 {
    let recorded = if ip >= cfg.text_start && ip < cfg.text_end {
        let bucket = ((ip - cfg.text_start) >> (cfg.shift & 63)) as u32;
        text.add(bucket)
    } else {
        let added = hist_add(others, &ip);
        if added {
            count_mode(modes, mode::OTHER_IPS);
        }
        added
    };
    // A plain 0, not an `Option`: LLVM may compute on an `Option`'s payload before
    // testing it, and the verifier refuses the pointer left in that register.
    let lost = if recorded {
        0
    } else {
        count_mode(modes, mode::LOST)
    };
    // Counted after it is recorded: jpd reads the mode counters before the
    // histograms, so every sample in its kernel count is already in a histogram.
    count_mode(modes, mode::KERNEL);
    lost
}

/// The idle task is pid 0 (one "swapper" per CPU).
#[inline(always)]
pub fn in_idle_task() -> bool {
    bpf_get_current_pid_tgid() as u32 == 0
}

/// x86-64: the interrupted context was user mode if the low two bits of CS (the
/// privilege level) are non-zero.
#[inline(always)]
pub fn user_mode(cs: u64) -> bool {
    cs & 3 != 0
}

/// True for 1, 2, 4, 8…: used to rate-limit log messages on rare paths.
#[inline(always)]
pub fn power_of_two(n: u64) -> bool {
    n != 0 && n & (n - 1) == 0
}

/// Monotonic time (ns).
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: bpf_ktime_get_ns takes no arguments and cannot fail.
    unsafe { bpf_ktime_get_ns() }
}

/// The current thread's current context id, from its context slot or from the
/// object on the JVM's heap that keeps it (`JvmThread`); None if a read fails or the
/// object's cookie is not the thread's (the collector moved it and gave its old place to
/// something else: the thread's context is then unknown, never taken from garbage).
/// A slot is read as a word: a carrier's names in its high half the stream of the virtual
/// thread mounted on it (`CtxKey::id`), a platform thread's holds 0 there.
#[inline(always)]
pub fn current_context(t: &JvmThread) -> Option<u64> {
    if t.current_offset == 0 {
        return read_user::<u64>(t.slot);
    }
    let object = read_user::<u64>(t.slot)?;
    if object == 0 {
        // The thread's reference was deleted: it has ended its tree and is leaving, like a
        // thread whose slot went back to the pool reading its root.
        return Some(0);
    }
    let (current, cookie) = if t.cookie_offset == t.current_offset.wrapping_add(4) {
        // Side by side (the agent lays them out so): one read.
        let both = read_user::<u64>(object.wrapping_add(u64::from(t.current_offset)))?;
        (both as u32, (both >> 32) as u32)
    } else {
        (
            read_user::<u32>(object.wrapping_add(u64::from(t.current_offset)))?,
            read_user::<u32>(object.wrapping_add(u64::from(t.cookie_offset)))?,
        )
    };
    (cookie == t.cookie).then_some(u64::from(current))
}

/// A `T` read from the current process's memory at `address`.
#[inline(always)]
pub fn read_user<T: Copy + Default>(address: u64) -> Option<T> {
    let mut v = T::default();
    // SAFETY: writes at most size_of::<T>() bytes into `v`; the source is the
    // interrupted process's memory, which the helper reads safely (a fault returns an
    // error, and `v` is then not used).
    let ret = unsafe {
        bpf_probe_read_user(
            (&mut v as *mut T).cast(),
            core::mem::size_of::<T>() as u32,
            address as *const _,
        )
    };
    (ret >= 0).then_some(v)
}
