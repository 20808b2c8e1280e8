//! Off-CPU time, the user-space half of `jp_offcpu` (jp-ebpf's `offcpu.rs`; what it needs
//! from the running kernel and its attach are `attach.rs`'s, as every program's):
//! `JP_OFFCPU_LOG`, drained every pass like the JVM samples' log (`ctx_log`): each CPU's `OffcpuCpu::logged` is its write position, the
//! record numbered `n` is in slot `n % slots`, written before the position moves past it.
use std::collections::HashMap;

use aya::Ebpf;
use jp_common::{maps, OffcpuCpu, OffcpuRecord};

use super::mapping::CpuSlots;
use crate::store::jvm::offcpu::OffcpuCounters;

/// What a pass read of off-CPU time: the periods summed by (tgid, stream, context,
/// reason), as (record holding their summed ns, periods), and the program's counters
/// summed over CPUs (totals since attach).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffcpuPass {
    pub periods: Vec<(OffcpuRecord, u64)>,
    pub counters: OffcpuCounters,
}

pub(super) struct OffcpuLog {
    cpus: CpuSlots<OffcpuCpu>,
    slots: CpuSlots<OffcpuRecord>,
    per_cpu: u64,
    drained: Vec<u64>,
    lost: u64,
}

impl OffcpuLog {
    /// Maps the counters and the log of `cpus` CPUs, `per_cpu` slots each.
    pub(super) fn map(ebpf: &Ebpf, cpus: usize, per_cpu: u32) -> anyhow::Result<OffcpuLog> {
        let fd = |name: &str| super::read::array_fd(ebpf, name);
        Ok(OffcpuLog {
            cpus: CpuSlots::map(fd(maps::OFFCPU_CPUS.name)?, cpus, maps::OFFCPU_CPUS.name)?,
            slots: CpuSlots::map_rows(
                fd(maps::OFFCPU_LOG.name)?,
                cpus,
                per_cpu as usize,
                maps::OFFCPU_LOG.name,
            )?,
            per_cpu: u64::from(per_cpu),
            drained: vec![0; cpus],
            lost: 0,
        })
    }

    /// The periods logged since the last drain, summed by key. Positions are read before
    /// the slots and again after: a slot the program may have reused meanwhile is lost
    /// (counted), never read half-written.
    pub(super) fn drain(&mut self) -> OffcpuPass {
        let before: Vec<u64> = self.cpus.read().iter().map(|c| c.logged).collect();
        let mut read: Vec<(usize, u64, Vec<OffcpuRecord>)> = Vec::with_capacity(before.len());
        for (cpu, &end) in before.iter().enumerate() {
            let Some(drained) = self.drained.get_mut(cpu) else {
                continue;
            };
            let start = (*drained).min(end).max(end.saturating_sub(self.per_cpu));
            self.lost += start.saturating_sub(*drained);
            let records = (start..end)
                .filter_map(|n| self.slots.value(cpu, (n % self.per_cpu) as usize))
                .collect();
            read.push((cpu, start, records));
            *drained = end;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let after = self.cpus.read();
        let mut sums: HashMap<(u32, u64, u64, u64), (u64, u64)> = HashMap::new();
        for (cpu, start, records) in read {
            let now = after.get(cpu).map_or(0, |c| c.logged);
            let unsure = now.saturating_sub(self.per_cpu).saturating_sub(start);
            let unsure = usize::try_from(unsure)
                .unwrap_or(usize::MAX)
                .min(records.len());
            self.lost += unsure as u64;
            for r in records.into_iter().skip(unsure) {
                let s = sums.entry((r.tgid, r.stream, r.id, r.reason)).or_default();
                s.0 = s.0.saturating_add(r.ns);
                s.1 += 1;
            }
        }
        let mut counters = OffcpuCounters {
            lost: self.lost,
            ..OffcpuCounters::default()
        };
        for c in &after {
            counters.over_cap += c.over_cap;
            counters.orphans += c.orphans;
            counters.stale += c.stale;
            counters.read_failed += c.read_failed;
        }
        let periods = sums
            .into_iter()
            .map(|((tgid, stream, id, reason), (ns, n))| {
                let r = OffcpuRecord {
                    tgid,
                    _pad: 0,
                    id,
                    stream,
                    ns,
                    reason,
                };
                (r, n)
            })
            .collect();
        OffcpuPass { periods, counters }
    }
}
