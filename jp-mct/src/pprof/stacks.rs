//! The samples' stacks, each built from its parent's: a pre-order walk keeps the
//! current path's location ids, and a context's stack is that path (leaf first).
//!
//! pprof has no shared stacks: every sample lists its whole stack, so a tree costs the
//! sum of its contexts' depths — a chain 100 000 deep would be 5·10⁹ location ids. A
//! stack therefore keeps at most [`MAX_STACK_FRAMES`] frames. The contexts below that
//! depth fold into one sample per context at the cap (their "anchor"): the anchor's
//! stack under one marked frame, `[jp: N deeper frames folded]` (N: the deepest context's
//! frames past the cap), carrying the sum of their counts. A chain then costs O(cap²)
//! location ids, whatever its depth.

use super::{value, MctCpu, Sample, MAX_STACK_FRAMES};
use crate::Mct;
use std::collections::HashMap;

/// Name of the frame that stands for the frames folded under a stack at the cap.
pub fn folded_frame_name(frames: usize) -> String {
    format!("[jp: {frames} deeper frames folded]")
}

/// Frames that are no method of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OtherFrame {
    /// The marked frame of folded contexts.
    Folded,
    /// A kernel function (in CPU profiles).
    Kernel,
}

/// The other frames' locations (one per distinct frame), their ids following the
/// methods'.
pub struct OtherFrames {
    base: u64,
    id_of: HashMap<(OtherFrame, String), u64>,
    frames: Vec<(OtherFrame, String)>,
}

impl OtherFrames {
    /// Ids from `base + 1` on.
    pub fn after(base: u64) -> OtherFrames {
        OtherFrames {
            base,
            id_of: HashMap::new(),
            frames: Vec::new(),
        }
    }

    /// The location id of a frame, new ids in order of first use.
    pub fn id(&mut self, kind: OtherFrame, name: &str) -> u64 {
        if let Some(&id) = self.id_of.get(&(kind, name.to_string())) {
            return id;
        }
        let id = self.base + self.frames.len() as u64 + 1;
        self.frames.push((kind, name.to_string()));
        self.id_of.insert((kind, name.to_string()), id);
        id
    }

    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        (1..=self.frames.len() as u64).map(|i| self.base + i)
    }

    /// (id, kind, name) of each frame, in id order.
    pub fn frames(&self) -> impl Iterator<Item = (u64, OtherFrame, &str)> + '_ {
        self.frames
            .iter()
            .zip(self.ids())
            .map(|((kind, name), id)| (id, *kind, name.as_str()))
    }
}

/// The contexts folded under one anchor.
struct FoldedGroup {
    /// The anchor's stack, leaf first ([`MAX_STACK_FRAMES`] long).
    anchor_stack: Vec<u64>,
    /// Sums of the folded contexts' values (calls, bytecodes, and user CPU if any).
    sums: Vec<u64>,
    /// Frames past the cap of the deepest folded context.
    deepest: usize,
}

/// One sample per context of the tree, in walk order, and the folded ones.
pub struct ContextStacks {
    pub samples: Vec<Sample>,
    groups: Vec<FoldedGroup>,
    /// The group of each folded context.
    group_of: HashMap<usize, usize>,
    /// Contexts deeper than [`MAX_STACK_FRAMES`].
    pub folded_contexts: u64,
}

impl ContextStacks {
    /// Walks `t` once; `of_node` is each node's location id.
    pub fn walk(t: &Mct, of_node: &[u64], cpu: Option<&MctCpu>) -> ContextStacks {
        let mut c = ContextStacks {
            samples: Vec::new(),
            groups: Vec::new(),
            group_of: HashMap::new(),
            folded_contexts: 0,
        };
        let mut anchors: HashMap<usize, usize> = HashMap::new();
        // Location ids of the path to the current context, root first.
        let mut path: Vec<u64> = Vec::new();
        let mut anchor = 0;
        t.walk(|i, depth| {
            let n = &t.nodes[i];
            let mut values = vec![n.calls, n.bytecodes];
            if let Some(c) = cpu {
                values.push(c.user_ns.get(i).copied().unwrap_or(0));
            }
            if depth < MAX_STACK_FRAMES {
                path.truncate(depth);
                path.push(of_node[i]);
                if depth + 1 == MAX_STACK_FRAMES {
                    anchor = i;
                }
                c.samples.push(Sample {
                    location_id: path.iter().rev().copied().collect(),
                    value: values.into_iter().map(value).collect(),
                });
                return;
            }
            // The path stops at the anchor: it is the anchor's stack.
            let g = *anchors.entry(anchor).or_insert_with(|| {
                c.groups.push(FoldedGroup {
                    anchor_stack: path.iter().rev().copied().collect(),
                    sums: vec![0; values.len()],
                    deepest: 0,
                });
                c.groups.len() - 1
            });
            let group = &mut c.groups[g];
            for (sum, v) in group.sums.iter_mut().zip(values) {
                *sum = sum.saturating_add(v);
            }
            group.deepest = group.deepest.max(depth + 1 - MAX_STACK_FRAMES);
            c.folded_contexts += 1;
            c.group_of.insert(i, g);
        });
        c
    }

    /// One sample per anchor: its stack under the marked frame, the folded sums.
    pub fn folded_samples(&self, others: &mut OtherFrames) -> Vec<Sample> {
        (0..self.groups.len())
            .map(|g| Sample {
                location_id: self.folded_stack(g, others),
                value: self.groups[g].sums.iter().map(|&v| value(v)).collect(),
            })
            .collect()
    }

    /// The group a folded context went into (`None`: not folded).
    pub fn group_of(&self, node: usize) -> Option<usize> {
        self.group_of.get(&node).copied()
    }

    /// The marked frame over the anchor's stack.
    pub fn folded_stack(&self, group: usize, others: &mut OtherFrames) -> Vec<u64> {
        let g = &self.groups[group];
        let marker = others.id(OtherFrame::Folded, &folded_frame_name(g.deepest));
        let mut stack = Vec::with_capacity(g.anchor_stack.len() + 1);
        stack.push(marker);
        stack.extend_from_slice(&g.anchor_stack);
        stack
    }

    /// The stack of a context that is not folded (at most [`MAX_STACK_FRAMES`] frames:
    /// the walk up its parents is as short).
    pub fn stack_of(&self, t: &Mct, of_node: &[u64], node: usize) -> Vec<u64> {
        let mut stack = Vec::new();
        let mut at = Some(node);
        while let Some(j) = at.filter(|&j| j != 0) {
            if stack.len() == MAX_STACK_FRAMES {
                break;
            }
            stack.push(of_node[j]);
            at = t.nodes[j].parent;
        }
        stack
    }
}
