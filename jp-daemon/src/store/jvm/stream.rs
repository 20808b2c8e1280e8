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

use super::nodes::{NodeTable, MAX_NODES};
use super::slots::{dense_allowance, FrozenSlots, NodeMap, Slot, Slots, DROPPED, PENDING, UNDEF};
use super::{LimitKind, Malformed};

/// Entries looked ahead when prefetching.
const AHEAD: usize = 16;
/// Scratch entries kept between records (8 KiB); a bigger record grows it for its
/// own decoding only.
pub(crate) const SCRATCH_KEPT: usize = 256;

const _: () = assert!(MAX_NODES < PENDING as usize);

/// Per-thread node slots charged to the JVM, and the limit on them.
pub(crate) struct SlotBudget {
    pub used: usize,
    pub limit: usize,
    /// The store's byte budget leaves room for new slots (see `budget`): when not,
    /// a record that defines a node is refused at [`LimitKind::StoreBytes`].
    pub grow: bool,
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
    slots: Slots,
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

        let mut fresh = Slots::default();
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
            budget.used = budget.used.saturating_sub(self.slots.count());
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
        let node = self.slots.node(usize::try_from(id).ok()?);
        (node < PENDING).then_some(node)
    }

    /// Wire node id → merged node of every node (for CPU samples that arrive after the
    /// thread ended).
    pub fn node_map(&self) -> NodeMap {
        self.slots.node_map()
    }
}

impl ThreadStream {
    /// The thread ended: its counts stay in the merged tree, its map is freed.
    pub fn release(&mut self, budget: &mut SlotBudget) {
        budget.used = budget.used.saturating_sub(self.slots.count());
        self.slots = Slots::default();
        self.old = HashMap::new();
    }

    pub fn memory_bytes(&self) -> usize {
        // `old`: (u32, [u64; 2]) and a control byte per entry.
        self.slots.memory_bytes() + self.old.capacity() * 29 + self.name.capacity()
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
        self.slots.freeze()
    }

    /// Writable again after [`ThreadStream::freeze`].
    pub fn thaw(&mut self) {
        self.slots.thaw();
    }
}

/// Pass 1: checks that every reference resolves, definitions are consistent and slots
/// fit the budget. Leaves `slots` and `budget` as they were when it fails. O(entries):
/// the slots grow by at most [`dense_allowance`] dense slots plus one far slot per
/// definition, and a failure undoes only what this record did.
fn check(
    slots: &mut Slots,
    entries: &[TreeEntry],
    tree: &NodeTable,
    budget: &mut SlotBudget,
) -> Result<(), Reject> {
    let base_len = slots.dense_len();
    let base_used = budget.used;
    let mut allowance = dense_allowance(entries.len());
    let mut r = Ok(());
    let mut checked = 0;
    for (i, e) in entries.iter().enumerate() {
        checked = i + 1;
        if let Some(ahead) = entries.get(i + AHEAD) {
            slots.prefetch(ahead.node as usize);
        }
        let id = e.node as usize;
        let Some((parent, mid)) = e.definition else {
            if slots.node(id) == UNDEF {
                r = Err(Reject::Malformed(Malformed::UnknownNode));
                break;
            }
            continue;
        };
        let p = if parent == 0 {
            0
        } else {
            slots.node(parent as usize)
        };
        if p == UNDEF {
            r = Err(Reject::Malformed(Malformed::UnknownParent));
            break;
        }
        match slots.node(id) {
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
        if !budget.grow {
            r = Err(Reject::Limit(LimitKind::StoreBytes));
            break;
        }
        budget.used += slots.define(id, &mut allowance);
        if budget.used > budget.limit {
            r = Err(Reject::Limit(LimitKind::ThreadNodes));
            break;
        }
    }
    if r.is_err() {
        slots.rollback(&entries[..checked], base_len);
        budget.used = base_used;
    }
    r
}

/// Pass 2: cannot fail.
fn apply(
    slots: &mut Slots,
    old: &mut HashMap<u32, [u64; 2]>,
    entries: &[TreeEntry],
    absolute: bool,
    tree: &mut NodeTable,
) -> Applied {
    let mut out = Applied::default();
    let big_table = tree.methods().is_big();
    for (i, e) in entries.iter().enumerate() {
        if let Some(ahead) = entries.get(i + AHEAD) {
            let node = slots.node(ahead.node as usize);
            if node < PENDING {
                tree.prefetch(node);
            }
        }
        // The method's totals: its id is in the links loaded AHEAD / 2 entries ago
        // (a small method table stays in the cache anyway).
        if big_table {
            if let Some(near) = entries.get(i + AHEAD / 2) {
                let node = slots.node(near.node as usize);
                if node < PENDING {
                    tree.prefetch_method(node);
                }
            }
        }
        let id = e.node as usize;
        let Some(mut slot) = slots.get(id) else {
            continue;
        };
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
            slots.set(id, slot);
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
        slots.set(id, slot);
    }
    out
}
