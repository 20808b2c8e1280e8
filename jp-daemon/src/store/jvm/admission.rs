//! Which JVMs the store keeps: a table of at most `max_jvms`, at most
//! `max_jvms_per_uid` running ones per uid, and what goes when it is full.
//!
//! Any local process can map a file named like the agent and fire records, so the
//! table must not fill with processes that never say who they are: at the limit an
//! exited JVM is evicted first (oldest exit), then a JVM that sent no HELLO (oldest
//! first). A real JVM says HELLO within a report interval of being asked, so it is not
//! the one evicted for long; a process that never does cannot keep a real JVM out. A
//! uid over its quota cannot fill the table either.

use std::time::SystemTime;

use crate::refusals::{self, Refusal};

use super::one_jvm::Jvm;
use super::{JvmStore, ProcessInfo};

/// A new JVM refused: every kept JVM is running and said HELLO.
pub(crate) const TABLE_FULL: Refusal = Refusal::new("store", "jvm_table_full");
/// A JVM that sent no HELLO was evicted to make room for a new one.
pub(crate) const NO_HELLO_EVICTED: Refusal = Refusal::new("store", "no_hello_evicted");
/// A process not tracked: its uid has `max_jvms_per_uid` running JVMs.
pub(crate) const UID_QUOTA: Refusal = Refusal::new("store", "uid_quota");

impl JvmStore {
    /// A process with the agent library was found (before or after its first record).
    /// A different start time for a known pid means the pid was reused: the old entry
    /// is replaced. A process whose uid has `max_jvms_per_uid` running JVMs is not
    /// tracked: its records are dropped until it exits.
    pub fn process_found(&mut self, tgid: u32, info: ProcessInfo, now: SystemTime) {
        self.generation += 1;
        let over_quota = self.over_uid_quota(tgid, info.uid);
        if let Some(j) = self.jvms.get_mut(&tgid) {
            let reused = j
                .info
                .as_ref()
                .is_some_and(|old| old.start_time_ticks != info.start_time_ticks);
            if !reused && !over_quota {
                j.info = Some(info);
                j.change += 1;
                if j.exited_at.take().is_some() {
                    self.context_threads_changed();
                }
                return;
            }
            self.jvms.remove(&tgid);
            self.recount();
            self.context_threads_changed();
        }
        if over_quota {
            self.refuse(tgid, &info);
            return;
        }
        self.refused.remove(&tgid);
        let room = self.room_for(0);
        if let Some(j) = self.entry(tgid, now, room) {
            j.info = Some(info);
        }
    }

    /// The process exited (or vanished): keep its data for the retention time.
    pub fn process_gone(&mut self, tgid: u32, now: SystemTime) {
        self.generation += 1;
        self.refused.remove(&tgid);
        self.context_threads_changed();
        if let Some(j) = self.jvms.get_mut(&tgid) {
            if j.exited_at.is_none() {
                j.exited_at = Some(now);
                j.change += 1;
            }
        }
    }

    /// Drops exited JVMs whose retention is over, and entries that only records created
    /// (the collector never found the process, so it cannot say when it exits) once they
    /// have been silent for the retention time.
    pub fn expire(&mut self, now: SystemTime) {
        let keep = self.limits.retention;
        let before = self.jvms.len();
        let young = |t: SystemTime| now.duration_since(t).map(|d| d < keep).unwrap_or(true);
        self.jvms.retain(|_, j| match (j.exited_at, &j.info) {
            (Some(t), _) => young(t),
            (None, None) => young(j.last_update.unwrap_or(j.attached_since)),
            (None, Some(_)) => true,
        });
        if self.jvms.len() != before {
            self.generation += 1;
            self.recount();
            self.context_threads_changed();
        }
    }

    /// The JVM of `tgid`, created if new and admitted: not refused at its uid's quota,
    /// `room` in the store's byte budget, and a place in the table (see the module).
    pub(super) fn entry(&mut self, tgid: u32, now: SystemTime, room: bool) -> Option<&mut Jvm> {
        if !self.jvms.contains_key(&tgid) {
            if self.refused.contains_key(&tgid) {
                return None;
            }
            if !room {
                refusals::count(super::budget::OVER_BUDGET, 1);
                return None;
            }
            if self.jvms.len() >= self.limits.max_jvms && !self.evict_one() {
                refusals::count(TABLE_FULL, 1);
                return None;
            }
            let j = Jvm::new(tgid, &self.limits, now);
            let cost = j.memory_bytes();
            self.jvms.insert(tgid, j);
            self.charge(tgid, cost);
            // The sampler counts a known JVM's threads by kind (see context_pids).
            self.context_threads_changed();
        }
        self.jvms.get_mut(&tgid)
    }

    /// Makes room for one JVM: evicts the oldest exited one, else the oldest that sent
    /// no HELLO. False if every one is running and said HELLO.
    fn evict_one(&mut self) -> bool {
        let exited = self
            .jvms
            .iter()
            .filter_map(|(&t, j)| j.exited_at.map(|e| (e, t)))
            .min()
            .map(|(_, t)| t);
        let victim = exited.or_else(|| {
            let silent = self
                .jvms
                .iter()
                .filter(|(_, j)| j.hello.is_none())
                .map(|(&t, j)| (j.attached_since, t))
                .min()
                .map(|(_, t)| t);
            if silent.is_some() {
                refusals::count(NO_HELLO_EVICTED, 1);
            }
            silent
        });
        let Some(t) = victim else {
            return false;
        };
        if let Some(j) = self.jvms.remove(&t) {
            self.held = self.held.saturating_sub(j.charged);
        }
        true
    }

    /// Whether the process's uid already has `max_jvms_per_uid` running JVMs (others
    /// than `tgid`). An unknown uid is not limited.
    fn over_uid_quota(&self, tgid: u32, uid: Option<u32>) -> bool {
        let Some(uid) = uid else {
            return false;
        };
        let running = self
            .jvms
            .iter()
            .filter(|(&t, j)| {
                t != tgid
                    && j.exited_at.is_none()
                    && j.info.as_ref().and_then(|i| i.uid) == Some(uid)
            })
            .count();
        running >= self.limits.max_jvms_per_uid
    }

    /// Remembers a process refused at its uid's quota until it exits (bounded: the
    /// collector reports each exit, and the set never holds more than the JVM table's
    /// worth of processes per uid seen).
    fn refuse(&mut self, tgid: u32, info: &ProcessInfo) {
        refusals::count(UID_QUOTA, 1);
        self.stats.jvm_limit_drops += 1;
        if self.refused.len() >= MAX_REFUSED {
            self.refused.clear();
        }
        self.refused.insert(tgid, info.start_time_ticks);
    }
}

/// Refused processes remembered at most (their records are dropped without a table
/// entry). Past this many the set starts over, and the forgotten processes' records
/// create entries again, which the table's own eviction bounds.
const MAX_REFUSED: usize = 65_536;
