//! Types shared by the eBPF programs (`jp-ebpf`) and user space (`jp-daemon`).
//!
//! Everything here is `#[repr(C)]` and `no_std`: the same bytes are written by the
//! kernel side and read by jpd. Structs have no implicit padding (explicit `_pad`
//! fields instead) so that they can be `aya::Pod` and hash-map keys compare by value.
#![cfg_attr(not(test), no_std)]

#[cfg(any(test, feature = "alloc"))]
extern crate alloc;

pub mod maps;
pub mod ring;
pub mod usdt;
pub mod wire;

/// Name of the load-time configuration global in the eBPF object (`.rodata`).
pub const CONFIG_GLOBAL: &str = "JP_CONFIG";

/// Load-time configuration of the probes, written by jpd with
/// `EbpfLoader::override_global` before the programs are loaded. Offsets come from
/// the running kernel's BTF, addresses from `/proc/kallsyms`: nothing about the kernel
/// is hard-coded in the programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeConfig {
    /// `_stext`: first address of core kernel text.
    pub text_start: u64,
    /// `_etext`: end (exclusive) of core kernel text.
    pub text_end: u64,
    /// `[irq_entry_start, irq_entry_end)`: the device-interrupt entry stub
    /// (`asm_common_interrupt`). In a kernel stack trace taken inside a hard-IRQ
    /// handler, the frame after the one in this range is the interrupted IP.
    pub irq_entry_start: u64,
    pub irq_entry_end: u64,
    /// readprofile bucket size is `1 << shift` bytes.
    pub shift: u32,
    /// `offsetof(struct irqaction, handler)`.
    pub irqaction_handler_off: u32,
    /// `offsetof(struct irqaction, name)`.
    pub irqaction_name_off: u32,
    /// The interrupted IP is looked for at 1 in this many hard-IRQ handler entries per
    /// CPU (the first of every run of this many); 0 or 1: at every one.
    pub irq_ip_every: u32,
    /// Time budget of the interrupted-IP stack walk: on each CPU, at most one walk per
    /// this many ns (`u64::MAX`: never). Entries in between cost a counter increment.
    pub irq_ip_min_interval_ns: u64,
    /// Slots per CPU of `JP_CTX_LOG`, minus one (a power of two minus one; jpd sizes
    /// the log at load). 0: no log, every JVM sample counts as lost.
    pub ctx_log_mask: u32,
    /// `offsetof(struct task_struct, pid)`; `tgid` is the `pid_t` after it (jpd checks),
    /// so one 8-byte read gives a task's `pid_tgid`.
    pub task_pid_off: u32,
    /// Slots per CPU of `JP_OFFCPU_LOG`, minus one (a power of two minus one). 0: the
    /// off-CPU program is not attached.
    pub offcpu_log_mask: u32,
    /// Switch-outs of joined threads accounted per CPU per second at most; the others
    /// are counted in `OffcpuCpu::over_cap`.
    pub offcpu_cap_per_cpu: u32,
    /// `[__sched_text_start, __sched_text_end)`: the scheduler's own functions
    /// (`schedule`, `schedule_timeout`, `io_schedule`…), skipped in a blocked thread's
    /// kernel stack to find the function it blocked in, as the kernel's `wchan` does.
    pub sched_text_start: u64,
    pub sched_text_end: u64,
}

impl ProbeConfig {
    /// All zero: with `text_end == 0` every kernel IP lands in the exact-address map,
    /// so an object loaded without configuration still records honestly.
    pub const ZERO: ProbeConfig = ProbeConfig {
        text_start: 0,
        text_end: 0,
        irq_entry_start: 0,
        irq_entry_end: 0,
        shift: 0,
        irqaction_handler_off: 0,
        irqaction_name_off: 0,
        irq_ip_every: 0,
        irq_ip_min_interval_ns: u64::MAX,
        ctx_log_mask: 0,
        task_pid_off: 0,
        offcpu_log_mask: 0,
        offcpu_cap_per_cpu: 0,
        sched_text_start: 0,
        sched_text_end: 0,
    };
}

/// JVMs the sampler counts at once (`JP_JVM_PIDS`): those with announced context slots
/// first, then other running JVMs, whose threads it counts by kind.
pub const MAX_JOINED_JVMS: u32 = 1024;

/// Core-text counters (`JP_TEXT_COUNTS`, `JP_IRQ_TEXT_COUNTS`): readprofile's array,
/// one `u32` per `2^shift`-byte bucket of `[_stext, _etext)`, shared by all CPUs
/// (atomic adds), memory-mapped by jpd. An array element holds this many buckets, so
/// that the kernel's 8-byte element rounding wastes nothing.
pub const TEXT_BLOCK_BUCKETS: u32 = 16;
/// One element of the core-text counter arrays.
pub type TextBlock = [u32; TEXT_BLOCK_BUCKETS as usize];
/// Blocks per dirty flag (`JP_TEXT_DIRTY`, one `u64` per 4 KiB page of counters): jpd
/// diffs only the pages whose flag was set since its last read.
pub const TEXT_PAGE_BLOCKS: u32 = 64;
/// Buckets per dirty page.
pub const TEXT_PAGE_BUCKETS: u32 = TEXT_BLOCK_BUCKETS * TEXT_PAGE_BLOCKS;

/// Slots of the per-CPU mode counters (`JP_MODES` for the `cpu-clock` sampler,
/// `JP_IRQ_MODES` for the interrupted IP at hard-IRQ handler entry).
pub mod mode {
    /// The CPU was in user mode.
    pub const USER: u32 = 0;
    /// Kernel mode, not the idle task. Every such sample is either in a histogram or in
    /// `LOST`: `sum(buckets) + sum(other_ips) + LOST == KERNEL`.
    pub const KERNEL: u32 = 1;
    /// Kernel mode in the idle task (pid 0).
    pub const IDLE: u32 = 2;
    /// Kernel samples that could not be recorded (histogram full).
    pub const LOST: u32 = 3;
    /// `JP_IRQ_MODES` only: handler invocations whose statistics could not be recorded.
    pub const LOST_IRQ_STATS: u32 = 4;
    /// `JP_IRQ_MODES` only: `irq_handler_exit` without the matching entry (e.g. the
    /// handler was already running when the probes were attached): counted, not timed.
    pub const UNTIMED: u32 = 5;
    /// `JP_IRQ_MODES` only: the interrupted IP could not be found (no kernel stack, or
    /// no interrupt-entry frame in it, or the trace was cut at its maximum depth).
    pub const READ_FAILED: u32 = 6;
    /// Kernel samples recorded in the exact-address map (IPs outside core text), bumped
    /// after the map: jpd reads that map again only when this has moved.
    pub const OTHER_IPS: u32 = 7;
    /// `JP_MODES` only: samples of a thread of a registered JVM, written to this CPU's
    /// part of `JP_CTX_LOG`: this CPU's count is also the log's write position (the
    /// sample numbered n goes to slot `n & ctx_log_mask`), bumped after the write.
    pub const JVM: u32 = 8;
    /// `JP_MODES` only: samples of a registered JVM that the log had no slot for (no log).
    pub const JVM_LOST: u32 = 9;
    pub const COUNT: u32 = 10;
}

/// A thread of a JVM that published its current context (the agent's `KIND_THREAD`
/// record), by `pid_tgid` (`tgid << 32 | tid`) in `JP_JVM_THREADS`. jpd writes it,
/// `jp_sample` reads the context with `bpf_probe_read_user` when it interrupts the thread:
/// from a context slot (`current_offset` 0), or on the JVM's heap (see
/// `wire::HeapContext`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct JvmThread {
    /// Address of the context slot in the JVM's memory, or of the cell holding the
    /// address of the object that keeps the current context.
    pub slot: u64,
    /// The thread's USDT stream id (`Thread.getId()`).
    pub stream: u64,
    /// 0: `slot` is a context slot. Otherwise the offset of the current context's `u32`
    /// in the object.
    pub current_offset: u32,
    /// Offset of the object's `u32` that must read `cookie`.
    pub cookie_offset: u32,
    pub cookie: u32,
    pub _pad: u32,
}

/// What a sample of a registered JVM's thread is counted under (`CtxKey::kind`).
pub mod ctx_kind {
    /// On a thread with a slot, in user mode: `stream`, `id` = the context's node id (a
    /// carrier of virtual threads: the high half of `id`, when not 0, is the stream of the
    /// virtual thread mounted on it, whose context the low half is).
    pub const USER: u32 = 0;
    /// Same, in kernel mode: `kip` = the kernel IP (core text: rounded down to its
    /// readprofile bucket).
    pub const KERNEL: u32 = 1;
    /// On a thread without a slot (GC, JIT compilers, VM threads, threads the agent has
    /// not announced): `stream`, `id` = the 16 bytes of its `comm`.
    pub const THREAD_USER: u32 = 2;
    pub const THREAD_KERNEL: u32 = 3;
    /// The thread's slot could not be read: `stream` = the thread's stream.
    pub const READ_FAILED: u32 = 4;
}

/// What `JP_CTX_LOG` records of a sample of a registered JVM (see [`ctx_kind`]); jpd
/// counts the samples by it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtxKey {
    pub tgid: u32,
    pub kind: u32,
    pub stream: u64,
    pub id: u64,
    pub kip: u64,
}

/// What `JP_OFFCPU_LOG` records: a joined thread's time off CPU, logged when it is
/// switched in again, under the context it was in when it was switched out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OffcpuRecord {
    pub tgid: u32,
    pub _pad: u32,
    /// The thread's stream.
    pub stream: u64,
    /// The thread's slot word at switch-out, whole: the context's node id in the low half;
    /// a carrier's names the mounted virtual thread's stream in the high half (read as a
    /// CPU sample's `CtxKey::id`, see `ctx_kind::USER`).
    pub id: u64,
    /// Switch-out to switch-in (ns).
    pub ns: u64,
    /// Why it was off CPU: the kernel function it blocked in, or one of [`offcpu_reason`].
    pub reason: u64,
}

/// `OffcpuRecord::reason` values that are not kernel addresses.
pub mod offcpu_reason {
    /// Preempted while runnable: waiting for a CPU (the run queue).
    pub const RUN_QUEUE: u64 = 0;
    /// Blocked, but its kernel stack could not be read.
    pub const UNKNOWN: u64 = 1;
    /// A virtual thread off its carriers, measured by the agent (the scheduler never sees
    /// it): `UNMOUNTED + why`, `why` one of `wire::unmounted` (so `UNMOUNTED + 1 ..
    /// UNMOUNTED + wire::unmounted::END`). Far below any kernel address.
    pub const UNMOUNTED: u64 = 0x100;
}

/// One CPU's off-CPU counters, the value of `JP_OFFCPU_CPUS` (one per CPU number,
/// mapped by jpd, see `CpuModes`): a whole 64-byte line.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffcpuCpu {
    /// Records written to this CPU's part of `JP_OFFCPU_LOG`: the write position (record
    /// n in slot `n & offcpu_log_mask`), bumped after the slot is written.
    pub logged: u64,
    /// Start of the current one-second window of the cap, and switch-outs accounted in it.
    pub window_start_ns: u64,
    pub window_count: u64,
    /// Switch-outs of joined threads not accounted because of the cap.
    pub over_cap: u64,
    /// Switch-ins of joined threads never accounted going out under this program (jpd
    /// started, or the thread was joined, while it was off CPU): counted, not timed. A
    /// switch-in after a switch-out that was not accounted is not counted again here: its
    /// switch-out already was, in `over_cap` or `read_failed`.
    pub orphans: u64,
    /// Switch-ins with a time going backwards: counted, not timed. (The switch-out's
    /// record is kept in the task itself, so a reused thread id, another task, can never
    /// be timed from an old task's switch-out.)
    pub stale: u64,
    /// Switch-outs of joined threads whose context slot could not be read, or for which
    /// the kernel gave no task storage.
    pub read_failed: u64,
    pub _pad: u64,
}

/// Number of softirq vectors (`NR_SOFTIRQS`: HI … RCU). A vector number at or above it
/// is counted in slot `NR_SOFTIRQS` of `JP_SIRQ_STATS`, never dropped silently.
pub const NR_SOFTIRQS: u32 = 10;

/// Names of the softirq vectors, by number, as the kernel's `softirq_to_name`.
pub const SOFTIRQ_NAMES: [&str; NR_SOFTIRQS as usize] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// Frames of kernel stack read at hard-IRQ handler entry to find the interrupted IP;
/// the handler path (tracepoint → flow handler → `__common_interrupt` →
/// `common_interrupt` → `asm_common_interrupt`) is about ten frames.
pub const IRQ_STACK_DEPTH: usize = 16;

/// Bytes of an IRQ handler's name (`irqaction->name`) kept, NUL-terminated.
pub const IRQ_NAME_LEN: usize = 32;

/// Key of `JP_IRQ_STATS`: one hard-IRQ handler on one IRQ line. The `irqaction`
/// pointer tells apart the handlers sharing a line.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IrqKey {
    pub irq: u32,
    pub _pad: u32,
    /// `struct irqaction *`.
    pub action: u64,
}

/// Value of `JP_IRQ_STATS` (per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqStats {
    /// Invocations that returned IRQ_HANDLED or IRQ_WAKE_THREAD.
    pub handled: u64,
    /// Invocations that returned IRQ_NONE (a shared line, or a spurious interrupt).
    pub unhandled: u64,
    /// Time in the handler, entry to exit, all invocations (ns).
    pub time_ns: u64,
    /// `irqaction->handler`; 0 until this CPU filled it in.
    pub handler: u64,
    /// `irqaction->name`, NUL-terminated (empty until this CPU filled it in).
    pub name: [u8; IRQ_NAME_LEN],
}

impl IrqStats {
    pub const ZERO: IrqStats = IrqStats {
        handled: 0,
        unhandled: 0,
        time_ns: 0,
        handler: 0,
        name: [0; IRQ_NAME_LEN],
    };
}

/// IRQ lines below this have a slot of their own in `JP_IRQ_LINES` (an array lookup at
/// handler exit); higher lines, and a second handler on a line, go to `JP_IRQ_STATS`.
pub const IRQ_LINES: u32 = 256;

/// Value of `JP_IRQ_LINES`, `IRQ_LINES` of them per CPU, CPU after CPU (CPU `c`'s slot of
/// line `irq` at `c * IRQ_LINES + irq`): the first handler that exited on this line on
/// this CPU, and its statistics. jpd sizes the array at load and maps it, like the
/// arrays of `CpuModes`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqLine {
    /// `struct irqaction *` the slot belongs to; 0 while the slot is free.
    pub action: u64,
    pub stats: IrqStats,
}

/// One CPU's mode counters (slots `mode::*`): the value of `JP_MODES` and
/// `JP_IRQ_MODES`. Those, like `JP_IRQ_START` and `JP_SIRQ_STATS`, are arrays with one
/// value per CPU, indexed by CPU number, that jpd sizes at load and maps
/// (`BPF_F_MMAPABLE`), so that its periodic pass reads them without a syscall. Each
/// value is a whole number of 64-byte lines, so that no two CPUs write the same line.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuModes {
    pub counts: [u64; mode::COUNT as usize],
    pub _pad: [u64; 6],
}

/// Slots of `CpuSoftirqs`: a power of two, so that the eBPF side's index, masked with
/// `SOFTIRQ_SLOTS - 1`, is in bounds by construction (LLVM drops a range check it can
/// prove from an earlier one, and the verifier then sees only the mask).
pub const SOFTIRQ_SLOTS: u32 = 16;

/// One CPU's softirq statistics, by vector; slot `NR_SOFTIRQS` counts vector numbers
/// out of range, the slots above it stay zero. The value of `JP_SIRQ_STATS` (see
/// `CpuModes`), six 64-byte lines.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSoftirqs {
    pub vectors: [SoftirqStats; SOFTIRQ_SLOTS as usize],
}

/// Per-CPU slot written at `irq_handler_entry`, read at `irq_handler_exit`. Hard-IRQ
/// handlers do not nest on one CPU, so one slot per CPU is enough (see `CpuModes`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqStart {
    pub ts_ns: u64,
    pub action: u64,
    /// Handler entries on this CPU (for `ProbeConfig::irq_ip_every`).
    pub entries: u64,
    /// Earliest time of the next interrupted-IP walk on this CPU (`irq_ip_min_interval_ns`).
    pub next_walk_ns: u64,
    /// Handler exits on this CPU, bumped after `JP_IRQ_LINES` or `JP_IRQ_STATS`: jpd
    /// reads those maps again only when their sum has moved.
    pub exits: u64,
    /// One past the highest slot of `JP_IRQ_LINES` this CPU has claimed, set before
    /// the exit that claimed it is counted: jpd reads only the slots below the highest
    /// of these (the lines in use are few and low: 24–43 on this project's VM).
    pub lines: u64,
    /// Handler exits on this CPU recorded in `JP_IRQ_STATS` (high lines, second
    /// handlers of a line), bumped after it and before `exits`: jpd reads that hash map
    /// only when their sum has moved, and most hosts never use it.
    pub shared: u64,
    pub _pad: [u64; 1],
}

/// One vector's slot of `CpuSoftirqs`. Entry and exit touch only this 24-byte slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftirqStats {
    /// `softirq_entry` events.
    pub count: u64,
    /// Entry to exit, summed (ns).
    pub time_ns: u64,
    /// Entry time of the run in progress on this CPU (0: none).
    pub start_ns: u64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are repr(C), made only of integers and byte arrays, without
    // implicit padding, so every bit pattern is a valid value.
    unsafe impl aya::Pod for super::ProbeConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::IrqKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::IrqStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::IrqStart {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::IrqLine {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SoftirqStats {}
    // SAFETY: as above (the padding is an explicit field).
    unsafe impl aya::Pod for super::CpuModes {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CpuSoftirqs {}
    // SAFETY: as above: repr(C), integers only, no padding.
    unsafe impl aya::Pod for super::JvmThread {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CtxKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffcpuRecord {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffcpuCpu {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::wire::EventHeader {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::wire::Control {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn shared_types_have_no_implicit_padding() {
        assert_eq!(size_of::<ProbeConfig>(), 7 * 8 + 8 * 4);
        assert_eq!(size_of::<OffcpuRecord>(), 40);
        assert_eq!(size_of::<OffcpuCpu>(), 64);
        // Two log records to a line.
        assert_eq!(size_of::<CtxKey>(), 32);
        assert_eq!(size_of::<IrqKey>(), 16);
        assert_eq!(size_of::<IrqStats>(), 4 * 8 + IRQ_NAME_LEN);
        // The per-CPU values jpd maps are whole 64-byte lines.
        assert_eq!(size_of::<IrqStart>(), 64);
        assert_eq!(size_of::<CpuModes>(), 128);
        assert_eq!(size_of::<CpuSoftirqs>(), 384);
        const { assert!(NR_SOFTIRQS < SOFTIRQ_SLOTS) };
        assert_eq!(size_of::<IrqLine>(), 8 + size_of::<IrqStats>());
        assert_eq!(size_of::<SoftirqStats>(), 24);
    }
}
