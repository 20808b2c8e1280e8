//! Read-side views of one JVM: the merged tree as a `jp_mct::Mct`, per-method totals,
//! and the live threads' own trees.

use std::collections::HashMap;

use jp_mct::{Mct, MctNode, MethodInfo};

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

/// Per node, a dense number of its method (`u32::MAX` for the root), and per dense
/// number the method id. Method ids are dense in practice (the agent numbers them from
/// 0); a plain vector indexes them unless a hostile sender spread them out.
fn dense_methods(jvm: &Jvm) -> (Vec<u32>, Vec<u32>) {
    let n = jvm.tree.len();
    let mut of = vec![u32::MAX; n];
    let mut mids = Vec::new();
    let max_mid = jvm
        .tree
        .iter()
        .skip(1)
        .map(|(l, _)| l[1])
        .max()
        .unwrap_or(0) as usize;
    if max_mid <= 4 * n + 1024 {
        let mut index = vec![u32::MAX; max_mid + 1];
        for (i, ([_, mid], _)) in jvm.tree.iter().enumerate().skip(1) {
            let d = &mut index[mid as usize];
            if *d == u32::MAX {
                *d = mids.len() as u32;
                mids.push(mid);
            }
            of[i] = *d;
        }
    } else {
        let mut index: HashMap<u32, u32> = HashMap::new();
        for (i, ([_, mid], _)) in jvm.tree.iter().enumerate().skip(1) {
            of[i] = *index.entry(mid).or_insert_with(|| {
                mids.push(mid);
                mids.len() as u32 - 1
            });
        }
    }
    (of, mids)
}

pub(crate) fn mct(jvm: &Jvm) -> Mct {
    let n = jvm.tree.len();
    let (method_of, mids) = dense_methods(jvm);
    let infos: Vec<MethodInfo> = mids.iter().map(|&m| jvm.methods.info(m)).collect();
    let mut kids = vec![0u32; n];
    for ([parent, _], _) in jvm.tree.iter().skip(1) {
        kids[parent as usize] += 1;
    }
    let mut t = Mct::new(jvm.bba_name());
    t.nodes.reserve_exact(n.saturating_sub(1));
    t.nodes[0].children.reserve_exact(kids[0] as usize);
    // Merged-tree indexes equal Mct indexes: both have the root at 0 and parents first.
    for (i, ([parent, _], [calls, bytecodes])) in jvm.tree.iter().enumerate().skip(1) {
        let info = infos
            .get(method_of[i] as usize)
            .cloned()
            .unwrap_or_default();
        let p = parent as usize;
        t.nodes.push(MctNode {
            method: info.name,
            file: info.file,
            calls,
            bytecodes,
            parent: Some(p),
            children: Vec::with_capacity(kids[i] as usize),
        });
        if let Some(pn) = t.nodes.get_mut(p) {
            pn.children.push(i);
        }
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
    let (method_of, mids) = dense_methods(jvm);
    let mut methods: Vec<MethodTotals> = mids
        .iter()
        .map(|&mid| {
            let info = jvm.methods.info(mid);
            MethodTotals {
                mid,
                name: info.name,
                file: info.file,
                calls: 0,
                exclusive_bytecodes: 0,
                inclusive_bytecodes: 0,
            }
        })
        .collect();
    for i in 1..n {
        let m = &mut methods[method_of[i] as usize];
        m.calls = m.calls.wrapping_add(counts[i][0]);
        m.exclusive_bytecodes = m.exclusive_bytecodes.wrapping_add(counts[i][1]);
    }
    // Depth-first over child lists (built as CSR), counting open frames per method: a
    // node adds its inclusive count only if no ancestor runs the same method (the
    // outermost frame of a recursion).
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
        let m = method_of[i] as usize;
        let has_method = m < methods.len();
        if !enter {
            if has_method {
                open[m] -= 1;
            }
            continue;
        }
        if has_method {
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
    // The agent's snapshot of ended threads is a stream but not a thread.
    let mut ids: Vec<u64> = jvm
        .threads
        .keys()
        .copied()
        .filter(|&t| t != jp_common::wire::STREAM_ENDED)
        .collect();
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
