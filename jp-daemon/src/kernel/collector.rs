//! Loads and attaches jp's eBPF programs, follows CPU hotplug, and copies the maps
//! into the [`KernelStore`] every `read_interval`.
//!
//! Life cycle: [`KernelCollector::start`] loads everything and starts a reader thread
//! (no async runtime needed); [`KernelCollector::refresh`] reads the maps right now;
//! [`KernelCollector::shutdown`] (or drop) stops the thread and detaches every link by
//! closing the eBPF object. Between passes, a [`JoinWaker`] has the thread tell the
//! sampler about JVM threads as soon as they announce their context.
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{bail, Context as _};

use super::join::ContextJoin;
use super::options::KernelOptions;
use super::reader::{read_until_stopped, JoinWaker, Pass, State, Wake};
use crate::lock::lock;
use crate::store::kernel::{CollectorStatus, KernelStore};

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
    pub fn start(opts: KernelOptions, store: Arc<KernelStore>) -> anyhow::Result<KernelCollector> {
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
        Some(JoinWaker::new(
            self.wake.clone()?,
            Arc::clone(&self.join_wanted),
        ))
    }

    /// Joins the sampler to the JVMs' context slots (CPU per exact JVM context): from the
    /// next pass on, the threads `join` announces are sampled per context and the
    /// samples handed to it.
    pub fn set_context_join(&self, join: Arc<dyn ContextJoin>) {
        lock(&self.state).set_context_join(join);
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
        lock(&self.state).status().clone()
    }

    /// `cpu-clock` samples taken on each CPU since attach (user + kernel + idle), by
    /// CPU number (possible CPUs; offline ones keep what they had).
    pub fn samples_per_cpu(&self) -> anyhow::Result<Vec<u64>> {
        lock(&self.state).samples_per_cpu()
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
