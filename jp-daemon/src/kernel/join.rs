//! CPU per exact JVM context (issue 13), the kernel side: tells `jp_sample` which
//! threads publish a context slot (`JP_JVM_PIDS`, `JP_JVM_THREADS`) and hands the
//! samples it counted under them (`JP_CTX_SAMPLES`) to whoever resolves contexts.
//!
//! The seam is [`ContextJoin`]: the kernel collector knows nothing of JVM stores; the
//! daemon connects it to the one that receives the agents' records.
use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::Context as _;
use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::Ebpf;
use jp_common::{CtxKey, JvmThread};

/// A thread that announced its context slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotThread {
    pub tgid: u32,
    pub tid: u32,
    pub slot: u64,
    pub stream: u64,
}

/// Where the join's threads come from and its samples go.
pub trait ContextJoin: Send + Sync {
    /// The announced threads, if they changed since `version` (with the new version).
    fn threads(&self, version: Option<u64>) -> Option<(u64, Vec<SlotThread>)>;
    /// An announced thread that is not its process's: the announcement is refused.
    fn refuse(&self, thread: &SlotThread);
    /// Samples counted since the last call (deltas), `period_ns` each.
    fn samples(&self, period_ns: u64, samples: &[(CtxKey, u64)]);
}

pub const JVM_PIDS: &str = "JP_JVM_PIDS";
pub const JVM_THREADS: &str = "JP_JVM_THREADS";
pub const CTX_SAMPLES: &str = "JP_CTX_SAMPLES";

/// What the collector keeps between passes for the join.
#[derive(Default)]
pub struct JoinState {
    version: Option<u64>,
    pids: HashSet<u32>,
    threads: HashMap<u64, JvmThread>,
    /// Totals of `JP_CTX_SAMPLES` as last read (the map only grows), for deltas.
    last: HashMap<CtxKey, u64>,
}

impl JoinState {
    /// Mirrors the announced threads into the sampler's maps. Threads whose id is not
    /// in their process are refused (a process may announce only its own threads).
    pub fn sync_threads(&mut self, ebpf: &mut Ebpf, join: &dyn ContextJoin) -> anyhow::Result<()> {
        let Some((version, announced)) = join.threads(self.version) else {
            return Ok(());
        };
        let mut want: HashMap<u64, JvmThread> = HashMap::new();
        for t in &announced {
            if !Path::new(&format!("/proc/{}/task/{}", t.tgid, t.tid)).exists() {
                join.refuse(t);
                continue;
            }
            let key = (u64::from(t.tgid) << 32) | u64::from(t.tid);
            want.insert(
                key,
                JvmThread {
                    slot: t.slot,
                    stream: t.stream,
                },
            );
        }
        let pids: HashSet<u32> = want.keys().map(|k| (k >> 32) as u32).collect();
        {
            let mut map: BpfHashMap<&mut MapData, u64, JvmThread> =
                BpfHashMap::try_from(ebpf.map_mut(JVM_THREADS).context("no JP_JVM_THREADS")?)?;
            for k in self.threads.keys().filter(|k| !want.contains_key(k)) {
                let _ = map.remove(k);
            }
            for (k, v) in &want {
                if self.threads.get(k) != Some(v) {
                    map.insert(k, v, 0).with_context(|| {
                        format!("JP_JVM_THREADS is full ({} threads)", want.len())
                    })?;
                }
            }
        }
        {
            let mut map: BpfHashMap<&mut MapData, u32, u32> =
                BpfHashMap::try_from(ebpf.map_mut(JVM_PIDS).context("no JP_JVM_PIDS")?)?;
            for p in self.pids.difference(&pids) {
                let _ = map.remove(p);
            }
            for p in pids.difference(&self.pids) {
                map.insert(p, 1, 0).context("JP_JVM_PIDS is full")?;
            }
        }
        self.threads = want;
        self.pids = pids;
        self.version = Some(version);
        Ok(())
    }

    /// The samples counted since the last pass (`entries` = the map's per-CPU values),
    /// handed to `join`. Keys of processes no longer joined are deleted from the map
    /// once read (no sample can come for them any more).
    pub fn take_samples(
        &mut self,
        ebpf: &mut Ebpf,
        entries: Vec<(CtxKey, Vec<u64>)>,
        period_ns: u64,
        join: &dyn ContextJoin,
    ) {
        let mut deltas = Vec::new();
        let mut gone = Vec::new();
        for (key, per_cpu) in entries {
            let total: u64 = per_cpu.iter().sum();
            let before = self.last.insert(key, total).unwrap_or(0);
            if total > before {
                deltas.push((key, total - before));
            }
            if !self.pids.contains(&key.tgid) {
                gone.push(key);
            }
        }
        if !deltas.is_empty() {
            join.samples(period_ns, &deltas);
        }
        if gone.is_empty() {
            return;
        }
        if let Some(m) = ebpf.map_mut(CTX_SAMPLES) {
            if let Ok(mut map) = aya::maps::PerCpuHashMap::<&mut MapData, CtxKey, u64>::try_from(m)
            {
                for k in gone {
                    let _ = map.remove(&k);
                    self.last.remove(&k);
                }
            }
        }
    }
}
