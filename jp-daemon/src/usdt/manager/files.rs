//! The library files the record program is attached to: one uprobe event per probe
//! site of each distinct file (device, inode), opened through a descriptor jpd keeps
//! on the file; idle files kept attached or detached (see the collector's module doc).
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use jp_common::wire::{PROBE_NAME, PROBE_PROVIDER};

use super::Manager;
use crate::refusals::{self, Refusal};
use crate::store::jvm::sink::{RecordSink, RefusedFile};
use crate::usdt::attach::{BpfLink, UprobeEvent};
use crate::usdt::control::{self, ControlSymbol};
use crate::usdt::discovery::{self, Found, OpenError};
use crate::usdt::elf::{self, ElfError, ElfParts};
use crate::usdt::maps::MappedFile;
use crate::usdt::program::MAX_SITES;
use crate::usdt::{notes, spec};

/// A mapped file that is not a regular file (a device node bind-mounted under the
/// library's name).
const NOT_REGULAR_FILE: Refusal = Refusal::new("discovery", "not_regular_file");
/// A part of the file (headers, notes, symbols) over the reader's caps.
const TOO_LARGE: Refusal = Refusal::new("discovery", "too_large");
/// Not ELF, or malformed headers, notes or probe arguments.
const MALFORMED: Refusal = Refusal::new("discovery", "malformed");
/// A well-formed library without the record probe (an agent built without it).
const NO_PROBE: Refusal = Refusal::new("discovery", "no_probe");
/// On FUSE: opening or reading it would wait for a local process.
const UNTRUSTED_FILESYSTEM: Refusal = Refusal::new("discovery", "untrusted_filesystem");

/// Refused files shown in the status, newest first; every refusal is counted in
/// [`refusals`] by its reason whether it is shown or not.
const MAX_LISTED_REFUSED: usize = 64;
/// Refused files remembered so that they are not opened again; beyond this the
/// oldest is forgotten (and costs its headers again if a process still maps it).
const MAX_REFUSED_KEYS: usize = 4096;

/// Probe sites of one library accepted (the agent has one).
const MAX_SITES_PER_FILE: usize = 64;
/// Files kept attached with no process using them; beyond this the longest idle goes.
const MAX_IDLE_FILES: usize = 8;

pub(super) type FileKey = ((u32, u32), u64);

/// One attached library file.
pub(super) struct AttachedFile {
    /// Kept open: the probes are opened through `/proc/self/fd/N`, whatever happens
    /// to the path the file was found under.
    pub(super) file: File,
    pub(super) shown: String,
    pub(super) sites: Vec<Site>,
    /// File offset of the control block, if the library exports one.
    pub(super) control: Option<ControlSymbol>,
    pub(super) users: BTreeSet<u32>,
    /// Found by a process in jpd's mount namespace: may stay attached when idle.
    pub(super) may_idle: bool,
    /// Since when no process uses it (kept attached).
    pub(super) idle_since: Option<Instant>,
}

/// One probe site of an attached file.
pub(super) struct Site {
    cookie: u64,
    file_offset: u64,
    semaphore_offset: Option<u64>,
    /// The link (holding the program) and the event (holding the uprobe and its
    /// semaphore count). Dropping both detaches.
    attached: Option<(BpfLink, UprobeEvent)>,
}

/// Why a file could not be attached.
enum FileError {
    /// The file itself is unusable: do not try again.
    Refused(Refusal, String),
    /// Something about this process or this moment: try again at the next scan.
    Transient(String),
}

impl<S: RecordSink> Manager<S> {
    /// Attaches the file `found` maps unless it is attached already; whether it now is.
    /// A refused file is remembered (and logged) once; a transient failure counts as an
    /// error and is tried again at the next scan.
    pub(super) fn ensure_attached(&mut self, found: &Found, key: FileKey) -> bool {
        if self.refused.contains(&key) {
            return false;
        }
        if self.files.contains_key(&key) {
            return true;
        }
        match self.attach_file(found.pid, &found.file) {
            Ok(file) => {
                log::info!(
                    "USDT: attached to {} ({} probe site(s), found in process {})",
                    file.shown,
                    file.sites.len(),
                    found.pid
                );
                self.files.insert(key, file);
                true
            }
            Err(FileError::Refused(kind, why)) => {
                refusals::count(kind, 1);
                log::warn!(
                    "USDT: not attaching to {} (process {}): {why}",
                    found.file.path,
                    found.pid
                );
                let refused = RefusedFile {
                    path: found.file.path.clone(),
                    reason: why,
                };
                self.refused.insert(key, refused);
                false
            }
            Err(FileError::Transient(why)) => {
                self.error(format!(
                    "cannot attach to {} of process {}: {why}",
                    found.file.path, found.pid
                ));
                false
            }
        }
    }

    /// Opens the library through a host path, reads its probe sites and control block,
    /// and attaches the program to every site.
    fn attach_file(&mut self, pid: u32, mapped: &MappedFile) -> Result<AttachedFile, FileError> {
        let (file, parts) = open_library(pid, mapped)?;
        let probes =
            notes::probes_of(&parts).map_err(|e| FileError::Refused(MALFORMED, e.to_string()))?;
        let sites = record_sites(&probes)?;
        let control = match control::control_symbol_of(&parts) {
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
        let attached = AttachedFile {
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
        self.attach_sites(attached, &sites)
    }

    /// Gives every site a cookie and its argument spec, then opens its event; a failure
    /// detaches the sites attached so far.
    fn attach_sites(
        &mut self,
        mut attached: AttachedFile,
        sites: &[&notes::Probe],
    ) -> Result<AttachedFile, FileError> {
        for probe in sites {
            let usdt_spec = spec::usdt_spec(&probe.args, 0)
                .map_err(|e| FileError::Refused(MALFORMED, format!("probe arguments: {e}")))?;
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

    pub(super) fn detach_file(&mut self, file: AttachedFile) {
        for site in file.sites {
            // Close the link and event before the spec can be reused.
            drop(site.attached);
            self.program.remove_spec(site.cookie);
        }
    }

    /// Detaches idle files that were deleted or replaced (no JVM can map them again),
    /// and the longest idle beyond [`MAX_IDLE_FILES`].
    pub(super) fn limit_idle_files(&mut self) {
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
}

/// Opens the very file `pid` maps (see [`discovery::open_mapped`]) and reads the
/// parts of it that attaching needs, never more than [`elf::MAX_FILE_READ`] bytes.
fn open_library(pid: u32, mapped: &MappedFile) -> Result<(File, ElfParts), FileError> {
    let file = discovery::open_mapped(pid, mapped).map_err(|e| match e {
        OpenError::NotRegular => FileError::Refused(NOT_REGULAR_FILE, e.to_string()),
        OpenError::UntrustedFilesystem(_) => {
            FileError::Refused(UNTRUSTED_FILESYSTEM, e.to_string())
        }
        OpenError::Replaced | OpenError::Io(_) => FileError::Transient(e.to_string()),
    })?;
    let parts = elf::read(&file).map_err(|e| match e {
        ElfError::Io(_) => FileError::Transient(e.to_string()),
        ElfError::TooLarge { .. } => FileError::Refused(TOO_LARGE, e.to_string()),
        ElfError::NotElf | ElfError::Object(_) | ElfError::Malformed(_) => {
            FileError::Refused(MALFORMED, e.to_string())
        }
    })?;
    Ok((file, parts))
}

/// The refused files: their keys, so that they are not opened again, and the newest
/// few with their reason, for the status. Both bounded: a process can map as many
/// files as it likes.
#[derive(Default)]
pub(super) struct RefusedFiles {
    keys: HashSet<FileKey>,
    /// The keys in the order they were refused, oldest first.
    order: VecDeque<FileKey>,
    /// Newest last.
    listed: VecDeque<RefusedFile>,
}

impl RefusedFiles {
    pub(super) fn contains(&self, key: &FileKey) -> bool {
        self.keys.contains(key)
    }

    pub(super) fn insert(&mut self, key: FileKey, file: RefusedFile) {
        if self.keys.insert(key) {
            self.order.push_back(key);
        }
        while self.order.len() > MAX_REFUSED_KEYS {
            if let Some(oldest) = self.order.pop_front() {
                self.keys.remove(&oldest);
            }
        }
        self.listed.push_back(file);
        while self.listed.len() > MAX_LISTED_REFUSED {
            self.listed.pop_front();
        }
    }

    /// The newest refused files, newest first.
    pub(super) fn newest(&self) -> Vec<RefusedFile> {
        self.listed.iter().rev().cloned().collect()
    }
}

/// The sites of the record probe among a file's probes: at least one, at most
/// [`MAX_SITES_PER_FILE`].
fn record_sites(probes: &[notes::Probe]) -> Result<Vec<&notes::Probe>, FileError> {
    let sites: Vec<&notes::Probe> = probes
        .iter()
        .filter(|p| p.provider == PROBE_PROVIDER && p.name == PROBE_NAME)
        .collect();
    if sites.is_empty() {
        return Err(FileError::Refused(
            NO_PROBE,
            format!(
            "no USDT probe {PROBE_PROVIDER}:{PROBE_NAME} (an agent built without profiler=usdt?)"
        ),
        ));
    }
    if sites.len() > MAX_SITES_PER_FILE {
        return Err(FileError::Refused(
            MALFORMED,
            format!(
                "{} {PROBE_PROVIDER}:{PROBE_NAME} probe sites, more than {MAX_SITES_PER_FILE}",
                sites.len()
            ),
        ));
    }
    Ok(sites)
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

/// The first online CPU (0 unless it was taken offline).
fn first_online_cpu() -> anyhow::Result<libc::c_int> {
    let online =
        aya::util::online_cpus().map_err(|(path, e)| anyhow::anyhow!("cannot read {path}: {e}"))?;
    let cpu = online.first().context("no CPU online")?;
    libc::c_int::try_from(*cpu).context("CPU number out of range")
}
