//! Every HotSpot JVM on the host — a process whose maps name `libjvm.so` — with what a
//! window needs to know of it: its user, its pid in its own namespace, its main class
//! and Java version, whether attach was disabled, and whether and in what state it runs
//! jp's agent (read from the agent's control block, `jp_usdt_control`).
//!
//! Listing is cheap on a host of many processes, as the USDT discovery's scan is: a
//! process is looked at once per (start time, executable); a non-JVM is then skipped
//! until it execs another program, and a JVM's fixed facts (main class, version,
//! options) are kept while it lives. Only a JVM's maps are read at each listing (to
//! see the agent loaded since), and its control block.
use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Mutex;

use jp_common::wire::{
    AGENT_STATE_DORMANT, AGENT_STATE_LIVE, AGENT_STATE_UNKNOWN, AGENT_STATE_WINDOW_OPEN,
    CONTROL_MAGIC,
};

use super::attach::error::AttachError;
use super::attach::process::{self, Credentials};
use crate::lock::lock;
use crate::usdt::control::{self, ControlSymbol};
use crate::usdt::discovery::{self, read_bounded};
use crate::usdt::elf;
use crate::usdt::maps::{self, MappedFile};

/// The file name of HotSpot's VM library.
pub const LIBJVM: &str = "libjvm.so";
/// The file name of jp's agent library (as the USDT collector finds it).
pub const AGENT_LIBRARY: &str = "libjpagent.so";

/// One HotSpot JVM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotspotJvm {
    /// Its pid in jpd's (the initial) PID namespace.
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`: with the pid, names the process across pid reuse.
    pub start_time: u64,
    /// Effective user and group.
    pub uid: u32,
    pub gid: u32,
    /// Its pid in its own PID namespace (`pid` when it is in jpd's).
    pub nspid: u32,
    /// Main class, jar or module, as `sun.java.command`'s first word names it.
    pub main_class: String,
    /// `JAVA_VERSION` of its JDK's `release` file ("17.0.15"), when readable.
    pub java_version: Option<String>,
    pub agent: AgentPresence,
    /// The agent library's path as the JVM sees it, when it maps one.
    pub agent_path: Option<String>,
    /// `-XX:+DisableAttachMechanism` on its command line or in its options' variables.
    pub attach_disabled: bool,
}

/// Whether a JVM runs jp's agent, and in what state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentPresence {
    /// No agent library mapped.
    None,
    /// Profiled from start (`mode=live`, or an agent older than the state field).
    Live,
    /// Loaded, costing nothing, waiting for a window.
    Dormant,
    /// A window is open, with this id.
    WindowOpen(u64),
    /// Mapped, but its control block could not be read (still loading, or not jp's).
    Unknown,
}

/// Words of the control block (`jp_common::wire::Control`): magic, generation,
/// agent_state, window_id, then reserved ones.
const CONTROL_WORDS: usize = 8;
const AGENT_STATE_WORD: usize = 2;
const WINDOW_ID_WORD: usize = 3;

impl AgentPresence {
    /// From the control block's `agent_state` and `window_id`. An agent older than the
    /// state field leaves it 0: it profiles from start.
    pub fn from_control(agent_state: u64, window_id: u64) -> AgentPresence {
        match agent_state {
            AGENT_STATE_UNKNOWN | AGENT_STATE_LIVE => AgentPresence::Live,
            AGENT_STATE_DORMANT => AgentPresence::Dormant,
            AGENT_STATE_WINDOW_OPEN => AgentPresence::WindowOpen(window_id),
            _ => AgentPresence::Unknown,
        }
    }
}

/// What stays true of a process while it runs the same program.
#[derive(Clone, Debug)]
enum Seen {
    NotJvm,
    Jvm(Fixed),
}

#[derive(Clone, Debug)]
struct Fixed {
    main_class: String,
    java_version: Option<String>,
    attach_disabled: bool,
}

/// A process as last looked at: its start time and executable name what it was.
struct Looked {
    start_time: u64,
    exe: String,
    seen: Seen,
}

#[derive(Default)]
struct Cache {
    processes: HashMap<u32, Looked>,
    /// The control block's place per agent library file (device, inode).
    symbols: HashMap<((u32, u32), u64), Option<ControlSymbol>>,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// Every HotSpot JVM on the host, by pid. Processes that exit or cannot be read
/// while listed are left out. Blocking (reads `/proc`).
pub fn list_hotspot_jvms() -> Vec<HotspotJvm> {
    let Ok(pids) = discovery::list_pids() else {
        return Vec::new();
    };
    let own = std::process::id();
    let mut guard = lock(&CACHE);
    let cache = guard.get_or_insert_with(Cache::default);
    let listed: HashSet<u32> = pids.iter().copied().collect();
    cache.processes.retain(|pid, _| listed.contains(pid));
    let mut jvms: Vec<HotspotJvm> = pids
        .into_iter()
        .filter(|&pid| pid != own)
        .filter_map(|pid| look(cache, pid).ok())
        .collect();
    jvms.sort_by_key(|j| j.pid);
    jvms
}

/// The HotSpot JVM `pid`, read now.
pub fn hotspot_jvm(pid: u32) -> Result<HotspotJvm, AttachError> {
    let mut guard = lock(&CACHE);
    let cache = guard.get_or_insert_with(Cache::default);
    look(cache, pid)
}

/// Looks at `pid`: from the cache while it runs the same program, else from `/proc`.
fn look(cache: &mut Cache, pid: u32) -> Result<HotspotJvm, AttachError> {
    let start_time =
        discovery::start_time(pid).map_err(|e| AttachError::io(pid, "read its stat", e))?;
    let exe = fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let known = cache
        .processes
        .get(&pid)
        .filter(|l| l.start_time == start_time && l.exe == exe)
        .map(|l| l.seen.clone());
    if let Some(Seen::NotJvm) = known {
        return Err(AttachError::NotHotspot { pid });
    }
    let maps_text = maps::read_maps(pid).map_err(|e| AttachError::io(pid, "read its maps", e))?;
    let files = maps::parse_maps(&maps_text);
    let Some(libjvm) = files.iter().find(|f| maps::has_file_name(f, LIBJVM)) else {
        // An empty map (a kernel thread, a zombie) says nothing lasting about the process.
        if !maps_text.is_empty() {
            remember(cache, pid, start_time, exe, Seen::NotJvm);
        }
        return Err(AttachError::NotHotspot { pid });
    };
    let fixed = match known {
        Some(Seen::Jvm(fixed)) => fixed,
        _ => {
            let fixed = fixed_facts(pid, libjvm)?;
            remember(cache, pid, start_time, exe, Seen::Jvm(fixed.clone()));
            fixed
        }
    };
    let status = read_bounded(&format!("/proc/{pid}/status"), 64 << 10)
        .map_err(|e| AttachError::io(pid, "read its status", e))?;
    let creds = process::parse_status(&String::from_utf8_lossy(&status), pid)
        .ok_or(AttachError::Vanished { pid })?;
    let agent_file = files.iter().find(|f| maps::has_file_name(f, AGENT_LIBRARY));
    let agent = agent_file.map_or(AgentPresence::None, |f| {
        agent_presence(&mut cache.symbols, pid, f)
    });
    Ok(jvm_of(pid, start_time, creds, fixed, agent, agent_file))
}

fn jvm_of(
    pid: u32,
    start_time: u64,
    creds: Credentials,
    fixed: Fixed,
    agent: AgentPresence,
    agent_file: Option<&MappedFile>,
) -> HotspotJvm {
    HotspotJvm {
        pid,
        start_time,
        uid: creds.uid,
        gid: creds.gid,
        nspid: creds.nspid,
        main_class: fixed.main_class,
        java_version: fixed.java_version,
        agent,
        agent_path: agent_file.map(|f| f.path.clone()),
        attach_disabled: fixed.attach_disabled,
    }
}

fn remember(cache: &mut Cache, pid: u32, start_time: u64, exe: String, seen: Seen) {
    cache.processes.insert(
        pid,
        Looked {
            start_time,
            exe,
            seen,
        },
    );
}

/// The facts a JVM keeps while it runs: from its command line, environment and JDK.
fn fixed_facts(pid: u32, libjvm: &MappedFile) -> Result<Fixed, AttachError> {
    let cmdline = read_bounded(&format!("/proc/{pid}/cmdline"), discovery::MAX_CMDLINE)
        .map_err(|e| AttachError::io(pid, "read its command line", e))?;
    let args = process::split_nul(&cmdline);
    let (options, main_class) = process::split_command_line(&args);
    Ok(Fixed {
        attach_disabled: disabled_origin(pid, &options).is_some(),
        main_class,
        java_version: java_version(pid, libjvm),
    })
}

/// Where `-XX:+DisableAttachMechanism` was given to JVM `pid`, if it was.
pub fn attach_disabled_by(pid: u32) -> Option<String> {
    let cmdline = read_bounded(&format!("/proc/{pid}/cmdline"), discovery::MAX_CMDLINE).ok()?;
    let args = process::split_nul(&cmdline);
    let (options, _) = process::split_command_line(&args);
    disabled_origin(pid, &options)
}

/// Longest environment read (the option variables are near its start, set by a launcher).
const MAX_ENVIRON: usize = 1 << 20;

fn disabled_origin(pid: u32, options: &[&str]) -> Option<String> {
    let environ = read_bounded(&format!("/proc/{pid}/environ"), MAX_ENVIRON).unwrap_or_default();
    process::attach_disabled_by(options, &environ)
}

/// `JAVA_VERSION` of the `release` file of the JDK `libjvm.so` belongs to
/// (`JAVA_HOME/lib/server/libjvm.so`; `JAVA_HOME/jre/lib/amd64/server/` before 9),
/// reached through the process's root.
fn java_version(pid: u32, libjvm: &MappedFile) -> Option<String> {
    let root = format!("/proc/{pid}/root");
    let mut dir = Path::new(&libjvm.path).parent();
    for _ in 0..5 {
        let d = dir?;
        let release = format!("{root}{}/release", d.display());
        if let Ok(text) = read_bounded(&release, 64 << 10) {
            if let Some(v) = process::release_java_version(&String::from_utf8_lossy(&text)) {
                return Some(v);
            }
        }
        dir = d.parent();
    }
    None
}

/// The agent's state from its control block; `Unknown` when it cannot be read.
fn agent_presence(
    symbols: &mut HashMap<((u32, u32), u64), Option<ControlSymbol>>,
    pid: u32,
    file: &MappedFile,
) -> AgentPresence {
    let symbol = symbols
        .entry((file.dev, file.inode))
        .or_insert_with(|| {
            let opened = discovery::open_mapped(pid, file).ok()?;
            control::control_symbol_of(&elf::read(&opened).ok()?).ok()
        })
        .as_ref()
        .copied();
    let Some(symbol) = symbol else {
        return AgentPresence::Unknown;
    };
    read_control(pid, file, &symbol).map_or(AgentPresence::Unknown, |words| {
        AgentPresence::from_control(words[AGENT_STATE_WORD], words[WINDOW_ID_WORD])
    })
}

/// The control block's words, checked by its magic.
fn read_control(
    pid: u32,
    file: &MappedFile,
    symbol: &ControlSymbol,
) -> Option<[u64; CONTROL_WORDS]> {
    let addr = control::address_in(pid, file.dev, file.inode, symbol).ok()?;
    let mem = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut bytes = [0u8; std::mem::size_of::<jp_common::wire::Control>()];
    mem.read_exact_at(&mut bytes, addr).ok()?;
    let mut words = [0u64; CONTROL_WORDS];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    (words[0] == CONTROL_MAGIC).then_some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_states() {
        assert_eq!(AgentPresence::from_control(0, 9), AgentPresence::Live);
        assert_eq!(AgentPresence::from_control(1, 0), AgentPresence::Live);
        assert_eq!(AgentPresence::from_control(2, 4), AgentPresence::Dormant);
        assert_eq!(
            AgentPresence::from_control(3, 4),
            AgentPresence::WindowOpen(4)
        );
        assert_eq!(AgentPresence::from_control(99, 0), AgentPresence::Unknown);
    }

    #[test]
    fn this_test_process_is_no_jvm() {
        let me = std::process::id();
        assert!(matches!(
            hotspot_jvm(me),
            Err(AttachError::NotHotspot { pid }) if pid == me
        ));
        // Remembered as no JVM: asked again, the answer comes from the cache.
        assert!(matches!(
            hotspot_jvm(me),
            Err(AttachError::NotHotspot { .. })
        ));
        assert!(matches!(
            hotspot_jvm(u32::MAX - 1),
            Err(AttachError::Vanished { .. })
        ));
    }
}
