//! Reading the kernel programs' maps into [`KernelCounts`]: the mapped arrays without a
//! syscall, the per-CPU hash maps with one batch read each, and only when the counter
//! the eBPF side bumps after writing them has moved, so that an idle pass stays cheap.
use std::collections::HashMap;
use std::os::fd::{AsFd as _, BorrowedFd};

use anyhow::{bail, Context as _};
use aya::maps::{Map, MapData};
use aya::{Ebpf, Pod};
use jp_common::{
    maps, mode, CpuModes, CpuSoftirqs, CtxKey, IrqKey, IrqLine, IrqStart, IrqStats, NR_SOFTIRQS,
};

use super::attach::MapShape;
use super::batch::read_percpu;
use super::ctx_log::CtxLog;
use super::mapping::CpuSlots;
use super::text_counts::TextCounts;
use crate::store::kernel::{IrqHandlerCounts, KernelCounts, ModeCounts, SoftirqCounts};

/// One pass's reading of the maps.
pub(super) struct Reading {
    pub counts: KernelCounts,
    /// Events the eBPF side could not record, since attach.
    pub lost: u64,
}

/// The kernel programs' maps as jpd reads them, with what each pass keeps for the next:
/// jpd's CPU share at idle is what its periodic passes cost, so each one re-reads only
/// what may have changed.
pub(super) struct MapReader {
    /// Possible CPUs: the layout of per-CPU values.
    ncpus: usize,
    /// Core-text counters of the sampler and of the interrupted IP, memory-mapped.
    text: TextCounts,
    irq_text: TextCounts,
    /// The arrays with one value per CPU, memory-mapped.
    cpu: CpuArrays,
    /// The JVM samples' log, memory-mapped.
    ctx_log: CtxLog,
    /// Per-CPU map name → its `max_entries` (see `PerCpuMaps`).
    map_entries: HashMap<&'static str, usize>,
    /// The hash maps as last read, with the counter they were read at (see
    /// `read_if_moved`).
    irqs: Option<(u64, IrqsByHandler)>,
    hashed_irqs: Option<(u64, HandlerStats)>,
    other_ips: Option<(u64, HashMap<u64, u64>)>,
    irq_other_ips: Option<(u64, HashMap<u64, u64>)>,
    /// `JP_MODES[mode::JVM]` (+ `JVM_LOST`) at this pass and when the log was last drained.
    jvm_samples: u64,
    jvm_samples_read: Option<u64>,
    /// Every sample the sampler counted (all of `JP_MODES`), at this pass and the one
    /// before: whether the sampler ran in between.
    sampler_counted: u64,
    sampler_counted_before: u64,
}

/// (irq, irqaction) → each CPU's statistics of the handler, as the eBPF side keeps them.
type HandlerStats = Vec<(IrqKey, Vec<IrqStats>)>;

/// (irq number, handler name) → counts, as `KernelCounts::irqs`.
type IrqsByHandler = HashMap<(u32, String), IrqHandlerCounts>;

impl MapReader {
    /// Maps the arrays of `ebpf`, as sized at load.
    pub(super) fn map(ebpf: &Ebpf, shape: &MapShape) -> anyhow::Result<MapReader> {
        let cpu = CpuArrays::map(ebpf, shape.cpu_slots)?;
        let ctx_log = CtxLog::map(
            array_fd(ebpf, maps::CTX_LOG.name)?,
            shape.cpu_slots,
            shape.ctx_log_slots,
        )?;
        let text_counts = |counts: maps::MapSpec, dirty: maps::MapSpec| {
            TextCounts::map(
                array_fd(ebpf, counts.name)?,
                array_fd(ebpf, dirty.name)?,
                shape.text,
                counts.name,
            )
        };
        Ok(MapReader {
            ncpus: shape.ncpus,
            text: text_counts(maps::TEXT_COUNTS, maps::TEXT_DIRTY)?,
            irq_text: text_counts(maps::IRQ_TEXT_COUNTS, maps::IRQ_TEXT_DIRTY)?,
            cpu,
            ctx_log,
            map_entries: HashMap::new(),
            irqs: None,
            hashed_irqs: None,
            other_ips: None,
            irq_other_ips: None,
            jvm_samples: 0,
            jvm_samples_read: None,
            sampler_counted: 0,
            sampler_counted_before: 0,
        })
    }

    /// Reads every map; returns the counts and the events lost on the eBPF side.
    pub(super) fn read(&mut self, ebpf: &Ebpf) -> anyhow::Result<Reading> {
        // The mode counters first, the histograms after: the eBPF side counts a sample
        // after recording it, so every sample in this pass's kernel count is in the
        // histograms read below (which may hold a few more, counted next pass).
        let modes = sum_modes(&self.cpu.modes.read());
        self.sampler_counted_before = self.sampler_counted;
        self.sampler_counted = modes.iter().fold(0, |a, &m| a.wrapping_add(m));
        self.jvm_samples = at(&modes, mode::JVM) + at(&modes, mode::JVM_LOST);
        let irq_modes = sum_modes(&self.cpu.irq_modes.read());
        let buckets = self.text.read().clone();
        let irq_buckets = self.irq_text.read().clone();
        let starts = self.cpu.irq_start.read();
        let mut hashes = PerCpuMaps {
            ebpf,
            ncpus: self.ncpus,
            sizes: &mut self.map_entries,
        };
        let irqs = read_irqs(
            &mut self.irqs,
            &mut self.hashed_irqs,
            &self.cpu.irq_lines,
            &starts,
            &mut hashes,
        )?;
        let other_ips = read_if_moved(&mut self.other_ips, at(&modes, mode::OTHER_IPS), || {
            hashes.sum_hash::<u64>(maps::OTHER_IPS.name)
        })?;
        let irq_other_ips = read_if_moved(
            &mut self.irq_other_ips,
            at(&irq_modes, mode::OTHER_IPS),
            || hashes.sum_hash::<u64>(maps::IRQ_OTHERS.name),
        )?;
        let counts = KernelCounts {
            modes: mode_counts(&modes),
            buckets,
            other_ips,
            irq_buckets,
            irq_other_ips,
            irq_modes: mode_counts(&irq_modes),
            irqs,
            softirqs: sum_softirqs(&self.cpu.softirqs.read()),
            irq_entries: starts.iter().map(|s| s.entries).sum(),
            irq_ip_sampled: [mode::USER, mode::KERNEL, mode::IDLE, mode::READ_FAILED]
                .iter()
                .map(|&m| at(&irq_modes, m))
                .sum(),
        };
        let lost = at(&modes, mode::LOST)
            + at(&modes, mode::JVM_LOST)
            + self.ctx_log.lost
            + at(&irq_modes, mode::LOST)
            + at(&irq_modes, mode::LOST_IRQ_STATS)
            + at(&irq_modes, mode::READ_FAILED);
        Ok(Reading { counts, lost })
    }

    /// Whether the sampler counted samples between the last two reads.
    pub(super) fn sampler_ran(&self) -> bool {
        self.sampler_counted != self.sampler_counted_before
    }

    /// The samples under JVM contexts logged since the last call, if the sampler counted
    /// any since (the log is read only then).
    pub(super) fn new_jvm_samples(&mut self) -> Option<Vec<(CtxKey, u64)>> {
        let stamp = self.jvm_samples;
        if self.jvm_samples_read == Some(stamp) {
            return None;
        }
        self.jvm_samples_read = Some(stamp);
        Some(self.ctx_log.drain(&self.cpu.modes))
    }

    /// Slots per CPU of the JVM samples' log.
    pub(super) fn ctx_log_slots_per_cpu(&self) -> u64 {
        self.ctx_log.slots_per_cpu()
    }

    /// `cpu-clock` samples taken on each CPU since attach (user + kernel + idle), by
    /// CPU number.
    pub(super) fn samples_per_cpu(&self) -> Vec<u64> {
        self.cpu
            .modes
            .read()
            .iter()
            .map(|m| {
                [mode::USER, mode::KERNEL, mode::IDLE]
                    .iter()
                    .map(|&i| m.counts.get(i as usize).copied().unwrap_or(0))
                    .sum()
            })
            .collect()
    }
}

/// Slot `i` of counters by `mode::*`.
fn at(v: &[u64], i: u32) -> u64 {
    v.get(i as usize).copied().unwrap_or(0)
}

fn mode_counts(modes: &[u64]) -> ModeCounts {
    ModeCounts {
        kernel: at(modes, mode::KERNEL),
        user: at(modes, mode::USER),
        idle: at(modes, mode::IDLE),
    }
}

/// The hard-IRQ handlers' counts, from the lines' slots and the hash map of the rest.
/// Read again only when the counter the eBPF side bumps after writing them has moved:
/// walking their buckets was most of an idle pass.
fn read_irqs(
    cache: &mut Option<(u64, IrqsByHandler)>,
    hashed: &mut Option<(u64, HandlerStats)>,
    irq_lines: &CpuSlots<IrqLine>,
    starts: &[IrqStart],
    hashes: &mut PerCpuMaps<'_>,
) -> anyhow::Result<IrqsByHandler> {
    let exits = starts.iter().map(|s| s.exits).sum();
    let in_hash = starts.iter().map(|s| s.shared).sum();
    read_if_moved(cache, exits, || {
        let mut irqs = IrqsByHandler::new();
        // Only the slots below the highest any CPU claimed (the lines in use are few
        // and low).
        let in_use = starts.iter().map(|s| s.lines).max().unwrap_or(0);
        let lines = irq_lines.columns(usize::try_from(in_use).unwrap_or(usize::MAX));
        let mut handlers = handlers_of_lines(&lines);
        // The hash map of high lines and shared lines' further handlers, only when an
        // exit was recorded there (counted before `exits`): most hosts never use it.
        handlers.extend(read_if_moved(hashed, in_hash, || {
            hashes.entries::<IrqKey, IrqStats>(maps::IRQ_STATS.name)
        })?);
        for (key, per_cpu) in handlers {
            let merged = merge_irq(&per_cpu);
            let e = irqs.entry((key.irq, merged.name)).or_default();
            e.count += merged.handled;
            e.unhandled += merged.unhandled;
            e.time_ns += merged.time_ns;
            if e.function_addr == 0 {
                e.function_addr = merged.handler;
            }
        }
        Ok(irqs)
    })
}

/// Softirq counts and time by vector, summed over CPUs.
fn sum_softirqs(per_cpu: &[CpuSoftirqs]) -> HashMap<u32, SoftirqCounts> {
    let mut softirqs = HashMap::new();
    let mut bad_vectors = 0;
    for i in 0..=NR_SOFTIRQS as usize {
        let vector = || per_cpu.iter().filter_map(|c| c.vectors.get(i));
        let count = vector().map(|s| s.count).sum();
        let time_ns = vector().map(|s| s.time_ns).sum();
        match u32::try_from(i) {
            Ok(v) if v < NR_SOFTIRQS => {
                softirqs.insert(v, SoftirqCounts { count, time_ns });
            }
            _ => bad_vectors += count,
        }
    }
    if bad_vectors > 0 {
        log::debug!("{bad_vectors} softirqs with a vector number out of range");
    }
    softirqs
}

/// The eBPF side's arrays with one value per CPU (`jp_common::CpuModes`), mapped: a
/// pass reads them without a syscall (as batch reads they were four of an idle pass's
/// few syscalls, the first of them the slowest, on a cold cache).
struct CpuArrays {
    modes: CpuSlots<CpuModes>,
    irq_modes: CpuSlots<CpuModes>,
    irq_start: CpuSlots<IrqStart>,
    softirqs: CpuSlots<CpuSoftirqs>,
    /// `IRQ_LINES` slots per CPU.
    irq_lines: CpuSlots<IrqLine>,
}

impl CpuArrays {
    fn map(ebpf: &Ebpf, cpus: usize) -> anyhow::Result<CpuArrays> {
        Ok(CpuArrays {
            modes: cpu_values(ebpf, maps::MODES, cpus)?,
            irq_modes: cpu_values(ebpf, maps::IRQ_MODES, cpus)?,
            irq_start: cpu_values(ebpf, maps::IRQ_START, cpus)?,
            softirqs: cpu_values(ebpf, maps::SIRQ_STATS, cpus)?,
            irq_lines: CpuSlots::map_rows(
                array_fd(ebpf, maps::IRQ_LINES.name)?,
                cpus,
                jp_common::IRQ_LINES as usize,
                maps::IRQ_LINES.name,
            )?,
        })
    }
}

/// Maps the array `map`, one value per CPU.
fn cpu_values<T: Pod>(ebpf: &Ebpf, map: maps::MapSpec, cpus: usize) -> anyhow::Result<CpuSlots<T>> {
    CpuSlots::map(array_fd(ebpf, map.name)?, cpus, map.name)
}

/// Mode counters summed over CPUs, by `mode::*` slot.
fn sum_modes(per_cpu: &[CpuModes]) -> Vec<u64> {
    let mut sums = vec![0u64; mode::COUNT as usize];
    for m in per_cpu {
        for (sum, n) in sums.iter_mut().zip(m.counts.iter()) {
            *sum += n;
        }
    }
    sums
}

/// `read()`, or the value last read if `stamp` has not moved since. The eBPF side bumps
/// the stamp after it wrote the map, and it is read before the map: an update whose bump
/// this pass did not see is seen by the next.
fn read_if_moved<T: Clone>(
    cache: &mut Option<(u64, T)>,
    stamp: u64,
    read: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    if let Some((at, value)) = cache.as_ref() {
        if *at == stamp {
            return Ok(value.clone());
        }
    }
    let value = read()?;
    *cache = Some((stamp, value.clone()));
    Ok(value)
}

fn map_data<'a>(ebpf: &'a Ebpf, name: &str) -> anyhow::Result<&'a MapData> {
    match ebpf.map(name) {
        Some(Map::PerCpuHashMap(d)) | Some(Map::PerCpuArray(d)) => Ok(d),
        Some(_) => bail!("map {name} is not a per-CPU map"),
        None => bail!("map {name} missing from the object"),
    }
}

pub(super) fn array_fd<'a>(ebpf: &'a Ebpf, name: &str) -> anyhow::Result<BorrowedFd<'a>> {
    match ebpf.map(name) {
        Some(Map::Array(d)) => Ok(d.fd().as_fd()),
        Some(_) => bail!("map {name} is not an array"),
        None => bail!("map {name} missing from the object"),
    }
}

/// jp's per-CPU maps, read with one batch syscall each. Remembers each map's
/// `max_entries` (which bounds the batch buffers) so that it is asked only once.
struct PerCpuMaps<'a> {
    ebpf: &'a Ebpf,
    /// Possible CPUs: the layout of per-CPU values.
    ncpus: usize,
    sizes: &'a mut HashMap<&'static str, usize>,
}

impl PerCpuMaps<'_> {
    /// Every (key, per-CPU values) of the map.
    fn entries<K: Pod, V: Pod>(&mut self, name: &'static str) -> anyhow::Result<Vec<(K, Vec<V>)>> {
        let map = map_data(self.ebpf, name)?;
        let max_entries = self.max_entries(name, map)?;
        read_percpu::<K, V>(map.fd().as_fd(), self.ncpus, max_entries)
            .with_context(|| format!("reading {name}"))
    }

    /// The map's `max_entries`, asked of the kernel once.
    fn max_entries(&mut self, name: &'static str, map: &MapData) -> anyhow::Result<usize> {
        if let Some(&n) = self.sizes.get(name) {
            return Ok(n);
        }
        let n = map
            .info()
            .with_context(|| format!("cannot read the size of map {name}"))?
            .max_entries() as usize;
        self.sizes.insert(name, n);
        Ok(n)
    }

    /// Sum over CPUs of a per-CPU `u64` histogram.
    fn sum_hash<K: Pod + Into<u64>>(
        &mut self,
        name: &'static str,
    ) -> anyhow::Result<HashMap<u64, u64>> {
        Ok(self
            .entries::<K, u64>(name)?
            .into_iter()
            .map(|(k, v)| (k.into(), v.iter().sum::<u64>()))
            .filter(|&(_, v)| v > 0)
            .collect())
    }
}

/// `JP_IRQ_LINES` as (irq, action) → the CPUs' statistics, like `JP_IRQ_STATS`: each
/// CPU's slot of a line belongs to the first handler that exited there on that CPU.
fn handlers_of_lines(lines: &[Vec<IrqLine>]) -> HandlerStats {
    let mut by_key: HashMap<IrqKey, Vec<IrqStats>> = HashMap::new();
    for (irq, per_cpu) in lines.iter().enumerate() {
        let Ok(irq) = u32::try_from(irq) else {
            break;
        };
        for line in per_cpu.iter().filter(|l| l.action != 0) {
            let key = IrqKey {
                irq,
                _pad: 0,
                action: line.action,
            };
            by_key.entry(key).or_default().push(line.stats);
        }
    }
    by_key.into_iter().collect()
}

/// One handler's statistics, summed over CPUs; identity from any CPU that filled it in.
#[derive(Debug, Default, PartialEq, Eq)]
struct MergedIrq {
    handled: u64,
    unhandled: u64,
    time_ns: u64,
    handler: u64,
    name: String,
}

fn merge_irq(per_cpu: &[IrqStats]) -> MergedIrq {
    let mut m = MergedIrq::default();
    for s in per_cpu {
        m.handled += s.handled;
        m.unhandled += s.unhandled;
        m.time_ns += s.time_ns;
        if m.handler == 0 && s.handler != 0 {
            m.handler = s.handler;
        }
        if m.name.is_empty() {
            let end = s.name.iter().position(|&b| b == 0).unwrap_or(s.name.len());
            m.name = String::from_utf8_lossy(&s.name[..end]).into_owned();
        }
    }
    if m.name.is_empty() {
        m.name = "?".to_string();
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_are_read_again_only_when_their_stamp_moved() {
        let mut cache = None;
        let mut reads = 0;
        let mut read = |stamp: u64, cache: &mut Option<(u64, u32)>| {
            read_if_moved(cache, stamp, || {
                reads += 1;
                Ok(reads)
            })
            .unwrap()
        };
        assert_eq!(read(0, &mut cache), 1, "the first pass reads");
        assert_eq!(read(0, &mut cache), 1, "same stamp: the last value");
        assert_eq!(read(3, &mut cache), 2, "moved: read again");
        assert_eq!(read(3, &mut cache), 2);
        let mut failing = Some((3, 7u32));
        assert!(read_if_moved(&mut failing, 4, || anyhow::bail!("gone")).is_err());
        assert_eq!(
            failing,
            Some((3, 7)),
            "a failed read keeps the last value and stamp"
        );
    }

    #[test]
    fn irq_stats_merge_sums_counts_and_takes_identity_from_any_cpu() {
        let mut a = IrqStats::ZERO;
        a.handled = 3;
        a.unhandled = 1;
        a.time_ns = 100;
        let mut b = IrqStats::ZERO;
        b.handled = 4;
        b.time_ns = 50;
        b.handler = 0xffff_ffff_8100_1000;
        b.name[..13].copy_from_slice(b"virtio1-req.0");
        let m = merge_irq(&[a, b]);
        assert_eq!(
            m,
            MergedIrq {
                handled: 7,
                unhandled: 1,
                time_ns: 150,
                handler: 0xffff_ffff_8100_1000,
                name: "virtio1-req.0".into()
            }
        );
        assert_eq!(merge_irq(&[IrqStats::ZERO]).name, "?");
    }

    #[test]
    fn line_slots_group_by_handler_across_cpus() {
        let slot = |action: u64, handled: u64| IrqLine {
            action,
            stats: IrqStats {
                handled,
                ..IrqStats::ZERO
            },
        };
        let free = slot(0, 0);
        // Line 0 unused; line 1: CPU 0 took handler A, CPU 1 handler B (a shared line).
        let lines = vec![vec![free, free], vec![slot(0xa, 2), slot(0xb, 5)]];
        let mut got: Vec<(u32, u64, Vec<u64>)> = handlers_of_lines(&lines)
            .into_iter()
            .map(|(k, v)| (k.irq, k.action, v.iter().map(|s| s.handled).collect()))
            .collect();
        got.sort();
        assert_eq!(got, [(1, 0xa, vec![2]), (1, 0xb, vec![5])]);
    }
}
