//! A JVM's Method Call Tree over a time window, as the pprof exporters write it
//! (`jp_mct::write_pprof`, sample types calls and bytecodes): the difference of two
//! snapshots of the merged tree, computed by the stores' read side
//! ([`crate::store::read`]), which owns what a window means.

pub use crate::store::read::{mct_delta, mct_delta_mapped};

#[cfg(test)]
use jp_mct::{Mct, MethodInfo};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;

    pub(crate) fn info(name: &str) -> MethodInfo {
        MethodInfo {
            name: Arc::from(name),
            file: None,
        }
    }

    /// (path, calls, bytecodes) of every node but the root, sorted.
    pub(crate) fn rows(t: &Mct) -> Vec<(String, u64, u64)> {
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
}
