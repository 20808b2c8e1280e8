//! The sampler's `JP_JVM_THREADS`, shared max-min fairly between JVMs and kept up to
//! date by changes: a sync costs O(keys changed + JVMs), not O(threads in the map).
//!
//! The fair share: when the JVMs want more entries than the map holds, each JVM keeps
//! all its threads up to one quota, the largest that fits ([`max_min_quota`]), so a JVM
//! that wants no more than `capacity / JVMs` always gets all it wants, whatever the
//! others announce. Within a JVM, the threads already in the map stay (no churn between
//! syncs), then the lowest thread ids. A JVM's kept and waiting threads are ordered
//! sets, so a quota that moves costs only the threads that cross it.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use jp_common::{maps, JvmThread};

use super::{ThreadMap, JVM_QUOTA, MAP_FULL};
use crate::refusals;

/// One JVM's part of the map.
#[derive(Default)]
struct Share {
    /// Every thread of the JVM that is its own, by `pid_tgid` (as jpd sees it).
    want: HashMap<u64, JvmThread>,
    /// The threads of `want` within the JVM's share (in the map, unless it refused them).
    kept: BTreeSet<u64>,
    /// The rest of `want`, left out over the JVM's share, lowest first; true once it
    /// was left out at the end of a sync (counted once, not at every sync).
    waiting: BTreeMap<u64, bool>,
}

/// What the join wants in the sampler's thread map, and what the map holds.
pub(super) struct SharedMap {
    capacity: usize,
    jvms: BTreeMap<u32, Share>,
    /// Σ `want` of every JVM.
    wanted: usize,
    /// What the sampler's map holds (written by the join).
    written: HashMap<u64, JvmThread>,
    /// Kept threads the map refused (full): tried again at every sync.
    full: HashSet<u64>,
    /// Keys whose entry in the map may have to change at the end of this sync.
    touched: HashSet<u64>,
    /// Keys that went to `waiting` during this sync.
    entered_waiting: Vec<u64>,
}

fn jvm_of(key: u64) -> u32 {
    (key >> 32) as u32
}

impl SharedMap {
    pub(super) fn new(capacity: usize) -> SharedMap {
        SharedMap {
            capacity,
            jvms: BTreeMap::new(),
            wanted: 0,
            written: HashMap::new(),
            full: HashSet::new(),
            touched: HashSet::new(),
            entered_waiting: Vec::new(),
        }
    }

    /// `key` is wanted with `thread` (`None`: not any more).
    pub(super) fn set(&mut self, key: u64, thread: Option<JvmThread>) {
        let jvm = jvm_of(key);
        match thread {
            Some(t) => {
                let share = self.jvms.entry(jvm).or_default();
                match share.want.insert(key, t) {
                    None => {
                        self.wanted += 1;
                        share.waiting.insert(key, false);
                        self.entered_waiting.push(key);
                    }
                    Some(old) if old != t && share.kept.contains(&key) => {
                        self.touched.insert(key);
                    }
                    Some(_) => {}
                }
            }
            None => {
                let Some(share) = self.jvms.get_mut(&jvm) else {
                    return;
                };
                if share.want.remove(&key).is_none() {
                    return;
                }
                self.wanted -= 1;
                if share.kept.remove(&key) {
                    self.touched.insert(key);
                }
                share.waiting.remove(&key);
                if share.want.is_empty() {
                    self.jvms.remove(&jvm);
                }
            }
        }
    }

    /// Every key of `jvm`, to drop it whole (its process is gone).
    pub(super) fn keys_of(&self, jvm: u32) -> Vec<u64> {
        self.jvms
            .get(&jvm)
            .map(|s| s.want.keys().copied().collect())
            .unwrap_or_default()
    }

    /// JVMs with threads in their share of the map.
    pub(super) fn jvms_kept(&self) -> impl Iterator<Item = u32> + '_ {
        self.jvms
            .iter()
            .filter(|(_, s)| !s.kept.is_empty())
            .map(|(jvm, _)| *jvm)
    }

    /// What the sampler's map holds.
    #[cfg(test)]
    pub(super) fn written(&self) -> &HashMap<u64, JvmThread> {
        &self.written
    }

    /// Ends a sync: moves threads across the JVMs' quotas, writes the entries that
    /// changed to `map`, and counts the threads left out anew.
    pub(super) fn finish(&mut self, map: &mut dyn ThreadMap) {
        self.rebalance();
        let mut new_by_jvm: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for key in std::mem::take(&mut self.entered_waiting) {
            let Some(counted) = self
                .jvms
                .get_mut(&jvm_of(key))
                .and_then(|s| s.waiting.get_mut(&key))
            else {
                continue;
            };
            if !*counted {
                *counted = true;
                new_by_jvm.entry(jvm_of(key)).or_default().0 += 1;
            }
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.extend(self.full.iter().copied());
        // Entries go before others come: a full map has room for them.
        let (stay, go): (Vec<u64>, Vec<u64>) = touched.into_iter().partition(|&key| self.kept(key));
        for key in go.into_iter().chain(stay) {
            if self.write(map, key) {
                new_by_jvm.entry(jvm_of(key)).or_default().1 += 1;
            }
        }
        count_left_out(new_by_jvm);
    }

    /// Every JVM's kept threads brought to its quota: O(JVMs log JVMs + threads moved).
    fn rebalance(&mut self) {
        let quota = if self.wanted <= self.capacity {
            usize::MAX
        } else {
            max_min_quota(self.jvms.values().map(|s| s.want.len()), self.capacity)
        };
        for share in self.jvms.values_mut() {
            let target = share.want.len().min(quota);
            while share.kept.len() > target {
                let Some(key) = share.kept.pop_last() else {
                    break;
                };
                share.waiting.insert(key, false);
                self.entered_waiting.push(key);
                self.touched.insert(key);
            }
            while share.kept.len() < target {
                let Some((key, _)) = share.waiting.pop_first() else {
                    break;
                };
                share.kept.insert(key);
                self.touched.insert(key);
            }
        }
    }

    fn kept(&self, key: u64) -> bool {
        self.jvms
            .get(&jvm_of(key))
            .is_some_and(|s| s.kept.contains(&key))
    }

    /// Brings `key`'s entry in the map to what the join wants. True if the map refused
    /// it and had not refused it at the last sync.
    fn write(&mut self, map: &mut dyn ThreadMap, key: u64) -> bool {
        let want = self
            .jvms
            .get(&jvm_of(key))
            .filter(|s| s.kept.contains(&key))
            .and_then(|s| s.want.get(&key).copied());
        if want.is_some() && self.written.get(&key) == want.as_ref() {
            return false;
        }
        match want {
            None => {
                self.full.remove(&key);
                if self.written.remove(&key).is_some() {
                    map.remove(key);
                }
                false
            }
            Some(thread) => match map.insert(key, thread) {
                Ok(()) => {
                    self.full.remove(&key);
                    self.written.insert(key, thread);
                    false
                }
                Err(_) => {
                    // A changed thread's old entry may still be there: gone, it cannot
                    // be stale.
                    if self.written.remove(&key).is_some() {
                        map.remove(key);
                    }
                    self.full.insert(key)
                }
            },
        }
    }
}

/// The threads left out anew at this sync, by JVM: (over its share, refused by a full
/// map), logged and counted.
fn count_left_out(new_by_jvm: BTreeMap<u32, (u64, u64)>) {
    for (jvm, (quota, full)) in new_by_jvm {
        log::warn!(
            "{}: JVM {jvm}: {quota} more thread(s) over its share of the map, {full} \
             refused by a full map: their CPU is counted by thread kind only",
            maps::JVM_THREADS.name
        );
        refusals::count(JVM_QUOTA, quota);
        refusals::count(MAP_FULL, full);
    }
}

/// The largest quota q with Σ min(demand, q) ≤ `capacity`.
pub(super) fn max_min_quota(demands: impl Iterator<Item = usize>, capacity: usize) -> usize {
    let mut demands: Vec<usize> = demands.collect();
    demands.sort_unstable();
    let mut remaining = capacity;
    for (i, &d) in demands.iter().enumerate() {
        let share = remaining / (demands.len() - i);
        if d > share {
            return share;
        }
        remaining -= d;
    }
    usize::MAX
}
