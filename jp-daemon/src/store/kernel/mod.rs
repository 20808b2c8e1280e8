//! The store: the one place where collected data lives between the collectors that
//! write it and the gRPC server that reads it.
//!
//! Collectors publish *cumulative* counts (since their programs were attached); the
//! store keeps a baseline so that `reset` never has to touch the kernel maps, and
//! readers get counts since the last reset.

pub mod profile;
pub mod symbols;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use symbols::Symbols;

/// Samples by the mode the CPU was in when the `cpu-clock` event fired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModeCounts {
    pub kernel: u64,
    pub user: u64,
    /// Kernel-mode samples taken in the idle task (pid 0); not in `kernel`.
    pub idle: u64,
}

impl ModeCounts {
    pub fn total(&self) -> u64 {
        self.kernel + self.user + self.idle
    }
    /// What was counted since `base` (an earlier reading): a mode that went back
    /// counts 0.
    pub fn since(&self, base: &ModeCounts) -> ModeCounts {
        ModeCounts {
            kernel: self.kernel.saturating_sub(base.kernel),
            user: self.user.saturating_sub(base.user),
            idle: self.idle.saturating_sub(base.idle),
        }
    }
}

/// Hits and time of one (irq, handler) pair.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IrqHandlerCounts {
    /// Invocations that returned IRQ_HANDLED (or WAKE_THREAD); IRQ_NONE ones are not hits.
    pub count: u64,
    /// Invocations that returned IRQ_NONE. `count + unhandled` is every invocation, which
    /// is what `/proc/interrupts` counts for a line with one handler.
    pub unhandled: u64,
    /// Time spent in the handler, all invocations (ns).
    pub time_ns: u64,
    /// The handler's function address (`irqaction->handler`), 0 if unknown.
    pub function_addr: u64,
}

/// A softirq vector's name as `/proc/softirqs` prints it (`SOFTIRQ<n>` past the
/// kernel's list): the API and the exporters label softirqs alike.
pub fn softirq_name(vector: u32) -> String {
    usize::try_from(vector)
        .ok()
        .and_then(|v| jp_common::SOFTIRQ_NAMES.get(v))
        .map_or_else(|| format!("SOFTIRQ{vector}"), |n| (*n).to_string())
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftirqCounts {
    pub count: u64,
    pub time_ns: u64,
}

/// Run time the kernel accounted to one of our eBPF programs (`kernel.bpf_stats_enabled`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramStats {
    pub name: String,
    /// What it is attached to, e.g. "perf_event cpu-clock on 2 CPUs".
    pub attached_to: String,
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// Everything the kernel collector has counted since attach. Keys of the histograms
/// are addresses or bucket indexes exactly as the eBPF programs record them.
#[derive(Clone, Debug, Default)]
pub struct KernelCounts {
    pub modes: ModeCounts,
    /// readprofile buckets: `(ip - _stext) >> shift` → samples, for IPs in `[_stext, _etext)`.
    pub buckets: HashMap<u64, u64>,
    /// Kernel IPs outside core text (modules, BPF JIT, …) → samples, by exact address.
    pub other_ips: HashMap<u64, u64>,
    /// Interrupted kernel IP at hard-IRQ handler entry, bucketed like `buckets`.
    pub irq_buckets: HashMap<u64, u64>,
    /// As `other_ips`, for the interrupted IP at hard-IRQ handler entry.
    pub irq_other_ips: HashMap<u64, u64>,
    /// The interrupted context's mode at hard-IRQ handler entry (as `modes`; `kernel`
    /// samples are the ones in `irq_buckets`/`irq_other_ips`).
    pub irq_modes: ModeCounts,
    /// (irq number, handler name) → counts.
    pub irqs: HashMap<(u32, String), IrqHandlerCounts>,
    /// softirq vector number (0 = HI … 9 = RCU) → counts.
    pub softirqs: HashMap<u32, SoftirqCounts>,
    /// Hard-IRQ handler entries, and those at which the interrupted IP was looked for
    /// (1 in `kernel.irq_ip_sample_every` per CPU; found or not).
    pub irq_entries: u64,
    pub irq_ip_sampled: u64,
}

/// Health of the collectors, always cumulative (reset does not clear it).
#[derive(Clone, Debug, Default)]
pub struct CollectorStatus {
    pub programs: Vec<ProgramStats>,
    pub cpus: Vec<u32>,
    pub frequency_hz: u64,
    pub shift: u32,
    /// `_stext`, `_etext` as read from kallsyms.
    pub text_start: u64,
    pub text_end: u64,
    /// Events that could not be recorded (full maps, failed reads…).
    pub events_lost: u64,
    pub last_read: Option<SystemTime>,
    /// The kernel's BPF run-time statistics are on (`programs`' run times move only
    /// then, and every BPF program on the host pays two clock reads per run).
    pub bpf_stats_enabled: bool,
    /// Bound on the interrupted-IP stack walks, per CPU (0: off).
    pub irq_ip_samples_per_second: u32,
}

#[derive(Default)]
struct Inner {
    counts: KernelCounts,
    baseline: KernelCounts,
    status: CollectorStatus,
    symbols: Option<Arc<Symbols>>,
    reset_at: Option<SystemTime>,
}

/// Shared between the collector (writer) and the server (reader).
#[derive(Default)]
pub struct KernelStore {
    inner: RwLock<Inner>,
}

/// A consistent view of the kernel data since the last reset.
#[derive(Clone, Debug, Default)]
pub struct KernelView {
    pub counts: KernelCounts,
    pub status: CollectorStatus,
    pub symbols: Option<Arc<Symbols>>,
    pub reset_at: Option<SystemTime>,
}

impl KernelStore {
    pub fn new() -> Arc<KernelStore> {
        Arc::new(KernelStore::default())
    }

    /// Called by the collector after each read of the maps.
    pub fn publish(&self, counts: KernelCounts, status: CollectorStatus) {
        let mut inner = self.write();
        inner.counts = counts;
        inner.status = status;
    }

    /// Called by the collector whenever it (re)loads kernel symbols.
    pub fn publish_symbols(&self, symbols: Arc<Symbols>) {
        self.write().symbols = Some(symbols);
    }

    /// The current kernel symbols, without copying any counts (naming kernel frames of
    /// a JVM's CPU per context needs only these).
    pub fn symbols(&self) -> Option<Arc<Symbols>> {
        self.read().symbols.clone()
    }

    /// Counts since the last reset (the maps are never cleared, see module docs).
    pub fn kernel_view(&self) -> KernelView {
        let inner = self.read();
        KernelView {
            counts: subtract(&inner.counts, &inner.baseline),
            status: inner.status.clone(),
            symbols: inner.symbols.clone(),
            reset_at: inner.reset_at,
        }
    }

    /// Counts since the collectors attached, ignoring resets: what monotonic
    /// consumers (Prometheus counters, profile deltas) need.
    pub fn kernel_totals(&self) -> KernelView {
        let inner = self.read();
        KernelView {
            counts: inner.counts.clone(),
            status: inner.status.clone(),
            symbols: inner.symbols.clone(),
            reset_at: None,
        }
    }

    pub fn reset(&self) {
        let mut inner = self.write();
        inner.baseline = inner.counts.clone();
        inner.reset_at = Some(SystemTime::now());
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        crate::lock::read(&self.inner)
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        crate::lock::write(&self.inner)
    }
}

fn subtract_map<K: Clone + Eq + std::hash::Hash>(
    now: &HashMap<K, u64>,
    base: &HashMap<K, u64>,
) -> HashMap<K, u64> {
    now.iter()
        .filter_map(|(k, &v)| {
            let d = v.saturating_sub(base.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

impl KernelCounts {
    /// What was counted since `base` (an earlier reading of the same counters): the
    /// one subtraction of counter maps, for reset baselines and exporter windows.
    /// Keys that did not grow are left out; a counter that went back counts 0.
    pub fn since(&self, base: &KernelCounts) -> KernelCounts {
        subtract(self, base)
    }
}

fn subtract(now: &KernelCounts, base: &KernelCounts) -> KernelCounts {
    KernelCounts {
        modes: now.modes.since(&base.modes),
        buckets: subtract_map(&now.buckets, &base.buckets),
        other_ips: subtract_map(&now.other_ips, &base.other_ips),
        irq_buckets: subtract_map(&now.irq_buckets, &base.irq_buckets),
        irq_other_ips: subtract_map(&now.irq_other_ips, &base.irq_other_ips),
        irq_modes: now.irq_modes.since(&base.irq_modes),
        irq_entries: now.irq_entries.saturating_sub(base.irq_entries),
        irq_ip_sampled: now.irq_ip_sampled.saturating_sub(base.irq_ip_sampled),
        irqs: now
            .irqs
            .iter()
            .map(|(k, v)| {
                let b = base.irqs.get(k).cloned().unwrap_or_default();
                let d = IrqHandlerCounts {
                    count: v.count.saturating_sub(b.count),
                    unhandled: v.unhandled.saturating_sub(b.unhandled),
                    time_ns: v.time_ns.saturating_sub(b.time_ns),
                    function_addr: v.function_addr,
                };
                (k.clone(), d)
            })
            .collect(),
        softirqs: now
            .softirqs
            .iter()
            .map(|(k, v)| {
                let b = base.softirqs.get(k).copied().unwrap_or_default();
                let d = SoftirqCounts {
                    count: v.count.saturating_sub(b.count),
                    time_ns: v.time_ns.saturating_sub(b.time_ns),
                };
                (*k, d)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_subtracts_a_baseline_without_touching_published_counts() {
        let store = KernelStore::new();
        let mut c = KernelCounts::default();
        c.modes.kernel = 10;
        c.buckets.insert(7, 4);
        c.irqs.insert(
            (11, "virtio0-requests".into()),
            IrqHandlerCounts {
                count: 5,
                unhandled: 1,
                time_ns: 100,
                function_addr: 0xffff_1000,
            },
        );
        store.publish(c.clone(), CollectorStatus::default());
        store.reset();
        c.modes.kernel = 13;
        c.buckets.insert(7, 6);
        c.buckets.insert(9, 1);
        c.irqs
            .get_mut(&(11, "virtio0-requests".into()))
            .unwrap()
            .count = 8;
        store.publish(c, CollectorStatus::default());
        assert_eq!(store.kernel_totals().counts.modes.kernel, 13);
        let v = store.kernel_view();
        assert_eq!(v.counts.modes.kernel, 3);
        assert_eq!(v.counts.buckets.get(&7), Some(&2));
        assert_eq!(v.counts.buckets.get(&9), Some(&1));
        let irq = &v.counts.irqs[&(11, "virtio0-requests".to_string())];
        assert_eq!(
            (irq.count, irq.time_ns, irq.function_addr),
            (3, 0, 0xffff_1000)
        );
    }
}
