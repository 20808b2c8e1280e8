//! CPU per exact context: the kernel sampler's samples of a JVM's threads,
//! counted under the merged node each thread was in (read from the thread's context
//! slot), or under the thread's name for threads without one (GC, JIT, VM threads).
//!
//! A sample names (stream, wire node id). The node may not be defined yet (the agent
//! numbers nodes when it makes them, and sends them at its next report): such samples
//! wait here and are resolved when the definition has arrived, or counted as unresolved
//! after [`PENDING_FOR`]. Nothing is dropped silently.
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use jp_common::{ctx_kind, CtxKey};

/// How long a sample may wait for its node's definition.
pub const PENDING_FOR: Duration = Duration::from_secs(60);
/// Keys waiting at most (per JVM); more are counted as unresolved at once.
const MAX_PENDING: usize = 1 << 14;
/// Distinct thread names counted per JVM; samples of further names go to "(other)".
const MAX_THREAD_NAMES: usize = 256;

/// What a thread without a context slot is, by its name (`comm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadKind {
    /// Threads of the application (with a slot, or not announced yet).
    App,
    Gc,
    Jit,
    /// The VM thread and other VM-internal threads.
    Vm,
}

impl ThreadKind {
    pub fn of_name(comm: &str) -> ThreadKind {
        const GC: [&str; 9] = [
            "GC Thread",
            "G1 ",
            "GC task",
            "ParGC",
            "Parallel GC",
            "Shenandoah",
            "ZDriver",
            "ZWorker",
            "ZDirector",
        ];
        const JIT: [&str; 3] = ["C1 CompilerThre", "C2 CompilerThre", "Compiler"];
        const VM: [&str; 8] = [
            "VM Thread",
            "VM Periodic Tas",
            "Signal Dispatch",
            "Service Thread",
            "Monitor Deflati",
            "Sweeper thread",
            "Common-Cleaner",
            "Notification Th",
        ];
        if GC.iter().any(|p| comm.starts_with(p)) {
            ThreadKind::Gc
        } else if JIT.iter().any(|p| comm.starts_with(p)) {
            ThreadKind::Jit
        } else if VM.iter().any(|p| comm.starts_with(p)) {
            ThreadKind::Vm
        } else {
            ThreadKind::App
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ThreadKind::App => "app",
            ThreadKind::Gc => "gc",
            ThreadKind::Jit => "jit",
            ThreadKind::Vm => "vm",
        }
    }
}

/// Samples in user and in kernel mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    pub user: u64,
    pub kernel: u64,
}

impl Samples {
    pub fn total(&self) -> u64 {
        self.user + self.kernel
    }

    fn add(&mut self, kernel: bool, n: u64) {
        if kernel {
            self.kernel += n;
        } else {
            self.user += n;
        }
    }
}

#[derive(Clone, Copy)]
struct Waiting {
    n: u64,
    since: SystemTime,
}

/// A JVM's CPU samples.
#[derive(Default)]
pub struct ContextCpu {
    /// Nanoseconds one sample stands for (1 s / the sampler's frequency).
    pub period_ns: u64,
    /// Merged node → samples taken while a thread was in that context (self time).
    pub by_node: HashMap<u32, Samples>,
    /// (merged node, kernel IP or bucket address) → kernel-mode samples under it.
    pub kernel_under: HashMap<(u32, u64), u64>,
    /// Thread name → samples of threads without a context slot.
    pub by_thread_name: HashMap<String, Samples>,
    /// User-mode samples whose thread's slot could not be read (in kernel mode, a failed
    /// read is an exiting thread, counted by its name).
    pub read_failed: u64,
    /// Samples whose node was never defined (waited [`PENDING_FOR`], or no room).
    pub unresolved: u64,
    pending: HashMap<CtxKey, Waiting>,
}

impl ContextCpu {
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Samples waiting for their node's definition.
    pub fn pending(&self) -> u64 {
        self.pending.values().map(|w| w.n).sum()
    }

    /// Counts `n` new samples under `key`; `resolve` maps (stream, wire id) to a merged
    /// node when that node is known.
    pub fn add(
        &mut self,
        key: &CtxKey,
        n: u64,
        now: SystemTime,
        resolve: &dyn Fn(u64, u64) -> Option<u32>,
    ) {
        match key.kind {
            ctx_kind::USER | ctx_kind::KERNEL => match resolve(key.stream, key.id) {
                Some(node) => self.count(node, key, n),
                None if self.pending.len() < MAX_PENDING || self.pending.contains_key(key) => {
                    let w = self
                        .pending
                        .entry(*key)
                        .or_insert(Waiting { n: 0, since: now });
                    w.n += n;
                }
                None => self.unresolved += n,
            },
            ctx_kind::THREAD_USER | ctx_kind::THREAD_KERNEL => {
                let mut name = comm_name(key.stream, key.id);
                if !self.by_thread_name.contains_key(&name)
                    && self.by_thread_name.len() >= MAX_THREAD_NAMES
                {
                    name = "(other)".to_string();
                }
                self.by_thread_name
                    .entry(name)
                    .or_default()
                    .add(key.kind == ctx_kind::THREAD_KERNEL, n);
            }
            _ => self.read_failed += n,
        }
    }

    fn count(&mut self, node: u32, key: &CtxKey, n: u64) {
        let kernel = key.kind == ctx_kind::KERNEL;
        self.by_node.entry(node).or_default().add(kernel, n);
        if kernel {
            *self.kernel_under.entry((node, key.kip)).or_default() += n;
        }
    }

    /// Resolves what waited and can be resolved now; what waited too long is unresolved.
    pub fn retry(&mut self, now: SystemTime, resolve: &dyn Fn(u64, u64) -> Option<u32>) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        for (key, w) in pending {
            match resolve(key.stream, key.id) {
                Some(node) => self.count(node, &key, w.n),
                None if now.duration_since(w.since).unwrap_or_default() >= PENDING_FOR => {
                    self.unresolved += w.n;
                }
                None => {
                    self.pending.insert(key, w);
                }
            }
        }
    }

    /// Samples under resolved contexts, all nodes together: what the views show per
    /// context.
    pub fn on_contexts(&self) -> Samples {
        let mut all = Samples::default();
        for s in self.by_node.values() {
            all.user += s.user;
            all.kernel += s.kernel;
        }
        all
    }

    /// Samples by kind of thread: application contexts (resolved or not) and the
    /// application's threads without a slot, GC, JIT, VM.
    pub fn by_kind(&self) -> Vec<(ThreadKind, Samples)> {
        let mut kinds: HashMap<ThreadKind, Samples> = HashMap::new();
        let app = kinds.entry(ThreadKind::App).or_default();
        *app = self.on_contexts();
        app.user += self.pending() + self.unresolved + self.read_failed;
        for (name, s) in &self.by_thread_name {
            let k = kinds.entry(ThreadKind::of_name(name)).or_default();
            k.user += s.user;
            k.kernel += s.kernel;
        }
        let mut v: Vec<_> = kinds.into_iter().collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    pub fn memory_bytes(&self) -> usize {
        self.by_node.capacity() * 24
            + self.kernel_under.capacity() * 24
            + self.pending.capacity() * 56
            + self.by_thread_name.capacity() * 48
    }
}

/// The thread name the sampler copied (`comm`, 16 bytes, NUL-padded).
fn comm_name(lo: u64, hi: u64) -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&lo.to_le_bytes());
    b[8..].copy_from_slice(&hi.to_le_bytes());
    let end = b.iter().position(|&c| c == 0).unwrap_or(16);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: u32, stream: u64, id: u64, kip: u64) -> CtxKey {
        CtxKey {
            tgid: 1,
            kind,
            stream,
            id,
            kip,
        }
    }

    #[test]
    fn thread_names_sort_into_kinds() {
        assert_eq!(ThreadKind::of_name("GC Thread#0"), ThreadKind::Gc);
        assert_eq!(ThreadKind::of_name("G1 Conc#0"), ThreadKind::Gc);
        assert_eq!(ThreadKind::of_name("C2 CompilerThre"), ThreadKind::Jit);
        assert_eq!(ThreadKind::of_name("VM Thread"), ThreadKind::Vm);
        assert_eq!(ThreadKind::of_name("main"), ThreadKind::App);
        assert_eq!(ThreadKind::of_name("ZWorker#1"), ThreadKind::Gc);
    }

    #[test]
    fn samples_wait_for_their_node_and_expire_counted() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut cpu = ContextCpu::default();
        let none = |_: u64, _: u64| None;
        cpu.add(&key(ctx_kind::USER, 7, 3, 0), 5, t0, &none);
        cpu.add(&key(ctx_kind::KERNEL, 7, 4, 0xffff_0000), 2, t0, &none);
        assert_eq!(cpu.pending(), 7);
        // Node 3 arrives: its samples resolve, node 4's keep waiting.
        let some = |s: u64, id: u64| (s == 7 && id == 3).then_some(42);
        cpu.retry(t0 + Duration::from_secs(1), &some);
        assert_eq!(cpu.by_node[&42], Samples { user: 5, kernel: 0 });
        assert_eq!(cpu.pending(), 2);
        cpu.retry(t0 + PENDING_FOR, &some);
        assert_eq!((cpu.pending(), cpu.unresolved), (0, 2));
    }

    #[test]
    fn kernel_samples_are_kept_under_their_context_and_names_decode() {
        let mut cpu = ContextCpu::default();
        let t = SystemTime::UNIX_EPOCH;
        let r = |_: u64, _: u64| Some(9);
        cpu.add(&key(ctx_kind::KERNEL, 1, 1, 0xabc0), 3, t, &r);
        cpu.add(&key(ctx_kind::KERNEL, 1, 1, 0xabc0), 1, t, &r);
        assert_eq!(cpu.kernel_under[&(9, 0xabc0)], 4);
        let name = u64::from_le_bytes(*b"GC Threa");
        let rest = u64::from_le_bytes(*b"d#0\0\0\0\0\0");
        cpu.add(&key(ctx_kind::THREAD_USER, name, rest, 0), 6, t, &r);
        cpu.add(&key(ctx_kind::READ_FAILED, 1, 0, 0), 1, t, &r);
        assert_eq!(cpu.by_thread_name["GC Thread#0"].user, 6);
        let kinds = cpu.by_kind();
        assert_eq!(kinds[0], (ThreadKind::App, Samples { user: 1, kernel: 4 }));
        assert_eq!(kinds[1], (ThreadKind::Gc, Samples { user: 6, kernel: 0 }));
    }
}
