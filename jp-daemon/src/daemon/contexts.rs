//! CPU per exact context: the kernel sampler's join wired to the JVM store.

use std::collections::HashMap;

use crate::kernel::join::{Joined, JvmMark, JvmThreads, SlotThread};
use crate::store::read::JvmJoin;

/// The kernel sampler's join of CPU samples to the JVMs' exact contexts, connected to
/// the JVM store: the threads the agents announced go to the sampler, its samples under
/// their contexts come back.
/// The daemon wires the two ([`crate::kernel::join::ContextJoin`] and the store's
/// [`JvmJoin`]); neither knows the other.
pub struct JvmContexts(pub crate::store::jvm::SharedJvmStore);

impl crate::kernel::join::ContextJoin for JvmContexts {
    fn joined(&self, version: Option<u64>, marks: &HashMap<u32, JvmMark>) -> Option<Joined> {
        let announced = self.0.context_threads_since(version, marks)?;
        let changed = announced
            .changed
            .into_iter()
            .map(|jvm| {
                let (mut threads, mut ended) = (Vec::new(), Vec::new());
                for (stream, slot) in jvm.threads {
                    match slot {
                        Some(slot) => threads.push(SlotThread {
                            tgid: jvm.tgid,
                            tid: slot.os_tid,
                            slot: slot.slot,
                            heap: slot.heap,
                            stream,
                        }),
                        None => ended.push(stream),
                    }
                }
                JvmThreads {
                    tgid: jvm.tgid,
                    mark: jvm.mark,
                    all: jvm.all,
                    announced: threads,
                    ended,
                }
            })
            .collect();
        Some(Joined {
            version: announced.version,
            changed,
            pids: announced.pids,
        })
    }

    fn refuse(&self, t: &SlotThread) {
        log::debug!(
            "jvm {}: thread {} announced a context slot for task {}, which is not the process's: refused",
            t.tgid,
            t.stream,
            t.tid
        );
        self.0.refuse_context_slot(t.tgid, t.stream);
    }

    fn samples(&self, period_ns: u64, samples: &[(jp_common::CtxKey, u64)]) {
        self.0.add_cpu_samples(period_ns, samples);
    }

    fn offcpu(&self, pass: &crate::kernel::offcpu::OffcpuPass) {
        self.0.add_offcpu(&pass.periods, pass.counters);
    }
}
