//! The reader: a pass over the maps every `read_interval` on a thread of its own, the
//! join's syncs that [`JoinWaker`]s ask for between passes, and what a periodic pass
//! checks now and then (CPU hotplug, changed kernel symbols).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use super::attach::Probes;
use super::join::{ContextJoin, JoinState};
use super::offcpu::OffcpuLog;
use super::options::KernelOptions;
use super::read::MapReader;
use super::status::StatusKeeper;
use crate::liveness::{Heartbeat, KERNEL_READER};
use crate::lock::lock;
use crate::store::kernel::symbols::{Symbols, SymbolsStamp};
use crate::store::kernel::{CollectorStatus, KernelStore};

/// Spacing of the reader's join syncs between passes: a JVM starting hundreds of
/// threads at once costs one sync per this much time, not one per thread.
const JOIN_SYNC_SPACING: Duration = Duration::from_millis(10);

/// Time between two checks of the online CPUs in periodic passes (hotplug is rare, and
/// a CPU that comes online is sampled from the next check on).
const CPUS_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Minimum time between two checks (and so two reloads) of the kernel's symbols.
const SYMBOLS_MIN_AGE: Duration = Duration::from_secs(5);

/// What wakes the reader thread before its next pass.
pub(super) enum Wake {
    Stop,
    /// The announced JVM threads changed ([`JoinWaker`]).
    Join,
}

/// Asks the reader thread to sync the join ([`super::KernelCollector::join_waker`]).
/// Cheap and non-blocking (callers hold the JVM store's lock): wakes that come while one
/// is pending are one sync.
#[derive(Clone)]
pub struct JoinWaker {
    wake: mpsc::Sender<Wake>,
    wanted: Arc<AtomicBool>,
}

impl JoinWaker {
    pub(super) fn new(wake: mpsc::Sender<Wake>, wanted: Arc<AtomicBool>) -> JoinWaker {
        JoinWaker { wake, wanted }
    }

    pub fn wake(&self) {
        if !self.wanted.swap(true, Ordering::AcqRel) {
            // Fails only once the reader has stopped: nothing left to wake.
            let _ = self.wake.send(Wake::Join);
        }
    }
}

/// The reader thread: a pass every `interval`, and between passes the join's syncs that
/// a [`JoinWaker`] asks for, at most one per [`JOIN_SYNC_SPACING`].
pub(super) fn read_until_stopped(
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

/// A pass over the maps: `Periodic` from the reader thread, `Forced` when asked
/// (`refresh`, start, a new frequency), which also checks what periodic passes check
/// only now and then.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    Periodic,
    Forced,
}

/// Everything the collector holds, one part per job.
pub(super) struct State {
    store: Arc<KernelStore>,
    probes: Probes,
    maps: MapReader,
    symbols: KernelSymbols,
    status: StatusKeeper,
    /// When the online CPUs were last compared with the sampler's (see
    /// [`CPUS_CHECK_EVERY`]).
    cpus_checked_at: Option<Instant>,
    /// Where the JVMs' context slots come from and the samples under them go.
    join: Option<Arc<dyn ContextJoin>>,
    join_state: JoinState,
    /// The off-CPU log, with `kernel.offcpu` on.
    offcpu: Option<OffcpuLog>,
    /// Beaten at every publish: the watchdog's sign that the maps are still read.
    heartbeat: Heartbeat,
}

impl State {
    /// Loads and attaches everything and publishes the kernel's symbols.
    pub(super) fn attach(opts: KernelOptions, store: Arc<KernelStore>) -> anyhow::Result<State> {
        let symbols = KernelSymbols::load()?;
        let read_interval = opts.read_interval;
        let (mut probes, shape) = Probes::load(opts, &symbols.current)?;
        let ebpf = probes.ebpf().context("not attached")?;
        let maps = MapReader::map(ebpf, &shape)?;
        let offcpu = match shape.offcpu_log_slots {
            0 => None,
            slots => Some(OffcpuLog::map(ebpf, shape.cpu_slots, slots)?),
        };
        probes.start_programs()?;
        store.publish_symbols(Arc::clone(&symbols.current));
        let heartbeat = Heartbeat::register(KERNEL_READER, read_interval);
        Ok(State {
            store,
            probes,
            maps,
            symbols,
            status: StatusKeeper::default(),
            cpus_checked_at: None,
            join: None,
            join_state: JoinState::default(),
            offcpu,
            heartbeat,
        })
    }

    pub(super) fn set_context_join(&mut self, join: Arc<dyn ContextJoin>) {
        self.join = Some(join);
    }

    pub(super) fn status(&self) -> &CollectorStatus {
        self.status.current()
    }

    /// `cpu-clock` samples taken on each CPU since attach, by CPU number.
    pub(super) fn samples_per_cpu(&self) -> anyhow::Result<Vec<u64>> {
        if self.probes.ebpf().is_none() {
            bail!("not attached");
        }
        Ok(self.maps.samples_per_cpu())
    }

    pub(super) fn detach_all(&mut self) {
        self.probes.detach_all();
    }

    pub(super) fn set_frequency(&mut self, hz: u64) -> anyhow::Result<()> {
        if !self.probes.set_frequency(hz)? {
            return Ok(());
        }
        // The JVM samples' log was sized at load for the frequency then; it is not
        // resized (its slots are mapped), so say when passes may now find it overrun.
        let wanted = u64::from(self.probes.options().ctx_log_slots());
        let slots = self.maps.ctx_log_slots_per_cpu();
        if wanted > slots {
            log::warn!(
                "at {hz} Hz the JVM samples' log ({slots} slots per CPU) may be overrun between \
                 two reads; samples it loses count in events_lost. Restart jpd to size it for \
                 this frequency"
            );
        }
        // Publish at once so that the status shows the new frequency.
        self.read_and_publish(Pass::Forced);
        Ok(())
    }

    pub(super) fn read_and_publish(&mut self, pass: Pass) {
        if self.probes.ebpf().is_none() {
            return;
        }
        self.probes.flush_log();
        if pass == Pass::Forced || due(&mut self.cpus_checked_at, CPUS_CHECK_EVERY) {
            if let Err(e) = self.probes.follow_cpus() {
                self.status.failed(&e);
            }
        }
        // Not in forced passes: start-up would parse kallsyms twice, and a refresh is
        // meant to be quick.
        if pass == Pass::Periodic {
            self.reload_symbols_if_changed();
        }
        self.publish_counts();
        self.pass_join();
    }

    fn publish_counts(&mut self) {
        let Some(ebpf) = self.probes.ebpf() else {
            return;
        };
        match self.maps.read(ebpf) {
            Ok(reading) => {
                let sampler_ran = self.maps.sampler_ran();
                let status = self.status.next(&self.probes, reading.lost, sampler_ran);
                self.store.publish(reading.counts, status);
                self.heartbeat.beat();
            }
            Err(e) => self.status.failed(&e),
        }
    }

    /// The sampler learns the threads announced since the last sync (every pass does it
    /// too, after handing over the samples: [`State::pass_join`]).
    fn sync_join(&mut self) {
        let (Some(join), Some(ebpf)) = (self.join.clone(), self.probes.ebpf_mut()) else {
            return;
        };
        if let Err(e) = self.join_state.sync_threads(ebpf, join.as_ref()) {
            self.status
                .failed(&e.context("joining samples to JVM contexts"));
        }
    }

    /// The samples under JVM contexts since the last pass go to the join (read only when
    /// the sampler counted some), then the sampler learns the threads announced since.
    fn pass_join(&mut self) {
        let Some(join) = self.join.clone() else {
            return;
        };
        if let Some(samples) = self.maps.new_jvm_samples() {
            if !samples.is_empty() {
                let hz = self.probes.options().frequency_hz;
                join.samples(1_000_000_000 / hz.max(1), &samples);
            }
        }
        if let Some(log) = self.offcpu.as_mut() {
            join.offcpu(&log.drain());
        }
        self.sync_join();
    }

    fn reload_symbols_if_changed(&mut self) {
        match self.symbols.reload_if_changed() {
            Ok(Some(symbols)) => {
                self.store.publish_symbols(symbols);
                log::debug!("kernel symbols reloaded (modules or BPF programs changed)");
            }
            Ok(None) => {}
            Err(e) => self.status.failed(&e.context("reloading /proc/kallsyms")),
        }
    }
}

/// The kernel's symbols, reloaded when modules or BPF programs come and go.
struct KernelSymbols {
    current: Arc<Symbols>,
    stamp: SymbolsStamp,
    /// When `SymbolsStamp` was last taken: taking it reads `/proc/modules` and walks
    /// every BPF program id on the host, so it runs every `SYMBOLS_MIN_AGE`, not every
    /// pass. `None`: at the first periodic pass (our own programs were loaded after the
    /// first stamp, so that pass reloads the symbols once, to name them).
    checked_at: Option<Instant>,
}

impl KernelSymbols {
    fn load() -> anyhow::Result<KernelSymbols> {
        let current = Symbols::load().context("cannot read kernel symbols")?;
        Ok(KernelSymbols {
            current: Arc::new(current),
            stamp: SymbolsStamp::current(),
            checked_at: None,
        })
    }

    /// The symbols reloaded, if they changed since the last load.
    fn reload_if_changed(&mut self) -> anyhow::Result<Option<Arc<Symbols>>> {
        // Parsing kallsyms takes tens of ms and even the stamp costs more than the rest
        // of an idle pass: check at most every SYMBOLS_MIN_AGE, so that when BPF programs
        // come and go all the time the reloads stay as rare (a change is seen next time).
        if !due(&mut self.checked_at, SYMBOLS_MIN_AGE) {
            return Ok(None);
        }
        let stamp = SymbolsStamp::current();
        if stamp == self.stamp {
            return Ok(None);
        }
        self.current = Arc::new(Symbols::load()?);
        self.stamp = stamp;
        Ok(Some(Arc::clone(&self.current)))
    }
}

/// True (and restarts the clock) when `last` is unset or at least `every` ago.
fn due(last: &mut Option<Instant>, every: Duration) -> bool {
    if last.is_some_and(|t| t.elapsed() < every) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_wakes_pending_together_are_one_and_a_stopped_reader_is_no_error() {
        let (tx, rx) = mpsc::channel();
        let waker = JoinWaker::new(tx, Arc::new(AtomicBool::new(false)));
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
}
