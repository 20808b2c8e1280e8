//! Off-CPU time of the joined JVMs' threads, from the scheduler's switch: at switch-out,
//! the thread's current context (read from its slot: `current` is still the thread
//! going out) and why it leaves; at switch-in, the time it was away, logged under that
//! context. Threads of other processes cost one `JP_JVM_PIDS` lookup going out and one
//! coming in (a small, hot map: the per-thread LRU map is only looked at for JVMs'
//! threads; an entry a JVM left behind when jpd let it go is evicted in time, and never
//! timed for another task, see `OffcpuStart::task`). The clock is read only for them.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_stack, bpf_probe_read_kernel},
    macros::raw_tracepoint,
    maps::{Array, LruHashMap, PerCpuArray},
    programs::RawTracePointContext,
    EbpfContext as _,
};
use jp_common::{maps, offcpu_reason, OffcpuCpu, OffcpuRecord, ProbeConfig};

use crate::common::{
    config, cpu_slot, current_context, jp_map, now_ns, row_slot, this_cpu, MMAPABLE,
};
use crate::sampler::{JP_JVM_PIDS, JP_JVM_THREADS};

/// `TASK_RUNNING`: a thread switched out in this state was preempted, not blocked.
const TASK_RUNNING: u64 = 0;
/// `TASK_DEAD` and `EXIT_DEAD | EXIT_ZOMBIE`: the thread's last switch-out; it never
/// comes back, so nothing is remembered for it.
const TASK_GONE: u64 = 0x80 | 0x10 | 0x20;
/// Kernel frames read at switch-out: the tracing frames, `__schedule`, `schedule` and its
/// wrappers, then the function the thread blocked in.
const STACK_DEPTH: usize = 12;

/// A joined thread off CPU: what its switch-in needs.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct OffcpuStart {
    pub at_ns: u64,
    /// The `task_struct` that went out: a switch-in of another task with the same ids
    /// (a thread id reused) is not timed from it.
    pub task: u64,
    pub stream: u64,
    pub reason: u64,
    /// The slot's word, whole (a carrier's names the mounted virtual thread: jpd reads it).
    pub id: u64,
}

jp_map!(
    /// Joined threads off CPU now, by `pid_tgid`. LRU: an entry whose switch-in never
    /// came (the program detached in between) is reused, never a full map.
    JP_OFFCPU_START: LruHashMap<u64, OffcpuStart> = maps::OFFCPU_START, 0
);

jp_map!(
    /// Counters and the log's write position, one value per CPU number.
    JP_OFFCPU_CPUS: Array<OffcpuCpu> = maps::OFFCPU_CPUS, MMAPABLE
);

jp_map!(
    /// Off-CPU periods, a log per CPU (as `JP_CTX_LOG`, and for its reasons: one slot
    /// written per switch-in, no lock shared between CPUs as a ring buffer's reserve
    /// takes), drained by jpd every pass.
    JP_OFFCPU_LOG: Array<OffcpuRecord> = maps::OFFCPU_LOG, MMAPABLE
);

jp_map!(
    /// Scratch space for the kernel stack at switch-out.
    JP_OFFCPU_TRACE: PerCpuArray<[u64; STACK_DEPTH]> = maps::OFFCPU_TRACE, 0
);

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
//          unsigned int prev_state)
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn jp_offcpu(ctx: RawTracePointContext) -> i32 {
    let cfg = config();
    switch_out(&ctx, &cfg);
    let next: u64 = ctx.arg(2);
    switch_in(&cfg, next);
    0
}

#[inline(always)]
fn switch_out(ctx: &RawTracePointContext, cfg: &ProbeConfig) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: a plain lookup; the value is only compared against None.
    if unsafe { JP_JVM_PIDS.get(&tgid) }.is_none() {
        return;
    }
    let state: u64 = ctx.arg(3);
    if state & TASK_GONE != 0 {
        return;
    }
    // SAFETY: the value is copied out at once; jpd may replace it, never frees it under us.
    let Some(thread) = (unsafe { JP_JVM_THREADS.get(&pid_tgid) }).copied() else {
        return;
    };
    let Some(counters) = cpu_slot(&JP_OFFCPU_CPUS) else {
        return;
    };
    // SAFETY: this CPU's value; switch programs do not nest on one CPU (the scheduler
    // runs them with interrupts off), and only they write it.
    let counters = unsafe { &mut *counters };
    let now = now_ns();
    if !within_cap(counters, cfg, now) {
        return;
    }
    let Some(id) = current_context(&thread) else {
        counters.read_failed += 1;
        return;
    };
    let preempt: u64 = ctx.arg(0);
    let reason = if preempt & 1 != 0 || state == TASK_RUNNING {
        offcpu_reason::RUN_QUEUE
    } else {
        blocked_in(ctx, cfg)
    };
    // The word goes whole: a carrier's names the mounted virtual thread in its high half,
    // which jpd reads as it reads a CPU sample's (one place, one reading).
    let start = OffcpuStart {
        at_ns: now,
        task: ctx.arg(1),
        stream: thread.stream,
        reason,
        id,
    };
    // An LRU insert does not fail for want of room.
    let _ = JP_OFFCPU_START.insert(&pid_tgid, &start, 0);
}

/// Whether one more switch-out may be accounted on this CPU in this second.
#[inline(always)]
fn within_cap(counters: &mut OffcpuCpu, cfg: &ProbeConfig, now: u64) -> bool {
    if now.wrapping_sub(counters.window_start_ns) >= 1_000_000_000 {
        counters.window_start_ns = now;
        counters.window_count = 0;
    }
    if counters.window_count >= u64::from(cfg.offcpu_cap_per_cpu) {
        counters.over_cap += 1;
        return false;
    }
    counters.window_count += 1;
    true
}

/// The kernel function the current thread blocked in: the first frame of its kernel
/// stack past the scheduler's own functions (the sched text section), as `wchan`.
#[inline(always)]
fn blocked_in(ctx: &RawTracePointContext, cfg: &ProbeConfig) -> u64 {
    let Some(trace) = JP_OFFCPU_TRACE.get_ptr_mut(0) else {
        return offcpu_reason::UNKNOWN;
    };
    // SAFETY: this CPU's scratch slot, STACK_DEPTH u64s long; the helper writes at most
    // the size passed; switch programs do not nest on one CPU.
    let trace = unsafe { &mut *trace };
    let size = (STACK_DEPTH * 8) as u32;
    // SAFETY: as above; flags 0 = kernel stack, no frames skipped.
    let bytes = unsafe { bpf_get_stack(ctx.as_ptr(), trace.as_mut_ptr().cast(), size, 0) };
    if bytes <= 0 {
        return offcpu_reason::UNKNOWN;
    }
    let frames = (bytes as usize / 8).min(STACK_DEPTH);
    let mut in_sched = false;
    for i in 0..STACK_DEPTH {
        if i >= frames {
            break;
        }
        let a = trace.get(i).copied().unwrap_or(0);
        let sched = a >= cfg.sched_text_start && a < cfg.sched_text_end;
        if sched {
            in_sched = true;
        } else if in_sched {
            return a;
        }
    }
    offcpu_reason::UNKNOWN
}

#[inline(always)]
fn switch_in(cfg: &ProbeConfig, next: u64) {
    // SAFETY: reads 8 bytes of the `task_struct` the scheduler hands us (`pid` and the
    // `tgid` after it); the helper fails safely on a bad address.
    let read = unsafe {
        bpf_probe_read_kernel(next.wrapping_add(u64::from(cfg.task_pid_off)) as *const u64)
    };
    let pid_tgid = read.unwrap_or(0);
    if pid_tgid as u32 == 0 {
        return;
    }
    // In memory the pid comes first: as a u64, `tgid << 32 | pid` as the helpers give it.
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: a plain lookup; the value is only compared against None.
    if unsafe { JP_JVM_PIDS.get(&tgid) }.is_none() {
        return;
    }
    // SAFETY: the value is copied out at once.
    let Some(start) = (unsafe { JP_OFFCPU_START.get(&pid_tgid) }).copied() else {
        count_orphan(pid_tgid);
        return;
    };
    let now = now_ns();
    let _ = JP_OFFCPU_START.remove(&pid_tgid);
    let Some(counters) = cpu_slot(&JP_OFFCPU_CPUS) else {
        return;
    };
    // SAFETY: see `switch_out`.
    let counters = unsafe { &mut *counters };
    if start.task != next || now < start.at_ns {
        counters.stale += 1;
        return;
    }
    let record = OffcpuRecord {
        tgid: (pid_tgid >> 32) as u32,
        _pad: 0,
        id: start.id,
        stream: start.stream,
        ns: now - start.at_ns,
        reason: start.reason,
    };
    log_record(cfg.offcpu_log_mask, counters, &record);
}

/// A thread of a joined JVM switched in without its switch-out: counted if it is joined.
#[inline(always)]
fn count_orphan(pid_tgid: u64) {
    // SAFETY: a plain lookup, only compared against None.
    let joined = unsafe { JP_JVM_THREADS.get(&pid_tgid).is_some() };
    if !joined {
        return;
    }
    if let Some(counters) = cpu_slot(&JP_OFFCPU_CPUS) {
        // SAFETY: see `switch_out`.
        unsafe { (*counters).orphans += 1 };
    }
}

/// Writes `record` to this CPU's next slot of `JP_OFFCPU_LOG`, then moves the position.
#[inline(always)]
fn log_record(mask: u32, counters: &mut OffcpuCpu, record: &OffcpuRecord) {
    let n = counters.logged;
    let Some(slot) = row_slot(
        &JP_OFFCPU_LOG,
        this_cpu(),
        mask.wrapping_add(1),
        n as u32 & mask,
    ) else {
        return;
    };
    // SAFETY: a slot of this CPU's part of the log, written only here, on this CPU.
    // Volatile, so that the slot is written before the position that publishes it.
    unsafe {
        core::ptr::write_volatile(slot, *record);
        core::ptr::write_volatile(&mut counters.logged, n.wrapping_add(1));
    }
}
