//! Whose thread an announced thread id is: the announcing process's (as jpd sees it,
//! across pid namespaces), another process's (refused), or none any more.
use std::collections::HashMap;
use std::path::Path;

/// Whose thread an announced thread id is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// A thread of the announcing process, by its id in jpd's pid namespace.
    Own(u32),
    /// A live thread of another process: the announcement is refused.
    Other,
    /// No such thread (any more).
    Gone,
}

/// Thread ids of processes in another pid namespace than jpd's (a JVM in a container
/// announces the ids `gettid()` gives it there), by process: innermost id → jpd's.
#[derive(Default)]
pub(super) struct NamespacedTids {
    by_process: HashMap<u32, Option<HashMap<u32, u32>>>,
}

/// An announced thread id translated to jpd's pid namespace.
#[derive(Debug, PartialEq, Eq)]
enum HostTid {
    /// The process shares jpd's pid namespace: the id is jpd's already.
    SameNamespace,
    /// The process is in another pid namespace, where this thread has jpd's id.
    Translated(u32),
    /// The process is in another pid namespace and has no thread of this id now.
    NotInNamespace,
}

impl NamespacedTids {
    /// `tid` of `tgid` as jpd sees it.
    fn host_tid(&mut self, tgid: u32, tid: u32) -> HostTid {
        let map = self
            .by_process
            .entry(tgid)
            .or_insert_with(|| namespaced_threads(tgid));
        match map.as_ref() {
            None => HostTid::SameNamespace,
            Some(m) => m
                .get(&tid)
                .map_or(HostTid::NotInNamespace, |&host| HostTid::Translated(host)),
        }
    }
}

/// Innermost → jpd's id of every thread of `tgid`, if it is in another pid namespace.
pub(super) fn namespaced_threads(tgid: u32) -> Option<HashMap<u32, u32>> {
    let ns = |p: &str| std::fs::read_link(format!("{p}/ns/pid")).ok();
    let theirs = ns(&format!("/proc/{tgid}"))?;
    if ns("/proc/self") == Some(theirs) {
        return None;
    }
    let mut map = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{tgid}/task"))
        .ok()?
        .flatten()
    {
        let Some(host) = task
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|ids| ids.split_whitespace().last()?.parse::<u32>().ok());
        if let Some(inner) = inner {
            map.insert(inner, host);
        }
    }
    Some(map)
}

pub(super) fn thread_owner(tgid: u32, tid: u32, namespaced: &mut NamespacedTids) -> Owner {
    match namespaced.host_tid(tgid, tid) {
        HostTid::Translated(host) => return Owner::Own(host),
        // In a container: not one of its threads now (another process's id space is
        // not visible from here, so this cannot be told from a thread that ended).
        HostTid::NotInNamespace => return Owner::Gone,
        HostTid::SameNamespace => {}
    }
    if Path::new(&format!("/proc/{tgid}/task/{tid}")).exists() {
        Owner::Own(tid)
    } else if tid != 0 && Path::new(&format!("/proc/{tid}")).exists() {
        // /proc/TID answers for any live thread id, listed or not.
        Owner::Other
    } else {
        Owner::Gone
    }
}

/// Where the join looks up who owns an announced thread: /proc (a test's table in the
/// tests). Each lookup is a few /proc reads: the join asks only about threads it has
/// not looked up before.
pub(super) trait Owners {
    fn owner(&mut self, tgid: u32, tid: u32) -> Owner;
}

/// /proc, with the thread ids of processes in other pid namespaces read once per sync.
#[derive(Default)]
pub(super) struct ProcOwners {
    namespaced: NamespacedTids,
}

impl Owners for ProcOwners {
    fn owner(&mut self, tgid: u32, tid: u32) -> Owner {
        thread_owner(tgid, tid, &mut self.namespaced)
    }
}
