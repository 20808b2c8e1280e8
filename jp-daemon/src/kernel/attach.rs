//! Loading and attaching jp's kernel programs: the probe configuration from the running
//! kernel, the eBPF object sized for this host, the tracepoint programs, and the
//! sampler's `cpu-clock` events, followed across CPU hotplug and re-opened at a new
//! frequency.
use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::os::fd::OwnedFd;

use anyhow::{bail, Context as _};
use aya::programs::perf_event::{
    PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent,
};
use aya::programs::{BtfTracePoint, PerfEvent, RawTracePoint};
use aya::Ebpf;
use jp_common::ProbeConfig;

use super::btf::Btf;
use super::online_cpus::{parse_cpu_list, OnlineCpus};
use super::options::KernelOptions;
use super::text_counts::TextLayout;
use crate::probes;
use crate::store::kernel::symbols::Symbols;

pub(super) const SAMPLER: &str = "jp_sample";
const IRQ_ENTRY: &str = "jp_irq_entry";
const IRQ_EXIT: &str = "jp_irq_exit";
const SIRQ_ENTRY: &str = "jp_sirq_entry";
const SIRQ_EXIT: &str = "jp_sirq_exit";
const OFFCPU: &str = "jp_offcpu";
/// x86-64's device-interrupt entry stub: in a stack trace taken in a hard-IRQ handler,
/// the frame after it is the interrupted IP (see jp-ebpf's `irq.rs`).
const IRQ_ENTRY_STUB: &str = "asm_common_interrupt";
const POSSIBLE_CPUS: &str = "/sys/devices/system/cpu/possible";

/// What the object's host-sized maps were sized for at load: what mapping and reading
/// them needs.
pub(super) struct MapShape {
    /// Number of possible CPUs: the layout of per-CPU map values.
    pub ncpus: usize,
    /// The highest possible CPU number + 1: values of the arrays indexed by CPU number.
    pub cpu_slots: usize,
    /// The core-text counter arrays.
    pub text: TextLayout,
    /// Slots per CPU of the JVM samples' log.
    pub ctx_log_slots: u32,
    /// Slots per CPU of the off-CPU log (0: off-CPU is off).
    pub offcpu_log_slots: u32,
}

/// jp's kernel programs, loaded and attached.
pub(super) struct Probes {
    /// `None` once detached.
    ebpf: Option<Ebpf>,
    opts: KernelOptions,
    cfg: ProbeConfig,
    /// perf_event link per online CPU.
    sampler_links: BTreeMap<u32, PerfEventLinkId>,
    /// Program name → what it is attached to (or why not).
    attached: Vec<(&'static str, String)>,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    /// Keeps `kernel.bpf_stats_enabled` on while we run (only with `bpf_stats = true`).
    stats_fd: Option<OwnedFd>,
    /// The online-CPU file, kept open (see `OnlineCpus`).
    online: Option<OnlineCpus>,
    /// CPUs the sampler could not be attached to, since start.
    attach_failures: u64,
}

impl Probes {
    /// Creates the object's maps, sized for this host and kernel; no program runs yet
    /// ([`Probes::start_programs`]).
    pub(super) fn load(
        opts: KernelOptions,
        symbols: &Symbols,
    ) -> anyhow::Result<(Probes, MapShape)> {
        let cfg = probe_config(&opts, symbols)?;
        let text = TextLayout::new(cfg.text_start, cfg.text_end, cfg.shift)?;
        log::info!(
            "core text: {} buckets of {} bytes, {} KiB of counters per array (2 arrays, all CPUs)",
            text.buckets,
            1u64 << cfg.shift,
            text.bytes() / 1024
        );
        // Per-CPU maps hold one value per possible CPU; the arrays indexed by CPU number
        // need one per possible number.
        let possible = std::fs::read_to_string(POSSIBLE_CPUS)
            .with_context(|| format!("cannot read {POSSIBLE_CPUS}"))?;
        let possible = parse_cpu_list(possible.trim())?;
        let cpu_slots = possible.iter().max().map_or(1, |m| m + 1);
        let ebpf = probes::load(probes::Instance::Kernel {
            config: &cfg,
            text_blocks: text.blocks,
            text_pages: text.pages,
            cpu_slots,
        })?;
        let shape = MapShape {
            ncpus: possible.len(),
            cpu_slots: cpu_slots as usize,
            text,
            ctx_log_slots: cfg.ctx_log_mask + 1,
            offcpu_log_slots: opts.offcpu_log_slots(),
        };
        let probes = Probes {
            ebpf: Some(ebpf),
            opts,
            cfg,
            sampler_links: BTreeMap::new(),
            attached: Vec::new(),
            logger: None,
            stats_fd: None,
            online: None,
            attach_failures: 0,
        };
        Ok((probes, shape))
    }

    /// Loads and attaches every program: the tracepoints, then the sampler on every
    /// online CPU. Fails with the verifier's full log if a program is rejected.
    pub(super) fn start_programs(&mut self) -> anyhow::Result<()> {
        let ebpf = self.ebpf.as_mut().context("not attached")?;
        self.logger = match aya_log::EbpfLogger::init(ebpf) {
            Ok(l) => Some(l),
            Err(e) => {
                log::warn!("eBPF log messages unavailable: {e}");
                None
            }
        };
        self.stats_fd = crate::bpf_stats::enable_run_time(self.opts.bpf_stats);
        self.attached = attach_tracepoints(ebpf, &self.opts)?;
        if self.cfg.offcpu_log_mask > 0 {
            self.attached.push(attach_offcpu(ebpf, OFFCPU)?);
        }
        let p: &mut PerfEvent = program_mut(ebpf, SAMPLER)?;
        p.load().map_err(|e| load_error(SAMPLER, e))?;
        self.follow_cpus()?;
        if self.sampler_links.is_empty() {
            bail!("could not attach the sampler to any CPU");
        }
        Ok(())
    }

    /// Attaches the sampler to CPUs that came online and detaches it from CPUs that
    /// went away.
    pub(super) fn follow_cpus(&mut self) -> anyhow::Result<()> {
        let online = match self.online.as_mut() {
            Some(o) => o.read()?,
            None => {
                let mut o = OnlineCpus::open()?;
                let cpus = o.read()?;
                self.online = Some(o);
                cpus
            }
        };
        let Some(ebpf) = self.ebpf.as_mut() else {
            return Ok(());
        };
        let p: &mut PerfEvent = program_mut(ebpf, SAMPLER)?;
        let (add, remove) = cpu_changes(self.sampler_links.keys().copied(), &online);
        for cpu in remove {
            if let Some(link) = self.sampler_links.remove(&cpu) {
                log::info!("CPU {cpu} went offline: sampler detached");
                if let Err(e) = p.detach(link) {
                    log::warn!("detaching the sampler from CPU {cpu}: {e}");
                }
            }
        }
        for cpu in add {
            match p.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(self.opts.frequency_hz),
                false,
            ) {
                Ok(link) => {
                    self.sampler_links.insert(cpu, link);
                }
                Err(e) => {
                    // A CPU that is going offline right now fails here; the next read
                    // tries again.
                    self.attach_failures += 1;
                    log::warn!("cannot attach the sampler to CPU {cpu}: {e}");
                }
            }
        }
        Ok(())
    }

    /// Re-opens the `cpu-clock` events at `hz`; false when they already run at `hz`.
    pub(super) fn set_frequency(&mut self, hz: u64) -> anyhow::Result<bool> {
        if hz == 0 {
            bail!("sampling frequency must be at least 1 Hz");
        }
        if hz == self.opts.frequency_hz {
            return Ok(false);
        }
        let Some(ebpf) = self.ebpf.as_mut() else {
            bail!("not attached");
        };
        let p: &mut PerfEvent = program_mut(ebpf, SAMPLER)?;
        for (cpu, link) in std::mem::take(&mut self.sampler_links) {
            if let Err(e) = p.detach(link) {
                log::warn!("detaching the sampler from CPU {cpu}: {e}");
            }
        }
        self.opts.frequency_hz = hz;
        self.follow_cpus()?;
        if self.sampler_links.is_empty() {
            bail!("could not re-attach the sampler to any CPU at {hz} Hz");
        }
        Ok(true)
    }

    /// Hands the eBPF side's log messages to jpd's log.
    pub(super) fn flush_log(&mut self) {
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
    }

    pub(super) fn detach_all(&mut self) {
        self.sampler_links.clear();
        self.logger = None;
        // Dropping the object closes every program, link and map fd.
        self.ebpf = None;
    }

    /// The object, `None` once detached.
    pub(super) fn ebpf(&self) -> Option<&Ebpf> {
        self.ebpf.as_ref()
    }

    pub(super) fn ebpf_mut(&mut self) -> Option<&mut Ebpf> {
        self.ebpf.as_mut()
    }

    pub(super) fn options(&self) -> &KernelOptions {
        &self.opts
    }

    pub(super) fn config(&self) -> &ProbeConfig {
        &self.cfg
    }

    /// The CPUs the sampler is attached to, in order.
    pub(super) fn cpus(&self) -> Vec<u32> {
        self.sampler_links.keys().copied().collect()
    }

    /// The programs other than the sampler, with what each is attached to.
    pub(super) fn attached(&self) -> &[(&'static str, String)] {
        &self.attached
    }

    /// Whether jpd itself keeps the kernel's BPF run-time statistics on.
    pub(super) fn holds_bpf_stats(&self) -> bool {
        self.stats_fd.is_some()
    }

    pub(super) fn attach_failures(&self) -> u64 {
        self.attach_failures
    }
}

/// The probes' configuration for the running kernel: its text range and entry stub
/// (`/proc/kallsyms`), its struct offsets (BTF) and the options.
fn probe_config(opts: &KernelOptions, symbols: &Symbols) -> anyhow::Result<ProbeConfig> {
    let btf = Btf::load_vmlinux()?;
    let irq_entry = symbols
        .by_name(IRQ_ENTRY_STUB)
        .filter(|s| s.len > 0)
        .with_context(|| format!("no {IRQ_ENTRY_STUB} in /proc/kallsyms (not x86-64?)"))?;
    let sched_text = if opts.offcpu { sched_text()? } else { (0, 0) };
    Ok(ProbeConfig {
        text_start: symbols.text_start,
        text_end: symbols.text_end,
        irq_entry_start: irq_entry.addr,
        irq_entry_end: irq_entry.addr + irq_entry.len,
        shift: opts.shift,
        irqaction_handler_off: btf.member_offset("irqaction", "handler")?,
        irqaction_name_off: btf.member_offset("irqaction", "name")?,
        irq_ip_every: opts.irq_ip_sample_every,
        irq_ip_min_interval_ns: opts.irq_ip_min_interval_ns(),
        ctx_log_mask: opts.ctx_log_slots() - 1,
        task_pid_off: if opts.offcpu {
            task_pid_offset(&btf)?
        } else {
            0
        },
        offcpu_log_mask: opts.offcpu_log_slots().saturating_sub(1),
        offcpu_cap_per_cpu: opts.offcpu_max_switches_per_cpu_per_second,
        sched_text_start: sched_text.0,
        sched_text_end: sched_text.1,
    })
}

/// Loads and attaches the hard-IRQ and softirq tracepoint programs; returns each with
/// what it is attached to.
fn attach_tracepoints(
    ebpf: &mut Ebpf,
    opts: &KernelOptions,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut attached = Vec::new();
    for (prog, tp) in [
        (IRQ_ENTRY, "irq_handler_entry"),
        (IRQ_EXIT, "irq_handler_exit"),
        (SIRQ_ENTRY, "softirq_entry"),
        (SIRQ_EXIT, "softirq_exit"),
    ] {
        let p: &mut RawTracePoint = program_mut(ebpf, prog)?;
        p.load().map_err(|e| load_error(prog, e))?;
        p.attach(tp)
            .with_context(|| format!("cannot attach {prog} to {tp}"))?;
        let what = if prog == IRQ_ENTRY {
            match opts.irq_ip_samples_per_second {
                0 => format!("raw_tracepoint {tp} (interrupted IP off)"),
                n => format!(
                    "raw_tracepoint {tp} (+ interrupted IP via kernel stack, at most {n}/s per CPU)"
                ),
            }
        } else {
            format!("raw_tracepoint {tp}")
        };
        attached.push((prog, what));
    }
    Ok(attached)
}

/// The scheduler's switch, as a `tp_btf` program: it runs through the same
/// `bpf_trace_run` call as a raw tracepoint, and its typed task arguments let it keep its
/// state in the tasks (task-local storage); the `sched:sched_switch` perf tracepoint would
/// first format the event's fields (two 16-byte names among them) for nothing.
const SWITCH: &str = "sched_switch";

/// Loads `program` and attaches it to the scheduler's switch.
fn attach_offcpu(ebpf: &mut Ebpf, program: &'static str) -> anyhow::Result<(&'static str, String)> {
    let btf = aya::Btf::from_sys_fs()
        .context("off-CPU time needs the kernel's BTF (/sys/kernel/btf/vmlinux)")?;
    let p: &mut BtfTracePoint = program_mut(ebpf, program)?;
    p.load(SWITCH, &btf).map_err(|e| load_error(program, e))?;
    p.attach()
        .with_context(|| format!("cannot attach {program} to {SWITCH}"))?;
    Ok((
        program,
        format!("tp_btf {SWITCH} (off-CPU time of joined threads)"),
    ))
}

/// `offsetof(struct task_struct, pid)`, checked to be followed by `tgid` (the program
/// reads both in one 8-byte read).
fn task_pid_offset(btf: &Btf) -> anyhow::Result<u32> {
    let pid = btf.member_offset("task_struct", "pid")?;
    let tgid = btf.member_offset("task_struct", "tgid")?;
    if tgid != pid + 4 {
        bail!("task_struct's tgid ({tgid}) does not follow its pid ({pid}): off-CPU time unsupported on this kernel");
    }
    Ok(pid)
}

/// `[__sched_text_start, __sched_text_end)` from `/proc/kallsyms` (markers that share
/// their address with a function, so not in `Symbols`).
fn sched_text() -> anyhow::Result<(u64, u64)> {
    let file = std::fs::File::open("/proc/kallsyms").context("cannot open /proc/kallsyms")?;
    let (mut start, mut end) = (None, None);
    for line in std::io::BufReader::new(file).lines() {
        let line = line.context("reading /proc/kallsyms")?;
        let mut f = line.split_whitespace();
        let (Some(addr), Some(_), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let slot = match name {
            "__sched_text_start" => &mut start,
            "__sched_text_end" => &mut end,
            _ => continue,
        };
        *slot = u64::from_str_radix(addr, 16).ok();
        if start.is_some() && end.is_some() {
            break;
        }
    }
    match (start, end) {
        (Some(s), Some(e)) if s != 0 && s < e => Ok((s, e)),
        _ => bail!("no __sched_text_start/__sched_text_end in /proc/kallsyms (addresses hidden?)"),
    }
}

pub(super) fn program_mut<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> anyhow::Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = ebpf
        .program_mut(name)
        .with_context(|| format!("program {name} missing from the object"))?;
    p.try_into()
        .with_context(|| format!("program {name} has an unexpected type"))
}

/// Keeps the verifier log: `ProgramError`'s Display includes it for load failures.
pub(super) fn load_error(name: &str, e: aya::programs::ProgramError) -> anyhow::Error {
    anyhow::anyhow!("the kernel rejected eBPF program {name}: {e}")
}

/// CPUs to attach to and to detach from.
fn cpu_changes(attached: impl Iterator<Item = u32>, online: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let attached: Vec<u32> = attached.collect();
    let add = online
        .iter()
        .copied()
        .filter(|c| !attached.contains(c))
        .collect();
    let remove = attached
        .into_iter()
        .filter(|c| !online.contains(c))
        .collect();
    (add, remove)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_changes_attach_new_and_detach_gone() {
        let (add, remove) = cpu_changes([0, 1, 2].into_iter(), &[0, 2, 3]);
        assert_eq!(add, vec![3]);
        assert_eq!(remove, vec![1]);
        let (add, remove) = cpu_changes(std::iter::empty(), &[0, 1]);
        assert_eq!((add, remove), (vec![0, 1], vec![]));
    }
}
