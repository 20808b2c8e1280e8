//! The JVM part of Watch messages: per JVM, the change of its totals (calls, bytecodes,
//! CPU) since the previous message and of each method's calls, exclusive bytecodes,
//! own CPU and own time off CPU since the JVM's previous method deltas; a method's name is sent once per stream with an
//! id that every JVM shares; JVMs appearing, exiting, and removed (retention
//! over, or the pid reused). One [`JvmWatch`] per stream.
//!
//! Deltas are "since my last read" as the stores' read side defines them
//! ([`crate::store::read`]): saturating, and a JVM behind a reused pid (another
//! `attached_since`) is removed and sent again as new.
//!
//! Costs: nothing is done when the store did not change (its generation). Per-method
//! totals take time proportional to the JVM's methods and hold the store's lock
//! (the service runs this on a blocking thread, `ReadJvm::with_store`), so a
//! JVM's are computed again only after [`METHODS_BUDGET`] times as long as they took
//! the last time: a big JVM gets method deltas less often than every message, never
//! a stalled ingestion. Its totals travel in every message.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use jp_proto::v1 as pb;

use super::jvm::summary;
use crate::store::jvm::{JvmStore, JvmSummary};
use crate::store::read::Since;

/// Per-method totals may take at most 1/METHODS_BUDGET of a stream's time per JVM.
pub const METHODS_BUDGET: u32 = 10;

/// What the stream has sent of one JVM.
struct Seen {
    /// Identity of the JVM behind the pid (a reused pid is another JVM).
    attached_since: SystemTime,
    exited: bool,
    /// Calls, bytecodes, CPU (ns) of every kind of thread.
    totals: Since<3>,
    /// The store's change counter of the JVM when its methods were last computed.
    methods_change: Option<u64>,
    /// When, and how long that took.
    methods_at: Option<Instant>,
    methods_cost: Duration,
    /// Per method id of the JVM (its agent's mid): calls, exclusive bytecodes, own CPU,
    /// own time off CPU.
    methods: HashMap<u32, Since<4>>,
}

impl Seen {
    fn methods_due(&self, change: Option<u64>, now: Instant) -> bool {
        if change == self.methods_change {
            return false;
        }
        match self.methods_at {
            None => true,
            Some(at) => now.saturating_duration_since(at) >= self.methods_cost * METHODS_BUDGET,
        }
    }
}

#[derive(Default)]
pub struct JvmWatch {
    /// The store's generation at the previous message; None before the first.
    generation: Option<u64>,
    jvms: HashMap<u32, Seen>,
    /// Stream-wide method ids, by name and file.
    names: HashMap<(Arc<str>, Option<Arc<str>>), u32>,
}

impl JvmWatch {
    /// The JVM part of the message taken at `now`; None when nothing changed.
    pub fn next(&mut self, store: &JvmStore, now: Instant) -> Option<pb::JvmDelta> {
        let generation = store.generation();
        let behind = self.jvms.iter().any(|(&pid, s)| {
            store
                .jvm_generation(pid)
                .is_some_and(|c| Some(c) != s.methods_change)
        });
        if self.generation == Some(generation) && !behind {
            return None;
        }
        self.generation = Some(generation);
        let mut out = pb::JvmDelta::default();
        let list = store.list();
        for s in &list {
            let replaced = self
                .jvms
                .get(&s.pid)
                .is_some_and(|seen| seen.attached_since != s.attached_since);
            if replaced {
                out.removed.push(s.pid);
                self.jvms.remove(&s.pid);
            }
            let seen = self.jvms.entry(s.pid).or_insert_with(|| {
                out.new_jvms.push(summary(s));
                Seen {
                    attached_since: s.attached_since,
                    exited: s.exited_at.is_some(),
                    totals: Since::default(),
                    methods_change: None,
                    methods_at: None,
                    methods_cost: Duration::ZERO,
                    methods: HashMap::new(),
                }
            });
            if s.exited_at.is_some() && !seen.exited {
                seen.exited = true;
                out.exited.push(s.pid);
            }
            let [calls, bytecodes, cpu_ns] =
                seen.totals.advance([s.calls, s.bytecodes, cpu_total(s)]);
            let mut activity = pb::JvmActivity {
                pid: s.pid,
                calls,
                bytecodes,
                methods: Vec::new(),
                methods_elapsed_ns: 0,
                cpu_ns,
            };
            let change = store.jvm_generation(s.pid);
            let computed = seen.methods_due(change, now);
            if computed {
                let started = Instant::now();
                // Kept on ingest: O(methods) under the store's lock.
                let totals = store.method_calls(s.pid).unwrap_or_default();
                seen.methods_cost = started.elapsed();
                activity.methods_elapsed_ns = seen.methods_at.map_or(0, |at| {
                    let d = now.saturating_duration_since(at);
                    // Never 0 for a real interval: 0 means "none" or "the first".
                    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
                });
                seen.methods_at = Some(now);
                seen.methods_change = change;
                for m in totals {
                    let [dc, db, dcpu, doff] = seen.methods.entry(m.mid).or_default().advance([
                        m.calls,
                        m.exclusive_bytecodes,
                        m.cpu_ns,
                        m.offcpu_ns,
                    ]);
                    if dc == 0 && db == 0 && dcpu == 0 && doff == 0 {
                        continue;
                    }
                    let next = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
                    let id = *self
                        .names
                        .entry((Arc::clone(&m.name), m.file.clone()))
                        .or_insert_with(|| {
                            out.new_methods.push(pb::JvmMethod {
                                id: next,
                                name: m.name.to_string(),
                                file: m.file.as_deref().map(str::to_string),
                            });
                            next
                        });
                    activity.methods.push(pb::JvmMethodDelta {
                        id,
                        calls: dc,
                        bytecodes: db,
                        cpu_ns: dcpu,
                        offcpu_ns: doff,
                    });
                }
            }
            // A JVM left out was idle: clients drop its rates to 0.
            // CPU alone is activity too: a method that spins between two reports.
            let active = activity.calls > 0 || activity.bytecodes > 0 || activity.cpu_ns > 0;
            if active || !activity.methods.is_empty() {
                out.jvms.push(activity);
            }
        }
        let mut gone: Vec<u32> = self
            .jvms
            .keys()
            .copied()
            .filter(|p| list.iter().all(|s| s.pid != *p))
            .collect();
        gone.sort_unstable();
        for pid in gone {
            self.jvms.remove(&pid);
            out.removed.push(pid);
        }
        let empty = out.new_jvms.is_empty()
            && out.exited.is_empty()
            && out.jvms.is_empty()
            && out.removed.is_empty();
        (!empty).then_some(out)
    }
}

/// A JVM's CPU (ns), user and kernel mode of every kind of thread: what `jvm list`
/// shows as its total.
fn cpu_total(s: &JvmSummary) -> u64 {
    s.cpu
        .iter()
        .map(|&(_, user, kernel)| user.saturating_add(kernel))
        .fold(0, u64::saturating_add)
}
