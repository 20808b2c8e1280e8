//! Loads and attaches jp's eBPF programs, follows CPU hotplug, and copies the maps
//! into the [`Store`] every `read_interval`.
//!
//! Life cycle: [`KernelCollector::start`] loads everything and starts a reader thread
//! (no async runtime needed); [`KernelCollector::refresh`] reads the maps right now;
//! [`KernelCollector::shutdown`] (or drop) stops the thread and detaches every link by
//! closing the eBPF object. Between passes, a [`JoinWaker`] has the thread tell the
//! sampler about JVM threads as soon as they announce their context.
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _};
use aya::maps::{Map, MapData};
use aya::programs::perf_event::{
    PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent,
};
use aya::programs::{PerfEvent, RawTracePoint};
use aya::{Ebpf, Pod};
use jp_common::{
    maps, mode, CpuModes, CpuSoftirqs, IrqKey, IrqLine, IrqStart, IrqStats, ProbeConfig,
    NR_SOFTIRQS,
};

use super::batch::read_percpu;
use super::btf::Btf;
use super::ctx_log::CtxLog;
use super::join::{ContextJoin, JoinState};
use super::mapping::CpuSlots;
use super::online_cpus::{parse_cpu_list, OnlineCpus};
use super::text_counts::{TextCounts, TextLayout};
use super::KernelOptions;
use crate::lock::lock;
use crate::probes;
use crate::store::kernel::symbols::{Symbols, SymbolsStamp};
use crate::store::kernel::{
    CollectorStatus, IrqHandlerCounts, KernelCounts, ModeCounts, ProgramStats, SoftirqCounts, Store,
};

const CTX_LOG: &str = maps::CTX_LOG.name;
const IRQ_LINES: &str = maps::IRQ_LINES.name;
const IRQ_MODES: &str = maps::IRQ_MODES.name;
const IRQ_START: &str = maps::IRQ_START.name;
const IRQ_TEXT_COUNTS: &str = maps::IRQ_TEXT_COUNTS.name;
const IRQ_TEXT_DIRTY: &str = maps::IRQ_TEXT_DIRTY.name;
const MODES: &str = maps::MODES.name;
const SIRQ_STATS: &str = maps::SIRQ_STATS.name;
const TEXT_COUNTS: &str = maps::TEXT_COUNTS.name;
const TEXT_DIRTY: &str = maps::TEXT_DIRTY.name;
const SAMPLER: &str = "jp_sample";
const IRQ_ENTRY: &str = "jp_irq_entry";
const IRQ_EXIT: &str = "jp_irq_exit";
const SIRQ_ENTRY: &str = "jp_sirq_entry";
const SIRQ_EXIT: &str = "jp_sirq_exit";
/// x86-64's device-interrupt entry stub: in a stack trace taken in a hard-IRQ handler,
/// the frame after it is the interrupted IP (see jp-ebpf's `irq.rs`).
const IRQ_ENTRY_STUB: &str = "asm_common_interrupt";
/// Whether the kernel's BPF run-time statistics are on (for anyone's reason).
const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Spacing of the reader's join syncs between passes: a JVM starting hundreds of
/// threads at once costs one sync per this much time, not one per thread.
const JOIN_SYNC_SPACING: Duration = Duration::from_millis(10);

/// What wakes the reader thread before its next pass.
enum Wake {
    Stop,
    /// The announced JVM threads changed ([`JoinWaker`]).
    Join,
}

/// Handle on the running collector.
pub struct KernelCollector {
    state: Arc<Mutex<State>>,
    wake: Option<mpsc::Sender<Wake>>,
    join_wanted: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl KernelCollector {
    /// Loads and attaches every program (root needed), publishes a first reading and
    /// starts reading every `opts.read_interval`. Fails with the verifier's full log if
    /// a program is rejected.
    pub fn start(opts: KernelOptions, store: Arc<Store>) -> anyhow::Result<KernelCollector> {
        if opts.frequency_hz == 0 {
            bail!("sampling frequency must be at least 1 Hz");
        }
        if opts.shift > 31 {
            bail!("shift {} is too large (at most 31)", opts.shift);
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("the kernel collector must run as root (it loads eBPF programs)");
        }
        let state = State::attach(opts.clone(), store)?;
        let state = Arc::new(Mutex::new(state));
        lock(&state).read_and_publish(Pass::Forced);

        let (wake, wake_rx) = mpsc::channel::<Wake>();
        let join_wanted = Arc::new(AtomicBool::new(false));
        let reader = Arc::clone(&state);
        let wanted = Arc::clone(&join_wanted);
        let interval = opts.read_interval;
        let thread = std::thread::Builder::new()
            .name("jp-kernel".into())
            .spawn(move || read_until_stopped(&reader, &wake_rx, &wanted, interval))
            .context("cannot start the kernel reader thread")?;
        Ok(KernelCollector {
            state,
            wake: Some(wake),
            join_wanted,
            thread: Some(thread),
        })
    }

    /// A handle that has the reader tell the sampler about the announced JVM threads now
    /// rather than at its next pass: a thread that lives less than `read_interval` would
    /// otherwise be counted by its name for most of its life. `None` once stopped.
    pub fn join_waker(&self) -> Option<JoinWaker> {
        Some(JoinWaker {
            wake: self.wake.clone()?,
            wanted: Arc::clone(&self.join_wanted),
        })
    }

    /// Joins the sampler to the JVMs' context slots (issue 13): from the next pass on,
    /// the threads `join` announces are sampled per context and the samples handed to it.
    pub fn set_context_join(&self, join: Arc<dyn ContextJoin>) {
        lock(&self.state).join = Some(join);
    }

    /// Reads every map now and publishes the result (the reader thread does this every
    /// `read_interval`).
    pub fn refresh(&self) {
        lock(&self.state).read_and_publish(Pass::Forced);
    }

    /// Re-opens the `cpu-clock` events at `hz` (SIGHUP reload). The maps stay as they
    /// are, so nothing counted so far is lost; only the few ms between closing and
    /// re-opening the events go unsampled.
    pub fn set_frequency(&self, hz: u64) -> anyhow::Result<()> {
        lock(&self.state).set_frequency(hz)
    }

    /// The attached programs and CPUs, as last published.
    pub fn status(&self) -> CollectorStatus {
        lock(&self.state).status.clone()
    }

    /// `cpu-clock` samples taken on each CPU since attach (user + kernel + idle), by
    /// CPU number (possible CPUs; offline ones keep what they had).
    pub fn samples_per_cpu(&self) -> anyhow::Result<Vec<u64>> {
        let state = lock(&self.state);
        if state.ebpf.is_none() {
            bail!("not attached");
        }
        Ok(state
            .cpu
            .modes
            .read()
            .iter()
            .map(|m| {
                [mode::USER, mode::KERNEL, mode::IDLE]
                    .iter()
                    .map(|&i| m.counts.get(i as usize).copied().unwrap_or(0))
                    .sum()
            })
            .collect())
    }

    /// Stops the reader thread and detaches everything.
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        // Wakers hold senders too: only the message stops the thread.
        if let Some(wake) = self.wake.take() {
            let _ = wake.send(Wake::Stop);
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("kernel reader thread panicked");
            }
        }
        // Detach the links now rather than whenever the last Arc goes away.
        lock(&self.state).detach_all();
    }
}

impl Drop for KernelCollector {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// Asks the reader thread to sync the join ([`KernelCollector::join_waker`]). Cheap and
/// non-blocking (callers hold the JVM store's lock): wakes that come while one is
/// pending are one sync.
#[derive(Clone)]
pub struct JoinWaker {
    wake: mpsc::Sender<Wake>,
    wanted: Arc<AtomicBool>,
}

impl JoinWaker {
    pub fn wake(&self) {
        if !self.wanted.swap(true, Ordering::AcqRel) {
            // Fails only once the reader has stopped: nothing left to wake.
            let _ = self.wake.send(Wake::Join);
        }
    }
}

/// The reader thread: a pass every `interval`, and between passes the join's syncs that
/// a [`JoinWaker`] asks for, at most one per [`JOIN_SYNC_SPACING`].
fn read_until_stopped(
    state: &Mutex<State>,
    wake: &mpsc::Receiver<Wake>,
    join_wanted: &AtomicBool,
    interval: Duration,
) {
    let mut next_pass = Instant::now() + interval;
    let mut join_due: Option<Instant> = None;
    let mut last_join = Instant::now();
    loop {
        let now = Instant::now();
        if join_due.is_some_and(|t| t <= now) {
            join_due = None;
            last_join = now;
            join_wanted.store(false, Ordering::Release);
            lock(state).sync_join();
            continue;
        }
        if next_pass <= now {
            // A pass syncs the join too. Cleared before, so that a thread announced
            // during the pass wakes the reader again.
            join_due = None;
            join_wanted.store(false, Ordering::Release);
            lock(state).read_and_publish(Pass::Periodic);
            next_pass += interval;
            if next_pass <= Instant::now() {
                // Behind (the machine was stopped or starved): no burst of passes.
                next_pass = Instant::now() + interval;
            }
            continue;
        }
        let until = join_due.map_or(next_pass, |t| t.min(next_pass));
        match wake.recv_timeout(until - now) {
            Ok(Wake::Join) => {
                join_due.get_or_insert(last_join + JOIN_SYNC_SPACING);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

struct State {
    /// `None` once detached.
    ebpf: Option<Ebpf>,
    opts: KernelOptions,
    store: Arc<Store>,
    /// Number of possible CPUs: the layout of per-CPU map values.
    ncpus: usize,
    /// perf_event link per online CPU.
    sampler_links: BTreeMap<u32, PerfEventLinkId>,
    /// Program name → what it is attached to (or why not).
    attached: Vec<(&'static str, String)>,
    symbols: Arc<Symbols>,
    symbols_stamp: SymbolsStamp,
    cfg: ProbeConfig,
    /// Core-text counters of the sampler and of the interrupted IP, memory-mapped.
    text: TextCounts,
    irq_text: TextCounts,
    /// The arrays with one value per CPU, memory-mapped.
    cpu: CpuArrays,
    /// The JVM samples' log, memory-mapped.
    ctx_log: CtxLog,
    /// Keeps `kernel.bpf_stats_enabled` on while we run (only with `bpf_stats = true`).
    stats_fd: Option<OwnedFd>,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    /// Failed map reads and attach errors since start.
    read_errors: u64,
    status: CollectorStatus,
    last_error_log: Option<Instant>,
    /// What each pass keeps between passes so that an idle pass stays cheap.
    pass: PassState,
    /// Where the JVMs' context slots come from and the samples under them go.
    join: Option<Arc<dyn ContextJoin>>,
    join_state: JoinState,
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
            modes: CpuSlots::map(array_fd(ebpf, MODES)?, cpus, MODES)?,
            irq_modes: CpuSlots::map(array_fd(ebpf, IRQ_MODES)?, cpus, IRQ_MODES)?,
            irq_start: CpuSlots::map(array_fd(ebpf, IRQ_START)?, cpus, IRQ_START)?,
            softirqs: CpuSlots::map(array_fd(ebpf, SIRQ_STATS)?, cpus, SIRQ_STATS)?,
            irq_lines: CpuSlots::map_rows(
                array_fd(ebpf, IRQ_LINES)?,
                cpus,
                jp_common::IRQ_LINES as usize,
                IRQ_LINES,
            )?,
        })
    }
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

/// A pass over the maps: `Periodic` from the reader thread, `Forced` when asked
/// (`refresh`, start, a new frequency), which also checks what periodic passes check
/// only now and then.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Periodic,
    Forced,
}

/// Kept between the collector's passes: jpd's CPU share at idle is what its periodic
/// passes cost, so each one re-reads only what may have changed, and without reopening
/// files.
#[derive(Default)]
struct PassState {
    /// The online-CPU file, kept open (see `OnlineCpus`).
    online: Option<OnlineCpus>,
    /// When the online CPUs were last compared with the sampler's (every
    /// `CPUS_CHECK_EVERY` in periodic passes: hotplug is rare, and a CPU that comes
    /// online is sampled from the next check on).
    cpus_checked_at: Option<Instant>,
    /// When `SymbolsStamp` was last taken: taking it reads `/proc/modules` and walks
    /// every BPF program id on the host, so it runs every `SYMBOLS_MIN_AGE`, not every
    /// pass. `None`: at the first periodic pass (our own programs were loaded after the
    /// first stamp, so that pass reloads the symbols once, to name them).
    symbols_checked_at: Option<Instant>,
    /// `kernel.bpf_stats_enabled`, kept open and re-read with `pread`.
    stats_sysctl: Option<std::fs::File>,
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
    /// before: whether the sampler ran in between (see `program_stats`).
    sampler_counted: u64,
    sampler_counted_before: u64,
    /// Whether the kernel counts BPF statistics, as the sampler's own figures last said
    /// (`None` until a pass has seen the sampler run since a status with its figures).
    stats_counted: Option<bool>,
}

/// (irq, irqaction) → each CPU's statistics of the handler, as the eBPF side keeps them.
type HandlerStats = Vec<(IrqKey, Vec<IrqStats>)>;

/// (irq number, handler name) → counts, as `KernelCounts::irqs`.
type IrqsByHandler = HashMap<(u32, String), IrqHandlerCounts>;

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

impl PassState {
    /// `kernel.bpf_stats_enabled` as written to the sysctl (another process holding a
    /// `BPF_ENABLE_STATS` fd does not show there).
    fn bpf_stats_enabled(&mut self) -> bool {
        use std::os::unix::fs::FileExt as _;
        if self.stats_sysctl.is_none() {
            self.stats_sysctl = std::fs::File::open(BPF_STATS_SYSCTL).ok();
        }
        let mut buf = [0u8; 8];
        match self.stats_sysctl.as_ref().map(|f| f.read_at(&mut buf, 0)) {
            Some(Ok(n)) => buf.get(..n).is_some_and(|b| b.trim_ascii() != b"0"),
            _ => false,
        }
    }
}

/// True (and restarts the clock) when `last` is unset or at least `every` ago.
fn due(last: &mut Option<Instant>, every: std::time::Duration) -> bool {
    if last.is_some_and(|t| t.elapsed() < every) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

const POSSIBLE_CPUS: &str = "/sys/devices/system/cpu/possible";

/// Time between two checks of the online CPUs in periodic passes.
const CPUS_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Minimum time between two checks (and so two reloads) of the kernel's symbols.
const SYMBOLS_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(5);

impl State {
    fn attach(opts: KernelOptions, store: Arc<Store>) -> anyhow::Result<State> {
        let symbols = Symbols::load().context("cannot read kernel symbols")?;
        let symbols_stamp = SymbolsStamp::current();
        let btf = Btf::load_vmlinux()?;
        let irq_entry = symbols
            .by_name(IRQ_ENTRY_STUB)
            .filter(|s| s.len > 0)
            .with_context(|| format!("no {IRQ_ENTRY_STUB} in /proc/kallsyms (not x86-64?)"))?
            .clone();
        let cfg = ProbeConfig {
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
            _pad: 0,
        };
        let layout = TextLayout::new(cfg.text_start, cfg.text_end, cfg.shift)?;
        log::info!(
            "core text: {} buckets of {} bytes, {} KiB of counters per array (2 arrays, all CPUs)",
            layout.buckets,
            1u64 << cfg.shift,
            layout.bytes() / 1024
        );

        // Per-CPU maps hold one value per possible CPU; the arrays indexed by CPU number
        // need one per possible number.
        let possible = std::fs::read_to_string(POSSIBLE_CPUS)
            .with_context(|| format!("cannot read {POSSIBLE_CPUS}"))?;
        let possible = parse_cpu_list(possible.trim())?;
        let ncpus = possible.len();
        let cpu_slots = possible.iter().max().map_or(1, |m| m + 1);
        let mut ebpf = probes::load(probes::Instance::Kernel {
            config: &cfg,
            text_blocks: layout.blocks,
            text_pages: layout.pages,
            cpu_slots,
        })?;
        let cpu = CpuArrays::map(&ebpf, cpu_slots as usize)?;
        let ctx_log = CtxLog::map(
            array_fd(&ebpf, CTX_LOG)?,
            cpu_slots as usize,
            cfg.ctx_log_mask + 1,
        )?;
        let text = TextCounts::map(
            array_fd(&ebpf, TEXT_COUNTS)?,
            array_fd(&ebpf, TEXT_DIRTY)?,
            layout,
            TEXT_COUNTS,
        )?;
        let irq_text = TextCounts::map(
            array_fd(&ebpf, IRQ_TEXT_COUNTS)?,
            array_fd(&ebpf, IRQ_TEXT_DIRTY)?,
            layout,
            IRQ_TEXT_COUNTS,
        )?;
        let logger = match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(l) => Some(l),
            Err(e) => {
                log::warn!("eBPF log messages unavailable: {e}");
                None
            }
        };
        let stats = crate::bpf_stats::enable_run_time(opts.bpf_stats);

        let mut attached = Vec::new();
        for (prog, tp) in [
            (IRQ_ENTRY, "irq_handler_entry"),
            (IRQ_EXIT, "irq_handler_exit"),
            (SIRQ_ENTRY, "softirq_entry"),
            (SIRQ_EXIT, "softirq_exit"),
        ] {
            let p: &mut RawTracePoint = program_mut(&mut ebpf, prog)?;
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
        let p: &mut PerfEvent = program_mut(&mut ebpf, SAMPLER)?;
        p.load().map_err(|e| load_error(SAMPLER, e))?;

        let mut state = State {
            ebpf: Some(ebpf),
            opts,
            store,
            ncpus,
            sampler_links: BTreeMap::new(),
            attached,
            symbols: Arc::new(symbols),
            symbols_stamp,
            cfg,
            text,
            irq_text,
            cpu,
            ctx_log,
            stats_fd: stats,
            logger,
            read_errors: 0,
            status: CollectorStatus::default(),
            last_error_log: None,
            pass: PassState::default(),
            join: None,
            join_state: JoinState::default(),
        };
        state.follow_cpus()?;
        if state.sampler_links.is_empty() {
            bail!("could not attach the sampler to any CPU");
        }
        state.store.publish_symbols(Arc::clone(&state.symbols));
        Ok(state)
    }

    /// Attaches the sampler to CPUs that came online and detaches it from CPUs that
    /// went away.
    fn follow_cpus(&mut self) -> anyhow::Result<()> {
        let online = match self.pass.online.as_mut() {
            Some(o) => o.read()?,
            None => {
                let mut o = OnlineCpus::open()?;
                let cpus = o.read()?;
                self.pass.online = Some(o);
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
                    self.read_errors += 1;
                    log::warn!("cannot attach the sampler to CPU {cpu}: {e}");
                }
            }
        }
        Ok(())
    }

    fn set_frequency(&mut self, hz: u64) -> anyhow::Result<()> {
        if hz == 0 {
            bail!("sampling frequency must be at least 1 Hz");
        }
        if hz == self.opts.frequency_hz {
            return Ok(());
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
        // The JVM samples' log was sized at load for the frequency then; it is not
        // resized (its slots are mapped), so say when passes may now find it overrun.
        let wanted = u64::from(self.opts.ctx_log_slots());
        if wanted > self.ctx_log.slots_per_cpu() {
            log::warn!(
                "at {hz} Hz the JVM samples' log ({} slots per CPU) may be overrun between \
                 two reads; samples it loses count in events_lost. Restart jpd to size it for \
                 this frequency",
                self.ctx_log.slots_per_cpu()
            );
        }
        self.follow_cpus()?;
        if self.sampler_links.is_empty() {
            bail!("could not re-attach the sampler to any CPU at {hz} Hz");
        }
        // Publish at once so that the status shows the new frequency.
        self.read_and_publish(Pass::Forced);
        Ok(())
    }

    fn read_and_publish(&mut self, pass: Pass) {
        if self.ebpf.is_none() {
            return;
        }
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
        if pass == Pass::Forced || due(&mut self.pass.cpus_checked_at, CPUS_CHECK_EVERY) {
            if let Err(e) = self.follow_cpus() {
                self.read_errors += 1;
                self.log_error(&e);
            }
        }
        // Not in forced passes: start-up would parse kallsyms twice, and a refresh is
        // meant to be quick.
        if pass == Pass::Periodic {
            self.reload_symbols_if_changed();
        }
        match self.read() {
            Ok((counts, lost)) => {
                self.status = self.make_status(lost);
                self.store.publish(counts, self.status.clone());
            }
            Err(e) => {
                self.read_errors += 1;
                self.log_error(&e);
            }
        }
        self.pass_join();
    }

    /// The sampler learns the threads announced since the last sync (every pass does it
    /// too, after handing over the samples: [`State::pass_join`]).
    fn sync_join(&mut self) {
        let (Some(join), Some(ebpf)) = (self.join.clone(), self.ebpf.as_mut()) else {
            return;
        };
        if let Err(e) = self.join_state.sync_threads(ebpf, join.as_ref()) {
            self.read_errors += 1;
            self.log_error(&e.context("joining samples to JVM contexts"));
        }
    }

    /// The samples under JVM contexts since the last pass go to the join (read only when
    /// the sampler counted some), then the sampler learns the threads announced since.
    fn pass_join(&mut self) {
        let Some(join) = self.join.clone() else {
            return;
        };
        let stamp = self.pass.jvm_samples;
        if self.pass.jvm_samples_read != Some(stamp) {
            let samples = self.ctx_log.drain(&self.cpu.modes);
            if !samples.is_empty() {
                join.samples(1_000_000_000 / self.opts.frequency_hz.max(1), &samples);
            }
            self.pass.jvm_samples_read = Some(stamp);
        }
        self.sync_join();
    }

    fn log_error(&mut self, e: &anyhow::Error) {
        // At most one message a minute: a persistent failure must not flood the log.
        if self
            .last_error_log
            .is_none_or(|t| t.elapsed().as_secs() >= 60)
        {
            log::error!("kernel collector: {e:#}");
            self.last_error_log = Some(Instant::now());
        }
    }

    fn reload_symbols_if_changed(&mut self) {
        // Parsing kallsyms takes tens of ms and even the stamp costs more than the rest
        // of an idle pass: check at most every SYMBOLS_MIN_AGE, so that when BPF programs
        // come and go all the time the reloads stay as rare (a change is seen next time).
        if !due(&mut self.pass.symbols_checked_at, SYMBOLS_MIN_AGE) {
            return;
        }
        let stamp = SymbolsStamp::current();
        if stamp == self.symbols_stamp {
            return;
        }
        match Symbols::load() {
            Ok(s) => {
                self.symbols = Arc::new(s);
                self.symbols_stamp = stamp;
                self.store.publish_symbols(Arc::clone(&self.symbols));
                log::debug!("kernel symbols reloaded (modules or BPF programs changed)");
            }
            Err(e) => {
                self.read_errors += 1;
                self.log_error(&e.context("reloading /proc/kallsyms"));
            }
        }
    }

    /// Reads every map; returns the counts and the events lost on the eBPF side.
    fn read(&mut self) -> anyhow::Result<(KernelCounts, u64)> {
        let mut maps = PerCpuMaps {
            ebpf: self.ebpf.as_ref().context("not attached")?,
            ncpus: self.ncpus,
            sizes: &mut self.pass.map_entries,
        };
        // The mode counters first, the histograms after: the eBPF side counts a sample
        // after recording it, so every sample in this pass's kernel count is in the
        // histograms read below (which may hold a few more, counted next pass).
        let modes = sum_modes(&self.cpu.modes.read());
        self.pass.sampler_counted_before = self.pass.sampler_counted;
        self.pass.sampler_counted = modes.iter().fold(0, |a, &m| a.wrapping_add(m));
        self.pass.jvm_samples = modes.get(mode::JVM as usize).copied().unwrap_or(0)
            + modes.get(mode::JVM_LOST as usize).copied().unwrap_or(0);
        let irq_modes = sum_modes(&self.cpu.irq_modes.read());
        let buckets = self.text.read().clone();
        let irq_buckets = self.irq_text.read().clone();
        let starts = self.cpu.irq_start.read();
        let at = |v: &[u64], i: u32| v.get(i as usize).copied().unwrap_or(0);

        // The hash maps are read again only when the counter the eBPF side bumps after
        // writing them has moved: walking their buckets was most of an idle pass.
        let exits = starts.iter().map(|s| s.exits).sum();
        let in_hash = starts.iter().map(|s| s.shared).sum();
        let irq_lines = &self.cpu.irq_lines;
        let hashed_irqs = &mut self.pass.hashed_irqs;
        let irqs = read_if_moved(&mut self.pass.irqs, exits, || {
            let mut irqs = IrqsByHandler::new();
            // Only the slots below the highest any CPU claimed (the lines in use are
            // few and low).
            let in_use = starts.iter().map(|s| s.lines).max().unwrap_or(0);
            let lines = irq_lines.columns(usize::try_from(in_use).unwrap_or(usize::MAX));
            let mut handlers = handlers_of_lines(&lines);
            // The hash map of high lines and shared lines' further handlers, only when
            // an exit was recorded there (counted before `exits`): most hosts never use it.
            handlers.extend(read_if_moved(hashed_irqs, in_hash, || {
                maps.entries::<IrqKey, IrqStats>(maps::IRQ_STATS.name)
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
        })?;
        let other_ips = read_if_moved(
            &mut self.pass.other_ips,
            at(&modes, mode::OTHER_IPS),
            || maps.sum_hash::<u64>(maps::OTHER_IPS.name),
        )?;
        let irq_other_ips = read_if_moved(
            &mut self.pass.irq_other_ips,
            at(&irq_modes, mode::OTHER_IPS),
            || maps.sum_hash::<u64>(maps::IRQ_OTHERS.name),
        )?;

        let sirq = self.cpu.softirqs.read();
        let mut softirqs = HashMap::new();
        let mut bad_vectors = 0;
        for i in 0..=NR_SOFTIRQS as usize {
            let per_cpu = || sirq.iter().filter_map(|c| c.vectors.get(i));
            let count = per_cpu().map(|s| s.count).sum();
            let time_ns = per_cpu().map(|s| s.time_ns).sum();
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

        let counts = KernelCounts {
            modes: ModeCounts {
                kernel: at(&modes, mode::KERNEL),
                user: at(&modes, mode::USER),
                idle: at(&modes, mode::IDLE),
            },
            buckets,
            other_ips,
            irq_buckets,
            irq_other_ips,
            irq_modes: ModeCounts {
                kernel: at(&irq_modes, mode::KERNEL),
                user: at(&irq_modes, mode::USER),
                idle: at(&irq_modes, mode::IDLE),
            },
            irqs,
            softirqs,
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
        Ok((counts, lost))
    }

    fn make_status(&mut self, lost: u64) -> CollectorStatus {
        let programs = self.program_stats();
        // The sysctl shows only what was written to it, not a `BPF_ENABLE_STATS` fd such
        // as ours or another process's; the sampler's own figures show both, so the
        // sysctl is read only until they have said whether anything is counted.
        let stats_enabled = self.stats_fd.is_some()
            || match self.pass.stats_counted {
                Some(counted) => counted,
                None => self.pass.bpf_stats_enabled(),
            };
        CollectorStatus {
            programs,
            cpus: self.sampler_links.keys().copied().collect(),
            frequency_hz: self.opts.frequency_hz,
            shift: self.opts.shift,
            text_start: self.cfg.text_start,
            text_end: self.cfg.text_end,
            events_lost: lost + self.read_errors,
            last_read: Some(SystemTime::now()),
            bpf_stats_enabled: stats_enabled,
            irq_ip_samples_per_second: self.opts.irq_ip_samples_per_second,
        }
    }

    /// Each program with what it is attached to and its BPF statistics. The statistics
    /// are asked for even when neither we nor the sysctl turned them on: another process
    /// may hold a `BPF_ENABLE_STATS` fd, which the sysctl does not show.
    fn program_stats(&mut self) -> Vec<ProgramStats> {
        let Some(ebpf) = self.ebpf.as_ref() else {
            return Vec::new();
        };
        let cpus: Vec<u32> = self.sampler_links.keys().copied().collect();
        // The last status's list, unless what the sampler is attached to changed: its
        // description is formatted only then, not in every pass.
        let mut programs = std::mem::take(&mut self.status.programs);
        if programs.is_empty()
            || self.status.cpus != cpus
            || self.status.frequency_hz != self.opts.frequency_hz
        {
            let sampler_target = format!(
                "perf_event cpu-clock {} Hz on CPUs {}",
                self.opts.frequency_hz,
                cpu_list(&cpus)
            );
            let old = std::mem::take(&mut programs);
            let last = |name: &str| old.iter().find(|p| p.name == name);
            programs = std::iter::once((SAMPLER, sampler_target))
                .chain(self.attached.iter().map(|(n, t)| (*n, t.clone())))
                .map(|(name, attached_to)| ProgramStats {
                    name: name.to_string(),
                    attached_to,
                    run_count: last(name).map_or(0, |p| p.run_count),
                    run_time_ns: last(name).map_or(0, |p| p.run_time_ns),
                })
                .collect();
        }
        let last_sampler = programs
            .iter()
            .find(|p| p.name == SAMPLER)
            .map(|p| (p.run_count, p.run_time_ns));
        let sampler = run_stats(ebpf, SAMPLER);
        // The kernel counts every program's statistics or none, so when the sampler ran
        // since the last pass (its own counters moved), whether its statistics moved
        // says whether anybody's are being counted; when they are not, the other
        // programs' figures of the last pass still hold: one syscall per idle pass
        // instead of one per program. A sampler that merely did not run between two
        // close passes says nothing (the other programs may have run), and with our own
        // statistics fd they are known to be counted: then all are read.
        let sampler_ran = self.pass.sampler_counted != self.pass.sampler_counted_before;
        if sampler_ran {
            if let Some(last) = last_sampler.filter(|_| self.status.last_read.is_some()) {
                self.pass.stats_counted = Some(last != sampler);
            }
        }
        let others_hold = self.stats_fd.is_none() && sampler_ran && last_sampler == Some(sampler);
        for p in &mut programs {
            let (run_count, run_time_ns) = if p.name == SAMPLER {
                sampler
            } else if others_hold {
                continue;
            } else {
                run_stats(ebpf, &p.name)
            };
            p.run_count = run_count;
            p.run_time_ns = run_time_ns;
        }
        programs
    }

    fn detach_all(&mut self) {
        self.sampler_links.clear();
        self.logger = None;
        // Dropping the object closes every program, link and map fd.
        self.ebpf = None;
    }
}

/// A program's BPF statistics: (runs, run time ns); zeros if they cannot be read.
fn run_stats(ebpf: &Ebpf, name: &str) -> (u64, u64) {
    let info = ebpf.program(name).and_then(|p| p.info().ok());
    let run_count = info.as_ref().map_or(0, |i| i.run_count());
    let run_time_ns = info.as_ref().map_or(0, |i| {
        u64::try_from(i.run_time().as_nanos()).unwrap_or(u64::MAX)
    });
    (run_count, run_time_ns)
}

fn program_mut<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> anyhow::Result<&'a mut T>
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
fn load_error(name: &str, e: aya::programs::ProgramError) -> anyhow::Error {
    anyhow::anyhow!("the kernel rejected eBPF program {name}: {e}")
}

fn map_data<'a>(ebpf: &'a Ebpf, name: &str) -> anyhow::Result<&'a MapData> {
    match ebpf.map(name) {
        Some(Map::PerCpuHashMap(d)) | Some(Map::PerCpuArray(d)) => Ok(d),
        Some(_) => bail!("map {name} is not a per-CPU map"),
        None => bail!("map {name} missing from the object"),
    }
}

fn array_fd<'a>(ebpf: &'a Ebpf, name: &str) -> anyhow::Result<std::os::fd::BorrowedFd<'a>> {
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

/// `0-3,6` style, as in `/sys/devices/system/cpu/online`.
fn cpu_list(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
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
    fn join_wakes_pending_together_are_one_and_a_stopped_reader_is_no_error() {
        let (tx, rx) = mpsc::channel();
        let waker = JoinWaker {
            wake: tx,
            wanted: Arc::new(AtomicBool::new(false)),
        };
        waker.wake();
        waker.clone().wake();
        assert!(matches!(rx.try_recv(), Ok(Wake::Join)));
        assert!(rx.try_recv().is_err(), "a second wake while one is pending");
        // The reader clears the flag before it syncs: the next change wakes it again.
        waker.wanted.store(false, Ordering::Release);
        waker.wake();
        assert!(matches!(rx.try_recv(), Ok(Wake::Join)));
        drop(rx);
        waker.wanted.store(false, Ordering::Release);
        waker.wake();
    }

    #[test]
    fn cpu_list_is_compact() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(cpu_list(&[]), "");
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
