//! The threads that announced a context slot, as the kernel sampler's join reads them:
//! each JVM keeps the order in which its threads' slots changed ([`ContextLog`]), so a
//! read names only what changed since the join's last read of that JVM, and a JVM
//! that did not change costs O(1). Syncs follow every announcement of any JVM: one JVM
//! announcing thousands of threads must not make every other JVM's sync re-read them.
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use jp_common::wire::ThreadSlot;

use super::JvmStore;

/// Told apart from every other JVM the store held or will hold at the same pid (a new
/// VM in the process, or another process): a mark of one is never read as another's.
static INCARNATIONS: AtomicU64 = AtomicU64::new(1);

/// The changes a JVM keeps at least, however few threads it has.
const MIN_CHANGES_KEPT: usize = 1024;

/// Where a reader left one JVM: (incarnation, epoch of its context slots).
pub type ContextMark = (u64, u64);

/// The order in which one JVM's threads' context slots came, changed or went.
#[derive(Debug)]
pub struct ContextLog {
    incarnation: u64,
    /// Bumps on every change of a thread's context slot.
    epoch: u64,
    /// (the epoch the change made, its stream), oldest first.
    changes: VecDeque<(u64, u64)>,
    /// The changes up to this epoch were dropped (the log is bounded): a reader that
    /// last read an earlier epoch reads all the JVM's threads again.
    dropped_through: u64,
}

impl ContextLog {
    pub fn new() -> ContextLog {
        ContextLog {
            incarnation: INCARNATIONS.fetch_add(1, Ordering::Relaxed),
            epoch: 0,
            changes: VecDeque::new(),
            dropped_through: 0,
        }
    }

    pub fn mark(&self) -> ContextMark {
        (self.incarnation, self.epoch)
    }

    /// `stream`'s context slot came, changed or went. The log keeps at most twice the
    /// JVM's threads' changes (at least [`MIN_CHANGES_KEPT`]): dropping the older half
    /// costs a late reader one full read.
    pub fn changed(&mut self, stream: u64, threads: usize) {
        self.epoch += 1;
        self.changes.push_back((self.epoch, stream));
        if self.changes.len() > MIN_CHANGES_KEPT.max(2 * threads) {
            let drop = self.changes.len() / 2;
            if let Some(&(epoch, _)) = self.changes.get(drop - 1) {
                self.dropped_through = epoch;
            }
            self.changes.drain(..drop);
        }
    }

    /// The streams changed since `seen` (sorted, once each); `None` when the reader
    /// must read all (it never read this JVM, or the changes since were dropped).
    fn since(&self, seen: Option<ContextMark>) -> Option<Vec<u64>> {
        let (incarnation, epoch) = seen?;
        if incarnation != self.incarnation || epoch < self.dropped_through || epoch > self.epoch {
            return None;
        }
        let from = self.changes.partition_point(|&(e, _)| e <= epoch);
        let mut streams: Vec<u64> = self.changes.range(from..).map(|&(_, s)| s).collect();
        streams.sort_unstable();
        streams.dedup();
        Some(streams)
    }

    pub fn memory_bytes(&self) -> usize {
        self.changes.capacity() * std::mem::size_of::<(u64, u64)>()
    }
}

/// The announced threads since the join's last read.
pub struct ContextThreads {
    /// [`JvmStore::context_threads_version`] when read.
    pub version: u64,
    /// The running JVMs whose announced threads changed since the marks the reader
    /// gave (every running JVM it gave no mark for included).
    pub changed: Vec<JvmContextThreads>,
    /// Every running JVM ([`JvmStore::context_pids`]): a JVM the reader holds that is
    /// not here is gone, with all its threads.
    pub pids: Vec<u32>,
}

/// One JVM's announced threads since the reader's mark.
pub struct JvmContextThreads {
    pub tgid: u32,
    /// Where the reader is now: give it at the next read.
    pub mark: ContextMark,
    /// True: `threads` are all the JVM's announced threads (whatever the reader held of
    /// this JVM is replaced). False: only the threads whose slot changed since the mark.
    pub all: bool,
    /// (stream, its slot now: `None` when it has none any more).
    pub threads: Vec<(u64, Option<ThreadSlot>)>,
}

impl JvmStore {
    /// The announced threads of every running JVM whose mark is not `seen`'s: O(JVMs +
    /// changes) under the lock (O(threads) only for a JVM the reader must read whole).
    pub fn context_threads_since(&self, seen: &HashMap<u32, ContextMark>) -> ContextThreads {
        let mut changed = Vec::new();
        for (&tgid, j) in self.jvms.iter().filter(|(_, j)| j.exited_at.is_none()) {
            let mark = j.context.mark();
            let last = seen.get(&tgid).copied();
            if last == Some(mark) {
                continue;
            }
            let slot = |stream: &u64| j.threads.get(stream).and_then(|th| th.context_slot);
            let (all, threads) = match j.context.since(last) {
                Some(streams) => (false, streams.iter().map(|s| (*s, slot(s))).collect()),
                None => (
                    true,
                    j.threads
                        .iter()
                        .filter_map(|(s, th)| Some((*s, Some(th.context_slot?))))
                        .collect(),
                ),
            };
            changed.push(JvmContextThreads {
                tgid,
                mark,
                all,
                threads,
            });
        }
        ContextThreads {
            version: self.context_version,
            changed,
            pids: self.context_pids(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_the_streams_changed_since_its_mark_or_all_when_they_were_dropped() {
        let mut log = ContextLog::new();
        assert_eq!(log.since(None), None, "a first read is whole");
        log.changed(5, 3);
        let after_first = log.mark();
        log.changed(7, 3);
        log.changed(5, 3);
        assert_eq!(log.since(Some(after_first)), Some(vec![5, 7]));
        assert_eq!(log.since(Some(log.mark())), Some(vec![]));
        let other = ContextLog::new();
        assert_eq!(other.since(Some(after_first)), None, "another JVM's mark");
        for i in 0..MIN_CHANGES_KEPT as u64 {
            log.changed(100 + i, 3);
        }
        assert_eq!(
            log.since(Some(after_first)),
            None,
            "its changes were dropped"
        );
        let recent = log.mark();
        log.changed(9, 3);
        assert_eq!(log.since(Some(recent)), Some(vec![9]));
        assert!(log.changes.len() <= MIN_CHANGES_KEPT + 1);
    }
}
