//! The difference of two trees, context by context (a context is its path of methods
//! from the root): a JVM's Method Call Tree over a time window is its merged tree at the
//! window's end less the one at its start.

use super::{Mct, MethodInfo};
use std::collections::HashMap;

/// Children looked through one by one; a wider node gets an index by method name (a
/// node may have up to a JVM's whole method table as children: matching them one by
/// one would cost the square of that).
const SCAN_CHILDREN: usize = 16;

/// Finds a node's child by method name.
enum ChildLookup<'t> {
    Scan(&'t Mct, &'t [usize]),
    Index(HashMap<&'t str, usize>),
    None,
}

impl<'t> ChildLookup<'t> {
    /// The children of `t`'s node `node` (none if it is not a node).
    pub(crate) fn of(t: &'t Mct, node: Option<usize>) -> ChildLookup<'t> {
        let Some(children) = node.and_then(|n| t.nodes.get(n)).map(|n| &n.children[..]) else {
            return ChildLookup::None;
        };
        if children.len() <= SCAN_CHILDREN {
            return ChildLookup::Scan(t, children);
        }
        let mut index = HashMap::with_capacity(children.len());
        for &c in children {
            if let Some(n) = t.nodes.get(c) {
                // The first child of a name, as a scan finds it.
                index.entry(&*n.method).or_insert(c);
            }
        }
        ChildLookup::Index(index)
    }

    pub(crate) fn find(&self, method: &str) -> Option<usize> {
        match self {
            ChildLookup::Scan(t, children) => children
                .iter()
                .copied()
                .find(|&x| t.nodes.get(x).is_some_and(|x| &*x.method == method)),
            ChildLookup::Index(index) => index.get(method).copied(),
            ChildLookup::None => None,
        }
    }
}

/// `after - before` per calling context; contexts new in `after` keep their counts.
/// Counts never go below zero (a re-send may briefly show less than before).
pub fn mct_delta(before: &Mct, after: &Mct) -> Mct {
    mct_delta_mapped(before, after).0
}

/// [`mct_delta`], and where each node of `after` went in it (every one is there, at
/// another index: the delta is built depth first). CPU per context, which is indexed by
/// `after`'s nodes, follows with [`MctCpu::remap`](super::MctCpu::remap).
pub fn mct_delta_mapped(before: &Mct, after: &Mct) -> (Mct, Vec<Option<usize>>) {
    let mut map = vec![None; after.nodes.len()];
    if let Some(root) = map.first_mut() {
        *root = Some(0);
    }
    let mut out = Mct::new(&after.bba);
    // (node in `after`, same context in `before` if any, node in `out`)
    let mut stack: Vec<(usize, Option<usize>, usize)> = vec![(0, Some(0), 0)];
    while let Some((a, b, o)) = stack.pop() {
        let Some(node) = after.nodes.get(a) else {
            continue;
        };
        let before_children = ChildLookup::of(before, b);
        for &c in &node.children {
            let Some(cn) = after.nodes.get(c) else {
                continue;
            };
            // A context is its path of method names: a method's source file may only be
            // known later (its class's details arrive after the first counts).
            let bc = before_children.find(&cn.method);
            let (pc, pb) = bc
                .and_then(|x| before.nodes.get(x))
                .map_or((0, 0), |x| (x.calls, x.bytecodes));
            let oc = out.add(
                o,
                MethodInfo {
                    name: cn.method.clone(),
                    file: cn.file.clone(),
                },
                cn.calls.saturating_sub(pc),
                cn.bytecodes.saturating_sub(pb),
            );
            if let Some(m) = map.get_mut(c) {
                *m = Some(oc);
            }
            stack.push((c, bc, oc));
        }
    }
    (out, map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn info(name: &str) -> MethodInfo {
        MethodInfo {
            name: Arc::from(name),
            file: None,
        }
    }

    /// (path, calls, bytecodes) of every node but the root, sorted.
    fn rows(t: &Mct) -> Vec<(String, u64, u64)> {
        let mut out = Vec::new();
        for (i, n) in t.nodes.iter().enumerate().skip(1) {
            let mut path = vec![n.method.to_string()];
            let mut at = n.parent;
            while let Some(p) = at.filter(|&p| p != 0) {
                path.push(t.nodes[p].method.to_string());
                at = t.nodes[p].parent;
            }
            path.reverse();
            out.push((path.join(">"), t.nodes[i].calls, t.nodes[i].bytecodes));
        }
        out.sort();
        out
    }

    #[test]
    fn delta_is_per_context() {
        let mut before = Mct::new("precise");
        let m = before.add(0, info("M.main"), 1, 5);
        let f = before.add(m, info("M.f"), 2, 20);
        before.add(f, info("M.h"), 4, 4);
        before.add(m, info("M.h"), 1, 1);

        let mut after = Mct::new("precise");
        let m = after.add(0, info("M.main"), 1, 5);
        let h_top = after.add(m, info("M.h"), 3, 3);
        let f = after.add(m, info("M.f"), 5, 50);
        after.add(f, info("M.h"), 4, 4);
        after.add(f, info("M.g"), 7, 70);
        let _ = h_top;

        let d = mct_delta(&before, &after);
        assert_eq!(d.bba, "precise");
        assert_eq!(
            rows(&d),
            [
                ("M.main".to_string(), 0, 0),
                ("M.main>M.f".to_string(), 3, 30),
                ("M.main>M.f>M.g".to_string(), 7, 70),
                ("M.main>M.f>M.h".to_string(), 0, 0),
                ("M.main>M.h".to_string(), 2, 2),
            ]
        );
        // Against an empty tree, the delta is the tree itself.
        assert_eq!(rows(&mct_delta(&Mct::new("precise"), &after)), rows(&after));
        // Parents come before children (the writers rely on it).
        for (i, n) in d.nodes.iter().enumerate() {
            assert!(n.parent.is_none_or(|p| p < i));
        }
        // The map sends each node of `after` to its context in the delta.
        let (d, map) = mct_delta_mapped(&before, &after);
        assert_eq!(map.len(), after.nodes.len());
        for (i, m) in map.iter().enumerate() {
            let j = m.expect("every node of after is in the delta");
            assert_eq!(d.nodes[j].method, after.nodes[i].method);
            let parent = |t: &Mct, k: usize| t.nodes[k].parent.map(|p| t.nodes[p].method.clone());
            assert_eq!(parent(&d, j), parent(&after, i));
        }
    }

    #[test]
    fn wide_nodes_are_matched_by_name() {
        // More children than are scanned one by one: the lookup goes by an index.
        const WIDE: usize = 3 * SCAN_CHILDREN;
        let mut before = Mct::new("precise");
        let m = before.add(0, info("M.main"), 1, 1);
        for k in 0..WIDE {
            before.add(m, info(&format!("M.c{k}")), k as u64, 1);
        }
        let mut after = Mct::new("precise");
        let m = after.add(0, info("M.main"), 1, 1);
        for k in (0..=WIDE).rev() {
            after.add(m, info(&format!("M.c{k}")), 2 * k as u64, 3);
        }
        let mut want = vec![("M.main".to_string(), 0, 0)];
        for k in 0..=WIDE {
            let (calls, bytecodes) = if k < WIDE {
                (k as u64, 2)
            } else {
                (2 * k as u64, 3)
            };
            want.push((format!("M.main>M.c{k}"), calls, bytecodes));
        }
        want.sort();
        assert_eq!(rows(&mct_delta(&before, &after)), want);
    }
}
