//! The store's byte budget, shared by all JVMs (`max_store_bytes`).
//!
//! What a JVM holds is told from the capacities of its structures in O(1)
//! (`Jvm::memory_bytes`), so the store re-reads it after every record and keeps the
//! sum. A record may grow what jpd holds by at most [`GROWTH_PER_BYTE`] bytes per byte
//! of it (ids are sparse past the dense prefix, see `slots`) plus [`GROWTH_SLACK`] (a
//! fresh chunk of each array it touches): a record is let grow the store only if that
//! much still fits. One that does not may still update what is there, but its new
//! nodes, threads and methods are dropped (counted `store/over_budget`), and the JVM
//! is incomplete at `max_store_mib`, as at any other limit. What is stored is never
//! dropped to make room. Hash tables double when they grow, so the store may pass the
//! budget by one table's doubling at most.

use crate::refusals::Refusal;

use super::JvmStore;

/// Growth refused: the store would pass `max_store_bytes`.
pub(crate) const OVER_BUDGET: Refusal = Refusal::new("store", "over_budget");

/// Bytes a record may add to what the store holds, at most, per byte of the record
/// (a definition entry of 5 bytes adds about 100: two dense slots, a merged node with
/// its index slot, the method's totals).
pub(crate) const GROWTH_PER_BYTE: u64 = 64;
/// Bytes a record may add besides: a fresh chunk of the slots, links and counts arrays.
pub(crate) const GROWTH_SLACK: u64 = 1 << 20;

impl JvmStore {
    /// Whether a record of `len` bytes may grow what the store holds.
    pub(super) fn room_for(&self, len: usize) -> bool {
        let worst = (len as u64)
            .saturating_mul(GROWTH_PER_BYTE)
            .saturating_add(GROWTH_SLACK);
        self.held.saturating_add(worst) <= self.limits.max_store_bytes as u64
    }

    /// The JVM `tgid` now holds `bytes`.
    pub(super) fn charge(&mut self, tgid: u32, bytes: u64) {
        if let Some(j) = self.jvms.get_mut(&tgid) {
            self.held = self.held.saturating_sub(j.charged).saturating_add(bytes);
            j.charged = bytes;
        }
    }

    /// Re-reads every JVM's size (after changes that are not records: CPU samples,
    /// expiry, eviction). O(JVMs).
    pub(super) fn recount(&mut self) {
        let mut held = 0;
        for j in self.jvms.values_mut() {
            j.charged = j.memory_bytes();
            held += j.charged;
        }
        self.held = held;
    }

    /// Bytes all JVMs hold (the budget's view; `stats().memory_bytes` adds the store's
    /// own buffers).
    pub fn held_bytes(&self) -> u64 {
        self.held
    }
}
