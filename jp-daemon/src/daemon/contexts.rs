//! CPU per exact context: the kernel sampler's join wired to the JVM store.

/// The kernel sampler's join of CPU samples to the JVMs' exact contexts, connected to
/// the JVM store: the threads the agents announced go to the sampler, its samples under
/// their contexts come back.
/// The daemon wires the two ([`crate::kernel::join::ContextJoin`]); neither knows the
/// other.
pub struct JvmContexts(pub crate::store::jvm::SharedJvmStore);

impl crate::kernel::join::ContextJoin for JvmContexts {
    fn joined(&self, version: Option<u64>) -> Option<crate::kernel::join::Joined> {
        let store = crate::lock::lock(&self.0);
        let now = store.context_threads_version();
        if version == Some(now) {
            return None;
        }
        let threads = store
            .context_threads()
            .into_iter()
            .map(|(tgid, slot, stream)| crate::kernel::join::SlotThread {
                tgid,
                tid: slot.os_tid,
                slot: slot.slot,
                heap: slot.heap,
                stream,
            })
            .collect();
        Some(crate::kernel::join::Joined {
            version: now,
            threads,
            pids: store.context_pids(),
        })
    }

    fn refuse(&self, t: &crate::kernel::join::SlotThread) {
        log::debug!(
            "jvm {}: thread {} announced a context slot for task {}, which is not the process's: refused",
            t.tgid,
            t.stream,
            t.tid
        );
        crate::lock::lock(&self.0).context_slot_refused(t.tgid, t.stream);
    }

    fn samples(&self, period_ns: u64, samples: &[(jp_common::CtxKey, u64)]) {
        crate::lock::lock(&self.0).add_cpu_samples(
            period_ns,
            samples,
            std::time::SystemTime::now(),
        );
    }
}
