//! The USDT collector: finds the processes that map the agent library, attaches the
//! record program to each distinct library file, writes control generations, and
//! hands every ring-buffer event to a [`RecordSink`] (the JVM store).
//!
//! Life cycle: [`UsdtCollector::start`] (inside a tokio runtime) loads the program,
//! starts the ring reader task, scans once, and starts a manager thread that rescans
//! every `scan_interval` (new processes, exits) and every [`TICK`] answers
//! the sink's re-send requests and publishes the eBPF counters.
//! [`UsdtCollector::shutdown`] (or drop) closes every uprobe, so the kernel drops
//! the semaphores: the agents stop serializing.
//!
//! Per library file (device, inode) there is one uprobe event per probe site
//! (system-wide: it covers every process mapping the file, in any mount namespace, on
//! every CPU), opened through a descriptor jpd keeps on the file, so that the path
//! it was found under may vanish.
//!
//! When the last process using a file is gone, a file on a disk filesystem stays
//! attached (idle) while it exists: the kernel then arms the probe in the next JVM that
//! maps it from its first instruction, so a JVM that lives shorter than one rescan (a
//! batch job, a CLI tool) still delivers everything — its records carry its tgid and its
//! HELLO names it. A file on a filesystem a container image or a private mount lives on
//! (overlayfs, squashfs, FUSE, tmpfs) is detached at once: the open descriptor would keep
//! that filesystem alive after its container is gone. (The test is the filesystem, not
//! the mount namespace: under systemd's hardening jpd has a namespace of its own, and
//! so do JVM services with PrivateTmp.)
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::attach::UprobePmu;
use super::manager::{Manager, Tick};
use super::program::UsdtProgram;
use super::ring::{self, ReaderStats};
use crate::lock::lock;
use crate::store::jvm::sink::UsdtStatus;

use crate::store::jvm::sink::RecordSink;

pub use super::options::UsdtOptions;

/// How often new processes and re-send requests are looked at, between scans.
pub const TICK: Duration = Duration::from_millis(100);

/// Handle on the running collector.
pub struct UsdtCollector {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    reader: Option<tokio::task::JoinHandle<()>>,
    status: Arc<Mutex<UsdtStatus>>,
}

impl UsdtCollector {
    /// Loads the program (root needed), starts reading the ring buffer on the current
    /// tokio runtime, attaches to every process mapping the library now, and keeps
    /// watching for new ones.
    pub fn start<S: RecordSink>(
        opts: UsdtOptions,
        sink: Arc<Mutex<S>>,
    ) -> anyhow::Result<UsdtCollector> {
        let runtime = tokio::runtime::Handle::try_current()
            .context("the USDT collector must be started inside a tokio runtime")?;
        if opts.library.is_empty() || opts.library.contains('/') {
            anyhow::bail!(
                "USDT library {:?} must be a file name without '/'",
                opts.library
            );
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            anyhow::bail!("the USDT collector must run as root (it loads eBPF programs and writes into other processes)");
        }
        let pmu = UprobePmu::from_sysfs()?;
        let mut program = UsdtProgram::load(opts.ring_buffer_bytes, &opts.share, opts.bpf_stats)?;
        let ring = program.take_ring().context("ring buffer already taken")?;
        let reader_stats = Arc::new(ReaderStats::default());
        let reader = runtime.spawn(ring::run(
            ring,
            Arc::clone(&sink),
            Arc::clone(&reader_stats),
        ));

        let interval = opts.scan_interval.max(TICK);
        let mut manager = Manager::new(program, pmu, &opts, sink, reader_stats);
        let status = manager.shared_status();
        manager.scan();
        manager.tick(Tick::WithStatus);
        let (stop, thread) = spawn_manager(manager, interval)?;
        Ok(UsdtCollector {
            stop: Some(stop),
            thread: Some(thread),
            reader: Some(reader),
            status,
        })
    }

    /// What the collector is attached to, as of the last tick.
    pub fn status(&self) -> UsdtStatus {
        lock(&self.status).clone()
    }

    /// Stops the manager thread, detaches every uprobe and stops the reader.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("USDT manager thread panicked");
            }
        }
        if let Some(r) = self.reader.take() {
            r.abort();
        }
    }
}

impl Drop for UsdtCollector {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The manager thread: a tick every [`TICK`], a scan every `interval`, until the
/// stop sender sends or is dropped; then it detaches everything.
fn spawn_manager<S: RecordSink>(
    mut manager: Manager<S>,
    interval: Duration,
) -> anyhow::Result<(mpsc::Sender<()>, JoinHandle<()>)> {
    let (stop, stop_rx) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("jp-usdt".into())
        .spawn(move || {
            let mut next_scan = Instant::now() + interval;
            // A message or a dropped sender both mean stop.
            while let Err(RecvTimeoutError::Timeout) = stop_rx.recv_timeout(TICK) {
                let mut tick = Tick::Quiet;
                if Instant::now() >= next_scan {
                    manager.scan();
                    next_scan = Instant::now() + interval;
                    tick = Tick::WithStatus;
                }
                manager.tick(tick);
            }
            manager.detach_all();
        })
        .context("cannot start the USDT manager thread")?;
    Ok((stop, thread))
}
