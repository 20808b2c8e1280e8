//! Two JVM profiles (jp-mct/1 trees) merged by calling context and compared exactly.

use std::collections::HashMap;
use std::sync::Arc;

use jp_mct::{FlameTree, FrameCounts, Mct};
use regex::Regex;
use serde::Serialize;

use super::{change, growth_percent, DiffOptions, Gate, Pair};

/// One side's counts of a context or method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    calls: u64,
    bytecodes: u64,
    inclusive: u64,
}

/// A calling context present in either profile.
struct Context2 {
    method: Arc<str>,
    parent: usize,
    children: Vec<usize>,
    side: [Counts; 2],
}

/// The two trees merged by path of method names. Node 0 is the root.
struct Merged {
    nodes: Vec<Context2>,
}

impl Merged {
    fn build(base: &Mct, new: &Mct, ignore: Option<&Regex>) -> Merged {
        let mut m = Merged {
            nodes: vec![Context2 {
                method: Arc::from(""),
                parent: 0,
                children: Vec::new(),
                side: [Counts::default(); 2],
            }],
        };
        let mut index: HashMap<(usize, Arc<str>), usize> = HashMap::new();
        for (s, t) in [base, new].into_iter().enumerate() {
            // Per node of `t`: its merged node, or None inside an ignored subtree.
            let mut to_merged: Vec<Option<usize>> = vec![None; t.nodes.len()];
            to_merged[0] = Some(0);
            for i in 1..t.nodes.len() {
                let n = &t.nodes[i];
                let Some(parent) = n.parent.and_then(|p| to_merged.get(p).copied().flatten())
                else {
                    continue;
                };
                if ignore.is_some_and(|re| re.is_match(&n.method)) {
                    continue;
                }
                let key = (parent, n.method.clone());
                let k = match index.get(&key) {
                    Some(&k) => k,
                    None => {
                        let k = m.nodes.len();
                        m.nodes.push(Context2 {
                            method: n.method.clone(),
                            parent,
                            children: Vec::new(),
                            side: [Counts::default(); 2],
                        });
                        m.nodes[parent].children.push(k);
                        index.insert(key, k);
                        k
                    }
                };
                let c = &mut m.nodes[k].side[s];
                c.calls = c.calls.saturating_add(n.calls);
                c.bytecodes = c.bytecodes.saturating_add(n.bytecodes);
                to_merged[i] = Some(k);
            }
        }
        // Parents come before their children.
        for i in (1..m.nodes.len()).rev() {
            for s in 0..2 {
                let c = &mut m.nodes[i].side[s];
                c.inclusive = c.inclusive.saturating_add(c.bytecodes);
                let inc = c.inclusive;
                let p = m.nodes[i].parent;
                m.nodes[p].side[s].inclusive = m.nodes[p].side[s].inclusive.saturating_add(inc);
            }
        }
        for s in 0..2 {
            let own = m.nodes[0].side[s].bytecodes;
            m.nodes[0].side[s].inclusive += own;
        }
        m
    }

    fn path(&self, mut i: usize) -> Vec<String> {
        let mut p = Vec::new();
        while i != 0 {
            p.push(self.nodes[i].method.to_string());
            i = self.nodes[i].parent;
        }
        p.reverse();
        p
    }

    /// Per method: calls and bytecodes summed over its contexts, inclusive bytecodes over
    /// its outermost contexts only (a recursion's inner calls are inside the outer ones).
    fn methods(&self) -> Vec<(Arc<str>, [Counts; 2])> {
        let mut by_method: HashMap<Arc<str>, [Counts; 2]> = HashMap::new();
        let mut on_path: HashMap<Arc<str>, u32> = HashMap::new();
        // (node, entering?): iterative, recursions make deep trees.
        let mut stack: Vec<(usize, bool)> = self.nodes[0]
            .children
            .iter()
            .rev()
            .map(|&c| (c, true))
            .collect();
        while let Some((i, enter)) = stack.pop() {
            let n = &self.nodes[i];
            let depth = on_path.entry(n.method.clone()).or_insert(0);
            if !enter {
                *depth -= 1;
                continue;
            }
            let outermost = *depth == 0;
            *depth += 1;
            let e = by_method.entry(n.method.clone()).or_default();
            for (sum, side) in e.iter_mut().zip(&n.side) {
                sum.calls = sum.calls.saturating_add(side.calls);
                sum.bytecodes = sum.bytecodes.saturating_add(side.bytecodes);
                if outermost {
                    sum.inclusive = sum.inclusive.saturating_add(side.inclusive);
                }
            }
            stack.push((i, false));
            stack.extend(n.children.iter().rev().map(|&c| (c, true)));
        }
        by_method.into_iter().collect()
    }
}

#[derive(Serialize, Debug)]
pub struct MethodDiff {
    pub method: String,
    pub calls: Pair,
    pub bytecodes: Pair,
    pub inclusive: Pair,
}

#[derive(Serialize, Debug)]
pub struct ContextDiff {
    pub path: Vec<String>,
    /// "added" (only in NEW), "removed" (only in BASE) or "changed".
    pub status: &'static str,
    pub calls: Pair,
    pub bytecodes: Pair,
    pub inclusive: Pair,
}

#[derive(Serialize, Debug)]
pub struct Totals {
    pub calls: Pair,
    pub bytecodes: Pair,
}

#[derive(Serialize, Debug)]
pub struct Unchanged {
    pub methods: usize,
    pub contexts: usize,
}

/// `jpctl diff --json` of two JVM profiles: only what changed is listed, biggest change
/// of inclusive bytecodes first.
#[derive(Serialize, Debug)]
pub struct JvmDiff {
    pub bba: String,
    pub methods: Vec<MethodDiff>,
    pub contexts: Vec<ContextDiff>,
    pub total: Totals,
    pub unchanged: Unchanged,
    pub gate: Gate,
}

fn pair(c: &[Counts; 2], f: impl Fn(&Counts) -> u64) -> Pair {
    [f(&c[0]), f(&c[1])]
}

pub fn diff_jvm(base: &Mct, new: &Mct, o: &DiffOptions) -> JvmDiff {
    let m = Merged::build(base, new, o.ignore.as_ref());
    let tiny =
        |c: &[Counts; 2]| c[0].inclusive < o.min_bytecodes && c[1].inclusive < o.min_bytecodes;
    let mut methods = Vec::new();
    let mut unchanged_methods = 0;
    for (name, c) in m.methods() {
        if c[0] == c[1] {
            unchanged_methods += 1;
        } else if !tiny(&c) {
            methods.push(MethodDiff {
                method: name.to_string(),
                calls: pair(&c, |c| c.calls),
                bytecodes: pair(&c, |c| c.bytecodes),
                inclusive: pair(&c, |c| c.inclusive),
            });
        }
    }
    methods.sort_by(|a, b| {
        change(b.inclusive)
            .abs()
            .cmp(&change(a.inclusive).abs())
            .then_with(|| a.method.cmp(&b.method))
    });
    let mut contexts = Vec::new();
    let mut unchanged_contexts = 0;
    for (i, n) in m.nodes.iter().enumerate().skip(1) {
        if n.side[0] == n.side[1] {
            unchanged_contexts += 1;
            continue;
        }
        if tiny(&n.side) {
            continue;
        }
        let status = if n.side[0] == Counts::default() {
            "added"
        } else if n.side[1] == Counts::default() {
            "removed"
        } else {
            "changed"
        };
        contexts.push(ContextDiff {
            path: m.path(i),
            status,
            calls: pair(&n.side, |c| c.calls),
            bytecodes: pair(&n.side, |c| c.bytecodes),
            inclusive: pair(&n.side, |c| c.inclusive),
        });
    }
    contexts.sort_by(|a, b| {
        change(b.inclusive)
            .abs()
            .cmp(&change(a.inclusive).abs())
            .then_with(|| a.path.cmp(&b.path))
    });
    let sum = |s: usize, f: &dyn Fn(&Counts) -> u64| {
        m.nodes
            .iter()
            .fold(0u64, |a, n| a.saturating_add(f(&n.side[s])))
    };
    let total = Totals {
        calls: [sum(0, &|c| c.calls), sum(1, &|c| c.calls)],
        bytecodes: [sum(0, &|c| c.bytecodes), sum(1, &|c| c.bytecodes)],
    };
    let gate = jvm_gate(&total, &methods, &contexts, o);
    JvmDiff {
        bba: new.bba.clone(),
        methods,
        contexts,
        total,
        unchanged: Unchanged {
            methods: unchanged_methods,
            contexts: unchanged_contexts,
        },
        gate,
    }
}

fn jvm_gate(
    total: &Totals,
    methods: &[MethodDiff],
    contexts: &[ContextDiff],
    o: &DiffOptions,
) -> Gate {
    let mut causes = Vec::new();
    let scoped = |name: &str| o.method.as_ref().is_none_or(|re| re.is_match(name));
    if let Some(limit) = o.fail_above {
        // With --method the gate looks at those methods only, not at the whole tree.
        if o.method.is_none() {
            if let Some(g) = growth_percent(total.bytecodes).filter(|&g| g > limit) {
                causes.push(format!(
                    "total bytecodes grew by {g:.3}% ({} -> {}), more than {limit}%",
                    total.bytecodes[0], total.bytecodes[1]
                ));
            }
        }
        for m in methods.iter().filter(|m| scoped(&m.method)) {
            if let Some(g) = growth_percent(m.inclusive).filter(|&g| g > limit) {
                causes.push(format!(
                    "{}: inclusive bytecodes grew by {g:.3}% ({} -> {}), more than {limit}%",
                    m.method, m.inclusive[0], m.inclusive[1]
                ));
            }
        }
    }
    if o.fail_on_new {
        for c in contexts.iter().filter(|c| c.status == "added") {
            let leaf = c.path.last().map(String::as_str).unwrap_or("");
            if scoped(leaf) {
                causes.push(format!(
                    "new calling context {} ({} calls, {} inclusive bytecodes)",
                    c.path.join(" > "),
                    c.calls[1],
                    c.inclusive[1]
                ));
            }
        }
    }
    Gate {
        passed: causes.is_empty(),
        causes,
    }
}

/// The differential flame graph: NEW's tree with BASE's counts beside it, removed
/// contexts kept (as wide as they were) so that they can be seen.
pub fn jvm_flame(base: &Mct, new: &Mct, o: &DiffOptions, title: &str) -> FlameTree {
    let m = Merged::build(base, new, o.ignore.as_ref());
    let mut g = FlameTree::new(title, "bytecodes", true);
    let mut readable: HashMap<Arc<str>, Arc<str>> = HashMap::new();
    let mut to_flame = vec![0usize; m.nodes.len()];
    for (i, n) in m.nodes.iter().enumerate().skip(1) {
        let name = readable
            .entry(n.method.clone())
            .or_insert_with(|| Arc::from(jp_mct::java_signature(&n.method)))
            .clone();
        let counts = |c: &Counts| FrameCounts {
            calls: Some(c.calls),
            inclusive: c.inclusive,
            exclusive: c.bytecodes,
        };
        to_flame[i] = g.add(
            to_flame[n.parent],
            name,
            counts(&n.side[1]),
            counts(&n.side[0]),
        );
    }
    g.subtitle = format!(
        "bba={} · {} calling contexts in either profile · width: the larger side",
        new.bba,
        m.nodes.len() - 1
    );
    g
}
