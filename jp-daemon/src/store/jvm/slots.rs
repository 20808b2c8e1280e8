//! A thread's node slots, indexed by the sender's node ids: a dense array for the ids
//! near those used so far, a hash map for ids far beyond them.
//!
//! Why both: the agent numbers a thread's nodes 1, 2, 3… as it creates them, so the
//! dense array is the fast path (one indexed load per entry). But any process can send
//! a record that defines id 2^31 − 1; growing the array to it would make jpd allocate
//! gigabytes for a few bytes. So one record may grow the dense array by at most
//! [`dense_allowance`] slots (a small multiple of its entries); an id beyond that goes
//! to the map, and moves into the array when the array grows over it. What one record
//! makes the slots allocate is thus O(its entries): at most 2 dense slots (20 bytes
//! each) per entry plus [`DENSE_REACH`], or one map entry per definition.
//!
//! Invariant: an id below the dense length is in the array, never in the map.

use std::collections::HashMap;

use jp_common::wire::TreeEntry;

use super::chunked::{prefetch, ChunkVec, Frozen};

/// Marker: the id is not defined.
pub(crate) const UNDEF: u32 = u32::MAX;
/// Marker: defined, but its node was dropped at a limit (its counts are dropped too).
pub(crate) const DROPPED: u32 = u32::MAX - 1;
/// Marker: defined earlier in the record being checked.
pub(crate) const PENDING: u32 = u32::MAX - 2;

/// Slots one record may add to the dense array beyond two per entry: covers the
/// agent's ids sent out of creation order (a depth-first walk of a tree numbered in
/// creation order) without letting a record reach far.
pub(crate) const DENSE_REACH: usize = 64;

/// Dense slots a record of `entries` entries may add.
pub(crate) fn dense_allowance(entries: usize) -> usize {
    entries.saturating_mul(2).saturating_add(DENSE_REACH)
}

/// Bytes of one entry of the far map, with hashbrown's control byte.
const FAR_ENTRY_BYTES: usize = std::mem::size_of::<(u32, Slot)>() + 1;

/// The thread's part of one node: 20 bytes (packed to 4-byte alignment).
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub(crate) struct Slot {
    pub calls: u64,
    pub bytecodes: u64,
    pub node: u32,
}

pub(crate) const UNDEF_SLOT: Slot = Slot {
    calls: 0,
    bytecodes: 0,
    node: UNDEF,
};

#[derive(Default)]
pub(crate) struct Slots {
    dense: ChunkVec<Slot>,
    far: HashMap<u32, Slot>,
}

impl Slots {
    /// Slots held (charged to the JVM's slot budget): the dense array's length, holes
    /// included, plus the far ids.
    pub fn count(&self) -> usize {
        self.dense.len() + self.far.len()
    }

    /// Length of the dense array (the mark [`Slots::rollback`] returns to).
    pub fn dense_len(&self) -> usize {
        self.dense.len()
    }

    /// For the writer, after [`Slots::thaw`].
    #[inline]
    pub fn get(&self, id: usize) -> Option<Slot> {
        if id < self.dense.len() {
            return self.dense.get(id).copied();
        }
        if self.far.is_empty() {
            return None;
        }
        self.far.get(&u32::try_from(id).ok()?).copied()
    }

    /// The node of `id`, [`UNDEF`] if not defined.
    #[inline]
    pub fn node(&self, id: usize) -> u32 {
        self.get(id).map_or(UNDEF, |s| s.node)
    }

    #[inline]
    pub fn prefetch(&self, id: usize) {
        prefetch(self.dense.get(id));
    }

    /// Replaces the slot of a defined id.
    #[inline]
    pub fn set(&mut self, id: usize, slot: Slot) {
        if let Some(s) = self.dense.get_mut(id) {
            *s = slot;
        } else if let Some(s) = u32::try_from(id).ok().and_then(|k| self.far.get_mut(&k)) {
            *s = slot;
        }
    }

    /// Marks the undefined `id` [`PENDING`]: in the dense array if it is within
    /// `allowance` more slots (which it uses up), else in the far map. Returns the slots
    /// newly held (ids moved from the map into the array were held already).
    pub fn define(&mut self, id: usize, allowance: &mut usize) -> usize {
        let len = self.dense.len();
        let pending = Slot {
            node: PENDING,
            ..UNDEF_SLOT
        };
        if id < len {
            self.set(id, pending);
            return 0;
        }
        let grow = id + 1 - len;
        if grow > *allowance {
            let Ok(key) = u32::try_from(id) else {
                return 0;
            };
            self.far.insert(key, pending);
            return 1;
        }
        *allowance -= grow;
        let mut moved = 0;
        for i in len..id {
            let s = match self.far.is_empty() {
                true => None,
                false => u32::try_from(i).ok().and_then(|k| self.far.remove(&k)),
            };
            moved += usize::from(s.is_some());
            self.dense.push(s.unwrap_or(UNDEF_SLOT));
        }
        self.dense.push(pending);
        grow - moved
    }

    /// Undoes a failed check: the definitions among `entries` go back to undefined, and
    /// the dense array to `dense_len` (ids it took from the map go back there).
    /// O(entries + growth), whatever the thread holds.
    pub fn rollback(&mut self, entries: &[TreeEntry], dense_len: usize) {
        for e in entries.iter().filter(|e| e.definition.is_some()) {
            let id = e.node as usize;
            if self.node(id) == PENDING {
                if id < self.dense.len() {
                    self.set(id, UNDEF_SLOT);
                } else {
                    self.far.remove(&e.node);
                }
            }
        }
        for i in dense_len..self.dense.len() {
            if let (Some(s), Ok(k)) = (self.dense.get(i).copied(), u32::try_from(i)) {
                if s.node != UNDEF {
                    self.far.insert(k, s);
                }
            }
        }
        self.dense.truncate(dense_len);
    }

    /// Every slot, holes included.
    pub fn iter(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.dense.iter().chain(self.far.values())
    }

    /// Wire id → merged node of every defined id.
    pub fn node_map(&self) -> NodeMap {
        NodeMap {
            dense: self.dense.iter().map(|s| s.node).collect(),
            far: self
                .far
                .iter()
                .filter(|(_, s)| s.node < PENDING)
                .map(|(&k, s)| (k, s.node))
                .collect(),
        }
    }

    /// The slots as they are now (the dense array's chunks shared, the far ones copied).
    pub fn freeze(&mut self) -> FrozenSlots {
        FrozenSlots {
            dense: self.dense.freeze(),
            far: self.far.values().copied().collect(),
        }
    }

    pub fn thaw(&mut self) {
        self.dense.thaw();
    }

    /// Bytes allocated (capacities).
    pub fn memory_bytes(&self) -> usize {
        self.dense.memory_bytes() + self.far.capacity() * FAR_ENTRY_BYTES
    }
}

/// A thread's slots as they were at [`Slots::freeze`].
pub(crate) struct FrozenSlots {
    dense: Frozen<Slot>,
    far: Vec<Slot>,
}

impl FrozenSlots {
    /// (merged node, calls, bytecodes) of every node, as `ThreadStream::nodes`.
    pub fn nodes(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        self.dense
            .iter()
            .chain(self.far.iter())
            .filter(|s| s.node < PENDING)
            .map(|s| (s.node, s.calls, s.bytecodes))
    }
}

/// An ended thread's wire ids → merged nodes, kept for its late CPU samples.
pub(crate) struct NodeMap {
    dense: Vec<u32>,
    far: HashMap<u32, u32>,
}

impl NodeMap {
    /// The merged node of wire id `id` (0: the root), if defined.
    pub fn node(&self, id: u64) -> Option<u32> {
        if id == 0 {
            return Some(0);
        }
        let i = usize::try_from(id).ok()?;
        let node = match self.dense.get(i) {
            Some(&n) => n,
            None => *self.far.get(&u32::try_from(id).ok()?)?,
        };
        (node < PENDING).then_some(node)
    }

    /// Bytes allocated (capacities).
    pub fn memory_bytes(&self) -> usize {
        self.dense.capacity() * 4 + self.far.capacity() * 9 + std::mem::size_of::<NodeMap>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defn(node: u32) -> TreeEntry {
        TreeEntry {
            node,
            definition: Some((0, 0)),
            calls: 0,
            bytecodes: 0,
        }
    }

    #[test]
    fn far_ids_go_to_the_map_and_move_into_the_array_when_it_reaches_them() {
        let mut s = Slots::default();
        let mut allow = 4;
        assert_eq!(s.define(1, &mut allow), 2, "slot 0 (the root's) and 1");
        assert_eq!(s.define(4, &mut allow), 1, "3 slots needed, 2 allowed");
        assert_eq!((s.dense_len(), s.count(), s.node(4)), (2, 3, PENDING));
        let mut allow = 10;
        assert_eq!(s.define(5, &mut allow), 3, "2, 3, 5 new; 4 moved");
        assert_eq!((s.dense_len(), s.count(), allow), (6, 6, 6));
        assert_eq!((s.node(4), s.node(3), s.node(2)), (PENDING, UNDEF, UNDEF));
        assert!(s.far.is_empty());
        // A far id: one map entry, whatever the id.
        let mut allow = 10;
        assert_eq!(s.define((1 << 31) - 1, &mut allow), 1);
        assert_eq!((s.count(), allow), (7, 10));
        assert!(s.memory_bytes() < 4096, "{}", s.memory_bytes());
    }

    #[test]
    fn a_rollback_restores_the_array_and_the_map() {
        let mut s = Slots::default();
        let mut allow = 100;
        s.define(1, &mut allow);
        s.set(
            1,
            Slot {
                node: 9,
                ..UNDEF_SLOT
            },
        );
        let mut allow = 0;
        s.define(3, &mut allow);
        s.set(
            3,
            Slot {
                node: 8,
                ..UNDEF_SLOT
            },
        );
        let before = (s.dense_len(), s.count());
        let record = [defn(2), defn(4), defn(1000)];
        let mut allow = 3;
        s.define(2, &mut allow);
        s.define(4, &mut allow);
        s.define(1000, &mut allow);
        assert_eq!(s.dense_len(), 5, "3 moved into the array");
        s.rollback(&record, before.0);
        assert_eq!((s.dense_len(), s.count()), before);
        assert_eq!((s.node(1), s.node(3), s.node(2)), (9, 8, UNDEF));
        assert_eq!((s.node(4), s.node(1000)), (UNDEF, UNDEF));
    }
}
