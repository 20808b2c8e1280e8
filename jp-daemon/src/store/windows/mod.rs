//! The window store: the exact windows jpd opened in JVMs (`windows::service` writes
//! them), per JVM (pid and start time) the newest `keep`, and all of them within
//! [`MAX_STORE_BYTES`]. A window is immutable once stored ([`Arc<WindowProfile>`]):
//! readers (`store::read::ReadWindows`) copy the pointers under the lock and build
//! their answers after it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use jp_mct::Mct;

mod origin;
pub use origin::WindowOrigin;

/// Bytes (estimated) of every window kept: past it the oldest windows go first.
pub const MAX_STORE_BYTES: usize = 256 << 20;

/// One window's merged tree and what the agent said of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowProfile {
    pub id: u64,
    pub pid: u32,
    /// The process's start time (clock ticks since boot, `/proc/PID/stat` field 22):
    /// with the pid, which JVM this was.
    pub start_time: u64,
    pub main_class: String,
    /// The include/exclude patterns, `all application classes` by default.
    pub scope: String,
    /// The seconds asked for.
    pub seconds: u32,
    /// Who asked for it: a request, the rotation, or `/debug/pprof/jvm`.
    pub origin: WindowOrigin,
    /// The JVM's version as its own `java.vm.version` says (what a JVM profiled from
    /// start reports), else its JDK's `release` file's; empty when neither was read.
    pub jdk_version: String,
    pub opened: SystemTime,
    pub closed: SystemTime,
    pub tree: Mct,
    /// The `key=value` lines of the agent's `window-ID.done`.
    pub meta: BTreeMap<String, String>,
}

impl WindowProfile {
    /// jpd's memory for it (estimated: a node, its method's share and the meta).
    pub fn memory_bytes(&self) -> usize {
        const NODE: usize = std::mem::size_of::<jp_mct::MctNode>() + 2 * 8;
        let meta: usize = self.meta.iter().map(|(k, v)| k.len() + v.len() + 64).sum();
        self.tree.nodes.len() * NODE
            + meta
            + self.scope.len()
            + self.main_class.len()
            + self.jdk_version.len()
            + 256
    }

    /// How long it was open.
    pub fn duration(&self) -> std::time::Duration {
        self.closed.duration_since(self.opened).unwrap_or_default()
    }
}

/// A stored window and its place in the order of arrival.
#[derive(Clone, Debug)]
struct Stored {
    seq: u64,
    bytes: usize,
    window: Arc<WindowProfile>,
}

#[derive(Debug)]
pub struct WindowStore {
    /// By (pid, start time): oldest first.
    jvms: BTreeMap<(u32, u64), VecDeque<Stored>>,
    keep: usize,
    max_bytes: usize,
    bytes: usize,
    /// Windows ever stored (the next one's sequence number).
    stored: u64,
}

pub type SharedWindowStore = Arc<Mutex<WindowStore>>;

impl Default for WindowStore {
    fn default() -> Self {
        WindowStore::new(8, MAX_STORE_BYTES)
    }
}

impl WindowStore {
    pub fn new(keep: usize, max_bytes: usize) -> WindowStore {
        WindowStore {
            jvms: BTreeMap::new(),
            keep: keep.max(1),
            max_bytes,
            bytes: 0,
            stored: 0,
        }
    }

    /// `windows.keep` reloaded: applies at once.
    pub fn set_keep(&mut self, keep: usize) {
        self.keep = keep.max(1);
        let jvms: Vec<(u32, u64)> = self.jvms.keys().copied().collect();
        for jvm in jvms {
            self.trim(jvm);
        }
    }

    /// Keeps `window`, dropping its JVM's oldest beyond `keep` and the host's oldest
    /// beyond the byte bound. A window larger than the whole bound is refused.
    pub fn insert(&mut self, window: Arc<WindowProfile>) -> Result<(), String> {
        let bytes = window.memory_bytes();
        if bytes > self.max_bytes {
            return Err(format!(
                "the window's tree ({} contexts, about {} MiB) is larger than the window store ({} MiB)",
                window.tree.nodes.len().saturating_sub(1),
                bytes >> 20,
                self.max_bytes >> 20
            ));
        }
        let jvm = (window.pid, window.start_time);
        // A pid reused by another process: its windows are of a JVM that is gone too,
        // and stay (by their own start time) until they age out.
        let seq = self.stored;
        self.stored += 1;
        self.bytes += bytes;
        self.jvms
            .entry(jvm)
            .or_default()
            .push_back(Stored { seq, bytes, window });
        self.trim(jvm);
        while self.bytes > self.max_bytes {
            let oldest = self
                .jvms
                .iter()
                .filter_map(|(k, q)| q.front().map(|s| (s.seq, *k)))
                .min();
            let Some((_, k)) = oldest else { break };
            self.pop_oldest(k);
        }
        Ok(())
    }

    fn trim(&mut self, jvm: (u32, u64)) {
        while self.jvms.get(&jvm).is_some_and(|q| q.len() > self.keep) {
            self.pop_oldest(jvm);
        }
    }

    fn pop_oldest(&mut self, jvm: (u32, u64)) {
        let Some(q) = self.jvms.get_mut(&jvm) else {
            return;
        };
        if let Some(s) = q.pop_front() {
            self.bytes -= s.bytes;
        }
        if q.is_empty() {
            self.jvms.remove(&jvm);
        }
    }

    /// The windows kept (of `pid` only, when given), by pid, then oldest first.
    pub fn list(&self, pid: Option<u32>) -> Vec<Arc<WindowProfile>> {
        self.jvms
            .iter()
            .filter(|((p, _), _)| pid.is_none_or(|want| *p == want))
            .flat_map(|(_, q)| q.iter().map(|s| Arc::clone(&s.window)))
            .collect()
    }

    /// Window `id` of JVM `pid`, while kept.
    pub fn get(&self, pid: u32, id: u64) -> Option<Arc<WindowProfile>> {
        self.jvms
            .iter()
            .filter(|((p, _), _)| *p == pid)
            .flat_map(|(_, q)| q.iter())
            .find(|s| s.window.id == id)
            .map(|s| Arc::clone(&s.window))
    }

    /// The windows stored after the first `seen` ones (those still kept), in order, and
    /// the count to pass next time: a pusher's "since my last read".
    pub fn since(&self, seen: u64) -> (Vec<Arc<WindowProfile>>, u64) {
        let mut new: Vec<&Stored> = self
            .jvms
            .values()
            .flat_map(|q| q.iter())
            .filter(|s| s.seq >= seen)
            .collect();
        new.sort_by_key(|s| s.seq);
        (
            new.into_iter().map(|s| Arc::clone(&s.window)).collect(),
            self.stored,
        )
    }

    /// Bytes (estimated) of the windows kept.
    pub fn memory_bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests;
