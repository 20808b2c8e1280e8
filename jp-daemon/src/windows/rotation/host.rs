//! The rotation's ports on a real host: the HotSpot JVMs as `windows::hotspot` lists
//! them, their CPU from jpd's kernel sampler (through the JVM store) when it counts them,
//! else from the kernel's process accounting; windows opened by the windows service.
use std::collections::HashMap;
use std::sync::Arc;

use super::cost::CpuSource;
use super::plan::{AgentState, Candidate};
use super::{Completed, Fleet, OpenFuture, Opener, RotationWindow};
use crate::store::jvm::SharedJvmStore;
use crate::store::read::ReadJvm;
use crate::windows::hotspot::{self, AgentPresence, HotspotJvm};
use crate::windows::{WindowOrigin, WindowRequest, Windows};

type ListJvms = dyn Fn() -> Vec<Candidate> + Send + Sync;

pub struct HostFleet {
    list: Box<ListJvms>,
    jvm_store: SharedJvmStore,
}

impl HostFleet {
    /// `list` lists the host's HotSpot JVMs (blocking).
    pub fn new(list: Box<ListJvms>, jvm_store: SharedJvmStore) -> Arc<HostFleet> {
        Arc::new(HostFleet { list, jvm_store })
    }

    /// Every HotSpot JVM of this host, with its cgroup.
    pub fn of_host(jvm_store: SharedJvmStore) -> Arc<HostFleet> {
        HostFleet::new(
            Box::new(|| hotspot::list_hotspot_jvms().iter().map(candidate).collect()),
            jvm_store,
        )
    }
}

/// A HotSpot JVM as the rotation's plan sees it.
pub fn candidate(jvm: &HotspotJvm) -> Candidate {
    Candidate {
        pid: jvm.pid,
        start_time: jvm.start_time,
        uid: jvm.uid,
        main_class: jvm.main_class.clone(),
        cgroup: cgroup_of(jvm.pid),
        agent: match jvm.agent {
            AgentPresence::None => AgentState::None,
            AgentPresence::Live => AgentState::Live,
            AgentPresence::Dormant => AgentState::Dormant,
            AgentPresence::WindowOpen(_) => AgentState::WindowOpen,
            AgentPresence::Unknown => AgentState::Unknown,
        },
        attach_disabled: jvm.attach_disabled,
    }
}

/// The rotation's windows are the service's like any other, counted and stored under
/// the origin `rotation`, with the agent's default scope.
impl Opener for Windows {
    fn open(&self, window: RotationWindow) -> OpenFuture {
        let windows = self.clone();
        Box::pin(async move {
            let req = WindowRequest {
                pid: window.pid,
                seconds: window.seconds,
                include: Vec::new(),
                exclude: Vec::new(),
                bba: None,
                origin: WindowOrigin::Rotation,
                load_agent: window.load_agent,
            };
            let w = windows.profile(req).await.map_err(|e| e.to_string())?;
            Ok(Completed {
                id: w.id,
                opened: w.opened,
                closed: w.closed,
            })
        })
    }
}

impl Fleet for HostFleet {
    fn jvms(&self) -> Vec<Candidate> {
        (self.list)()
    }

    fn cpu(&self, jvms: &[(u32, u64)]) -> Vec<Option<(u64, CpuSource)>> {
        // One short hold of the store's lock for every JVM: the sampler's CPU per process.
        let sampled: HashMap<u32, u64> = self
            .jvm_store
            .list()
            .into_iter()
            .filter(|s| s.exited_at.is_none() && !s.cpu.is_empty())
            .map(|s| (s.pid, s.cpu.iter().map(|(_, u, k)| u + k).sum()))
            .collect();
        jvms.iter()
            .map(|&(pid, start_time)| {
                // The pid must still be this JVM, whichever source counts its CPU.
                let stat = proc_stat(pid).filter(|s| s.start_time == start_time)?;
                Some(match sampled.get(&pid) {
                    Some(&ns) => (ns, CpuSource::Sampler),
                    None => (stat.cpu_ns, CpuSource::Proc),
                })
            })
            .collect()
    }
}

/// What the rotation reads of /proc/PID/stat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Clock ticks since boot.
    pub start_time: u64,
    /// User and system time of every thread, ns.
    pub cpu_ns: u64,
}

pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
        clock_ticks(),
    )
}

/// Fields after the command (which may hold spaces and parentheses): the 3rd is the
/// first; utime, stime are the 14th and 15th, starttime the 22nd.
fn parse_stat(text: &str, ticks_per_second: u64) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    let ticks = num(14)? + num(15)?;
    Some(ProcStat {
        start_time: num(22)?,
        cpu_ns: ticks * (1_000_000_000 / ticks_per_second.max(1)),
    })
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The process's cgroup: its v2 path (`0::PATH`), else the first hierarchy's; empty when
/// unreadable.
pub fn cgroup_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    parse_cgroup(&text)
}

fn parse_cgroup(text: &str) -> String {
    let v2 = text.lines().find_map(|l| l.strip_prefix("0::"));
    let first = || text.lines().next().and_then(|l| l.splitn(3, ':').nth(2));
    v2.or_else(first).unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_command_with_spaces_and_parentheses() {
        let line = "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    30 0 987654 1000 100 18446744073709551615";
        assert_eq!(
            parse_stat(line, 100),
            Some(ProcStat {
                start_time: 987654,
                cpu_ns: 3_000_000_000
            })
        );
        assert_eq!(parse_stat("4242 (java) S 1", 100), None);
        let me = proc_stat(std::process::id()).unwrap();
        assert!(me.start_time > 0);
    }

    #[test]
    fn cgroup_v2_else_the_first_hierarchy() {
        assert_eq!(
            parse_cgroup("0::/system.slice/shop.service\n"),
            "/system.slice/shop.service"
        );
        assert_eq!(
            parse_cgroup("12:cpu,cpuacct:/a/b\n1:name=systemd:/c\n"),
            "/a/b"
        );
        assert_eq!(parse_cgroup(""), "");
    }
}
