//! One JVM's merged tree, kept compact: per node 8 bytes of links (parent, method), 16
//! of counters, and an open-addressing index keyed by (parent, method) that finds a
//! child without child lists (4 bytes a slot, at most 7/8 full: linear probing stays short
//! for the lookups, which only definitions make, and the index is the biggest part per
//! node after the counters). The JVM chooses the method ids, so the index hashes them
//! with a random key of its own table ([`SlotHasher`]): ids chosen to collide under a
//! fixed multiplier would otherwise make every definition walk one long run of slots.
//!
//! Links and counters live in [`ChunkVec`]s (see there why; [`NodeTable::freeze`] takes
//! a snapshot of both in O(chunks)). Per-method totals follow every change of a node's
//! counters ([`MethodCounts`]). Node 0 is the root. A node is always created after its parent, so parents have
//! smaller indexes than their children (the writers of `jp-mct` rely on it).

use super::chunked::{prefetch, ChunkVec, Frozen, NONE};
use super::totals::MethodCounts;

/// Indexes at and above this are markers of the per-thread maps (see `stream`).
pub(crate) const MAX_NODES: usize = (u32::MAX - 8) as usize;
/// In a node's stored method id (ids are below 2^31, see `wire::MAX_NODE_ID`): no
/// ancestor of the node runs the same method (the outermost frame of a recursion, the
/// nodes whose subtrees make a method's inclusive count). Fixed when the node is
/// created: its ancestors never change.
const OUTER: u32 = 1 << 31;
/// Ancestors looked at for [`OUTER`] when a node is created; a deeper tree marks the
/// table `deep` and its queries walk it whole instead (and no more flags are looked
/// for: a hostile deep tree costs nothing more per node).
const DEPTH_CAP: usize = 256;

/// (parent, mid) without the [`OUTER`] flag (the root's stay NONE).
#[inline]
pub(crate) fn unflag(l: [u32; 2]) -> [u32; 2] {
    if l[0] == NONE {
        l
    } else {
        [l[0], l[1] & !OUTER]
    }
}

/// Whether a stored link has the [`OUTER`] flag.
#[inline]
pub(crate) fn is_outer(l: [u32; 2]) -> bool {
    l[0] != NONE && l[1] & OUTER != 0
}

pub(crate) struct NodeTable {
    /// (parent, mid) per node; the root has (NONE, NONE).
    links: ChunkVec<[u32; 2]>,
    /// (calls, bytecodes) per node: wrapping, so that subtracting an old contribution
    /// always restores the exact value.
    counts: ChunkVec<[u64; 2]>,
    /// Slots holding node indexes (NONE = empty); length a power of two.
    index: Vec<u32>,
    /// Nodes allowed, the root included.
    limit: usize,
    total_calls: u64,
    total_bytecodes: u64,
    methods: MethodCounts,
    /// Some node's [`OUTER`] flag is not known (deeper than [`DEPTH_CAP`]).
    deep: bool,
    hasher: SlotHasher,
    /// Slots looked at by the definitions so far (what a collision attack inflates).
    #[cfg(test)]
    probes: u64,
}

/// The tree's links and counters as they were at [`NodeTable::freeze`]. The links
/// carry the [`OUTER`] flag (see [`unflag`]).
#[derive(Clone)]
pub(crate) struct FrozenTree {
    pub links: Frozen<[u32; 2]>,
    pub counts: Frozen<[u64; 2]>,
    /// The flags are not all known.
    pub deep: bool,
}

/// The index's hash of (parent, mid): a keyed mix whose key is drawn at random for
/// each table, so that which ids collide cannot be known outside jpd.
#[derive(Clone, Copy)]
struct SlotHasher {
    key: u64,
}

impl SlotHasher {
    /// A key from the standard library's per-process random hash keys (each
    /// `RandomState` differs from the last).
    fn random() -> SlotHasher {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0);
        SlotHasher { key: h.finish() }
    }

    /// The murmur3 finalizer over the keyed id: every bit of the key and the id moves
    /// every bit of the slot.
    #[inline]
    fn slot(self, parent: u32, mid: u32, mask: usize) -> usize {
        let mut x = ((u64::from(parent) << 32) | u64::from(mid)) ^ self.key;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x as usize & mask
    }
}

impl NodeTable {
    /// A tree of the root alone that may grow to `max_nodes` nodes besides the root.
    pub fn new(max_nodes: usize) -> NodeTable {
        let mut t = NodeTable {
            links: ChunkVec::new(),
            counts: ChunkVec::new(),
            index: vec![NONE; 16],
            limit: max_nodes.min(MAX_NODES - 1) + 1,
            total_calls: 0,
            total_bytecodes: 0,
            methods: MethodCounts::default(),
            deep: false,
            hasher: SlotHasher::random(),
            #[cfg(test)]
            probes: 0,
        };
        t.links.push([NONE, NONE]);
        t.counts.push([0, 0]);
        t
    }

    /// Nodes, the root included.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// The child of `parent` for method `mid`, created if new; `None` when the node limit
    /// is reached (or `parent` is not a node).
    pub fn child(&mut self, parent: u32, mid: u32) -> Option<u32> {
        if parent as usize >= self.links.len() {
            return None;
        }
        let mask = self.index.len() - 1;
        let mut s = self.hasher.slot(parent, mid, mask);
        loop {
            #[cfg(test)]
            {
                self.probes += 1;
            }
            let v = self.index[s];
            if v == NONE {
                break;
            }
            if self.links.get(v as usize).map(|&l| unflag(l)) == Some([parent, mid]) {
                return Some(v);
            }
            s = (s + 1) & mask;
        }
        if self.links.len() >= self.limit {
            return None;
        }
        let n = self.links.len() as u32;
        let flag = if self.outermost(parent, mid) {
            OUTER
        } else {
            0
        };
        self.links.push([parent, mid | flag]);
        self.counts.push([0, 0]);
        self.index[s] = n;
        self.methods.node_created(mid, n, self.links.len());
        // The root is not in the index: nodes - 1 entries.
        if (self.links.len() - 1) * 8 > self.index.len() * 7 {
            self.rehash(self.index.len() * 2);
        }
        Some(n)
    }

    /// No node from `parent` up runs `mid` (see [`OUTER`]).
    fn outermost(&mut self, parent: u32, mid: u32) -> bool {
        if self.deep {
            return false;
        }
        let mut v = parent;
        for _ in 0..DEPTH_CAP {
            if v == 0 {
                return true;
            }
            match self.links.get(v as usize) {
                Some(&[p, m]) if m & !OUTER != mid => v = p,
                _ => return false,
            }
        }
        self.deep = true;
        false
    }

    fn rehash(&mut self, size: usize) {
        let mut index = vec![NONE; size];
        let mask = size - 1;
        for (i, l) in self.links.iter().enumerate().skip(1) {
            let mut s = self.hasher.slot(l[0], l[1] & !OUTER, mask);
            while index[s] != NONE {
                s = (s + 1) & mask;
            }
            index[s] = i as u32;
        }
        self.index = index;
    }

    /// Adds (wrapping) to a node's counters.
    #[inline]
    pub fn add(&mut self, node: u32, calls: u64, bytecodes: u64) {
        if let Some(c) = self.counts.get_mut(node as usize) {
            c[0] = c[0].wrapping_add(calls);
            c[1] = c[1].wrapping_add(bytecodes);
            self.total_calls = self.total_calls.wrapping_add(calls);
            self.total_bytecodes = self.total_bytecodes.wrapping_add(bytecodes);
            if let Some(&[_, mid]) = self.links.get(node as usize) {
                self.methods.add(mid & !OUTER, calls, bytecodes);
            }
        }
    }

    /// Starts loading a node's counters and links into the cache.
    #[inline(always)]
    pub fn prefetch(&self, node: u32) {
        prefetch(self.counts.get(node as usize));
        prefetch(self.links.get(node as usize));
    }

    /// Starts loading the totals of a node's method into the cache (its links should
    /// be in the cache already, see [`NodeTable::prefetch`]).
    #[inline(always)]
    pub fn prefetch_method(&self, node: u32) {
        if let Some(&[_, mid]) = self.links.get(node as usize) {
            self.methods.prefetch(mid & !OUTER);
        }
    }

    /// Per-method totals, kept up to date by every change of the counters.
    pub fn methods(&self) -> &MethodCounts {
        &self.methods
    }

    /// Links and counters as they are now, sharing their chunks (O(chunks)): a later
    /// change copies a chunk the snapshot still holds.
    pub fn freeze(&mut self) -> FrozenTree {
        FrozenTree {
            links: self.links.freeze(),
            counts: self.counts.freeze(),
            deep: self.deep,
        }
    }

    /// Subtracts (wrapping) from a node's counters.
    #[inline]
    pub fn sub(&mut self, node: u32, calls: u64, bytecodes: u64) {
        self.add(node, calls.wrapping_neg(), bytecodes.wrapping_neg());
    }

    /// (parent, mid) of a node; the root's are NONE.
    pub fn links(&self, node: u32) -> Option<[u32; 2]> {
        self.links.read(node as usize).map(|&l| unflag(l))
    }

    /// (calls, bytecodes) of a node.
    #[cfg(test)]
    pub fn counts(&self, node: u32) -> Option<[u64; 2]> {
        self.counts.read(node as usize).copied()
    }

    /// Writable again after [`NodeTable::freeze`]: the writer calls it before any
    /// change (see [`ChunkVec::thaw`]).
    pub fn thaw(&mut self) {
        self.links.thaw();
        self.counts.thaw();
    }

    /// All nodes in index order: (parent, mid, calls, bytecodes).
    pub fn iter(&self) -> impl Iterator<Item = ([u32; 2], [u64; 2])> + '_ {
        self.links
            .iter()
            .map(|&l| unflag(l))
            .zip(self.counts.iter().copied())
    }

    /// Sums over all nodes.
    pub fn totals(&self) -> (u64, u64) {
        (self.total_calls, self.total_bytecodes)
    }

    pub fn memory_bytes(&self) -> usize {
        self.links.memory_bytes()
            + self.counts.memory_bytes()
            + self.index.capacity() * 4
            + self.methods.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_found_by_parent_and_method() {
        let mut t = NodeTable::new(100);
        let a = t.child(0, 7).unwrap();
        let b = t.child(a, 7).unwrap();
        let c = t.child(0, 8).unwrap();
        assert_eq!((a, b, c), (1, 2, 3));
        assert_eq!(t.child(0, 7), Some(1));
        assert_eq!(t.child(1, 7), Some(2));
        assert_eq!(t.links(2), Some([1, 7]));
        assert_eq!(t.child(99, 1), None, "parent must exist");
        // 1 and 3 are outermost, 2 (7 under 7) is not.
        let outer: Vec<bool> = (1..4)
            .map(|n| is_outer(t.links.read(n).copied().unwrap()))
            .collect();
        assert_eq!(outer, vec![true, false, true]);
        t.add(2, 3, 4);
        t.sub(2, 1, 1);
        assert_eq!(t.counts(2), Some([2, 3]));
        assert_eq!(t.totals(), (2, 3));
    }

    /// Method ids that all fall in one slot under the fixed multiplier this index once
    /// used (`key * 0x9E37_79B9_7F4A_7C15 >> 32`, masked), for every table of up to
    /// 2^16 slots.
    fn ids_colliding_under_a_fixed_multiplier(n: usize) -> Vec<u32> {
        (1u32..)
            .filter(|&mid| (u64::from(mid).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) & 0xFFFF == 0)
            .take(n)
            .collect()
    }

    #[test]
    fn colliding_method_ids_define_in_few_probes() {
        const N: usize = 3000;
        let mids = ids_colliding_under_a_fixed_multiplier(N);
        let mut t = NodeTable::new(N);
        for (i, &mid) in mids.iter().enumerate() {
            assert_eq!(t.child(0, mid), Some(i as u32 + 1));
        }
        // Under the fixed multiplier this is N²/2 = 4.5 M probes; a random key gives a
        // few per definition (the table is at most 7/8 full).
        assert!(
            t.probes <= 8 * N as u64,
            "{} probes for {N} definitions",
            t.probes
        );
        for (i, &mid) in mids.iter().enumerate() {
            assert_eq!(t.child(0, mid), Some(i as u32 + 1));
        }
    }

    #[test]
    fn grows_past_many_rehashes_and_respects_the_limit() {
        let mut t = NodeTable::new(10_000);
        let mut parent = 0;
        for i in 0..10_000u32 {
            let n = t.child(parent, i % 37).unwrap();
            assert_eq!(n, i + 1);
            if i % 3 == 0 {
                parent = n;
            }
        }
        assert_eq!(t.child(0, 12345), None);
        // Every node is still found.
        for n in 1..=10_000u32 {
            let [p, m] = t.links(n).unwrap();
            assert_eq!(t.child(p, m), Some(n));
        }
    }
}
