//! Read-side views of one JVM: the merged tree as a `jp_mct::Mct`, per-method totals,
//! and the live threads' own trees.

use std::collections::HashMap;

use jp_mct::{Mct, MethodInfo};

use super::state::Jvm;
use super::Name;

/// One method's totals over all its calling contexts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodTotals {
    pub mid: u32,
    pub name: Name,
    pub file: Option<Name>,
    pub calls: u64,
    /// Bytecodes executed in the method itself.
    pub exclusive_bytecodes: u64,
    /// Bytecodes of the method and everything it called, each stack counted once
    /// (a recursive call inside the method adds nothing).
    pub inclusive_bytecodes: u64,
}

/// One live thread's tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadTree {
    /// Java thread id (`Thread.getId()`).
    pub thread_id: u64,
    pub name: String,
    /// RESYNC seen and nothing lost since.
    pub synced: bool,
    pub mct: Mct,
}

/// Resolves each method once; its contexts share the strings.
struct Names<'a> {
    jvm: &'a Jvm,
    cache: HashMap<u32, MethodInfo>,
}

impl Names<'_> {
    fn get(&mut self, mid: u32) -> MethodInfo {
        let jvm = self.jvm;
        self.cache
            .entry(mid)
            .or_insert_with(|| jvm.methods.info(mid))
            .clone()
    }
}

pub(crate) fn mct(jvm: &Jvm) -> Mct {
    let mut t = Mct::new(jvm.bba_name());
    t.nodes.reserve(jvm.tree.len());
    let mut names = Names {
        jvm,
        cache: HashMap::new(),
    };
    // Merged-tree indexes equal Mct indexes: both have the root at 0 and parents first.
    for ([parent, mid], [calls, bytecodes]) in jvm.tree.iter().skip(1) {
        t.add(parent as usize, names.get(mid), calls, bytecodes);
    }
    t
}

pub(crate) fn top_methods(jvm: &Jvm) -> Vec<MethodTotals> {
    let n = jvm.tree.len();
    let links: Vec<[u32; 2]> = jvm.tree.iter().map(|(l, _)| l).collect();
    let counts: Vec<[u64; 2]> = jvm.tree.iter().map(|(_, c)| c).collect();
    // Inclusive bytecodes per node: children have larger indexes than their parents.
    let mut inclusive: Vec<u64> = counts.iter().map(|c| c[1]).collect();
    for i in (1..n).rev() {
        let p = links[i][0] as usize;
        if p < i {
            inclusive[p] = inclusive[p].wrapping_add(inclusive[i]);
        }
    }
    // Dense method numbers, and each node's nearest ancestor of the same method: a node
    // adds its inclusive count only if it has none (the outermost frame of a recursion).
    let mut dense: HashMap<u32, usize> = HashMap::new();
    let mut methods: Vec<MethodTotals> = Vec::new();
    let mut method_of = vec![usize::MAX; n];
    for i in 1..n {
        let mid = links[i][1];
        let d = *dense.entry(mid).or_insert_with(|| {
            let info = jvm.methods.info(mid);
            methods.push(MethodTotals {
                mid,
                name: info.name,
                file: info.file,
                calls: 0,
                exclusive_bytecodes: 0,
                inclusive_bytecodes: 0,
            });
            methods.len() - 1
        });
        method_of[i] = d;
        let m = &mut methods[d];
        m.calls = m.calls.wrapping_add(counts[i][0]);
        m.exclusive_bytecodes = m.exclusive_bytecodes.wrapping_add(counts[i][1]);
    }
    // Depth-first over child lists (built as CSR), counting open frames per method.
    let mut first = vec![0u32; n + 1];
    for l in links.iter().skip(1) {
        first[l[0] as usize + 1] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut fill = first.clone();
    let mut child = vec![0u32; n.saturating_sub(1)];
    for (i, l) in links.iter().enumerate().skip(1) {
        let p = l[0] as usize;
        child[fill[p] as usize] = i as u32;
        fill[p] += 1;
    }
    let mut open = vec![0u32; methods.len()];
    // (node, entering?)
    let mut stack: Vec<(u32, bool)> = vec![(0, true)];
    while let Some((i, enter)) = stack.pop() {
        let i = i as usize;
        let m = method_of[i];
        if !enter {
            if m != usize::MAX {
                open[m] -= 1;
            }
            continue;
        }
        if m != usize::MAX {
            if open[m] == 0 {
                let t = &mut methods[m];
                t.inclusive_bytecodes = t.inclusive_bytecodes.wrapping_add(inclusive[i]);
            }
            open[m] += 1;
        }
        stack.push((i as u32, false));
        for &c in &child[first[i] as usize..first[i + 1] as usize] {
            stack.push((c, true));
        }
    }
    methods.sort_by(|a, b| {
        b.exclusive_bytecodes
            .cmp(&a.exclusive_bytecodes)
            .then_with(|| a.name.cmp(&b.name))
    });
    methods
}

pub(crate) fn thread_trees(jvm: &Jvm) -> Vec<ThreadTree> {
    let mut ids: Vec<u64> = jvm.threads.keys().copied().collect();
    ids.sort_unstable();
    let mut names = Names {
        jvm,
        cache: HashMap::new(),
    };
    let mut out = Vec::with_capacity(ids.len());
    for tid in ids {
        let Some(th) = jvm.threads.get(&tid) else {
            continue;
        };
        // Merged-tree order puts parents first; a thread's nodes are a subtree of it.
        let mut nodes: Vec<(u32, u64, u64)> = th.nodes().collect();
        nodes.sort_unstable_by_key(|n| n.0);
        nodes.dedup_by(|b, a| {
            // Two ids of one thread on the same merged node (a hostile sender): sum them.
            if a.0 == b.0 {
                a.1 = a.1.wrapping_add(b.1);
                a.2 = a.2.wrapping_add(b.2);
                true
            } else {
                false
            }
        });
        let mut t = Mct::new(jvm.bba_name());
        let mut at: HashMap<u32, usize> = HashMap::with_capacity(nodes.len() + 1);
        at.insert(0, 0);
        for (node, calls, bytecodes) in nodes {
            let Some([parent, mid]) = jvm.tree.links(node) else {
                continue;
            };
            let p = at.get(&parent).copied().unwrap_or(0);
            let i = t.add(p, names.get(mid), calls, bytecodes);
            at.insert(node, i);
        }
        out.push(ThreadTree {
            thread_id: tid,
            name: th.name.clone(),
            synced: th.synced,
            mct: t,
        });
    }
    out
}
