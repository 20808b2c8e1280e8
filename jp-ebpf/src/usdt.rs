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
use aya_ebpf::{
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid,
        generated::{bpf_probe_read_kernel, bpf_probe_read_user, bpf_ringbuf_output},
    },
    macros::uprobe,
    maps::{HashMap, PerCpuArray},
    programs::ProbeContext,
    EbpfContext,
};
use jp_common::maps;
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
fn report(status: u32, len: u64) {
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
        &header as *const EventHeader as *const u8,
        EVENT_HEADER_LEN as u64,
    );
}

/// `bpf_ringbuf_output` of `len` bytes at `data`, counted.
#[inline(always)]
fn send(data: *const u8, len: u64) {
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
    } else {
        bump(&JP_USDT_STATS, usdt_stat::SENT);
    }
}

#[uprobe]
pub fn jp_usdt_record(ctx: ProbeContext) -> u32 {
    bump(&JP_USDT_STATS, usdt_stat::FIRED);
    // SAFETY: the context is the probe's `pt_regs`, as the helper expects.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    // SAFETY: the value is only read; jpd writes a spec before attaching with its
    // cookie and never changes it while attached.
    let Some(spec) = (unsafe { JP_USDT_SPECS.get(&cookie) }) else {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        report(EVENT_FAULT, 0);
        return 0;
    };
    let Ok((addr, len)) = probe_args(&ctx, spec) else {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        report(EVENT_FAULT, 0);
        return 0;
    };
    if len > MAX_RECORD as u64 {
        bump(&JP_USDT_STATS, usdt_stat::TOO_LONG);
        report(EVENT_TOO_LONG, len);
        return 0;
    }
    let Some(scratch) = JP_USDT_SCRATCH.get_ptr_mut(0) else {
        bump(&JP_USDT_STATS, usdt_stat::FAULT);
        report(EVENT_FAULT, len);
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
        report(EVENT_FAULT, len);
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
        report(EVENT_FAULT, len);
        return 0;
    }
    // SAFETY: the header fits at the start of `buf` (SCRATCH_LEN > EVENT_HEADER_LEN);
    // unaligned write since `buf` is a byte array.
    unsafe { core::ptr::write_unaligned(buf.as_mut_ptr().cast::<EventHeader>(), header) };
    send(buf.as_ptr(), EVENT_HEADER_LEN as u64 + u64::from(n));
    *busy = 0;
    0
}
