//! jp-mct: a merged Method Call Tree with resolved method names, its file formats, and
//! the difference of two trees (a time window's tree).
//!
//! Built from the flat arrays the Java runtime hands over at VM death (pre-order: a node's
//! parent comes before it), independent of JNI so that `jpd` can reuse it.

mod delta;
mod folded;
mod html;
mod json;
pub mod otlp;
pub mod pprof;
mod read;
mod tree;

pub use delta::{mct_delta, mct_delta_mapped};
pub use folded::{write_folded, write_folded_folding};
pub use html::{
    idle_note, typed_graphs, write_flame_html, write_flame_html_types, write_html, FlameTree,
    FrameCounts, SampleType, DEFAULT_MIN_SHARE, OFFCPU_FRAME,
};
pub use json::{write_json, write_json_cpu};
pub use pprof::{
    folded_frame_name, write_pprof, write_pprof_folding, MctCpu, OffcpuTime, PprofOptions,
    TimeRange,
};
pub use read::{read_json, read_json_cpu};
pub use tree::write_tree;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Frames a stack keeps in the formats that list every context's whole stack (pprof,
/// folded): deeper frames fold into one marked frame ([`folded_frame_name`]). Real
/// programs' trees are hundreds of frames deep; without a cap a hostile or runaway
/// recursion makes these formats grow with the square of its depth.
pub const MAX_STACK_FRAMES: usize = 2048;

/// One calling context. Node 0 of an [`Mct`] is the root (no method, zero counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MctNode {
    /// `pkg.Class.name(DESCRIPTOR)`; empty for the root. Shared by all contexts of a method.
    pub method: Arc<str>,
    /// Source file with its package directory (`pkg/Foo.java`) when the class names one.
    pub file: Option<Arc<str>>,
    pub calls: u64,
    pub bytecodes: u64,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

/// A method call tree; `bba` names the basic-block algorithm that produced the counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mct {
    pub bba: String,
    pub nodes: Vec<MctNode>,
}

/// Method name and source file of a method id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MethodInfo {
    pub name: Arc<str>,
    pub file: Option<Arc<str>>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct MctError(pub String);

impl fmt::Display for MctError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad method call tree: {}", self.0)
    }
}

impl std::error::Error for MctError {}

impl Mct {
    /// An empty tree (a root only).
    pub fn new(bba: &str) -> Mct {
        Mct {
            bba: bba.to_string(),
            nodes: vec![MctNode {
                method: Arc::from(""),
                file: None,
                calls: 0,
                bytecodes: 0,
                parent: None,
                children: Vec::new(),
            }],
        }
    }

    /// Adds a child of `parent` (the root if `parent` is not a node) and returns its index.
    pub fn add(&mut self, parent: usize, info: MethodInfo, calls: u64, bytecodes: u64) -> usize {
        let i = self.nodes.len();
        // Keeps the invariant the writers rely on: a parent comes before its children.
        let parent = if parent < i { parent } else { 0 };
        self.nodes.push(MctNode {
            method: info.name,
            file: info.file,
            calls,
            bytecodes,
            parent: Some(parent),
            children: Vec::new(),
        });
        if let Some(p) = self.nodes.get_mut(parent) {
            p.children.push(i);
        }
        i
    }

    /// Builds a tree from parallel arrays: node 0 is the root (parent -1), every other node's
    /// parent is an earlier node. Counters are reinterpreted as unsigned 64-bit values.
    pub fn from_flat(
        bba: &str,
        parent: &[i32],
        mid: &[i32],
        calls: &[i64],
        bytecodes: &[i64],
        mut resolve: impl FnMut(i32) -> MethodInfo,
    ) -> Result<Mct, MctError> {
        let n = parent.len();
        if mid.len() != n || calls.len() != n || bytecodes.len() != n {
            return Err(MctError("arrays of different lengths".into()));
        }
        let mut t = Mct::new(bba);
        if n == 0 {
            return Ok(t);
        }
        // Resolve each method once; its contexts share the name.
        let mut names: HashMap<i32, MethodInfo> = HashMap::new();
        if parent[0] != -1 {
            return Err(MctError("node 0 is not a root".into()));
        }
        for i in 1..n {
            let p = usize::try_from(parent[i])
                .ok()
                .filter(|&p| p < i)
                .ok_or_else(|| {
                    MctError(format!("node {i} has parent {} (not earlier)", parent[i]))
                })?;
            // Node indices of `t` equal input indices: node 0 is the root in both.
            let info = names
                .entry(mid[i])
                .or_insert_with(|| resolve(mid[i]))
                .clone();
            t.add(p, info, calls[i] as u64, bytecodes[i] as u64);
        }
        Ok(t)
    }

    /// Children of `i` in the deterministic output order: by method name, then by counts.
    pub fn sorted_children(&self, i: usize) -> Vec<usize> {
        self.sorted_children_ranked(i, &self.name_ranks())
    }

    /// Per node, the rank of its method name among all names (for sorting with integer
    /// compares: names of big trees share long prefixes).
    pub fn name_ranks(&self) -> Vec<u32> {
        let mut names: Vec<&str> = self.nodes.iter().map(|n| &*n.method).collect();
        names.sort_unstable();
        names.dedup();
        let index: HashMap<&str, u32> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, i as u32))
            .collect();
        self.nodes
            .iter()
            .map(|n| index.get(&*n.method).copied().unwrap_or(0))
            .collect()
    }

    /// [`Mct::sorted_children`] with ranks from [`Mct::name_ranks`].
    pub fn sorted_children_ranked(&self, i: usize, ranks: &[u32]) -> Vec<usize> {
        let mut c = self
            .nodes
            .get(i)
            .map(|n| n.children.clone())
            .unwrap_or_default();
        c.sort_by(|&a, &b| {
            let (x, y) = (&self.nodes[a], &self.nodes[b]);
            ranks[a]
                .cmp(&ranks[b])
                .then(x.calls.cmp(&y.calls))
                .then(x.bytecodes.cmp(&y.bytecodes))
                .then(a.cmp(&b))
        });
        c
    }

    /// Inclusive bytecodes per node (the node's plus all its descendants').
    pub fn inclusive_bytecodes(&self) -> Vec<u64> {
        let mut inc: Vec<u64> = self.nodes.iter().map(|n| n.bytecodes).collect();
        // Children always have larger indices than their parents (see from_flat / add).
        for i in (1..self.nodes.len()).rev() {
            if let Some(p) = self.nodes[i].parent {
                inc[p] = inc[p].wrapping_add(inc[i]);
            }
        }
        inc
    }

    /// Pre-order walk in output order, calling `f(node, depth)` (the root is not visited).
    /// Iterative: trees of deep recursions are deep.
    pub fn walk(&self, mut f: impl FnMut(usize, usize)) {
        let ranks = self.name_ranks();
        let mut stack: Vec<(usize, usize)> = self
            .sorted_children_ranked(0, &ranks)
            .into_iter()
            .rev()
            .map(|c| (c, 0))
            .collect();
        while let Some((i, d)) = stack.pop() {
            f(i, d);
            for c in self.sorted_children_ranked(i, &ranks).into_iter().rev() {
                stack.push((c, d + 1));
            }
        }
    }
}

/// `pkg.Class.name(I[Ljava/lang/String;)V` → `pkg.Class.name(int,java.lang.String[])`:
/// a readable frame name without `;` (the folded format's separator).
pub fn java_signature(method: &str) -> String {
    let Some(open) = method.find('(') else {
        return method.replace(';', ",");
    };
    let Some(close) = method[open..].find(')').map(|c| c + open) else {
        return method.replace(';', ",");
    };
    let mut params = Vec::new();
    let desc = &method[open + 1..close];
    let mut rest = desc;
    while !rest.is_empty() {
        let dims = rest.len() - rest.trim_start_matches('[').len();
        rest = &rest[dims..];
        let (base, used) = match rest.as_bytes().first() {
            Some(b'L') => match rest.find(';') {
                Some(e) => (rest[1..e].replace('/', "."), e + 1),
                None => (rest.to_string(), rest.len()),
            },
            Some(c) => {
                let name = match c {
                    b'B' => "byte",
                    b'C' => "char",
                    b'D' => "double",
                    b'F' => "float",
                    b'I' => "int",
                    b'J' => "long",
                    b'S' => "short",
                    b'Z' => "boolean",
                    _ => "?",
                };
                (name.to_string(), 1)
            }
            None => (String::new(), 0),
        };
        params.push(format!("{base}{}", "[]".repeat(dims)));
        rest = &rest[used.min(rest.len())..];
    }
    format!("{}({})", &method[..open], params.join(","))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The paper's example tree (javac 17 counts), children added in a scrambled order.
    pub fn paper_tree() -> Mct {
        let mut t = Mct::new("precise");
        let info = |n: &str| MethodInfo {
            name: n.into(),
            file: Some("Paper.java".into()),
        };
        let main = t.add(0, info("Paper.main([Ljava/lang/String;)V"), 1, 5);
        let f = t.add(main, info("Paper.f()V"), 1, 106);
        t.add(main, info("Paper.<init>()V"), 1, 3);
        let g = t.add(f, info("Paper.g(I)V"), 10, 445);
        t.add(f, info("Paper.h()V"), 10, 10);
        t.add(g, info("Paper.h()V"), 55, 55);
        t
    }

    /// A chain `depth` contexts deep (a runaway recursion through 1000 methods), each
    /// context 1 call and 1 bytecode.
    pub fn chain(depth: usize) -> Mct {
        let mut t = Mct::new("precise");
        let mut parent = 0;
        for d in 0..depth {
            let info = MethodInfo {
                name: format!("m{}", d % 1000).into(),
                file: None,
            };
            parent = t.add(parent, info, 1, 1);
        }
        t
    }

    #[test]
    fn from_flat_rejects_bad_parents() {
        let r = |_| MethodInfo::default();
        assert!(Mct::from_flat("default", &[-1, 1], &[0, 1], &[0, 0], &[0, 0], r).is_err());
        assert!(Mct::from_flat("default", &[0], &[0], &[0], &[0], r).is_err());
        assert!(Mct::from_flat("default", &[-1, 0], &[0], &[0, 0], &[0, 0], r).is_err());
        let t = Mct::from_flat(
            "default",
            &[-1, 0, 1],
            &[-1, 7, 8],
            &[0, 1, 2],
            &[0, 3, -1],
            |m| MethodInfo {
                name: format!("m{m}").into(),
                file: None,
            },
        )
        .unwrap();
        assert_eq!(&*t.nodes[2].method, "m8");
        assert_eq!(t.nodes[2].bytecodes, u64::MAX);
        assert_eq!(t.nodes[1].children, vec![2]);
    }

    #[test]
    fn inclusive() {
        let t = paper_tree();
        let inc = t.inclusive_bytecodes();
        assert_eq!(inc[1], 5 + 3 + 106 + 10 + 445 + 55);
        assert_eq!(inc[4], 500);
    }

    #[test]
    fn signatures() {
        assert_eq!(
            java_signature("a.B$C.m([[ILjava/lang/String;J)V"),
            "a.B$C.m(int[][],java.lang.String,long)"
        );
        assert_eq!(java_signature("A.<init>()V"), "A.<init>()");
        assert_eq!(
            java_signature("A.m([Ljava/lang/Object;Z)V"),
            "A.m(java.lang.Object[],boolean)"
        );
    }
}
