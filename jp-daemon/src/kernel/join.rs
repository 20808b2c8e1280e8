//! CPU per exact JVM context, the kernel side: tells `jp_sample` which
//! threads publish a context slot (`JP_JVM_PIDS`, `JP_JVM_THREADS`); the collector hands
//! the samples it logged under them (`ctx_log`) to whoever resolves contexts.
//!
//! The seam is [`ContextJoin`]: the kernel collector knows nothing of JVM stores; the
//! daemon connects it to the one that receives the agents' records.
use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::Context as _;
use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::Ebpf;
use jp_common::wire::HeapContext;
use jp_common::{maps, CtxKey, JvmThread};

/// A thread that announced its context slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotThread {
    pub tgid: u32,
    pub tid: u32,
    pub slot: u64,
    /// Set when the thread publishes on the JVM's heap (see `wire::HeapContext`).
    pub heap: Option<HeapContext>,
    pub stream: u64,
}

/// The JVMs the sampler counts, and their threads that publish a context.
pub struct Joined {
    /// Changes whenever `threads` or `pids` do.
    pub version: u64,
    /// Threads that announced a context slot: samples count under their context.
    pub threads: Vec<SlotThread>,
    /// Running JVMs (tgids): samples of their other threads count by the thread's kind.
    pub pids: Vec<u32>,
}

/// Where the join's threads come from and its samples go.
pub trait ContextJoin: Send + Sync {
    /// The JVMs and announced threads, if they changed since `version`.
    fn joined(&self, version: Option<u64>) -> Option<Joined>;
    /// An announced thread that is not its process's: the announcement is refused.
    fn refuse(&self, thread: &SlotThread);
    /// Samples counted since the last call (deltas), `period_ns` each.
    fn samples(&self, period_ns: u64, samples: &[(CtxKey, u64)]);
}

/// Whose thread an announced thread id is.
#[derive(Debug, PartialEq, Eq)]
enum Owner {
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
struct NamespacedTids {
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
fn namespaced_threads(tgid: u32) -> Option<HashMap<u32, u32>> {
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

fn thread_owner(tgid: u32, tid: u32, namespaced: &mut NamespacedTids) -> Owner {
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

/// The sampler's `JP_JVM_THREADS`: `pid_tgid` (as jpd sees it) → the thread's slot.
type SampledThreads = HashMap<u64, JvmThread>;

/// (tgid, announced tid, stream) → the tid as jpd sees it.
type OwnedThreads = HashMap<(u32, u32, u64), u32>;

/// What the collector keeps between passes for the join.
#[derive(Default)]
pub struct JoinState {
    version: Option<u64>,
    pids: HashSet<u32>,
    threads: SampledThreads,
    /// Announced threads found to be their process's at an earlier sync, (tgid, announced
    /// tid, stream) → the tid as jpd sees it: a sync looks in /proc only for new ones
    /// (syncs follow every announcement, and a JVM may have thousands of threads).
    owned: OwnedThreads,
}

impl JoinState {
    /// Mirrors the announced threads into the sampler's maps. Threads whose id is not
    /// in their process are refused (a process may announce only its own threads).
    pub fn sync_threads(&mut self, ebpf: &mut Ebpf, join: &dyn ContextJoin) -> anyhow::Result<()> {
        let Some(Joined {
            version,
            threads: announced,
            pids: jvms,
        }) = join.joined(self.version)
        else {
            return Ok(());
        };
        let (want, owned) = self.owned_threads(&announced, join);
        let pids = joined_pids(&want, jvms);
        self.write_threads(ebpf, &want)?;
        self.write_pids(ebpf, &pids)?;
        self.threads = want;
        self.owned = owned;
        self.pids = pids;
        self.version = Some(version);
        Ok(())
    }

    /// The announced threads that are their process's, as the sampler's map wants them
    /// (by `pid_tgid` as jpd sees it), and the ownership found, for the next sync.
    fn owned_threads(
        &self,
        announced: &[SlotThread],
        join: &dyn ContextJoin,
    ) -> (SampledThreads, OwnedThreads) {
        let mut want = SampledThreads::new();
        let mut namespaced = NamespacedTids::default();
        let mut owned = HashMap::with_capacity(announced.len());
        for t in announced {
            let id = (t.tgid, t.tid, t.stream);
            let tid = match self.owned.get(&id) {
                Some(&tid) => tid,
                None => match thread_owner(t.tgid, t.tid, &mut namespaced) {
                    Owner::Own(tid) => tid,
                    Owner::Other => {
                        join.refuse(t);
                        continue;
                    }
                    // Ended since it announced itself (its end record is on its way):
                    // nothing to read any more, and nothing to hold against the JVM.
                    Owner::Gone => continue,
                },
            };
            owned.insert(id, tid);
            let key = (u64::from(t.tgid) << 32) | u64::from(tid);
            want.insert(
                key,
                JvmThread {
                    slot: t.slot,
                    stream: t.stream,
                    current_offset: t.heap.map_or(0, |h| h.current_offset),
                    cookie_offset: t.heap.map_or(0, |h| h.cookie_offset),
                    cookie: t.heap.map_or(0, |h| h.cookie),
                    _pad: 0,
                },
            );
        }
        (want, owned)
    }

    /// Brings `JP_JVM_THREADS` from what the last sync wrote to `want`: only the threads
    /// gone, new or changed are written.
    fn write_threads(&self, ebpf: &mut Ebpf, want: &SampledThreads) -> anyhow::Result<()> {
        let name = maps::JVM_THREADS.name;
        let mut map: BpfHashMap<&mut MapData, u64, JvmThread> =
            BpfHashMap::try_from(ebpf.map_mut(name).with_context(|| format!("no {name}"))?)?;
        for k in self.threads.keys().filter(|k| !want.contains_key(k)) {
            let _ = map.remove(k);
        }
        for (k, v) in want {
            if self.threads.get(k) != Some(v) {
                map.insert(k, v, 0)
                    .with_context(|| format!("{name} is full ({} threads)", want.len()))?;
            }
        }
        Ok(())
    }

    /// Brings `JP_JVM_PIDS` from what the last sync wrote to `pids`.
    fn write_pids(&self, ebpf: &mut Ebpf, pids: &HashSet<u32>) -> anyhow::Result<()> {
        let name = maps::JVM_PIDS.name;
        let mut map: BpfHashMap<&mut MapData, u32, u32> =
            BpfHashMap::try_from(ebpf.map_mut(name).with_context(|| format!("no {name}"))?)?;
        for p in self.pids.difference(pids) {
            let _ = map.remove(p);
        }
        for p in pids.difference(&self.pids) {
            map.insert(p, 1, 0)
                .with_context(|| format!("{name} is full"))?;
        }
        Ok(())
    }
}

/// The JVMs the sampler counts: those with announced threads first (their samples need
/// the join to find a context), then the other running JVMs (counted by thread kind)
/// while `JP_JVM_PIDS` has room.
fn joined_pids(want: &SampledThreads, jvms: Vec<u32>) -> HashSet<u32> {
    let mut pids: HashSet<u32> = want.keys().map(|k| (k >> 32) as u32).collect();
    let room = maps::JVM_PIDS.max_entries as usize;
    let mut left_out = 0usize;
    for p in jvms {
        if pids.len() < room {
            pids.insert(p);
        } else if !pids.contains(&p) {
            left_out += 1;
        }
    }
    if left_out > 0 {
        log::warn!(
            "the sampler counts at most {room} JVMs: {left_out} running JVM(s) get no CPU split"
        );
    }
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_threads_are_told_apart_by_owner() {
        let me = std::process::id();
        let mut ns = NamespacedTids::default();
        assert_eq!(thread_owner(me, me, &mut ns), Owner::Own(me));
        // pid 1's main thread is alive and not ours.
        assert_eq!(thread_owner(me, 1, &mut ns), Owner::Other);
        // Beyond pid_max: never a thread.
        assert_eq!(thread_owner(me, u32::MAX - 1, &mut ns), Owner::Gone);
        // Our own namespace: ids are taken as they are.
        assert_eq!(namespaced_threads(me), None);
    }
}
