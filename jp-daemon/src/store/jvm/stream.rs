//! One thread stream: its sequence state and its own tree, as a map from the sender's
//! node ids to merged-tree nodes with the counts this thread contributed to each.
//!
//! A tree record comes decoded (`wire::decode_body`, at ingest, into the store's
//! reusable scratch vector) and is applied in two passes: check (every id and parent
//! known, no conflicting redefinition, room in the slot budget), apply. Only the second
//! pass changes the merged tree, and it cannot fail, so a malformed record changes
//! nothing. (The store shrinks the scratch back to [`SCRATCH_KEPT`] entries after a big
//! record: it is sized on demand.)

use std::collections::HashMap;

use jp_common::wire::{TreeBody, TreeEntry};

use super::chunked::prefetch;
use super::chunked::{ChunkVec, Frozen};
use super::nodes::{NodeTable, MAX_NODES};
use super::{LimitKind, Malformed};

/// Entries looked ahead when prefetching.
const AHEAD: usize = 16;
/// Scratch entries kept between records (8 KiB); a bigger record grows it for its
/// own decoding only.
pub(crate) const SCRATCH_KEPT: usize = 256;

/// Marker: the id is not defined.
const UNDEF: u32 = u32::MAX;
/// Marker: defined, but its node was dropped at a limit (its counts are dropped too).
const DROPPED: u32 = u32::MAX - 1;
/// Marker: defined earlier in the record being checked.
const PENDING: u32 = u32::MAX - 2;
const _: () = assert!(MAX_NODES < PENDING as usize);

/// The thread's part of one node: 20 bytes (packed to 4-byte alignment).
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
struct Slot {
    calls: u64,
    bytecodes: u64,
    node: u32,
}

const UNDEF_SLOT: Slot = Slot {
    calls: 0,
    bytecodes: 0,
    node: UNDEF,
};

/// Per-thread node slots charged to the JVM, and the limit on them.
pub(crate) struct SlotBudget {
    pub used: usize,
    pub limit: usize,
}

/// Why a tree record was not applied.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reject {
    Malformed(Malformed),
    Limit(LimitKind),
}

/// What applying a record did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Entries whose node was (or had been) dropped at the node limit.
    pub dropped: u64,
    /// The node limit was hit by this record.
    pub node_limit: bool,
}

#[derive(Default)]
pub(crate) struct ThreadStream {
    pub name: String,
    /// RESYNC seen and nothing lost since.
    pub synced: bool,
    pub expected_seq: u32,
    /// Between a RESYNC and the stream's first delta record: counts are totals.
    pub absolute_phase: bool,
    /// A limit dropped one of its records: the rest are dropped (and counted) until
    /// a RESYNC, without asking for a re-send that would hit the limit again.
    pub limited: bool,
    /// The JVM's record counter when this stream last sent (see `Jvm::loss_marker`).
    pub last_record: u64,
    /// Records of this stream accepted.
    pub records: u64,
    /// Where the thread publishes its current context (its `KIND_THREAD` record).
    pub context_slot: Option<jp_common::wire::ThreadSlot>,
    slots: ChunkVec<Slot>,
    /// During a re-send: what the thread contributed before it, by merged node, not yet
    /// replaced by a new total.
    old: HashMap<u32, [u64; 2]>,
}

impl ThreadStream {
    /// Checks and applies one decoded TREE body. `resync` starts a new state (the
    /// record has RESYNC), `absolute` means totals.
    pub fn apply_tree(
        &mut self,
        body: &TreeBody<'_, '_>,
        resync: bool,
        absolute: bool,
        tree: &mut NodeTable,
        budget: &mut SlotBudget,
    ) -> Result<(Applied, Option<String>), Reject> {
        let name = (!body.thread_name.is_empty())
            .then(|| String::from_utf8_lossy(body.thread_name).into_owned());

        let mut fresh = ChunkVec::new();
        let slots = if resync { &mut fresh } else { &mut self.slots };
        check(slots, body.entries, tree, budget)?;
        if resync {
            // The old state becomes "contributed before", merged with what an unfinished
            // earlier re-send left.
            for s in self.slots.iter().copied() {
                if s.node < PENDING {
                    let o = self.old.entry(s.node).or_insert([0, 0]);
                    o[0] = o[0].wrapping_add(s.calls);
                    o[1] = o[1].wrapping_add(s.bytecodes);
                }
            }
            budget.used = budget.used.saturating_sub(self.slots.len());
            self.slots = fresh;
        } else if !absolute {
            self.finish_resync(tree);
        }
        let applied = apply(&mut self.slots, &mut self.old, body.entries, absolute, tree);
        Ok((applied, name))
    }

    /// The re-send is over: contributions of old nodes it did not name go away.
    pub fn finish_resync(&mut self, tree: &mut NodeTable) {
        for (node, [c, b]) in self.old.drain() {
            tree.sub(node, c, b);
        }
        self.absolute_phase = false;
    }

    /// The merged node of this thread's wire node `id` (0: the root), if defined.
    pub fn node_of(&self, id: u64) -> Option<u32> {
        if id == 0 {
            return Some(0);
        }
        let slot = self.slots.get(usize::try_from(id).ok()?)?;
        (slot.node < PENDING).then_some(slot.node)
    }

    /// Wire node id → merged node of every node (for CPU samples that arrive after the
    /// thread ended); read it with [`node_in`].
    pub fn node_map(&self) -> Vec<u32> {
        self.slots.iter().map(|s| s.node).collect()
    }
}

/// The merged node of wire id `id` in a [`ThreadStream::node_map`], as
/// [`ThreadStream::node_of`] answers for a live stream.
pub(crate) fn node_in(map: &[u32], id: u64) -> Option<u32> {
    if id == 0 {
        return Some(0);
    }
    let node = *map.get(usize::try_from(id).ok()?)?;
    (node < PENDING).then_some(node)
}

impl ThreadStream {
    /// The thread ended: its counts stay in the merged tree, its map is freed.
    pub fn release(&mut self, budget: &mut SlotBudget) {
        budget.used = budget.used.saturating_sub(self.slots.len());
        self.slots = ChunkVec::new();
        self.old = HashMap::new();
    }

    pub fn memory_bytes(&self) -> usize {
        self.slots.memory_bytes() + self.old.capacity() * 24 + self.name.capacity()
    }

    /// What this thread has put in the merged tree: its nodes' counts and, during a
    /// re-send, the old counts not replaced yet.
    pub fn contributions(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        self.nodes()
            .chain(self.old.iter().map(|(&node, &[c, b])| (node, c, b)))
    }

    /// (merged node, calls, bytecodes) of every node of this thread.
    pub fn nodes(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.node < PENDING)
            .map(|s| (s.node, s.calls, s.bytecodes))
    }

    /// The thread's nodes as they are now, sharing the slots' chunks (O(chunks)).
    pub fn freeze(&mut self) -> FrozenSlots {
        FrozenSlots(self.slots.freeze())
    }

    /// Writable again after [`ThreadStream::freeze`].
    pub fn thaw(&mut self) {
        self.slots.thaw();
    }
}

/// A thread's nodes as they were at [`ThreadStream::freeze`].
pub(crate) struct FrozenSlots(Frozen<Slot>);

impl FrozenSlots {
    /// As [`ThreadStream::nodes`].
    pub fn nodes(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        self.0
            .iter()
            .filter(|s| s.node < PENDING)
            .map(|s| (s.node, s.calls, s.bytecodes))
    }
}

/// Pass 1: checks that every reference resolves, definitions are consistent and slots
/// fit the budget. Leaves `slots` and `budget` as they were when it fails.
fn check(
    slots: &mut ChunkVec<Slot>,
    entries: &[TreeEntry],
    tree: &NodeTable,
    budget: &mut SlotBudget,
) -> Result<(), Reject> {
    let base_len = slots.len();
    let base_used = budget.used;
    let mut r = Ok(());
    let mut marked = 0;
    for (i, e) in entries.iter().enumerate() {
        if let Some(ahead) = entries.get(i + AHEAD) {
            prefetch(slots.get(ahead.node as usize));
        }
        let id = e.node as usize;
        let known = |slots: &ChunkVec<Slot>, i: usize| slots.get(i).map_or(UNDEF, |s| s.node);
        let Some((parent, mid)) = e.definition else {
            if known(slots, id) == UNDEF {
                r = Err(Reject::Malformed(Malformed::UnknownNode));
                break;
            }
            continue;
        };
        let p = if parent == 0 {
            0
        } else {
            known(slots, parent as usize)
        };
        if p == UNDEF {
            r = Err(Reject::Malformed(Malformed::UnknownParent));
            break;
        }
        match known(slots, id) {
            UNDEF => {}
            PENDING => {
                r = Err(Reject::Malformed(Malformed::Redefined));
                break;
            }
            DROPPED => continue,
            node => {
                // Defined before: only the same definition again is allowed.
                if p == PENDING || tree.links(node) != Some([p, mid]) {
                    r = Err(Reject::Malformed(Malformed::Redefined));
                    break;
                }
                continue;
            }
        }
        if id >= slots.len() {
            let need = id + 1 - slots.len();
            if budget.used.saturating_add(need) > budget.limit {
                r = Err(Reject::Limit(LimitKind::ThreadNodes));
                break;
            }
            budget.used += need;
            slots.grow_to(id + 1, UNDEF_SLOT);
        }
        slots[id].node = PENDING;
        marked += 1;
    }
    if r.is_err() {
        if marked > 0 {
            for s in slots.iter_mut() {
                if s.node == PENDING {
                    s.node = UNDEF;
                }
            }
        }
        slots.truncate(base_len);
        budget.used = base_used;
    }
    r
}

/// Pass 2: cannot fail.
fn apply(
    slots: &mut ChunkVec<Slot>,
    old: &mut HashMap<u32, [u64; 2]>,
    entries: &[TreeEntry],
    absolute: bool,
    tree: &mut NodeTable,
) -> Applied {
    let mut out = Applied::default();
    let big_table = tree.methods().is_big();
    for (i, e) in entries.iter().enumerate() {
        if let Some(ahead) = entries
            .get(i + AHEAD)
            .and_then(|a| slots.get(a.node as usize))
        {
            if ahead.node < PENDING {
                tree.prefetch(ahead.node);
            }
        }
        // The method's totals: its id is in the links loaded AHEAD / 2 entries ago
        // (a small method table stays in the cache anyway).
        if big_table {
            if let Some(near) = entries
                .get(i + AHEAD / 2)
                .and_then(|a| slots.get(a.node as usize))
            {
                if near.node < PENDING {
                    tree.prefetch_method(near.node);
                }
            }
        }
        let id = e.node as usize;
        let Some(&slot) = slots.get(id) else {
            continue;
        };
        let mut slot = slot;
        if slot.node == PENDING {
            let parent = match e.definition {
                Some((0, _)) => 0,
                Some((p, _)) => slots.get(p as usize).map_or(DROPPED, |s| s.node),
                None => DROPPED,
            };
            let mid = e.definition.map_or(0, |d| d.1);
            let node = if parent == DROPPED {
                DROPPED
            } else {
                match tree.child(parent, mid) {
                    Some(n) => n,
                    None => {
                        out.node_limit = true;
                        DROPPED
                    }
                }
            };
            slot = Slot {
                calls: 0,
                bytecodes: 0,
                node,
            };
            if absolute && node != DROPPED {
                if let Some([c, b]) = old.remove(&node) {
                    tree.sub(node, c, b);
                }
            }
        }
        if slot.node == DROPPED {
            out.dropped += 1;
            slots[id] = slot;
            continue;
        }
        let (dc, db) = if absolute {
            (
                e.calls.wrapping_sub(slot.calls),
                e.bytecodes.wrapping_sub(slot.bytecodes),
            )
        } else {
            (e.calls, e.bytecodes)
        };
        slot.calls = slot.calls.wrapping_add(dc);
        slot.bytecodes = slot.bytecodes.wrapping_add(db);
        tree.add(slot.node, dc, db);
        slots[id] = slot;
    }
    out
}
