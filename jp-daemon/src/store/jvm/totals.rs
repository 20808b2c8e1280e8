//! Per-method totals of one merged tree (calls and exclusive bytecodes over all of a
//! method's nodes), changed with every change of a node's counters, so that reading
//! them costs O(methods) and not a walk of the tree.
//!
//! Method ids are dense in practice (the agent numbers them from 0): a vector indexed
//! by id holds them, grown only while it stays within twice the tree's nodes (every
//! slot is paid for by nodes); ids beyond (a hostile sender) go to a map.

use std::collections::HashMap;

use super::chunked::{prefetch, NONE};

/// One method's totals; `first` is its first node (NONE: the method has no node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MethodCount {
    pub calls: u64,
    pub exclusive: u64,
    pub first: u32,
}

const EMPTY: MethodCount = MethodCount {
    calls: 0,
    exclusive: 0,
    first: NONE,
};

#[derive(Default)]
pub(crate) struct MethodCounts {
    /// (calls, exclusive) by mid: the part every update touches, 16 bytes.
    by_mid: Vec<[u64; 2]>,
    /// First node by mid (NONE: no node), beside `by_mid`.
    first: Vec<u32>,
    sparse: HashMap<u32, MethodCount>,
}

impl MethodCounts {
    /// Node `node` of method `mid` was created; the tree now has `nodes` nodes.
    pub fn node_created(&mut self, mid: u32, node: u32, nodes: usize) {
        let i = mid as usize;
        if i >= self.by_mid.len() && i < 2 * nodes + 1024 {
            let len = (i + 1).max(self.by_mid.len() * 5 / 4);
            let len = len.min(2 * nodes + 1024);
            // Exact: a doubling vector would hold up to twice the slots (growth by a
            // quarter above keeps the copies amortized).
            self.by_mid.reserve_exact(len - self.by_mid.len());
            self.first.reserve_exact(len - self.first.len());
            self.by_mid.resize(len, [0, 0]);
            self.first.resize(len, NONE);
            if !self.sparse.is_empty() {
                let moved: Vec<u32> = self
                    .sparse
                    .keys()
                    .copied()
                    .filter(|&m| (m as usize) < len)
                    .collect();
                for m in moved {
                    if let Some(c) = self.sparse.remove(&m) {
                        self.by_mid[m as usize] = [c.calls, c.exclusive];
                        self.first[m as usize] = c.first;
                    }
                }
            }
        }
        let first = match self.first.get_mut(i) {
            Some(f) => f,
            None => &mut self.sparse.entry(mid).or_insert(EMPTY).first,
        };
        if *first == NONE {
            *first = node;
        }
    }

    /// Adds (wrapping) to a method's totals; nothing for a method without nodes.
    #[inline]
    pub fn add(&mut self, mid: u32, calls: u64, bytecodes: u64) {
        if let Some(c) = self.by_mid.get_mut(mid as usize) {
            c[0] = c[0].wrapping_add(calls);
            c[1] = c[1].wrapping_add(bytecodes);
        } else if let Some(c) = self.sparse.get_mut(&mid) {
            c.calls = c.calls.wrapping_add(calls);
            c.exclusive = c.exclusive.wrapping_add(bytecodes);
        }
    }

    /// Too big to stay in a core's cache (worth prefetching from).
    pub fn is_big(&self) -> bool {
        self.by_mid.len() > 16_384
    }

    /// Starts loading a method's totals into the cache.
    #[inline(always)]
    pub fn prefetch(&self, mid: u32) {
        prefetch(self.by_mid.get(mid as usize));
    }

    /// (mid, totals) of every method with a node, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, MethodCount)> + '_ {
        self.by_mid
            .iter()
            .zip(&self.first)
            .enumerate()
            .map(|(m, (c, &first))| {
                let [calls, exclusive] = *c;
                (
                    m as u32,
                    MethodCount {
                        calls,
                        exclusive,
                        first,
                    },
                )
            })
            .chain(self.sparse.iter().map(|(&m, &c)| (m, c)))
            .filter(|(_, c)| c.first != NONE)
    }

    pub fn memory_bytes(&self) -> usize {
        self.by_mid.capacity() * 16
            + self.first.capacity() * 4
            + self.sparse.capacity() * (std::mem::size_of::<MethodCount>() + 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_ids() {
        let mut m = MethodCounts::default();
        m.node_created(3, 1, 2);
        m.node_created(1 << 30, 2, 3);
        m.add(3, 1, 10);
        m.add(1 << 30, 2, 20);
        m.add(7, 5, 5);
        let mut all: Vec<_> = m.iter().collect();
        all.sort_by_key(|x| x.0);
        assert_eq!(
            all,
            vec![
                (
                    3,
                    MethodCount {
                        calls: 1,
                        exclusive: 10,
                        first: 1
                    }
                ),
                (
                    1 << 30,
                    MethodCount {
                        calls: 2,
                        exclusive: 20,
                        first: 2
                    }
                ),
            ]
        );
        // A sparse id that the vector grows over moves into it.
        m.node_created(5000, 9, 4000);
        m.node_created(4000, 10, 4000);
        assert_eq!(m.iter().count(), 4);
        m.add(5000, 1, 1);
        assert!(m.iter().any(|x| x
            == (
                5000,
                MethodCount {
                    calls: 1,
                    exclusive: 1,
                    first: 9
                }
            )));
        assert!(m.by_mid.len() >= 5001 && m.sparse.len() == 1);
    }
}
