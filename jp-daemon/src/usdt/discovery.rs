//! Which processes map the agent library, by a rescan of `/proc/*/maps`.
//!
//! A rescan rather than an exec tracepoint: the agent is often loaded after exec
//! (`-agentpath` is processed once the JVM runs, and `jcmd PID JVMTI.agent_load` loads it
//! into a running JVM at any time), so an exec event would still need a look at the
//! maps later. A scan reads each process's maps once per interval, and only parses
//! the ones whose text names the library.
use std::fs;
use std::io::{self, Read as _};

use super::maps::{self, MappedFile};
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

/// Every process whose maps name a file called `library`. `known(pid)` gives the
/// start time of a process the caller already tracks. Processes that exit or cannot
/// be read during the scan are left out (a later scan sees them, or their absence).
pub fn scan(library: &str, known: impl Fn(u32) -> Option<u64>) -> io::Result<Scan> {
    let mut scan = Scan::default();
    let own = std::process::id();
    for entry in fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        if let Some(start) = known(pid) {
            if start_time(pid).is_ok_and(|t| t == start) {
                scan.alive.push(pid);
                continue;
            }
        }
        let Ok(text) = maps::read_maps(pid) else {
            continue;
        };
        if !text.contains(library) {
            continue;
        }
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
    Ok(scan)
}

/// Field 22 (`starttime`, clock ticks since boot) of `/proc/PID/stat`.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let text = read_bounded(&format!("/proc/{pid}/stat"), 4096)?;
    parse_start_time(&String::from_utf8_lossy(&text))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/PID/stat"))
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
    let ns_pid = read_bounded(&format!("/proc/{pid}/status"), 64 << 10)
        .ok()
        .and_then(|raw| parse_ns_pid(&String::from_utf8_lossy(&raw)));
    ProcessInfo {
        start_time_ticks,
        ns_pid,
        cmdline,
        exe,
    }
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

fn read_bounded(path: &str, limit: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    fs::File::open(path)?
        .take(limit as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
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
    fn ns_pid_lines() {
        assert_eq!(parse_ns_pid("Name:\tx\nNSpid:\t1234\t7\n"), Some(7));
        assert_eq!(parse_ns_pid("NSpid:\t1234\n"), None);
        assert_eq!(parse_ns_pid("Name:\tx\n"), None);
        assert_eq!(parse_ns_pid("NSpid:\t1\tx\n"), None);
    }
}
