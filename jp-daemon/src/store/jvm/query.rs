//! Read-side views of one JVM: the merged tree as a `jp_mct::Mct`, per-method totals,
//! and the live threads' own trees.
//!
//! Each view reads a [`TreeView`]: either the live [`Jvm`] (the caller holds the store's
//! lock for the whole walk — the reference implementations, kept as the tests' oracle
//! and as the benchmark's "before"), or a [`JvmSnapshot`] taken under the lock in
//! O(chunks + methods) and walked after the lock is released.
//!
//! Why snapshots of shared chunks (and not a copy, or a walk in slices): a copy of a
//! 1M-node tree is 24 MB under the lock for every query; slices that release the lock
//! would need the writer to keep old values for the reader to see one generation.
//! Shared chunks cost nothing to take; the JVM's next record copies the chunks that a
//! snapshot still holds (a memcpy, once per snapshot, and only if the query is still
//! running), and a record is applied whole under the lock, so a snapshot never sees
//! half a record.

use std::collections::HashMap;

use jp_mct::{Mct, MctCpu, MctNode, MethodInfo};

use super::cpu::Samples;
use super::methods::{info_in, NameMap};
use super::nodes::{is_outer, unflag, FrozenTree};
use super::one_jvm::Jvm;
use super::slots::FrozenSlots;
use super::totals::MethodCount;
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
    /// CPU (ns, from the kernel sampler) in the method's own contexts, user and kernel
    /// mode together, and with everything it called (each sample counted once per
    /// method); 0 when the sampler is not joined to the JVM.
    pub cpu_ns: u64,
    pub inclusive_cpu_ns: u64,
    /// Time off CPU (ns, from the scheduler program) in the method's own contexts.
    pub offcpu_ns: u64,
}

/// One method's calls and exclusive bytecodes ([`MethodTotals`] without the inclusive
/// count, which needs a walk of the tree).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodCalls {
    pub mid: u32,
    pub name: Name,
    pub file: Option<Name>,
    pub calls: u64,
    pub exclusive_bytecodes: u64,
    /// CPU (ns) in the method's own contexts, as [`MethodTotals::cpu_ns`].
    pub cpu_ns: u64,
    /// Time off CPU (ns) in the method's own contexts, as [`MethodTotals::offcpu_ns`].
    pub offcpu_ns: u64,
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

/// What the views read: nodes in index order (parents first), links, method names.
pub(crate) trait TreeView {
    /// Nodes, the root included.
    fn len(&self) -> usize;
    /// (parent, mid) and (calls, bytecodes) of every node, in index order.
    fn nodes(&self) -> impl Iterator<Item = ([u32; 2], [u64; 2])> + '_;
    fn links(&self, node: u32) -> Option<[u32; 2]>;
    fn info(&self, mid: u32) -> MethodInfo;
    fn bba(&self) -> &'static str;
}

impl TreeView for Jvm {
    fn len(&self) -> usize {
        self.tree.len()
    }
    fn nodes(&self) -> impl Iterator<Item = ([u32; 2], [u64; 2])> + '_ {
        self.tree.iter()
    }
    fn links(&self, node: u32) -> Option<[u32; 2]> {
        self.tree.links(node)
    }
    fn info(&self, mid: u32) -> MethodInfo {
        self.methods.info(mid)
    }
    fn bba(&self) -> &'static str {
        self.bba_name()
    }
}

/// A thread's part of a snapshot.
struct ThreadSnapshot {
    tid: u64,
    name: String,
    synced: bool,
    slots: FrozenSlots,
}

/// One JVM's tree, method names and per-method totals as they were at one moment (one
/// generation: never half a record), readable without the store's lock. Taken by
/// [`super::JvmStore::snapshot`].
pub struct JvmSnapshot {
    bba: &'static str,
    tree: FrozenTree,
    names: NameMap,
    /// (mid, totals) of every method with a node.
    methods: Vec<(u32, MethodCount)>,
    /// Live threads, by id (empty unless asked for).
    threads: Vec<ThreadSnapshot>,
    /// CPU per context when the kernel sampler is joined to this JVM.
    cpu: Option<CpuSnapshot>,
}

/// A JVM's CPU per context at one moment (see [`super::cpu`]).
#[derive(Clone, Debug, Default)]
pub struct CpuSnapshot {
    pub period_ns: u64,
    pub by_node: HashMap<u32, Samples>,
    pub kernel_under: HashMap<(u32, u64), u64>,
    /// (node, reason) → time off CPU (ns), see [`super::offcpu`].
    pub offcpu: HashMap<(u32, u64), u64>,
    /// Off-CPU time (ns) of idle contexts taken out of `offcpu` (see [`super::idle`]).
    pub offcpu_idle_hidden_ns: u64,
}

impl CpuSnapshot {
    /// What was counted between `before` and `self` (a later snapshot of the same JVM).
    pub fn since(&self, before: &CpuSnapshot) -> CpuSnapshot {
        let by_node = self
            .by_node
            .iter()
            .map(|(&n, s)| {
                let b = before.by_node.get(&n).copied().unwrap_or_default();
                let d = Samples {
                    user: s.user.saturating_sub(b.user),
                    kernel: s.kernel.saturating_sub(b.kernel),
                };
                (n, d)
            })
            .filter(|(_, d)| d.total() > 0)
            .collect();
        let kernel_under = self
            .kernel_under
            .iter()
            .map(|(&k, &v)| {
                (
                    k,
                    v.saturating_sub(before.kernel_under.get(&k).copied().unwrap_or(0)),
                )
            })
            .filter(|&(_, v)| v > 0)
            .collect();
        let offcpu = self
            .offcpu
            .iter()
            .map(|(&k, &v)| {
                (
                    k,
                    v.saturating_sub(before.offcpu.get(&k).copied().unwrap_or(0)),
                )
            })
            .filter(|&(_, v)| v > 0)
            .collect();
        CpuSnapshot {
            period_ns: self.period_ns,
            by_node,
            kernel_under,
            offcpu,
            offcpu_idle_hidden_ns: self
                .offcpu_idle_hidden_ns
                .saturating_sub(before.offcpu_idle_hidden_ns),
        }
    }

    /// Each context's own CPU (ns, user and kernel mode) by node index, for a tree of
    /// `nodes` nodes (the merged tree's indexes are its `Mct`'s).
    pub fn self_ns(&self, nodes: usize) -> Vec<u64> {
        let mut out = vec![0u64; nodes];
        for (&n, s) in &self.by_node {
            if let Some(x) = out.get_mut(n as usize) {
                *x = s.total().saturating_mul(self.period_ns);
            }
        }
        out
    }

    /// Each context's own time off CPU (ns, every reason) by node index, for a tree of
    /// `nodes` nodes; empty when no time off CPU was counted.
    pub fn offcpu_self_ns(&self, nodes: usize) -> Vec<u64> {
        if self.offcpu.is_empty() {
            return Vec::new();
        }
        let mut out = vec![0u64; nodes];
        for (&(n, _), &ns) in &self.offcpu {
            if let Some(x) = out.get_mut(n as usize) {
                *x = x.saturating_add(ns);
            }
        }
        out
    }

    /// As jp-mct's CPU of `tree` (this JVM's), kernel addresses named by `symbols`.
    pub fn mct_cpu(
        &self,
        tree: &Mct,
        symbols: Option<&crate::store::kernel::symbols::Symbols>,
    ) -> MctCpu {
        let name = |addr: u64| crate::store::kernel::symbols::function_name(symbols, addr);
        self.mct_cpu_named(tree.nodes.len(), &name)
    }

    /// As [`CpuSnapshot::mct_cpu`] for a tree of `nodes` nodes; `function_of` names a
    /// kernel address.
    pub fn mct_cpu_named(&self, nodes: usize, function_of: &dyn Fn(u64) -> String) -> MctCpu {
        let ns = |samples: u64| samples.saturating_mul(self.period_ns);
        let mut user_ns = vec![0u64; nodes];
        for (&n, s) in &self.by_node {
            if let Some(u) = user_ns.get_mut(n as usize) {
                *u = ns(s.user);
            }
        }
        // One entry per (context, function): buckets of one function add up.
        let mut kernel: HashMap<(u32, String), u64> = HashMap::new();
        for (&(node, kip), &n) in &self.kernel_under {
            *kernel.entry((node, function_of(kip))).or_default() += ns(n);
        }
        let mut kernel: Vec<(usize, std::sync::Arc<str>, u64)> = kernel
            .into_iter()
            .map(|((node, f), v)| (node as usize, std::sync::Arc::from(f), v))
            .collect();
        kernel.sort();
        let mut offcpu: Vec<jp_mct::OffcpuTime> = self
            .offcpu
            .iter()
            .filter(|(&(node, _), _)| (node as usize) < nodes)
            .map(|(&(node, reason), &ns)| {
                let function = super::offcpu::reason_function(reason, function_of);
                jp_mct::OffcpuTime {
                    node: node as usize,
                    kind: super::offcpu::reason_kind(reason, &function).into(),
                    function: function.into(),
                    ns,
                }
            })
            .collect();
        offcpu.sort();
        MctCpu {
            user_ns,
            kernel,
            offcpu,
            offcpu_idle_hidden_ns: self.offcpu_idle_hidden_ns,
        }
    }
}

impl TreeView for JvmSnapshot {
    fn len(&self) -> usize {
        self.tree.links.len()
    }
    fn nodes(&self) -> impl Iterator<Item = ([u32; 2], [u64; 2])> + '_ {
        self.tree
            .links
            .iter()
            .map(|&l| unflag(l))
            .zip(self.tree.counts.iter().copied())
    }
    fn links(&self, node: u32) -> Option<[u32; 2]> {
        self.tree.links.get(node as usize).map(|&l| unflag(l))
    }
    fn info(&self, mid: u32) -> MethodInfo {
        info_in(&self.names, mid)
    }
    fn bba(&self) -> &'static str {
        self.bba
    }
}

impl JvmSnapshot {
    /// Under the store's lock: O(chunks + methods (+ threads' chunks)).
    pub(crate) fn take(jvm: &mut Jvm, with_threads: bool) -> JvmSnapshot {
        let mut threads: Vec<ThreadSnapshot> = if with_threads {
            jvm.threads
                .iter_mut()
                .filter(|(&t, _)| t != jp_common::wire::STREAM_ENDED)
                .map(|(&tid, th)| ThreadSnapshot {
                    tid,
                    name: th.name.clone(),
                    synced: th.synced,
                    slots: th.freeze(),
                })
                .collect()
        } else {
            Vec::new()
        };
        threads.sort_unstable_by_key(|t| t.tid);
        jvm.threads_frozen |= with_threads;
        JvmSnapshot {
            bba: jvm.bba_name(),
            tree: jvm.tree.freeze(),
            names: jvm.methods.snapshot(),
            methods: jvm.tree.methods().iter().collect(),
            threads,
            cpu: (jvm.cpu.period_ns > 0 || !jvm.offcpu.by_node.is_empty()).then(|| CpuSnapshot {
                period_ns: jvm.cpu.period_ns,
                by_node: jvm.cpu.by_node.clone(),
                kernel_under: jvm.cpu.kernel_under.clone(),
                offcpu: jvm.offcpu.by_node.iter().map(|(&k, p)| (k, p.ns)).collect(),
                offcpu_idle_hidden_ns: 0,
            }),
        }
    }

    /// CPU per context, if the kernel sampler is joined to this JVM.
    pub fn cpu(&self) -> Option<&CpuSnapshot> {
        self.cpu.as_ref()
    }

    pub(super) fn cpu_mut(&mut self) -> Option<&mut CpuSnapshot> {
        self.cpu.as_mut()
    }

    /// As [`super::JvmStore::mct`].
    pub fn mct(&self) -> Mct {
        mct(self)
    }

    /// As [`super::JvmStore::top_methods`]: calls and exclusive bytecodes from the
    /// totals kept on ingest, inclusive bytecodes from two passes over the snapshot's
    /// arrays (subtree sums, then each outermost node's sum on its method).
    pub fn top_methods(&self) -> Vec<MethodTotals> {
        let inclusive = self.inclusive();
        let cpu = self.cpu_by_method();
        let offcpu = self.offcpu_by_method();
        let mut out: Vec<(u32, MethodTotals)> = self
            .methods
            .iter()
            .map(|&(mid, c)| {
                let info = self.info(mid);
                let inclusive = inclusive(mid);
                (
                    c.first,
                    MethodTotals {
                        mid,
                        name: info.name,
                        file: info.file,
                        calls: c.calls,
                        exclusive_bytecodes: c.exclusive,
                        inclusive_bytecodes: inclusive,
                        cpu_ns: cpu.get(&mid).map_or(0, |c| c[0]),
                        inclusive_cpu_ns: cpu.get(&mid).map_or(0, |c| c[1]),
                        offcpu_ns: offcpu.get(&mid).copied().unwrap_or(0),
                    },
                )
            })
            .collect();
        sort_totals(&mut out, |t| (t.exclusive_bytecodes, &t.name));
        out.into_iter().map(|(_, t)| t).collect()
    }

    /// mid → time off CPU (ns) in the method's own contexts.
    fn offcpu_by_method(&self) -> HashMap<u32, u64> {
        let mut out: HashMap<u32, u64> = HashMap::new();
        for (&(node, _), &ns) in self.cpu.iter().flat_map(|c| c.offcpu.iter()) {
            match self.links(node) {
                Some([_, mid]) if node != 0 => *out.entry(mid).or_default() += ns,
                _ => {}
            }
        }
        out
    }

    /// mid → [self, inclusive] CPU (ns). Only nodes with samples are walked: each adds
    /// its samples to its own method and, once, to every other method on its path.
    fn cpu_by_method(&self) -> HashMap<u32, [u64; 2]> {
        let mut out: HashMap<u32, [u64; 2]> = HashMap::new();
        let Some(cpu) = &self.cpu else {
            return out;
        };
        let mut seen: Vec<u32> = Vec::new();
        for (&node, s) in &cpu.by_node {
            let ns = s.total().saturating_mul(cpu.period_ns);
            let Some([_, mid]) = self.links(node) else {
                continue;
            };
            if node == 0 || ns == 0 {
                continue;
            }
            out.entry(mid).or_default()[0] += ns;
            seen.clear();
            let mut at = node;
            while at != 0 {
                let Some([parent, m]) = self.links(at) else {
                    break;
                };
                if !seen.contains(&m) {
                    seen.push(m);
                    out.entry(m).or_default()[1] += ns;
                }
                if parent >= at {
                    break; // parents come first: a cycle is corrupt data, not a loop
                }
                at = parent;
            }
        }
        out
    }

    /// Inclusive bytecodes by method id. The nodes' outermost flags, set when each node
    /// was created, stand for the reference walk's "no ancestor runs the same method";
    /// a tree too deep for them is walked whole.
    fn inclusive(&self) -> Box<dyn Fn(u32) -> u64> {
        if self.tree.deep {
            let (mids, walked) = walk_totals(self);
            let by_mid: HashMap<u32, u64> = mids
                .into_iter()
                .zip(walked)
                .map(|(m, w)| (m, w[2]))
                .collect();
            return Box::new(move |mid| by_mid.get(&mid).copied().unwrap_or(0));
        }
        let links = &self.tree.links;
        let n = links.len();
        let mut sum: Vec<u64> = self.tree.counts.iter().map(|c| c[1]).collect();
        let parents: Vec<u32> = links.iter().map(|l| l[0]).collect();
        // Children have larger indexes than their parents.
        for i in (1..n).rev() {
            let p = parents[i] as usize;
            if p < i {
                sum[p] = sum[p].wrapping_add(sum[i]);
            }
        }
        drop(parents);
        let outer = links
            .iter()
            .zip(&sum)
            .filter(|(l, _)| is_outer(**l))
            .map(|(&l, &s)| (unflag(l)[1], s));
        let max_mid = self.methods.iter().map(|m| m.0).max().unwrap_or(0) as usize;
        if max_mid <= 4 * n + 1024 {
            let mut by_mid = vec![0u64; max_mid + 1];
            for (mid, s) in outer {
                if let Some(x) = by_mid.get_mut(mid as usize) {
                    *x = x.wrapping_add(s);
                }
            }
            Box::new(move |mid| by_mid.get(mid as usize).copied().unwrap_or(0))
        } else {
            let mut by_mid: HashMap<u32, u64> = HashMap::new();
            for (mid, s) in outer {
                let x = by_mid.entry(mid).or_insert(0);
                *x = x.wrapping_add(s);
            }
            Box::new(move |mid| by_mid.get(&mid).copied().unwrap_or(0))
        }
    }

    /// As [`super::JvmStore::thread_trees`] (needs a snapshot taken with threads).
    pub fn thread_trees(&self) -> Vec<ThreadTree> {
        let mut names = Names {
            view: self,
            cache: HashMap::new(),
        };
        self.threads
            .iter()
            .map(|t| {
                thread_tree(
                    self,
                    &mut names,
                    t.tid,
                    t.name.clone(),
                    t.synced,
                    t.slots.nodes().collect(),
                )
            })
            .collect()
    }
}

/// Sorts `(first node, x)` pairs by exclusive bytecodes descending, then name, then
/// first node: the order of the reference walk (a stable sort of methods in the order
/// of their first node).
fn sort_totals<T>(v: &mut [(u32, T)], key: impl Fn(&T) -> (u64, &Name)) {
    v.sort_unstable_by(|(fa, a), (fb, b)| {
        let (ea, na) = key(a);
        let (eb, nb) = key(b);
        eb.cmp(&ea)
            .then_with(|| na.cmp(nb))
            .then_with(|| fa.cmp(fb))
    });
}

/// Calls and exclusive bytecodes per method from the totals kept on ingest, and CPU
/// from the contexts that have samples: O(methods + sampled contexts), in the order of
/// [`top_methods`].
pub(crate) fn method_calls(jvm: &Jvm) -> Vec<MethodCalls> {
    let cpu = self_cpu_by_method(jvm);
    let offcpu = jvm.offcpu.self_by_method(&|node| jvm.tree.links(node));
    let mut out: Vec<(u32, MethodCalls)> = jvm
        .tree
        .methods()
        .iter()
        .map(|(mid, c)| {
            let info = jvm.methods.info(mid);
            (
                c.first,
                MethodCalls {
                    mid,
                    name: info.name,
                    file: info.file,
                    calls: c.calls,
                    exclusive_bytecodes: c.exclusive,
                    cpu_ns: cpu.get(&mid).copied().unwrap_or(0),
                    offcpu_ns: offcpu.get(&mid).copied().unwrap_or(0),
                },
            )
        })
        .collect();
    sort_totals(&mut out, |t| (t.exclusive_bytecodes, &t.name));
    out.into_iter().map(|(_, t)| t).collect()
}

/// mid → CPU (ns) in the method's own contexts. Only sampled nodes are read (no walk
/// up their paths: self CPU needs none), so Watch can ask for it as often as for the
/// calls.
fn self_cpu_by_method(jvm: &Jvm) -> HashMap<u32, u64> {
    let mut out: HashMap<u32, u64> = HashMap::new();
    for (&node, s) in &jvm.cpu.by_node {
        let ns = s.total().saturating_mul(jvm.cpu.period_ns);
        match jvm.tree.links(node) {
            Some([_, mid]) if node != 0 && ns > 0 => *out.entry(mid).or_default() += ns,
            _ => {}
        }
    }
    out
}

/// Resolves each method once; its contexts share the strings.
struct Names<'a, V> {
    view: &'a V,
    cache: HashMap<u32, MethodInfo>,
}

impl<V: TreeView> Names<'_, V> {
    fn get(&mut self, mid: u32) -> MethodInfo {
        let view = self.view;
        self.cache
            .entry(mid)
            .or_insert_with(|| view.info(mid))
            .clone()
    }
}

/// Per node, a dense number of its method (`u32::MAX` for the root), and per dense
/// number the method id. Method ids are dense in practice (the agent numbers them from
/// 0); a plain vector indexes them unless a hostile sender spread them out.
fn dense_methods<V: TreeView>(v: &V) -> (Vec<u32>, Vec<u32>) {
    let n = v.len();
    let mut of = vec![u32::MAX; n];
    let mut mids = Vec::new();
    let max_mid = v.nodes().skip(1).map(|(l, _)| l[1]).max().unwrap_or(0) as usize;
    if max_mid <= 4 * n + 1024 {
        let mut index = vec![u32::MAX; max_mid + 1];
        for (i, ([_, mid], _)) in v.nodes().enumerate().skip(1) {
            let d = &mut index[mid as usize];
            if *d == u32::MAX {
                *d = mids.len() as u32;
                mids.push(mid);
            }
            of[i] = *d;
        }
    } else {
        let mut index: HashMap<u32, u32> = HashMap::new();
        for (i, ([_, mid], _)) in v.nodes().enumerate().skip(1) {
            of[i] = *index.entry(mid).or_insert_with(|| {
                mids.push(mid);
                mids.len() as u32 - 1
            });
        }
    }
    (of, mids)
}

pub(crate) fn mct<V: TreeView>(v: &V) -> Mct {
    let n = v.len();
    let (method_of, mids) = dense_methods(v);
    let infos: Vec<MethodInfo> = mids.iter().map(|&m| v.info(m)).collect();
    let mut kids = vec![0u32; n];
    for ([parent, _], _) in v.nodes().skip(1) {
        kids[parent as usize] += 1;
    }
    let mut t = Mct::new(v.bba());
    t.nodes.reserve_exact(n.saturating_sub(1));
    t.nodes[0].children.reserve_exact(kids[0] as usize);
    // Merged-tree indexes equal Mct indexes: both have the root at 0 and parents first.
    for (i, ([parent, _], [calls, bytecodes])) in v.nodes().enumerate().skip(1) {
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

/// A walk of the whole tree: the methods in the order of their first node, and per
/// method (calls, exclusive bytecodes, inclusive bytecodes).
fn walk_totals<V: TreeView>(v: &V) -> (Vec<u32>, Vec<[u64; 3]>) {
    let n = v.len();
    let links: Vec<[u32; 2]> = v.nodes().map(|(l, _)| l).collect();
    let counts: Vec<[u64; 2]> = v.nodes().map(|(_, c)| c).collect();
    // Inclusive bytecodes per node: children have larger indexes than their parents.
    let mut inclusive: Vec<u64> = counts.iter().map(|c| c[1]).collect();
    for i in (1..n).rev() {
        let p = links[i][0] as usize;
        if p < i {
            inclusive[p] = inclusive[p].wrapping_add(inclusive[i]);
        }
    }
    let (method_of, mids) = dense_methods(v);
    let mut methods = vec![[0u64; 3]; mids.len()];
    for i in 1..n {
        let m = &mut methods[method_of[i] as usize];
        m[0] = m[0].wrapping_add(counts[i][0]);
        m[1] = m[1].wrapping_add(counts[i][1]);
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
                t[2] = t[2].wrapping_add(inclusive[i]);
            }
            open[m] += 1;
        }
        stack.push((i as u32, false));
        for &c in &child[first[i] as usize..first[i + 1] as usize] {
            stack.push((c, true));
        }
    }
    (mids, methods)
}

/// The reference: every total from a walk of the tree.
pub(crate) fn top_methods<V: TreeView>(v: &V) -> Vec<MethodTotals> {
    let (mids, walked) = walk_totals(v);
    let mut methods: Vec<MethodTotals> = mids
        .iter()
        .zip(walked)
        .map(|(&mid, [calls, exclusive, inclusive])| {
            let info = v.info(mid);
            MethodTotals {
                mid,
                name: info.name,
                file: info.file,
                calls,
                exclusive_bytecodes: exclusive,
                inclusive_bytecodes: inclusive,
                cpu_ns: 0,
                inclusive_cpu_ns: 0,
                offcpu_ns: 0,
            }
        })
        .collect();
    methods.sort_by(|a, b| {
        b.exclusive_bytecodes
            .cmp(&a.exclusive_bytecodes)
            .then_with(|| a.name.cmp(&b.name))
    });
    methods
}

fn thread_tree<V: TreeView>(
    v: &V,
    names: &mut Names<'_, V>,
    tid: u64,
    name: String,
    synced: bool,
    mut nodes: Vec<(u32, u64, u64)>,
) -> ThreadTree {
    // Merged-tree order puts parents first; a thread's nodes are a subtree of it.
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
    let mut t = Mct::new(v.bba());
    let mut at: HashMap<u32, usize> = HashMap::with_capacity(nodes.len() + 1);
    at.insert(0, 0);
    for (node, calls, bytecodes) in nodes {
        let Some([parent, mid]) = v.links(node) else {
            continue;
        };
        let p = at.get(&parent).copied().unwrap_or(0);
        let i = t.add(p, names.get(mid), calls, bytecodes);
        at.insert(node, i);
    }
    ThreadTree {
        thread_id: tid,
        name,
        synced,
        mct: t,
    }
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
        view: jvm,
        cache: HashMap::new(),
    };
    let mut out = Vec::with_capacity(ids.len());
    for tid in ids {
        let Some(th) = jvm.threads.get(&tid) else {
            continue;
        };
        out.push(thread_tree(
            jvm,
            &mut names,
            tid,
            th.name.clone(),
            th.synced,
            th.nodes().collect(),
        ));
    }
    out
}
