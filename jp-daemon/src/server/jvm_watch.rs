//! The JVM part of Watch messages: per JVM, the change of each method's calls and
//! exclusive bytecodes since the previous message; a method's name is sent once
//! per stream with an id that every JVM shares; JVMs appearing, exiting, and
//! removed (retention over). One [`JvmWatch`] per stream.
//!
//! Work is skipped when the store did not change (its generation), and per JVM
//! when that JVM did not change.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use jp_proto::v1 as pb;

use super::jvm::summary;
use crate::jvm::JvmStore;

/// What the stream has sent of one JVM.
struct Seen {
    /// Identity of the JVM behind the pid (a reused pid is another JVM).
    attached_since: SystemTime,
    exited: bool,
    /// The store's change counter of the JVM at the previous message.
    change: Option<u64>,
    calls: u64,
    bytecodes: u64,
    /// Per method id of the JVM (its agent's mid): calls, exclusive bytecodes.
    methods: HashMap<u32, (u64, u64)>,
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
    /// The JVM part of the next message; None when nothing changed.
    pub fn next(&mut self, store: &JvmStore) -> Option<pb::JvmDelta> {
        let generation = store.generation();
        if self.generation == Some(generation) {
            return None;
        }
        self.generation = Some(generation);
        let mut out = pb::JvmDelta::default();
        let list = store.list();
        let mut present: Vec<u32> = Vec::with_capacity(list.len());
        for s in &list {
            present.push(s.pid);
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
                    change: None,
                    calls: 0,
                    bytecodes: 0,
                    methods: HashMap::new(),
                }
            });
            if s.exited_at.is_some() && !seen.exited {
                seen.exited = true;
                out.exited.push(s.pid);
            }
            let change = store.jvm_generation(s.pid);
            if change == seen.change {
                continue;
            }
            seen.change = change;
            let mut activity = pb::JvmActivity {
                pid: s.pid,
                calls: s.calls.saturating_sub(seen.calls),
                bytecodes: s.bytecodes.saturating_sub(seen.bytecodes),
                methods: Vec::new(),
            };
            (seen.calls, seen.bytecodes) = (s.calls, s.bytecodes);
            for m in store.top_methods(s.pid).unwrap_or_default() {
                let prev = seen.methods.entry(m.mid).or_insert((0, 0));
                let (dc, db) = (
                    m.calls.saturating_sub(prev.0),
                    m.exclusive_bytecodes.saturating_sub(prev.1),
                );
                *prev = (m.calls, m.exclusive_bytecodes);
                if dc == 0 && db == 0 {
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
                });
            }
            if activity.calls > 0 || activity.bytecodes > 0 || !activity.methods.is_empty() {
                out.jvms.push(activity);
            }
        }
        let mut gone: Vec<u32> = self
            .jvms
            .keys()
            .copied()
            .filter(|p| !present.contains(p))
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
