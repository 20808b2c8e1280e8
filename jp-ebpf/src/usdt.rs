//! The USDT record probe `jp:record(addr, len)` of `libjpagent.so`, the JVM agent's record stream.
//!
//! jpd attaches `jp_usdt_record` to every copy of the probe with an attach cookie that
//! selects the probe site's argument spec in `JP_USDT_SPECS` (the compiler chooses the
//! registers, so the spec differs per build of the library). The program evaluates
//! the spec as libbpf's `usdt.bpf.h` does (`jp_common::usdt::UsdtArg::fetch`), copies
//! the record from the traced process into a per-CPU scratch buffer behind a
//! kernel-filled `EventHeader`, and hands header and record to user space through the
//! ring buffer `JP_USDT_EVENTS`. Nothing the traced process controls is trusted: the
//! length is bounded, a read failure becomes an `EVENT_FAULT` event.
//!
//! The ring is shared by every process on the host, so each process gets a share
//! (`jp_common::ring`): outside jpd's allow-lists it gets nothing, and over its rate
//! its events are dropped here, before any copy, and counted against it. Its losses to
//! a full ring are counted against it too, so that jpd asks only that process to
//! re-send.
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_current_uid_gid,
        generated::{
            bpf_get_current_ancestor_cgroup_id, bpf_probe_read_kernel, bpf_probe_read_user,
            bpf_ringbuf_output,
        },
    },
    macros::uprobe,
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::ProbeContext,
    EbpfContext,
};
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use jp_common::maps;
use jp_common::ring::{allow, ProcessRing, RingLimits, MAX_CGROUP_LEVELS};
use jp_common::usdt::{x86_64_reg, UnknownArgKind, UsdtSpec};
use jp_common::wire::{
    usdt_stat, EventHeader, EVENT_FAULT, EVENT_HEADER_LEN, EVENT_OK, EVENT_TOO_LONG, MAX_RECORD,
};

use crate::common::{bump, jp_map, now_ns};

jp_map!(
    /// Attach cookie → argument spec of that probe site (written by jpd before attaching).
    JP_USDT_SPECS: HashMap<u64, UsdtSpec> = maps::USDT_SPECS, 0
);

jp_map!(
    /// `jp_common::wire::usdt_stat` counters.
    JP_USDT_STATS: PerCpuArray<u64> = maps::USDT_STATS, 0
);

jp_map!(
    /// Header + record, to user space. One page here: jpd sets the real size at load
    /// (`[usdt] ring_buffer_kib`), so that loading the object for the kernel collector
    /// does not pin megabytes nobody reads.
    ring JP_USDT_EVENTS = maps::USDT_EVENTS, 0
);

const SCRATCH_LEN: usize = EVENT_HEADER_LEN + MAX_RECORD;

/// The copy buffer: 16 KiB do not fit on the 512-byte BPF stack.
#[repr(C)]
pub struct Scratch {
    /// Non-zero while a program on this CPU uses `buf` (see `jp_usdt_record`).
    busy: u64,
    buf: [u8; SCRATCH_LEN],
}

jp_map!(JP_USDT_SCRATCH: PerCpuArray<Scratch> = maps::USDT_SCRATCH, 0);

jp_map!(
    /// The rate and the allow-lists in force (written by jpd before attaching).
    JP_USDT_LIMITS: Array<RingLimits> = maps::USDT_LIMITS, 0
);

jp_map!(
    /// Each process's token bucket and losses, by tgid.
    JP_USDT_PROCS: LruHashMap<u32, ProcessRing> = maps::USDT_PROCS, 0
);

jp_map!(
    /// The uids listened to, when `RingLimits::allow` has `allow::UIDS`.
    JP_USDT_ALLOW_UIDS: HashMap<u32, u8> = maps::USDT_ALLOW_UIDS, 0
);

jp_map!(
    /// The cgroups listened to, when `RingLimits::allow` has `allow::CGROUPS`.
    JP_USDT_ALLOW_CGROUPS: HashMap<u64, u8> = maps::USDT_ALLOW_CGROUPS, 0
);

/// Adds one to a count of a process's entry, which threads of the process on other
/// CPUs update at the same time.
#[inline(always)]
fn add_one(count: *mut u64) {
    // SAFETY: `count` is a field of a live `JP_USDT_PROCS` value (non-null, aligned);
    // the add is atomic, so concurrent updates are not lost.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(count, 1) };
}

/// Whether the current process is inside the allow-lists in force.
#[inline(always)]
fn allowed(limits: &RingLimits) -> bool {
    if limits.allow & allow::UIDS != 0 {
        let uid = bpf_get_current_uid_gid() as u32;
        // SAFETY: the value is only tested for presence.
        if unsafe { JP_USDT_ALLOW_UIDS.get(&uid) }.is_none() {
            return false;
        }
    }
    if limits.allow & allow::CGROUPS != 0 {
        // The process's cgroup or any cgroup above it: an allowed cgroup covers the
        // ones below (a pod's containers, a service's sub-scopes).
        let mut level = 0;
        let mut found = false;
        while level < MAX_CGROUP_LEVELS {
            // SAFETY: takes an integer, returns 0 past the process's own level.
            let id = unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) };
            if id == 0 {
                break;
            }
            // SAFETY: the value is only tested for presence.
            if unsafe { JP_USDT_ALLOW_CGROUPS.get(&id) }.is_some() {
                found = true;
                break;
            }
            level += 1;
        }
        if !found {
            return false;
        }
    }
    true
}

/// The process's entry in `JP_USDT_PROCS`, created with a full bucket if it has none;
/// null only if the map refuses it.
#[inline(always)]
fn process_entry(tgid: u32) -> *mut ProcessRing {
    if let Some(p) = JP_USDT_PROCS.get_ptr_mut(&tgid) {
        return p;
    }
    let fresh = ProcessRing::default();
    // Another CPU may have created it meanwhile (EEXIST): then that one is used.
    let _ = JP_USDT_PROCS.insert(&tgid, &fresh, u64::from(BPF_NOEXIST));
    JP_USDT_PROCS
        .get_ptr_mut(&tgid)
        .unwrap_or(core::ptr::null_mut())
}

/// Whether the process is within its rate for this event. An event over it is
/// counted (globally and against the process) and nothing is written to the ring, not
/// even a header.
#[inline(always)]
fn within_rate(process: *mut ProcessRing, limits: &RingLimits) -> bool {
    if limits.event_cost_ns == 0 || process.is_null() {
        return true;
    }
    // SAFETY: a live map value (non-null checked). Threads of the process on other
    // CPUs may update `next_ns` at the same time: a lost update moves the bucket by one
    // event's cost at most per CPU, which the rate can afford; the counts are atomic.
    let next = unsafe { core::ptr::read_volatile(&(*process).next_ns) };
    match ProcessRing::admit(next, now_ns(), limits) {
        Some(next) => {
            // SAFETY: as above.
            unsafe { core::ptr::write_volatile(&mut (*process).next_ns, next) };
            true
        }
        None => {
            bump(&JP_USDT_STATS, usdt_stat::RATE_LIMITED);
            // SAFETY: as above.
            add_one(unsafe { &mut (*process).rate_limited });
            false
        }
    }
}

/// Why an argument could not be fetched (reported as a fault).
struct Fault;

impl From<UnknownArgKind> for Fault {
    fn from(_: UnknownArgKind) -> Fault {
        Fault
    }
}

/// Register slot `idx` of the probed thread's `pt_regs`.
#[inline(always)]
fn reg(ctx: *const u64, idx: u16) -> Result<u64, Fault> {
    if idx >= x86_64_reg::COUNT {
        return Err(Fault);
    }
    let mut value: u64 = 0;
    // SAFETY: reads 8 bytes into `value`; the source is slot `idx` of the context's
    // `pt_regs` (idx checked above), read through the helper because the verifier
    // refuses loads through a context pointer moved by a run-time offset.
    let ret = unsafe {
        bpf_probe_read_kernel(
            (&mut value as *mut u64).cast(),
            8,
            ctx.wrapping_add(usize::from(idx)).cast(),
        )
    };
    if ret < 0 {
        Err(Fault)
    } else {
        Ok(value)
    }
}

/// `size` bytes (1, 2, 4 or 8; anything else reads 8) of the traced process at `addr`,
/// little-endian, zero-extended.
#[inline(always)]
fn user_word(addr: u64, size: u8) -> Result<u64, Fault> {
    let mut value: u64 = 0;
    let n: u32 = match size {
        1 => 1,
        2 => 2,
        4 => 4,
        _ => 8,
    };
    // SAFETY: reads at most 8 bytes into `value`, which is 8 bytes; the source is user
    // memory, which the helper reads safely (a fault returns an error).
    let ret = unsafe { bpf_probe_read_user((&mut value as *mut u64).cast(), n, addr as *const _) };
    if ret < 0 {
        Err(Fault)
    } else {
        Ok(value)
    }
}

/// The probe's `(addr, len)`.
#[inline(always)]
fn probe_args(ctx: &ProbeContext, spec: &UsdtSpec) -> Result<(u64, u64), Fault> {
    if spec.arg_count < 2 {
        return Err(Fault);
    }
    let regs = ctx.as_ptr() as *const u64;
    let addr = spec.args[0].fetch(|i| reg(regs, i), user_word)?;
    let len = spec.args[1].fetch(|i| reg(regs, i), user_word)?;
    Ok((addr, len))
}

/// Outputs a header-only event (`status` says why nothing follows).
#[inline(always)]
fn report(process: *mut ProcessRing, status: u32, len: u64) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let header = EventHeader {
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        ktime_ns: now_ns(),
        len: if len > u64::from(u32::MAX) {
            u32::MAX
        } else {
            len as u32
        },
        status,
    };
    send(
        process,
        &header as *const EventHeader as *const u8,
        EVENT_HEADER_LEN as u64,
    );
}

/// `bpf_ringbuf_output` of `len` bytes at `data`, counted (also against the process,
/// when it has an entry).
#[inline(always)]
fn send(process: *mut ProcessRing, data: *const u8, len: u64) {
    // SAFETY: `data` points to at least `len` readable bytes (a stack header or the
    // scratch buffer with a verifier-bounded length); the map is a ring buffer.
    let ret = unsafe {
        bpf_ringbuf_output(
            core::ptr::addr_of!(JP_USDT_EVENTS) as *mut _,
            data as *mut _,
            len,
            0,
        )
    };
    if ret < 0 {
        bump(&JP_USDT_STATS, usdt_stat::RING_FULL);
        if !process.is_null() {
            // SAFETY: a live map value (non-null checked).
            add_one(unsafe { &mut (*process).ring_full });
        }
    } else {
        bump(&JP_USDT_STATS, usdt_stat::SENT);
        if !process.is_null() {
            // SAFETY: as above.
            add_one(unsafe { &mut (*process).sent });
        }
    }
}

#[uprobe]
pub fn jp_usdt_record(ctx: ProbeContext) -> u32 {
    bump(&JP_USDT_STATS, usdt_stat::FIRED);
    let limits = match JP_USDT_LIMITS.get(0) {
        Some(l) => *l,
        None => RingLimits::default(),
    };
    // Outside the allow-lists: not even an entry in the process map.
    if limits.allow != 0 && !allowed(&limits) {
        bump(&JP_USDT_STATS, usdt_stat::NOT_ALLOWED);
        return 0;
    }
    let process = process_entry((bpf_get_current_pid_tgid() >> 32) as u32);
    if !within_rate(process, &limits) {
        return 0;
    }
    // SAFETY: the context is the probe's `pt_regs`, as the helper expects.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    // SAFETY: the value is only read; jpd writes a spec before attaching with its
    // cookie and never changes it while attached.
    let Some(spec) = (unsafe { JP_USDT_SPECS.get(&cookie) }) else {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        report(process, EVENT_FAULT, 0);
        return 0;
    };
    let Ok((addr, len)) = probe_args(&ctx, spec) else {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        report(process, EVENT_FAULT, 0);
        return 0;
    };
    if len > MAX_RECORD as u64 {
        bump(&JP_USDT_STATS, usdt_stat::TOO_LONG);
        report(process, EVENT_TOO_LONG, len);
        return 0;
    }
    let Some(scratch) = JP_USDT_SCRATCH.get_ptr_mut(0) else {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        report(process, EVENT_FAULT, len);
        return 0;
    };
    // Uprobe programs run with migration, not preemption, disabled: on a preemptible
    // kernel another probe hit may run on this CPU while we copy. It must not reuse the
    // buffer: it reports its record as lost (a fault; the sequence gap makes jpd ask
    // for a re-send) instead of mixing its bytes into ours.
    // SAFETY: this CPU's slot of a per-CPU array, valid while the program runs.
    let busy = unsafe { &mut (*scratch).busy };
    if *busy != 0 {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        report(process, EVENT_FAULT, len);
        return 0;
    }
    *busy = 1;
    // `len` is at most MAX_RECORD here; the mask restates it in a form the verifier
    // tracks through to the helper's size argument.
    let n = len as u32 & (2 * MAX_RECORD as u32 - 1);
    let n = if n > MAX_RECORD as u32 { 0 } else { n };
    // SAFETY: as above.
    let buf = unsafe { &mut (*scratch).buf };
    let pid_tgid = bpf_get_current_pid_tgid();
    let header = EventHeader {
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        ktime_ns: now_ns(),
        len: n,
        status: EVENT_OK,
    };
    // SAFETY: `n` ≤ MAX_RECORD bytes are written after the header, inside `buf`; the
    // source is user memory, which the helper reads safely.
    let ret = unsafe {
        bpf_probe_read_user(
            buf.as_mut_ptr().add(EVENT_HEADER_LEN).cast(),
            n,
            addr as *const _,
        )
    };
    if ret < 0 {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        *busy = 0;
        report(process, EVENT_FAULT, len);
        return 0;
    }
    // SAFETY: the header fits at the start of `buf` (SCRATCH_LEN > EVENT_HEADER_LEN);
    // unaligned write since `buf` is a byte array.
    unsafe { core::ptr::write_unaligned(buf.as_mut_ptr().cast::<EventHeader>(), header) };
    send(
        process,
        buf.as_ptr(),
        EVENT_HEADER_LEN as u64 + u64::from(n),
    );
    *busy = 0;
    0
}
