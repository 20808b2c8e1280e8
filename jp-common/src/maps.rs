//! jp's eBPF maps, each named and sized once: jp-ebpf declares every map with its
//! [`MapSpec`] (the size in the declaration, the name checked at compile time against
//! the static's identifier, which is what aya's `#[map]` exports), and jpd looks the
//! maps up, resizes them at load and reports their capacity through the same constants.
//!
//! A map whose size depends on the host (CPUs, kernel text, configuration) is declared
//! with [`SIZED_AT_LOAD`] entries; jpd sets the real size with `map_max_entries` before
//! it creates the maps.

/// One eBPF map of jp's object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// The name in the object (the declaring static's identifier).
    pub name: &'static str,
    /// `max_entries` as declared in the object (for the ring buffer: its bytes).
    pub max_entries: u32,
}

impl MapSpec {
    /// Whether `name` is this map's name; usable in constants, so that jp-ebpf checks
    /// its declarations at compile time.
    pub const fn is_named(&self, name: &str) -> bool {
        let (a, b) = (self.name.as_bytes(), name.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }
}

/// The declared size of a map jpd sizes at load: a placeholder the object must still
/// hold valid.
pub const SIZED_AT_LOAD: u32 = 1;

const fn map(name: &'static str, max_entries: u32) -> MapSpec {
    MapSpec { name, max_entries }
}

// The `cpu-clock` sampler (jp-ebpf's `sampler.rs`).

/// Samples by mode (`crate::mode`), one `CpuModes` per CPU number, mapped by jpd.
pub const MODES: MapSpec = map("JP_MODES", SIZED_AT_LOAD);
/// readprofile's core-text counters (`crate::TextBlock`s), mapped by jpd; sized from the
/// running kernel's text.
pub const TEXT_COUNTS: MapSpec = map("JP_TEXT_COUNTS", SIZED_AT_LOAD);
/// Dirty flag per page of `TEXT_COUNTS`.
pub const TEXT_DIRTY: MapSpec = map("JP_TEXT_DIRTY", SIZED_AT_LOAD);
/// Kernel IPs outside core text → samples (per-CPU hash map); a full map counts as lost.
pub const OTHER_IPS: MapSpec = map("JP_OTHER_IPS", 1 << 13);
/// JVMs whose threads the sampler counts (tgid → 1), written by jpd.
pub const JVM_PIDS: MapSpec = map("JP_JVM_PIDS", crate::MAX_JOINED_JVMS);
/// Threads with a context slot, by `pid_tgid` (`crate::JvmThread`), written by jpd.
pub const JVM_THREADS: MapSpec = map("JP_JVM_THREADS", 1 << 14);
/// The JVM samples' log (`crate::CtxKey`), `ProbeConfig::ctx_log_mask + 1` slots per CPU
/// number, mapped by jpd.
pub const CTX_LOG: MapSpec = map("JP_CTX_LOG", SIZED_AT_LOAD);

// Off-CPU time (jp-ebpf's `offcpu.rs`).

/// Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`, eBPF side only): a joined thread's
/// `OffcpuStart`, kept in its task. Declared as a BTF map, with no size (the kernel wants
/// none: a task's value lives and dies with the task).
pub const OFFCPU_TASKS: MapSpec = map("JP_OFFCPU_TASKS", 0);
/// One bit per tgid (`u64` words, word `tgid / 64`), a superset of `JVM_PIDS`' keys:
/// the switch program's "is this process tracked". Sized for `PID_MAX_LIMIT` (2^22).
pub const JVM_PID_BITS: MapSpec = map("JP_JVM_PID_BITS", 1 << 16);
/// Off-CPU counters (`crate::OffcpuCpu`), one per CPU number, mapped by jpd.
pub const OFFCPU_CPUS: MapSpec = map("JP_OFFCPU_CPUS", SIZED_AT_LOAD);
/// The off-CPU log (`crate::OffcpuRecord`), `ProbeConfig::offcpu_log_mask + 1` slots per
/// CPU number, mapped by jpd.
pub const OFFCPU_LOG: MapSpec = map("JP_OFFCPU_LOG", SIZED_AT_LOAD);
/// Scratch space for the kernel stack at switch-out (eBPF side only).
pub const OFFCPU_TRACE: MapSpec = map("JP_OFFCPU_TRACE", 1);

// Hard-IRQ handlers (jp-ebpf's `irq.rs`).

/// Scratch space for the kernel stack at handler entry (eBPF side only).
pub const IRQ_TRACE: MapSpec = map("JP_IRQ_TRACE", 1);
/// Interrupted-IP samples by mode, as `MODES`.
pub const IRQ_MODES: MapSpec = map("JP_IRQ_MODES", SIZED_AT_LOAD);
/// Interrupted kernel IPs in core text, as `TEXT_COUNTS`.
pub const IRQ_TEXT_COUNTS: MapSpec = map("JP_IRQ_TEXT_COUNTS", SIZED_AT_LOAD);
/// Dirty flag per page of `IRQ_TEXT_COUNTS`.
pub const IRQ_TEXT_DIRTY: MapSpec = map("JP_IRQ_TEXT_DIRTY", SIZED_AT_LOAD);
/// Interrupted kernel IPs outside core text, as `OTHER_IPS`.
pub const IRQ_OTHERS: MapSpec = map("JP_IRQ_OTHERS", 1 << 11);
/// Handler entry time and counters (`crate::IrqStart`), one per CPU number, mapped.
pub const IRQ_START: MapSpec = map("JP_IRQ_START", SIZED_AT_LOAD);
/// The IRQ lines' slots (`crate::IrqLine`), `crate::IRQ_LINES` per CPU number, mapped.
pub const IRQ_LINES: MapSpec = map("JP_IRQ_LINES", SIZED_AT_LOAD);
/// (irq, irqaction) → per-CPU `crate::IrqStats`, for high lines and shared lines'
/// further handlers.
pub const IRQ_STATS: MapSpec = map("JP_IRQ_STATS", 512);

// Softirqs (jp-ebpf's `softirq.rs`).

/// Softirq statistics by vector (`crate::CpuSoftirqs`), one per CPU number, mapped.
pub const SIRQ_STATS: MapSpec = map("JP_SIRQ_STATS", SIZED_AT_LOAD);

// The USDT record probe (jp-ebpf's `usdt.rs`).

/// Attach cookie → argument spec of that probe site: probe sites attached at once.
pub const USDT_SPECS: MapSpec = map("JP_USDT_SPECS", 1024);
/// `crate::wire::usdt_stat` counters (per-CPU array).
pub const USDT_STATS: MapSpec = map("JP_USDT_STATS", crate::wire::usdt_stat::COUNT);
/// The records' ring buffer: one page in the object; jpd sizes it at load from
/// `[usdt] ring_buffer_kib`.
pub const USDT_EVENTS: MapSpec = map("JP_USDT_EVENTS", 4096);
/// The per-CPU copy buffer (eBPF side only).
pub const USDT_SCRATCH: MapSpec = map("JP_USDT_SCRATCH", 1);
/// `crate::ring::RingLimits`, one entry, written by jpd before it attaches.
pub const USDT_LIMITS: MapSpec = map("JP_USDT_LIMITS", 1);
/// tgid → `crate::ring::ProcessRing` (LRU hash): each process's rate and losses. Sized
/// for more processes firing at once than a host runs JVMs; an evicted entry starts
/// with a full bucket and its counts are lost (jpd reads the map every 100 ms).
pub const USDT_PROCS: MapSpec = map("JP_USDT_PROCS", 4096);
/// Real uid → 1: the uids whose processes are listened to (`[usdt] allow_uids`).
pub const USDT_ALLOW_UIDS: MapSpec = map("JP_USDT_ALLOW_UIDS", 256);
/// cgroup v2 id → 1: the cgroups whose processes (and their sub-cgroups') are listened
/// to (`[usdt] allow_cgroups`).
pub const USDT_ALLOW_CGROUPS: MapSpec = map("JP_USDT_ALLOW_CGROUPS", 256);

/// Every map of the object.
pub const ALL: [MapSpec; 29] = [
    MODES,
    TEXT_COUNTS,
    TEXT_DIRTY,
    OTHER_IPS,
    JVM_PIDS,
    JVM_THREADS,
    CTX_LOG,
    OFFCPU_TASKS,
    JVM_PID_BITS,
    OFFCPU_CPUS,
    OFFCPU_LOG,
    OFFCPU_TRACE,
    IRQ_TRACE,
    IRQ_MODES,
    IRQ_TEXT_COUNTS,
    IRQ_TEXT_DIRTY,
    IRQ_OTHERS,
    IRQ_START,
    IRQ_LINES,
    IRQ_STATS,
    SIRQ_STATS,
    USDT_SPECS,
    USDT_STATS,
    USDT_EVENTS,
    USDT_SCRATCH,
    USDT_LIMITS,
    USDT_PROCS,
    USDT_ALLOW_UIDS,
    USDT_ALLOW_CGROUPS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_compared_whole() {
        assert!(MODES.is_named("JP_MODES"));
        assert!(!MODES.is_named("JP_MODE"));
        assert!(!MODES.is_named("JP_MODES_"));
        assert!(!MODES.is_named("JP_MODEX"));
    }

    #[test]
    fn every_map_has_its_own_name() {
        for (i, a) in ALL.iter().enumerate() {
            // Task storage alone has no size.
            assert!(a.max_entries > 0 || *a == OFFCPU_TASKS, "{}", a.name);
            assert!(a.name.starts_with("JP_"), "{}", a.name);
            for b in &ALL[i + 1..] {
                assert!(!a.is_named(b.name), "{} twice", a.name);
            }
        }
    }
}
