//! Which processes map the agent library, by a rescan of `/proc/*/maps`.
//!
//! A rescan rather than an exec tracepoint: the agent is often loaded after exec
//! (`-agentpath` is processed once the JVM runs, and `jcmd PID JVMTI.agent_load` loads it
//! into a running JVM at any time), so an exec event would still need a look at the
//! maps later. A scan parses only the maps whose text names the library.
//!
//! Reading a process's maps costs tens of µs and more for big processes, and a host
//! runs hundreds of processes that never load the agent: a process whose maps did not
//! name the library is looked at again after a gap that doubles each time, from the
//! scan interval up to `MAX_RECHECK_GAPS` intervals. A JVM started with `-agentpath` is
//! found at once (the agent is loaded in the JVM's first second); an agent loaded into
//! a running JVM with `jcmd` is found within the longest gap.
//!
//! Listing `/proc` itself costs about a µs per process. When no pid was allocated since
//! the last listing (the last field of `/proc/loadavg`), no process can have started:
//! the scan goes over the last listing instead.
use std::collections::HashMap;
use std::fs;
use std::io::{self, Read as _};
use std::time::{Duration, Instant};

use super::maps::{self, MappedFile};
use super::notes;
use crate::store::jvm::ProcessInfo;

/// One process mapping the library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`: with the pid, names the process across pid reuse.
    pub start_time: u64,
    pub file: MappedFile,
}

/// What a scan saw.
#[derive(Debug, Default)]
pub struct Scan {
    /// Processes mapping the library that the caller did not know.
    pub found: Vec<Found>,
    /// Known processes still running (same pid and start time): their maps were not
    /// read again (a JVM's are large).
    pub alive: Vec<u32>,
}

/// The longest gap between two looks at a process without the library, in scan
/// intervals.
pub const MAX_RECHECK_GAPS: u32 = 32;

/// When each process that did not map the library is looked at again.
#[derive(Debug)]
pub struct Rechecks {
    /// The scan interval: the first gap.
    base: Duration,
    next: HashMap<u32, Recheck>,
    /// The pids of the last listing of `/proc`, and the newest pid then.
    listing: Vec<u32>,
    newest_pid: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Recheck {
    at: Instant,
    gap: Duration,
}

impl Rechecks {
    pub fn new(scan_interval: Duration) -> Rechecks {
        Rechecks {
            base: scan_interval,
            next: HashMap::new(),
            listing: Vec::new(),
            newest_pid: None,
        }
    }

    /// Whether `pid` is to be looked at in the scan at `now`.
    fn due(&self, pid: u32, now: Instant) -> bool {
        self.next.get(&pid).is_none_or(|r| now >= r.at)
    }

    /// `pid` was looked at and does not map the library: the next look comes after
    /// twice the last gap (the first after one interval).
    fn looked(&mut self, pid: u32, now: Instant) {
        let longest = self.base * MAX_RECHECK_GAPS;
        let gap = match self.next.get(&pid) {
            Some(r) => (r.gap * 2).min(longest),
            None => self.base,
        };
        self.next.insert(pid, Recheck { at: now + gap, gap });
    }

    /// `pid` maps the library (the caller tracks it now) or is gone.
    fn forget(&mut self, pid: u32) {
        self.next.remove(&pid);
    }

    /// Drops the processes that were not listed in the last scan.
    fn retain_listed(&mut self, listed: &std::collections::HashSet<u32>) {
        self.next.retain(|pid, _| listed.contains(pid));
    }
}

/// Every process whose maps name a file called `library`. `known(pid)` gives the
/// start time of a process the caller already tracks. Processes that exit or cannot
/// be read during the scan are left out (a later scan sees them, or their absence).
/// Processes that did not map the library are looked at again as `rechecks` says (a pid
/// reused within that gap is seen at the next look).
pub fn scan(
    library: &str,
    known: impl Fn(u32) -> Option<u64>,
    rechecks: &mut Rechecks,
) -> io::Result<Scan> {
    let mut scan = Scan::default();
    let own = std::process::id();
    let now = Instant::now();
    let newest = newest_pid();
    if newest.is_none() || newest != rechecks.newest_pid {
        rechecks.listing = list_pids()?;
        rechecks.newest_pid = newest;
        let listed: std::collections::HashSet<u32> = rechecks.listing.iter().copied().collect();
        rechecks.retain_listed(&listed);
    }
    let pids = std::mem::take(&mut rechecks.listing);
    for &pid in &pids {
        if pid == own {
            continue;
        }
        if let Some(start) = known(pid) {
            if start_time(pid).is_ok_and(|t| t == start) {
                scan.alive.push(pid);
                continue;
            }
        }
        if !rechecks.due(pid, now) {
            continue;
        }
        let Ok(text) = maps::read_maps(pid) else {
            // Exiting, or not ours to read: no cheaper to try again at every scan.
            rechecks.looked(pid, now);
            continue;
        };
        if !text.contains(library) {
            rechecks.looked(pid, now);
            continue;
        }
        rechecks.forget(pid);
        let Some(file) = maps::parse_maps(&text)
            .into_iter()
            .find(|f| maps::has_file_name(f, library))
        else {
            continue;
        };
        let Ok(start_time) = start_time(pid) else {
            continue;
        };
        scan.found.push(Found {
            pid,
            start_time,
            file,
        });
    }
    rechecks.listing = pids;
    Ok(scan)
}

/// The pids in `/proc`.
pub(crate) fn list_pids() -> io::Result<Vec<u32>> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        if let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// The pid allocated last on the host (`/proc/loadavg`'s last field), if readable.
fn newest_pid() -> Option<u32> {
    let text = read_bounded("/proc/loadavg", 256).ok()?;
    parse_newest_pid(&String::from_utf8_lossy(&text))
}

fn parse_newest_pid(loadavg: &str) -> Option<u32> {
    loadavg.split_whitespace().nth(4)?.parse().ok()
}

/// Field 22 (`starttime`, clock ticks since boot) of `/proc/PID/stat`.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let text = read_bounded(&format!("/proc/{pid}/stat"), 4096)?;
    parse_start_time(&String::from_utf8_lossy(&text))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/PID/stat"))
}

/// Opens the directory `/proc/PID` of the process started at `start_time` (field 22 of
/// its `stat`), read through the directory itself. Files opened relative to it
/// ([`open_in`]) belong to that process or to none: once it exits, the directory
/// refers to it still, and a new process given the same pid is not reached.
pub fn open_process(pid: u32, start_time: u64) -> io::Result<fs::File> {
    let dir = fs::File::open(format!("/proc/{pid}"))?;
    let mut stat = Vec::new();
    open_in(&dir, c"stat", libc::O_RDONLY)?
        .take(4096)
        .read_to_end(&mut stat)?;
    match parse_start_time(&String::from_utf8_lossy(&stat)) {
        Some(t) if t == start_time => Ok(dir),
        // Another process with the same pid: as if the first were gone.
        _ => Err(io::Error::from_raw_os_error(libc::ESRCH)),
    }
}

/// Opens `name` in the directory `dir` (`openat`, close-on-exec).
pub fn open_in(dir: &fs::File, name: &std::ffi::CStr, flags: libc::c_int) -> io::Result<fs::File> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is an open
    // descriptor borrowed for the call.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// The command name (field 2) is in parentheses and may itself contain spaces and
/// parentheses: the fields after it start after the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after the name; starttime is field 22.
    after.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Longest command line kept, in bytes.
pub const MAX_CMDLINE: usize = 4096;

/// Best effort: missing pieces are left empty (the process may be exiting).
pub fn process_info(pid: u32, start_time_ticks: u64) -> ProcessInfo {
    let cmdline = read_bounded(&format!("/proc/{pid}/cmdline"), MAX_CMDLINE)
        .map(|raw| {
            let text = String::from_utf8_lossy(&raw);
            text.trim_end_matches('\0').replace('\0', " ")
        })
        .unwrap_or_default();
    let exe = fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let status = read_bounded(&format!("/proc/{pid}/status"), 64 << 10)
        .map(|raw| String::from_utf8_lossy(&raw).into_owned())
        .unwrap_or_default();
    ProcessInfo {
        start_time_ticks,
        ns_pid: parse_ns_pid(&status),
        cmdline,
        exe,
        uid: parse_uid(&status),
    }
}

/// `Uid:\t1000\t1000\t1000\t1000`: the real uid (the per-uid quota's key).
fn parse_uid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// `NSpid:\t1234\t7`: the last is the pid in the innermost namespace; a single value
/// means the process is in jpd's (initial) namespace.
fn parse_ns_pid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Vec<&str> = line.split_whitespace().collect();
    if pids.len() < 2 {
        return None;
    }
    pids.last()?.parse().ok()
}

/// At most `limit` bytes of the file at `path` (a `/proc` file's size is not known).
pub(crate) fn read_bounded(path: &str, limit: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    fs::File::open(path)?
        .take(limit as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// Why a mapped file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// On a filesystem whose server is a local process (FUSE): an open or a read there
    /// waits for that process, which may never answer.
    #[error("on a {0} filesystem, served by a process that may never answer")]
    UntrustedFilesystem(String),
    #[error("not a regular file")]
    NotRegular,
    /// The process mapped another file at that place since its maps were read.
    #[error("replaced since the process's maps were read")]
    Replaced,
    #[error("cannot open: {0}")]
    Io(#[from] io::Error),
}

/// Opens the very file that process `pid` maps as `file` says: through
/// `/proc/PID/map_files/START-END`, the mapping itself, never through its path. No
/// path is walked, so the process cannot swap a directory or plant a symlink or a
/// FIFO under jpd; the entry reaches a deleted file and a file in another mount
/// namespace alike. (It needs `CAP_SYS_ADMIN`, which jpd has; the entry is a link the
/// kernel resolves itself, so `O_NOFOLLOW` would refuse it.) The open does not block
/// (`O_NONBLOCK`), the open file must be a regular file and the one the maps named
/// (device and inode), and a file on FUSE is not opened at all.
pub fn open_mapped(pid: u32, file: &MappedFile) -> Result<fs::File, OpenError> {
    if let Some(kind) = filesystem_type(pid, file.dev).filter(|k| k.starts_with("fuse")) {
        return Err(OpenError::UntrustedFilesystem(kind));
    }
    let path = format!("/proc/{pid}/map_files/{:x}-{:x}", file.start, file.end);
    let opened = notes::open_regular(std::path::Path::new(&path)).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidInput => OpenError::NotRegular,
        _ => OpenError::Io(e),
    })?;
    let meta = opened.metadata()?;
    use std::os::unix::fs::MetadataExt as _;
    if (libc::major(meta.dev()), libc::minor(meta.dev())) != file.dev || meta.ino() != file.inode {
        return Err(OpenError::Replaced);
    }
    Ok(opened)
}

/// The type of the filesystem with device `dev` in process `pid`'s mount namespace
/// (`/proc/PID/mountinfo`), if it is listed there.
fn filesystem_type(pid: u32, dev: (u32, u32)) -> Option<String> {
    let text = read_bounded(&format!("/proc/{pid}/mountinfo"), 4 << 20).ok()?;
    parse_filesystem_type(&String::from_utf8_lossy(&text), dev)
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`: the device is
/// field 3, the type follows the ` - ` separator.
fn parse_filesystem_type(mountinfo: &str, dev: (u32, u32)) -> Option<String> {
    let wanted = format!("{}:{}", dev.0, dev.1);
    mountinfo.lines().find_map(|line| {
        let (mount, rest) = line.split_once(" - ")?;
        (mount.split(' ').nth(2)? == wanted).then(|| rest.split(' ').next().map(str::to_owned))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_tricky_command_name() {
        let mut stat = String::from("42 (a) b (c) S");
        for field in 4..=30 {
            stat.push_str(&format!(" {field}"));
        }
        assert_eq!(parse_start_time(&stat), Some(22));
        assert_eq!(parse_start_time("42 (x) S 1 2"), None);
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn own_start_time_and_info() {
        let me = std::process::id();
        let t = start_time(me).unwrap();
        assert!(t > 0);
        let info = process_info(me, t);
        assert_eq!(info.ns_pid, None);
        assert!(!info.cmdline.is_empty());
        assert_eq!(
            std::path::Path::new(&info.exe),
            fs::canonicalize("/proc/self/exe").unwrap()
        );
    }

    #[test]
    fn rechecks_back_off_to_the_longest_gap_and_forget() {
        let base = Duration::from_secs(1);
        let mut r = Rechecks::new(base);
        let t0 = Instant::now();
        assert!(r.due(7, t0), "a new process is looked at at once");
        r.looked(7, t0);
        assert!(!r.due(7, t0 + base / 2));
        assert!(r.due(7, t0 + base));
        // Gaps double: 1, 2, 4, … up to MAX_RECHECK_GAPS intervals.
        let mut at = t0;
        let mut gaps = Vec::new();
        for _ in 0..8 {
            r.looked(7, at);
            let gap = r.next[&7].gap;
            gaps.push(gap.as_secs());
            at += gap;
        }
        assert_eq!(gaps, [2, 4, 8, 16, 32, 32, 32, 32]);
        r.forget(7);
        assert!(r.due(7, at), "a forgotten pid is looked at again at once");
        r.looked(8, at);
        r.retain_listed(&std::collections::HashSet::from([9]));
        assert!(r.due(8, at), "a pid gone from /proc is forgotten");
    }

    #[test]
    fn newest_pid_from_loadavg() {
        assert_eq!(parse_newest_pid("0.00 0.01 0.05 1/79 29446\n"), Some(29446));
        assert_eq!(parse_newest_pid("0.00 0.01 0.05 1/79"), None);
        assert_eq!(parse_newest_pid("garbage"), None);
        assert!(newest_pid().is_some());
    }

    #[test]
    fn filesystem_types_by_device() {
        let text = "\
36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 36 0:52 / /home/u/fuse rw,nosuid,nodev shared:9 - fuse.sshfs host: rw,user_id=1000
";
        assert_eq!(
            parse_filesystem_type(text, (98, 0)).as_deref(),
            Some("ext3")
        );
        assert_eq!(
            parse_filesystem_type(text, (0, 52)).as_deref(),
            Some("fuse.sshfs")
        );
        assert_eq!(parse_filesystem_type(text, (0, 53)), None);
        assert_eq!(parse_filesystem_type("garbage\n", (0, 0)), None);
    }

    #[test]
    fn own_mapped_executable_opens_and_a_fifo_is_refused_without_blocking() {
        let exe = fs::canonicalize("/proc/self/exe").unwrap();
        let me = maps::mapped_files(std::process::id())
            .unwrap()
            .into_iter()
            .find(|f| std::path::Path::new(&f.path) == exe)
            .unwrap();
        let opened = open_mapped(std::process::id(), &me).unwrap();
        assert!(opened.metadata().unwrap().is_file());
        let moved = MappedFile {
            inode: me.inode + 1,
            ..me.clone()
        };
        assert!(matches!(
            open_mapped(std::process::id(), &moved),
            Err(OpenError::Replaced)
        ));

        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libjpagent.so");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        // No writer: a blocking open would wait here for good.
        let err = notes::open_regular(&fifo).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn ns_pid_lines() {
        assert_eq!(parse_ns_pid("Name:\tx\nNSpid:\t1234\t7\n"), Some(7));
        assert_eq!(parse_ns_pid("NSpid:\t1234\n"), None);
        assert_eq!(parse_ns_pid("Name:\tx\n"), None);
        assert_eq!(parse_ns_pid("NSpid:\t1\tx\n"), None);
    }
}
