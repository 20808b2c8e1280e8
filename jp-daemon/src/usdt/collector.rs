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
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use jp_common::wire::{PROBE_NAME, PROBE_PROVIDER};

use super::attach::{BpfLink, UprobeEvent, UprobePmu};
use super::control::{self, ControlError, ControlSymbol, GenerationClock};
use super::discovery::{self, Found};
use super::maps::{self, MappedFile};
use super::program::{UsdtProgram, MAX_SITES};
use super::ring::{self, ReaderStats};
use super::{notes, spec};
use crate::lock::lock;
use crate::store::jvm::sink::{FileStatus, RecordSink, RefusedFile, UsdtStatus};

/// What the collector needs from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtOptions {
    /// File name of the agent library in `/proc/PID/maps`.
    pub library: String,
    /// How often `/proc` is rescanned for new and exited processes.
    pub scan_interval: Duration,
    /// Size of the ring buffer (a power of two, 64 KiB to 1 GiB).
    pub ring_buffer_bytes: u32,
    /// Hold the kernel's BPF run-time statistics on while running (`kernel.bpf_stats`):
    /// they make every BPF program on the host pay two clock reads per run, so only
    /// when asked. Without them the program's run count and time read 0.
    pub bpf_stats: bool,
}

impl Default for UsdtOptions {
    fn default() -> Self {
        UsdtOptions {
            library: jp_common::wire::AGENT_LIBRARY.to_owned(),
            scan_interval: Duration::from_secs(1),
            ring_buffer_bytes: 8 << 20,
            bpf_stats: false,
        }
    }
}

/// How often new processes and re-send requests are looked at, between scans.
pub const TICK: Duration = Duration::from_millis(100);

/// A tick between scans reads the kernel counters and publishes the status only if it
/// did something; the tick after a scan always does (jpd's CPU at idle is mostly what
/// its periodic work costs, and this is a syscall per counter and per program).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tick {
    Quiet,
    WithStatus,
}
/// Probe sites of one library accepted (the agent has one).
const MAX_SITES_PER_FILE: usize = 64;
/// Files kept attached with no process using them; beyond this the longest idle goes.
const MAX_IDLE_FILES: usize = 8;

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
        let mut program = UsdtProgram::load(opts.ring_buffer_bytes, opts.bpf_stats)?;
        let ring = program.take_ring().context("ring buffer already taken")?;
        let reader_stats = Arc::new(ReaderStats::default());
        let reader = runtime.spawn(ring::run(
            ring,
            Arc::clone(&sink),
            Arc::clone(&reader_stats),
        ));

        let status = Arc::new(Mutex::new(UsdtStatus::default()));
        let mut manager = Manager {
            program,
            pmu,
            opts: opts.clone(),
            sink,
            files: HashMap::new(),
            refused: HashMap::new(),
            procs: HashMap::new(),
            rechecks: discovery::Rechecks::new(opts.scan_interval),
            clock: GenerationClock::default(),
            next_cookie: 1,
            status: Arc::clone(&status),
            reader_stats,
            scans: 0,
            last_scan: Duration::ZERO,
            generations: 0,
            errors: 0,
            last_error: String::new(),
            last_error_log: None,
        };
        manager.scan();
        manager.tick(Tick::WithStatus);

        let (stop, stop_rx) = mpsc::channel::<()>();
        let interval = opts.scan_interval.max(TICK);
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

/// Whether `file` lives on a filesystem that outlives containers, so that keeping it
/// open holds nothing a container runtime wants to unmount (see the module doc).
fn on_lasting_filesystem(file: &File) -> bool {
    // Filesystem magic numbers (linux/magic.h).
    const OVERLAYFS: i64 = 0x794c_7630;
    const SQUASHFS: i64 = 0x7371_7368;
    const FUSE: i64 = 0x6573_5546;
    const TMPFS: i64 = 0x0102_1994;
    const RAMFS: i64 = 0x8584_58f6;
    const AUFS: i64 = 0x6175_6673;
    // SAFETY: statfs is plain old data (integers and an array): all zeroes is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs into `st`, which we own; the descriptor stays
    // open for the call (borrowed from `file`).
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let kind = st.f_type as i64;
    ![OVERLAYFS, SQUASHFS, FUSE, TMPFS, RAMFS, AUFS].contains(&kind)
}

type FileKey = ((u32, u32), u64);

/// One attached library file.
struct AttachedFile {
    /// Kept open: the probes are opened through `/proc/self/fd/N`, whatever happens
    /// to the path the file was found under.
    file: File,
    shown: String,
    sites: Vec<Site>,
    /// File offset of the control block, if the library exports one.
    control: Option<ControlSymbol>,
    users: BTreeSet<u32>,
    /// Found by a process in jpd's mount namespace: may stay attached when idle.
    may_idle: bool,
    /// Since when no process uses it (kept attached).
    idle_since: Option<Instant>,
}

/// One probe site of an attached file.
struct Site {
    cookie: u64,
    file_offset: u64,
    semaphore_offset: Option<u64>,
    /// The link (holding the program) and the event (holding the uprobe and its
    /// semaphore count). Dropping both detaches.
    attached: Option<(BpfLink, UprobeEvent)>,
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

struct Manager<S> {
    program: UsdtProgram,
    pmu: UprobePmu,
    opts: UsdtOptions,
    sink: Arc<Mutex<S>>,
    files: HashMap<FileKey, AttachedFile>,
    /// Files that cannot be attached (no probe, malformed), with the reason, so that
    /// they are tried (and logged) once.
    refused: HashMap<FileKey, RefusedFile>,
    procs: HashMap<u32, Process>,
    /// When processes without the library are looked at again.
    rechecks: discovery::Rechecks,
    clock: GenerationClock,
    next_cookie: u64,
    status: Arc<Mutex<UsdtStatus>>,
    reader_stats: Arc<ReaderStats>,
    scans: u64,
    last_scan: Duration,
    generations: u64,
    errors: u64,
    last_error: String,
    last_error_log: Option<Instant>,
}

/// Why a file could not be attached.
enum FileError {
    /// The file itself is unusable: do not try again.
    Refused(String),
    /// Something about this process or this moment: try again at the next scan.
    Transient(String),
}

impl<S: RecordSink> Manager<S> {
    fn scan(&mut self) {
        let started = Instant::now();
        let procs = &self.procs;
        let scan = match discovery::scan(
            &self.opts.library,
            |pid| procs.get(&pid).map(|p| p.start_time),
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
        self.unseen_gone(&present, now);
        self.limit_idle_files();
        self.adopt_generations();
        lock(&self.sink).expire(now);
        self.scans += 1;
        self.last_scan = started.elapsed();
    }

    fn add_process(&mut self, found: Found, now: SystemTime) {
        let key = (found.file.dev, found.file.inode);
        if self.refused.contains_key(&key) {
            return;
        }
        if !self.files.contains_key(&key) {
            match self.attach_file(found.pid, &found.file) {
                Ok(file) => {
                    log::info!(
                        "USDT: attached to {} ({} probe site(s), found in process {})",
                        file.shown,
                        file.sites.len(),
                        found.pid
                    );
                    self.files.insert(key, file);
                }
                Err(FileError::Refused(why)) => {
                    log::warn!(
                        "USDT: not attaching to {} (process {}): {why}",
                        found.file.path,
                        found.pid
                    );
                    self.refused.insert(
                        key,
                        RefusedFile {
                            path: found.file.path.clone(),
                            reason: why,
                        },
                    );
                    return;
                }
                Err(FileError::Transient(why)) => {
                    self.error(format!(
                        "cannot attach to {} of process {}: {why}",
                        found.file.path, found.pid
                    ));
                    return;
                }
            }
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

    /// Writes the first generation into a process once its control block is mapped: a
    /// scan can find a library whose data segment the loader has not mapped yet, so a
    /// process without a generation is tried again at every tick.
    fn first_contact(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if p.generation.is_some() {
            return;
        }
        let Some(symbol) = p.control else {
            return;
        };
        if p.control_addr.is_none() {
            match control::address_in(pid, p.key.0, p.key.1, &symbol) {
                Ok(addr) => p.control_addr = Some(addr),
                // Not mapped yet, or exiting: the next scan tries again, or sees the exit.
                Err(ControlError::NotMapped) | Err(ControlError::Gone) => return,
                Err(e) => {
                    self.error(format!("process {pid}: control block not found: {e}"));
                    return;
                }
            }
        }
        self.write_generation(pid);
    }

    /// Opens the library through a host path, reads its probe sites and control block,
    /// and attaches the program to every site on every online CPU.
    fn attach_file(&mut self, pid: u32, mapped: &MappedFile) -> Result<AttachedFile, FileError> {
        let transient =
            |what: &str, e: &dyn std::fmt::Display| FileError::Transient(format!("{what}: {e}"));
        let path = maps::host_path(pid, mapped).map_err(|e| transient("no path", &e))?;
        let file = File::open(&path).map_err(|e| transient("cannot open", &e))?;
        let meta = file.metadata().map_err(|e| transient("cannot stat", &e))?;
        if (libc::major(meta.dev()), libc::minor(meta.dev())) != mapped.dev
            || meta.ino() != mapped.inode
        {
            return Err(FileError::Transient("replaced while opening".into()));
        }
        if meta.len() > notes::MAX_FILE_SIZE {
            return Err(FileError::Refused(format!(
                "{} bytes, larger than the {} accepted",
                meta.len(),
                notes::MAX_FILE_SIZE
            )));
        }
        let mut data = Vec::new();
        (&file)
            .take(notes::MAX_FILE_SIZE)
            .read_to_end(&mut data)
            .map_err(|e| transient("cannot read", &e))?;
        let probes = notes::parse(&data).map_err(|e| FileError::Refused(e.to_string()))?;
        let sites: Vec<&notes::Probe> = probes
            .iter()
            .filter(|p| p.provider == PROBE_PROVIDER && p.name == PROBE_NAME)
            .collect();
        if sites.is_empty() {
            return Err(FileError::Refused(format!(
                "no USDT probe {PROBE_PROVIDER}:{PROBE_NAME} (an agent built without profiler=usdt?)"
            )));
        }
        if sites.len() > MAX_SITES_PER_FILE {
            return Err(FileError::Refused(format!(
                "{} {PROBE_PROVIDER}:{PROBE_NAME} probe sites, more than {MAX_SITES_PER_FILE}",
                sites.len()
            )));
        }
        let control = match control::control_symbol(&data) {
            Ok(offset) => Some(offset),
            Err(e) => {
                log::warn!(
                    "USDT: {}: {e}; jpd cannot ask its processes for a re-send",
                    mapped.path
                );
                None
            }
        };
        let may_idle = !mapped.deleted && on_lasting_filesystem(&file);
        let mut attached = AttachedFile {
            file,
            shown: if mapped.deleted {
                format!("{} (deleted)", mapped.path)
            } else {
                mapped.path.clone()
            },
            sites: Vec::new(),
            control,
            users: BTreeSet::new(),
            may_idle,
            idle_since: None,
        };
        for probe in sites {
            let usdt_spec = spec::usdt_spec(&probe.args, 0)
                .map_err(|e| FileError::Refused(format!("probe arguments: {e}")))?;
            if self.program_sites() >= MAX_SITES {
                self.detach_file(attached);
                return Err(FileError::Transient(format!(
                    "{MAX_SITES} probe sites attached already"
                )));
            }
            let cookie = self.next_cookie;
            self.next_cookie += 1;
            if let Err(e) = self.program.set_spec(cookie, &usdt_spec) {
                self.detach_file(attached);
                return Err(FileError::Transient(format!("{e:#}")));
            }
            attached.sites.push(Site {
                cookie,
                file_offset: probe.file_offset,
                semaphore_offset: probe.semaphore_offset,
                attached: None,
            });
        }
        for site in &mut attached.sites {
            if let Err(e) = self.attach_site(&attached.file, site) {
                self.detach_file(attached);
                return Err(FileError::Transient(format!("{e:#}")));
            }
        }
        Ok(attached)
    }

    fn program_sites(&self) -> usize {
        self.files.values().map(|f| f.sites.len()).sum()
    }

    /// One system-wide event per site is enough: a BPF program on a uprobe runs from
    /// the uprobe's handler on whatever CPU hits it; the event's CPU only filters
    /// what perf itself records (an event per CPU would run the program once per
    /// event, duplicating every record). The event lives on the first online CPU, as
    /// libbpf's uprobes on CPU 0.
    fn attach_site(&self, file: &File, site: &mut Site) -> anyhow::Result<()> {
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let cpu = first_online_cpu()?;
        let event = UprobeEvent::open(
            &self.pmu,
            &path,
            site.file_offset,
            site.semaphore_offset,
            None,
            cpu,
        )?;
        let link = event.attach_bpf(self.program.fd()?, site.cookie)?;
        site.attached = Some((link, event));
        Ok(())
    }

    fn detach_file(&mut self, file: AttachedFile) {
        for site in file.sites {
            // Close the link and event before the spec can be reused.
            drop(site.attached);
            self.program.remove_spec(site.cookie);
        }
    }

    fn gone(&mut self, pid: u32, now: SystemTime) {
        let Some(process) = self.procs.remove(&pid) else {
            return;
        };
        lock(&self.sink).process_gone(pid, now);
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

    /// Detaches idle files that were deleted or replaced (no JVM can map them again),
    /// and the longest idle beyond [`MAX_IDLE_FILES`].
    fn limit_idle_files(&mut self) {
        let deleted: Vec<FileKey> = self
            .files
            .iter()
            .filter(|(_, f)| f.idle_since.is_some())
            .filter(|(_, f)| f.file.metadata().map_or(true, |m| m.nlink() == 0))
            .map(|(&k, _)| k)
            .collect();
        for key in deleted {
            if let Some(file) = self.files.remove(&key) {
                log::info!(
                    "USDT: detached from {} (deleted, no process uses it)",
                    file.shown
                );
                self.detach_file(file);
            }
        }
        let mut idle: Vec<(Instant, FileKey)> = self
            .files
            .iter()
            .filter_map(|(&k, f)| f.idle_since.map(|t| (t, k)))
            .collect();
        idle.sort_unstable();
        let excess = idle.len().saturating_sub(MAX_IDLE_FILES);
        for (_, key) in idle.into_iter().take(excess) {
            if let Some(file) = self.files.remove(&key) {
                log::info!("USDT: detached from {} (idle the longest)", file.shown);
                self.detach_file(file);
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
            }
        }
    }

    /// Writes a fresh generation into the process's control block (the uprobes of its
    /// file are attached, so the agent's semaphore is already set).
    fn write_generation(&mut self, pid: u32) {
        let Some(addr) = self.procs.get(&pid).and_then(|p| p.control_addr) else {
            return;
        };
        let generation = self.clock.next_generation();
        match control::write_generation(pid, addr, generation) {
            Ok(()) => {
                self.generations += 1;
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.generation = Some(generation);
                }
                lock(&self.sink).generation_written(pid, generation);
            }
            // The next scan reports the exit.
            Err(ControlError::Gone) => {}
            // Before the first generation: the address may have been found while the
            // loader was still mapping the library; look it up again at the next scan.
            Err(ControlError::BadMagic(magic))
                if self.procs.get(&pid).is_some_and(|p| p.generation.is_none()) =>
            {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.control_addr = None;
                }
                log::debug!("USDT: process {pid}: control block magic {magic:#x}, trying again");
            }
            Err(e) => self.error(format!("process {pid}: cannot write the generation: {e}")),
        }
    }

    /// Another tracer on the host (a second jpd, a test) writes its own generations
    /// into the same control blocks, and the agents answer the latest one: records
    /// then carry a generation this jpd did not write, and its store would wait for a
    /// re-send of its own forever. So a generation found in the block that this jpd did
    /// not write is adopted as if written here: every tracer then accepts the re-send
    /// that all of them receive.
    fn adopt_generations(&mut self) {
        let mut adopted = Vec::new();
        for (&pid, p) in &mut self.procs {
            let (Some(addr), Some(ours)) = (p.control_addr, p.generation) else {
                continue;
            };
            let Ok(current) = control::read_generation(pid, addr) else {
                continue;
            };
            if current != ours && current != 0 {
                if !p.shared {
                    log::info!(
                        "USDT: process {pid}: another tracer wrote generation {current} (a second jpd?); following it"
                    );
                    p.shared = true;
                }
                p.generation = Some(current);
                adopted.push((pid, current));
            }
        }
        if !adopted.is_empty() {
            let mut sink = lock(&self.sink);
            for (pid, generation) in adopted {
                sink.generation_written(pid, generation);
            }
        }
    }

    /// First contacts still pending, re-send requests, counters and the status snapshot.
    fn tick(&mut self, tick: Tick) {
        let pending: Vec<u32> = self
            .procs
            .iter()
            .filter(|(_, p)| p.generation.is_none() && p.control.is_some())
            .map(|(&pid, _)| pid)
            .collect();
        let resync = lock(&self.sink).take_resync_requests();
        if tick == Tick::Quiet && pending.is_empty() && resync.is_empty() {
            return;
        }
        for pid in pending {
            self.first_contact(pid);
        }
        for pid in resync {
            self.write_generation(pid);
        }
        match self.program.counters() {
            Ok(c) => lock(&self.sink).set_kernel_counters(c),
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
            refused: {
                let mut refused: Vec<RefusedFile> = self.refused.values().cloned().collect();
                refused.sort_by(|a, b| a.path.cmp(&b.path));
                refused
            },
            items: r.items.load(Ordering::Relaxed),
            batches: r.batches.load(Ordering::Relaxed),
            malformed_items: r.malformed.load(Ordering::Relaxed),
            run_count,
            run_time_ns,
        };
        lock(&self.sink).collector_status(&status);
        *lock(&self.status) = status;
    }

    fn detach_all(&mut self) {
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

/// The first online CPU (0 unless it was taken offline).
fn first_online_cpu() -> anyhow::Result<libc::c_int> {
    let online =
        aya::util::online_cpus().map_err(|(path, e)| anyhow::anyhow!("cannot read {path}: {e}"))?;
    let cpu = online.first().context("no CPU online")?;
    libc::c_int::try_from(*cpu).context("CPU number out of range")
}
