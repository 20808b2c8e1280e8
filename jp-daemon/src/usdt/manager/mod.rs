//! The USDT manager thread's state and its jobs: the scan that finds processes and
//! their exits ([`Manager::scan`], here), the library files attached and detached
//! ([`files`]), the control generations written and adopted ([`generations`]), and
//! the status published at every tick (here).
mod files;
mod generations;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::attach::UprobePmu;
use super::control::{ControlSymbol, GenerationClock};
use super::discovery::{self, Found};
use super::fair::{LossLedger, ResendBackoff, RingShare};
use super::program::UsdtProgram;
use super::ring::ReaderStats;
use crate::liveness::fault::{self, Fault};
use crate::liveness::{Heartbeat, USDT_MANAGER};
use crate::lock::lock;
use crate::store::jvm::sink::{FileStatus, RecordSink, UsdtStatus};
use crate::store::jvm::UsdtKernelCounters;
use files::{AttachedFile, FileKey, RefusedFiles};

/// A tick between scans reads the kernel counters and publishes the status only if it
/// did something; the tick after a scan always does (jpd's CPU at idle is mostly what
/// its periodic work costs, and this is a syscall per counter and per program).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Tick {
    Quiet,
    WithStatus,
}

struct Process {
    start_time: u64,
    key: FileKey,
    /// File offset of the library's control block, if it exports one.
    control: Option<ControlSymbol>,
    /// Its address in the process, once found.
    control_addr: Option<u64>,
    /// The generation last written (or adopted, see [`Manager::adopt_generations`]).
    generation: Option<u64>,
    /// Another tracer was seen writing generations (logged once).
    shared: bool,
}

pub(super) struct Manager<S> {
    program: UsdtProgram,
    pmu: UprobePmu,
    /// File name of the agent library in `/proc/PID/maps`.
    library: String,
    sink: Arc<Mutex<S>>,
    files: HashMap<FileKey, AttachedFile>,
    /// Files that cannot be attached (no probe, malformed), so that they are tried
    /// (and logged) once; the newest with their reason for the status.
    refused: RefusedFiles,
    procs: HashMap<u32, Process>,
    /// When processes without the library are looked at again.
    rechecks: discovery::Rechecks,
    clock: GenerationClock,
    /// Who may use the ring: processes outside its allow-lists are left alone.
    share: RingShare,
    /// Processes outside the allow-lists, with their start time: not looked at again.
    outside: HashMap<u32, u64>,
    /// Re-sends spaced per JVM.
    backoff: ResendBackoff,
    /// Each process's loss counts as last read, to charge it only what is new.
    ledger: LossLedger,
    /// The program's counters as last read.
    kernel: UsdtKernelCounters,
    next_cookie: u64,
    status: Arc<Mutex<UsdtStatus>>,
    reader_stats: Arc<ReaderStats>,
    scans: u64,
    last_scan: Duration,
    generations: u64,
    errors: u64,
    last_error: String,
    last_error_log: Option<Instant>,
    /// Beaten at every tick: the watchdog's sign that scans and ticks go on.
    heartbeat: Heartbeat,
}

impl<S: RecordSink> Manager<S> {
    /// A manager that has scanned nothing yet; the status it publishes is
    /// [`Manager::shared_status`].
    pub(super) fn new(
        program: UsdtProgram,
        pmu: UprobePmu,
        options: &super::options::UsdtOptions,
        sink: Arc<Mutex<S>>,
        reader_stats: Arc<ReaderStats>,
    ) -> Manager<S> {
        Manager {
            program,
            pmu,
            library: options.library.clone(),
            sink,
            files: HashMap::new(),
            refused: RefusedFiles::default(),
            procs: HashMap::new(),
            rechecks: discovery::Rechecks::new(options.scan_interval),
            clock: GenerationClock::default(),
            share: options.share.clone(),
            outside: HashMap::new(),
            backoff: ResendBackoff::default(),
            ledger: LossLedger::default(),
            kernel: UsdtKernelCounters::default(),
            next_cookie: 1,
            status: Arc::new(Mutex::new(UsdtStatus::default())),
            reader_stats,
            scans: 0,
            last_scan: Duration::ZERO,
            generations: 0,
            errors: 0,
            last_error: String::new(),
            last_error_log: None,
            // A scan is the longest regular step between two ticks.
            heartbeat: Heartbeat::register(USDT_MANAGER, options.scan_interval),
        }
    }

    /// The status as of the last tick, shared with the collector's handle.
    pub(super) fn shared_status(&self) -> Arc<Mutex<UsdtStatus>> {
        Arc::clone(&self.status)
    }

    pub(super) fn scan(&mut self) {
        // Not in the scan at start (jpd would never get ready), at the manager
        // thread's first.
        if self.scans > 0 && fault::injected(Fault::UsdtManagerStall) {
            fault::stall_forever("the USDT manager");
        }
        let started = Instant::now();
        let (procs, outside) = (&self.procs, &self.outside);
        let scan = match discovery::scan(
            &self.library,
            |pid| {
                procs
                    .get(&pid)
                    .map(|p| p.start_time)
                    .or_else(|| outside.get(&pid).copied())
            },
            &mut self.rechecks,
        ) {
            Ok(s) => s,
            Err(e) => {
                self.error(format!("cannot scan /proc: {e}"));
                return;
            }
        };
        let now = SystemTime::now();
        let mut present: BTreeSet<u32> = scan.alive.into_iter().collect();
        for f in scan.found {
            present.insert(f.pid);
            if self.procs.contains_key(&f.pid) {
                // The pid was reused by a process that maps the library too.
                self.gone(f.pid, now);
            }
            if !self.allowed(&f) {
                continue;
            }
            self.add_process(f, now);
        }
        let exited: Vec<u32> = self
            .procs
            .keys()
            .copied()
            .filter(|pid| !present.contains(pid))
            .collect();
        for pid in exited {
            self.gone(pid, now);
        }
        self.outside.retain(|pid, _| present.contains(pid));
        self.unseen_gone(&present, now);
        self.limit_idle_files();
        self.adopt_generations();
        lock(&self.sink).expire(now);
        self.scans += 1;
        self.last_scan = started.elapsed();
    }

    fn add_process(&mut self, found: Found, now: SystemTime) {
        let key = (found.file.dev, found.file.inode);
        if !self.ensure_attached(&found, key) {
            return;
        }
        let Some(file) = self.files.get_mut(&key) else {
            return;
        };
        file.users.insert(found.pid);
        file.idle_since = None;
        let control = file.control;
        let info = discovery::process_info(found.pid, found.start_time);
        lock(&self.sink).process_found(found.pid, info, now);
        self.procs.insert(
            found.pid,
            Process {
                start_time: found.start_time,
                key,
                control,
                control_addr: None,
                generation: None,
                shared: false,
            },
        );
        self.first_contact(found.pid);
    }

    fn gone(&mut self, pid: u32, now: SystemTime) {
        let Some(process) = self.procs.remove(&pid) else {
            return;
        };
        lock(&self.sink).process_gone(pid, now);
        self.backoff.forget(pid);
        self.ledger.forget(pid);
        let last_user = match self.files.get_mut(&process.key) {
            Some(file) => {
                file.users.remove(&pid);
                file.users.is_empty()
            }
            None => false,
        };
        if !last_user {
            return;
        }
        match self.files.get_mut(&process.key) {
            Some(file) if file.may_idle => {
                file.idle_since = Some(Instant::now());
                log::debug!("USDT: {} idle, kept attached", file.shown);
                self.limit_idle_files();
            }
            _ => {
                if let Some(file) = self.files.remove(&process.key) {
                    log::info!("USDT: detached from {} (no process uses it)", file.shown);
                    self.detach_file(file);
                }
            }
        }
    }

    /// JVMs whose records arrived through an idle file before any scan found them: the
    /// store holds them as running until told otherwise.
    fn unseen_gone(&mut self, present: &BTreeSet<u32>, now: SystemTime) {
        let running = lock(&self.sink).running_tgids();
        for tgid in running {
            if !self.procs.contains_key(&tgid)
                && !present.contains(&tgid)
                && !std::path::Path::new(&format!("/proc/{tgid}")).exists()
            {
                lock(&self.sink).process_gone(tgid, now);
                self.backoff.forget(tgid);
                self.ledger.forget(tgid);
            }
        }
    }

    /// First contacts still pending, re-send requests, counters and the status snapshot.
    pub(super) fn tick(&mut self, tick: Tick) {
        self.heartbeat.beat();
        let pending: Vec<u32> = self
            .procs
            .iter()
            .filter(|(_, p)| p.generation.is_none() && p.control.is_some())
            .map(|(&pid, _)| pid)
            .collect();
        let resync = lock(&self.sink).take_resync_requests();
        let resends = self.space_resends(resync, Instant::now());
        if tick == Tick::Quiet && pending.is_empty() && resends.is_empty() {
            return;
        }
        for pid in pending {
            self.first_contact(pid);
        }
        for pid in resends {
            self.write_generation(pid);
        }
        match self.program.counters() {
            Ok(c) => {
                self.charge_losses(&c);
                lock(&self.sink).set_kernel_counters(c);
            }
            Err(e) => self.error(format!("{e:#}")),
        }
        self.publish_status();
    }

    fn publish_status(&self) {
        let (run_count, run_time_ns) = self.program.run_stats().unwrap_or((0, 0));
        let mut files: Vec<FileStatus> = self
            .files
            .iter()
            .map(|(&(dev, inode), f)| FileStatus {
                path: f.shown.clone(),
                dev,
                inode,
                sites: f.sites.len(),
                users: f.users.iter().copied().collect(),
                idle: f.idle_since.is_some(),
            })
            .collect();
        files.sort_by_key(|f| (f.dev, f.inode));
        let mut processes: Vec<u32> = self.procs.keys().copied().collect();
        processes.sort_unstable();
        let r = &self.reader_stats;
        let status = UsdtStatus {
            files,
            processes,
            scans: self.scans,
            last_scan: self.last_scan,
            generations_written: self.generations,
            errors: self.errors,
            last_error: self.last_error.clone(),
            refused: self.refused.newest(),
            items: r.items.load(Ordering::Relaxed),
            batches: r.batches.load(Ordering::Relaxed),
            malformed_items: r.malformed.load(Ordering::Relaxed),
            run_count,
            run_time_ns,
        };
        lock(&self.sink).collector_status(&status);
        *lock(&self.status) = status;
    }

    pub(super) fn detach_all(&mut self) {
        let files: Vec<AttachedFile> = self.files.drain().map(|(_, f)| f).collect();
        for file in files {
            self.detach_file(file);
        }
        self.procs.clear();
        self.publish_status();
    }

    fn error(&mut self, message: String) {
        self.errors += 1;
        self.last_error.clone_from(&message);
        // At most one message every 10 s: a persistent failure must not flood the log.
        if self
            .last_error_log
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            log::warn!("USDT: {message}");
            self.last_error_log = Some(Instant::now());
        } else {
            log::debug!("USDT: {message}");
        }
    }
}
