//! Off-CPU time of the joined JVMs' threads, from the scheduler's switch: at switch-out,
//! the thread's current context (read from its slot: `current` is still the thread
//! going out) and why it leaves; at switch-in, the time it was away, logged under that
//! context.
//!
//! The program is a `tp_btf` program: its task arguments are typed pointers, so it reads
//! the tasks' ids with plain loads (no helper call) and keeps the switch-out's record in
//! the task itself (task-local storage, `JP_OFFCPU_TASKS`) rather than in a hash map keyed
//! by thread id. A switch of a process jpd does not track costs two loads and a bit test
//! (`JP_JVM_PID_BITS`, an array the verifier inlines) going out, the same coming in; a
//! tracked one costs no hash insert or delete, and no lock shared between CPUs. A blocked
//! thread's kernel stack is walked only when it blocks from another place than last time
//! (`blocked_reason`): the walk was most of a tracked switch's cost. A record cannot
//! outlive its task (the kernel frees a task's storage with the task, so a thread exiting
//! while off CPU leaves nothing behind) and cannot be taken for another task's (a reused
//! thread id is another task). docs/journal/off-cpu-switch-cost.md has the measurements
//! behind this design.
use core::ffi::c_void;

use aya_ebpf::{
    bindings::{bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE, pt_regs, task_struct, BPF_F_NO_PREALLOC},
    helpers::{
        bpf_get_stack,
        generated::{bpf_task_pt_regs, bpf_task_storage_get},
    },
    macros::{btf_map, btf_tracepoint},
    maps::{Array, PerCpuArray},
    programs::BtfTracePointContext,
    EbpfContext as _,
};
use jp_common::{maps, offcpu_reason, OffcpuCpu, OffcpuRecord, ProbeConfig};

use crate::common::{
    config, cpu_slot, current_context, jp_map, now_ns, row_slot, this_cpu, MMAPABLE,
};
use crate::sampler::JP_JVM_THREADS;

/// `TASK_RUNNING`: a thread switched out in this state was preempted, not blocked.
const TASK_RUNNING: u64 = 0;
/// `TASK_DEAD` and `EXIT_DEAD | EXIT_ZOMBIE`: the thread's last switch-out; it never
/// comes back, so nothing is remembered for it.
const TASK_GONE: u64 = 0x80 | 0x10 | 0x20;
/// Kernel frames read at switch-out: the tracing frames, `__schedule`, `schedule` and its
/// wrappers, then the function the thread blocked in.
const STACK_DEPTH: usize = 12;
/// `BPF_LOCAL_STORAGE_GET_F_CREATE`.
const STORAGE_CREATE: u64 = 1;

/// A joined thread's off-CPU state, kept in its task: what its switch-in needs.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct OffcpuStart {
    /// When it went out; 0 when no switch-out is pending (it is on CPU, or its last
    /// switch-out was not accounted).
    pub at_ns: u64,
    pub stream: u64,
    pub reason: u64,
    /// The slot's word, whole (a carrier's names the mounted virtual thread: jpd reads it).
    pub id: u64,
    /// The last kernel stack walk's result and where the thread was then (see
    /// `blocked_in`).
    pub walked: Walked,
}

/// Where a blocked thread entered the kernel (from its user registers: the instruction
/// and the system call, or the fault), in which context, and the kernel function it
/// blocked in then.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Walked {
    pub ip: u64,
    pub orig_ax: u64,
    pub id: u64,
    pub reason: u64,
}

/// A task-local storage map (`BPF_MAP_TYPE_TASK_STORAGE`), declared the way libbpf reads
/// a BTF map definition (aya-ebpf has none of this type): the kernel requires BTF for its
/// key and value, no preallocation and no size.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders that only describe the map in BTF; nothing reads
// or writes them.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        TaskStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// `task`'s value, created (zeroed) first if `create` and it has none; None if it has
    /// none (or it could not be created).
    #[inline(always)]
    fn get(&self, task: *mut task_struct, create: bool) -> Option<*mut T> {
        let flags = if create { STORAGE_CREATE } else { 0 };
        let map = core::ptr::from_ref(self).cast_mut().cast::<c_void>();
        // SAFETY: `task` is a BTF-typed task pointer of the tracepoint (the verifier
        // checks it); the helper returns this map's value of that task, or null.
        let p = unsafe { bpf_task_storage_get(map, task, core::ptr::null_mut(), flags) };
        (!p.is_null()).then_some(p.cast::<T>())
    }
}

/// Joined threads' off-CPU state, in their tasks.
#[btf_map]
static JP_OFFCPU_TASKS: TaskStorage<OffcpuStart> = TaskStorage::new();

const _: () = assert!(maps::OFFCPU_TASKS.is_named("JP_OFFCPU_TASKS"));

jp_map!(
    /// One bit per tgid (word `tgid / 64`), set for every JVM in `JP_JVM_PIDS` and maybe
    /// a few more: jpd sets a bit before the tgid enters `JP_JVM_PIDS` and clears it after
    /// it left. The switch-out's test of "is this process tracked": an array look-up the
    /// verifier inlines, where a hash look-up is a call and a hash.
    pub(crate) JP_JVM_PID_BITS: Array<u64> = maps::JVM_PID_BITS, 0
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
#[btf_tracepoint(function = "sched_switch")]
pub fn jp_offcpu(ctx: BtfTracePointContext) -> i32 {
    let cfg = config();
    switch_out(&ctx, &cfg);
    let next: *mut task_struct = ctx.arg(2);
    switch_in(&cfg, next);
    0
}

/// Whether `tgid`'s bit is set in `JP_JVM_PID_BITS`.
#[inline(always)]
fn pid_bit(tgid: u32) -> bool {
    JP_JVM_PID_BITS
        .get(tgid / 64)
        .is_some_and(|word| word & (1u64 << (tgid % 64)) != 0)
}

#[inline(always)]
fn switch_out(ctx: &BtfTracePointContext, cfg: &ProbeConfig) {
    let prev: *mut task_struct = ctx.arg(1);
    let pid_tgid = task_pid_tgid(cfg, prev);
    let tgid = (pid_tgid >> 32) as u32;
    if !pid_bit(tgid) {
        return;
    }
    let state: u64 = ctx.arg(3);
    if state & TASK_GONE != 0 {
        return;
    }
    // SAFETY: the value is copied out at once; jpd may replace it, never frees it under us.
    let Some(thread) = (unsafe { JP_JVM_THREADS.get(&pid_tgid) }).copied() else {
        // Not joined (now): whatever it left pending when it was is not timed.
        if let Some(start) = JP_OFFCPU_TASKS.get(prev, false) {
            // SAFETY: this task's value, touched only by switch programs (see below).
            unsafe { (*start).at_ns = 0 };
        }
        return;
    };
    let Some(counters) = cpu_slot(&JP_OFFCPU_CPUS) else {
        return;
    };
    // SAFETY: this CPU's value; switch programs do not nest on one CPU (the scheduler
    // runs them with interrupts off), and only they write it.
    let counters = unsafe { &mut *counters };
    // Created at the joined thread's first switch-out, freed with its task.
    let Some(start) = JP_OFFCPU_TASKS.get(prev, true) else {
        counters.read_failed += 1;
        return;
    };
    // SAFETY: this task's value: only switch programs touch it, the task's switch-out on
    // this CPU now and its switch-in later, never at once.
    let start = unsafe { &mut *start };
    let now = now_ns();
    if !within_cap(counters, cfg, now) {
        // Nothing pending: an older switch-out whose switch-in was not timed (its JVM was
        // let go meanwhile) is not timed from either.
        start.at_ns = 0;
        return;
    }
    let Some(id) = current_context(&thread) else {
        start.at_ns = 0;
        counters.read_failed += 1;
        return;
    };
    let preempt: u64 = ctx.arg(0);
    let reason = if preempt & 1 != 0 || state == TASK_RUNNING {
        offcpu_reason::RUN_QUEUE
    } else {
        blocked_reason(ctx, cfg, prev, id, &mut start.walked)
    };
    // The word goes whole: a carrier's names the mounted virtual thread in its high half,
    // which jpd reads as it reads a CPU sample's (one place, one reading).
    start.at_ns = now;
    start.stream = thread.stream;
    start.reason = reason;
    start.id = id;
}

/// Why the current thread blocks: the kernel function, from its kernel stack, or from the
/// thread's last walk when it entered the kernel the same way as then: the same user
/// instruction and system call (or fault), in the same context `id` (a thread parking in
/// one method, reading a socket in another, sleeping in a third). The walk is most of a
/// blocked switch-out's cost, and such a thread blocks in the same function every time.
/// (The call's first argument is left out of the key: a condition variable's futex
/// alternates between two words, and the cache would never hit.)
#[inline(always)]
fn blocked_reason(
    ctx: &BtfTracePointContext,
    cfg: &ProbeConfig,
    prev: *mut task_struct,
    id: u64,
    walked: &mut Walked,
) -> u64 {
    // SAFETY: `prev` is the tracepoint's typed task pointer; the helper returns its user
    // registers (typed: the verifier checks the loads against `pt_regs`).
    let regs = unsafe { bpf_task_pt_regs(prev) } as *const pt_regs;
    // SAFETY: as above.
    let (ip, orig_ax) = unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!((*regs).rip)),
            core::ptr::read_volatile(core::ptr::addr_of!((*regs).orig_rax)),
        )
    };
    let same = walked.ip == ip && walked.orig_ax == orig_ax && walked.id == id;
    if same && walked.reason > offcpu_reason::UNKNOWN {
        return walked.reason;
    }
    let reason = blocked_in(ctx, cfg);
    *walked = Walked {
        ip,
        orig_ax,
        id,
        reason,
    };
    reason
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
fn blocked_in(ctx: &BtfTracePointContext, cfg: &ProbeConfig) -> u64 {
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
fn switch_in(cfg: &ProbeConfig, next: *mut task_struct) {
    let pid_tgid = task_pid_tgid(cfg, next);
    let tgid = (pid_tgid >> 32) as u32;
    if !pid_bit(tgid) {
        // A task of another process: the common case, and the whole cost of its
        // switch-in. (A pending switch-out of a JVM jpd let go meanwhile stays untimed:
        // the next switch-out replaces it.)
        return;
    }
    let Some(start) = JP_OFFCPU_TASKS.get(next, false) else {
        // A joined thread never seen going out under this program: it was off CPU when
        // jpd started or joined it.
        count_orphan(pid_tgid);
        return;
    };
    // SAFETY: see `switch_out`.
    let start = unsafe { &mut *start };
    let at = start.at_ns;
    if at == 0 {
        // Its last switch-out was not accounted, and counted as such (the cap, a failed
        // read).
        return;
    }
    start.at_ns = 0;
    let now = now_ns();
    let Some(counters) = cpu_slot(&JP_OFFCPU_CPUS) else {
        return;
    };
    // SAFETY: see `switch_out`.
    let counters = unsafe { &mut *counters };
    if now < at {
        counters.stale += 1;
        return;
    }
    let record = OffcpuRecord {
        tgid,
        _pad: 0,
        id: start.id,
        stream: start.stream,
        ns: now - at,
        reason: start.reason,
    };
    log_record(cfg.offcpu_log_mask, counters, &record);
}

/// `task`'s `pid_tgid` as the helpers give it (`tgid << 32 | pid`), read straight from
/// the typed pointer: `pid` and `tgid` are adjacent `pid_t`s at `task_pid_off` (jpd
/// checks), a constant of the frozen configuration, so the verifier checks each load
/// against `task_struct`'s layout and lets it through without a helper call.
#[inline(always)]
fn task_pid_tgid(cfg: &ProbeConfig, task: *mut task_struct) -> u64 {
    let base = task.cast::<u8>().wrapping_add(cfg.task_pid_off as usize);
    // SAFETY: see above; a task pointer the scheduler hands the tracepoint is valid for
    // its run.
    let (pid, tgid) = unsafe {
        (
            core::ptr::read_volatile(base.cast::<u32>()),
            core::ptr::read_volatile(base.wrapping_add(4).cast::<u32>()),
        )
    };
    (u64::from(tgid) << 32) | u64::from(pid)
}

/// A thread of a tracked JVM switched in with no switch-out seen: counted if it is
/// joined.
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
