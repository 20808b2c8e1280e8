//! jp's USDT record program (`jp_usdt_record` in jp-ebpf's `usdt.rs`) and its maps,
//! from an instance of jp's eBPF object of its own ([`crate::probes`]): the USDT
//! collector owns its own ring buffer and can come and go independently.
use std::os::fd::{AsFd as _, BorrowedFd};

use anyhow::{bail, Context as _};
use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::UProbe;
use aya::Ebpf;
use jp_common::maps;
use jp_common::ring::{ProcessRing, RingLimits};
use jp_common::usdt::UsdtSpec;
use jp_common::wire::usdt_stat;

use super::fair::{self, RingShare};
use crate::probes;
use crate::store::jvm::UsdtKernelCounters;

pub const PROGRAM: &str = "jp_usdt_record";
const SPECS: &str = maps::USDT_SPECS.name;
const STATS: &str = maps::USDT_STATS.name;
const USDT_EVENTS: &str = maps::USDT_EVENTS.name;
const PROCS: &str = maps::USDT_PROCS.name;
/// Capacity of `JP_USDT_SPECS`: probe sites attached at once.
pub const MAX_SITES: usize = maps::USDT_SPECS.max_entries as usize;

/// Smallest and largest ring buffer accepted (the kernel needs a power of two times
/// the page size; the largest keeps a typo from pinning gigabytes).
pub const MIN_RING_BYTES: u32 = 64 << 10;
pub const MAX_RING_BYTES: u32 = 1 << 30;

/// The loaded program and the maps the collector uses.
pub struct UsdtProgram {
    ebpf: Ebpf,
    specs: HashMap<MapData, u64, UsdtSpec>,
    stats: PerCpuArray<MapData, u64>,
    procs: HashMap<MapData, u32, ProcessRing>,
    ring: Option<RingBuf<MapData>>,
    /// Keeps `kernel.bpf_stats_enabled` on while loaded, when asked (for [`UsdtProgram::run_stats`]).
    _stats: Option<std::os::fd::OwnedFd>,
}

impl UsdtProgram {
    /// Loads the program (root needed) with a ring buffer of `ring_bytes` (a power of
    /// two, at least a page) shared as `share` says, holding BPF run-time statistics on
    /// while loaded when `bpf_stats`. Fails with the verifier's log if the program is
    /// rejected.
    pub fn load(
        ring_bytes: u32,
        share: &RingShare,
        bpf_stats: bool,
    ) -> anyhow::Result<UsdtProgram> {
        if !ring_bytes.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring_bytes)
        {
            bail!(
                "USDT ring buffer of {ring_bytes} bytes: must be a power of two from {MIN_RING_BYTES} to {MAX_RING_BYTES}"
            );
        }
        let mut ebpf = probes::load(probes::Instance::Usdt { ring_bytes })?;
        let program: &mut UProbe = ebpf
            .program_mut(PROGRAM)
            .with_context(|| format!("program {PROGRAM} missing from the eBPF object"))?
            .try_into()
            .with_context(|| format!("program {PROGRAM} is not a uprobe program"))?;
        program
            .load()
            .map_err(|e| anyhow::anyhow!("the kernel rejected eBPF program {PROGRAM}: {e}"))?;
        let take = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .with_context(|| format!("map {name} missing from the eBPF object"))
        };
        let specs = HashMap::try_from(take(&mut ebpf, SPECS)?)
            .with_context(|| format!("map {SPECS} has an unexpected type"))?;
        let stats = PerCpuArray::try_from(take(&mut ebpf, STATS)?)
            .with_context(|| format!("map {STATS} has an unexpected type"))?;
        let ring = RingBuf::try_from(take(&mut ebpf, USDT_EVENTS)?)
            .with_context(|| format!("map {USDT_EVENTS} has an unexpected type"))?;
        let procs = HashMap::try_from(take(&mut ebpf, PROCS)?)
            .with_context(|| format!("map {PROCS} has an unexpected type"))?;
        configure_share(&mut ebpf, share)?;
        let run_stats = crate::bpf_stats::enable_run_time(bpf_stats);
        Ok(UsdtProgram {
            ebpf,
            specs,
            stats,
            procs,
            ring: Some(ring),
            _stats: run_stats,
        })
    }

    /// The ring buffer, for the reader (once).
    pub fn take_ring(&mut self) -> Option<RingBuf<MapData>> {
        self.ring.take()
    }

    /// The program, to attach to uprobe events.
    pub fn fd(&self) -> anyhow::Result<BorrowedFd<'_>> {
        let p: &UProbe = self
            .ebpf
            .program(PROGRAM)
            .context("program missing")?
            .try_into()
            .context("program type")?;
        Ok(p.fd().context("program not loaded")?.as_fd())
    }

    /// Makes `cookie` select `spec` (before attaching with that cookie).
    pub fn set_spec(&mut self, cookie: u64, spec: &UsdtSpec) -> anyhow::Result<()> {
        self.specs
            .insert(cookie, spec, 0)
            .with_context(|| format!("cannot store the USDT spec of cookie {cookie}"))
    }

    /// Forgets `cookie` (after its links are closed).
    pub fn remove_spec(&mut self, cookie: u64) {
        if let Err(e) = self.specs.remove(&cookie) {
            log::debug!("removing USDT spec {cookie}: {e}");
        }
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> anyhow::Result<UsdtKernelCounters> {
        let slot = |i: u32| -> anyhow::Result<u64> {
            let values = self
                .stats
                .get(&i, 0)
                .with_context(|| format!("reading {STATS}[{i}]"))?;
            Ok(values.iter().fold(0u64, |a, v| a.wrapping_add(*v)))
        };
        Ok(UsdtKernelCounters {
            fired: slot(usdt_stat::FIRED)?,
            sent: slot(usdt_stat::SENT)?,
            ring_full: slot(usdt_stat::RING_FULL)?,
            fault: slot(usdt_stat::FAULT)?,
            too_long: slot(usdt_stat::TOO_LONG)?,
            rate_limited: slot(usdt_stat::RATE_LIMITED)?,
            not_allowed: slot(usdt_stat::NOT_ALLOWED)?,
        })
    }

    /// Process `tgid`'s share of the ring, if it has fired since its entry was made
    /// (entries of the least recently firing processes are evicted).
    pub fn process_ring(&self, tgid: u32) -> Option<ProcessRing> {
        self.procs.get(&tgid, 0).ok()
    }

    /// `(run_count, run_time_ns)` of the program (needs `kernel.bpf_stats_enabled`).
    pub fn run_stats(&self) -> Option<(u64, u64)> {
        let info = self.ebpf.program(PROGRAM)?.info().ok()?;
        Some((
            info.run_count(),
            u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
        ))
    }
}

/// Writes the allow-lists, then the limits that switch them on, before anything is
/// attached: the program never runs with half of them.
fn configure_share(ebpf: &mut Ebpf, share: &RingShare) -> anyhow::Result<()> {
    let limits_name = maps::USDT_LIMITS.name;
    let uids_name = maps::USDT_ALLOW_UIDS.name;
    let cgroups_name = maps::USDT_ALLOW_CGROUPS.name;
    let mut uids: HashMap<_, u32, u8> = HashMap::try_from(
        ebpf.map_mut(uids_name)
            .with_context(|| format!("map {uids_name} missing from the eBPF object"))?,
    )?;
    for &uid in &share.allow_uids {
        uids.insert(uid, 1, 0)
            .with_context(|| format!("cannot store uid {uid} in {uids_name}"))?;
    }
    let mut cgroups: HashMap<_, u64, u8> = HashMap::try_from(
        ebpf.map_mut(cgroups_name)
            .with_context(|| format!("map {cgroups_name} missing from the eBPF object"))?,
    )?;
    for path in &share.allow_cgroups {
        // A cgroup that does not exist (yet) cannot be matched by id: its processes
        // stay outside until jpd restarts, the safe side of an allow-list.
        match fair::cgroup_id(path) {
            Ok(id) => cgroups
                .insert(id, 1, 0)
                .with_context(|| format!("cannot store cgroup {path} in {cgroups_name}"))?,
            Err(e) => log::warn!(
                "[usdt] allow_cgroups: {path}: {e} (under {}); its processes are not listened to",
                fair::CGROUP2_ROOT
            ),
        }
    }
    let mut limits: Array<_, RingLimits> = Array::try_from(
        ebpf.map_mut(limits_name)
            .with_context(|| format!("map {limits_name} missing from the eBPF object"))?,
    )?;
    limits
        .set(0, share.limits(), 0)
        .with_context(|| format!("cannot write {limits_name}"))?;
    Ok(())
}
