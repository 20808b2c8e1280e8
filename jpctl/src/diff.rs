//! `jpctl diff BASE NEW`: compares two profiles read from files, without jpd.
//!
//! JVM profiles (jp-mct/1 JSON) are compared exactly: per calling context (the path of
//! methods from a thread's root) and per method, calls and bytecodes before and after. Two
//! runs of a deterministic program give the same counts, so any difference is a change of
//! the code or of its input; a CI can gate on it (`--fail-above`). Kernel profiles
//! (`jpctl kernel --json`) are samples, so they are compared by share.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::{bail, Context};
use jp_mct::{FlameTree, FrameCounts, Mct};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::kernel_flame::{self, KernelFunction};

/// What the gate checks and what the report leaves out.
#[derive(Clone, Debug, Default)]
pub struct DiffOptions {
    /// Fail when the whole tree's bytecodes, or a method's inclusive bytecodes, grew by more
    /// than this percentage (kernel: a function's share grew by more percentage points).
    pub fail_above: Option<f64>,
    /// Gate only methods (kernel: functions) whose name matches.
    pub method: Option<Regex>,
    /// Contexts and methods under this many inclusive bytecodes on both sides are ignored.
    pub min_bytecodes: u64,
    /// Fail when NEW has a calling context (kernel: a function) that BASE has not.
    pub fail_on_new: bool,
    /// Leave out subtrees whose root method matches (on both sides).
    pub ignore: Option<Regex>,
    /// Rows per table in the text report (0: all).
    pub limit: usize,
}

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

/// `[base, new]` pairs, as the JSON report shows them.
type Pair = [u64; 2];

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

#[derive(Serialize, Debug)]
pub struct Gate {
    pub passed: bool,
    pub causes: Vec<String>,
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

fn change(p: Pair) -> i128 {
    i128::from(p[1]) - i128::from(p[0])
}

fn growth_percent(p: Pair) -> Option<f64> {
    (p[0] > 0).then(|| (p[1] as f64 - p[0] as f64) / p[0] as f64 * 100.0)
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

fn signed(d: i128) -> String {
    if d > 0 {
        format!("+{d}")
    } else {
        d.to_string()
    }
}

fn ratio(p: Pair) -> String {
    if p[0] == 0 {
        "new".into()
    } else {
        format!("{:.4}", p[1] as f64 / p[0] as f64)
    }
}

pub fn jvm_text(d: &JvmDiff, o: &DiffOptions) -> String {
    let mut s = String::new();
    let t = &d.total;
    let _ = writeln!(
        s,
        "jp diff (bba={}): calls {} -> {} ({}), bytecodes {} -> {} ({}{})",
        d.bba,
        t.calls[0],
        t.calls[1],
        signed(change(t.calls)),
        t.bytecodes[0],
        t.bytecodes[1],
        signed(change(t.bytecodes)),
        growth_percent(t.bytecodes).map_or(String::new(), |g| format!(", {g:+.3}%"))
    );
    let take = |n: usize| if o.limit == 0 { n } else { n.min(o.limit) };
    let _ = writeln!(
        s,
        "\nmethods changed: {} ({} unchanged), by change of inclusive bytecodes",
        d.methods.len(),
        d.unchanged.methods
    );
    if !d.methods.is_empty() {
        let _ = writeln!(
            s,
            "  {:>14} {:>14} {:>12} {:>8} {:>21} {:>25}  method",
            "inclusive", "(new)", "change", "ratio", "calls", "exclusive bytecodes"
        );
    }
    for m in &d.methods[..take(d.methods.len())] {
        let _ = writeln!(
            s,
            "  {:>14} {:>14} {:>12} {:>8} {:>21} {:>25}  {}",
            m.inclusive[0],
            m.inclusive[1],
            signed(change(m.inclusive)),
            ratio(m.inclusive),
            format!("{} -> {}", m.calls[0], m.calls[1]),
            format!("{} -> {}", m.bytecodes[0], m.bytecodes[1]),
            m.method
        );
    }
    let added = d.contexts.iter().filter(|c| c.status == "added").count();
    let removed = d.contexts.iter().filter(|c| c.status == "removed").count();
    let _ = writeln!(
        s,
        "\ncontexts changed: {} ({added} added, {removed} removed; {} unchanged)",
        d.contexts.len(),
        d.unchanged.contexts
    );
    for c in &d.contexts[..take(d.contexts.len())] {
        let _ = writeln!(
            s,
            "  {:<8} inclusive {} -> {} ({}), calls {} -> {}, exclusive {} -> {}\n           {}",
            c.status,
            c.inclusive[0],
            c.inclusive[1],
            signed(change(c.inclusive)),
            c.calls[0],
            c.calls[1],
            c.bytecodes[0],
            c.bytecodes[1],
            c.path.join(" > ")
        );
    }
    let shown =
        take(d.methods.len()) < d.methods.len() || take(d.contexts.len()) < d.contexts.len();
    if shown {
        let _ = writeln!(
            s,
            "  (first {} rows of each; --limit 0 shows all, --json has all)",
            o.limit
        );
    }
    gate_text(&mut s, &d.gate, o);
    s
}

fn gate_text(s: &mut String, g: &Gate, o: &DiffOptions) {
    if o.fail_above.is_none() && !o.fail_on_new {
        return;
    }
    if g.passed {
        let _ = writeln!(s, "\ngate: PASS");
    } else {
        let _ = writeln!(s, "\ngate: FAIL");
        for c in &g.causes {
            let _ = writeln!(s, "FAIL: {c}");
        }
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

// ---- kernel profiles ----

#[derive(Deserialize, Debug)]
struct KernelFunctionIn {
    name: String,
    module: Option<String>,
    samples: u64,
}

#[derive(Deserialize, Debug)]
struct KernelProfileIn {
    functions: Vec<KernelFunctionIn>,
}

#[derive(Serialize, Debug)]
pub struct FunctionDiff {
    pub function: String,
    pub module: Option<String>,
    pub samples: Pair,
    /// Percent of the profile's function samples.
    pub share: [f64; 2],
}

#[derive(Serialize, Debug)]
pub struct KernelDiff {
    pub functions: Vec<FunctionDiff>,
    pub total: KernelTotal,
    pub gate: Gate,
}

#[derive(Serialize, Debug)]
pub struct KernelTotal {
    pub samples: Pair,
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

pub fn diff_kernel(base: &[KernelFunction], new: &[KernelFunction], o: &DiffOptions) -> KernelDiff {
    let mut by_key: HashMap<(Option<String>, String), Pair> = HashMap::new();
    for (s, side) in [base, new].into_iter().enumerate() {
        for f in side {
            if o.ignore.as_ref().is_some_and(|re| re.is_match(&f.name)) {
                continue;
            }
            by_key
                .entry((f.module.clone(), f.name.clone()))
                .or_default()[s] += f.samples;
        }
    }
    let totals: Pair = [
        by_key.values().map(|p| p[0]).sum(),
        by_key.values().map(|p| p[1]).sum(),
    ];
    let mut functions: Vec<FunctionDiff> = by_key
        .into_iter()
        .map(|((module, function), samples)| FunctionDiff {
            function,
            module,
            samples,
            share: [share(samples[0], totals[0]), share(samples[1], totals[1])],
        })
        .collect();
    let delta = |f: &FunctionDiff| (f.share[1] - f.share[0]).abs();
    functions.sort_by(|a, b| {
        delta(b)
            .total_cmp(&delta(a))
            .then_with(|| a.function.cmp(&b.function))
    });
    let mut causes = Vec::new();
    let scoped = |name: &str| o.method.as_ref().is_none_or(|re| re.is_match(name));
    for f in functions.iter().filter(|f| scoped(&f.function)) {
        let grew = f.share[1] - f.share[0];
        if let Some(limit) = o.fail_above.filter(|&l| grew > l) {
            causes.push(format!(
                "{}: share grew by {grew:.3} percentage points ({:.3}% -> {:.3}%), more than {limit}",
                f.function, f.share[0], f.share[1]
            ));
        }
        if o.fail_on_new && f.samples[0] == 0 && f.samples[1] > 0 {
            causes.push(format!(
                "new function {} ({} samples)",
                f.function, f.samples[1]
            ));
        }
    }
    KernelDiff {
        functions,
        total: KernelTotal { samples: totals },
        gate: Gate {
            passed: causes.is_empty(),
            causes,
        },
    }
}

pub fn kernel_text(d: &KernelDiff, o: &DiffOptions) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "jp kernel diff by share: {} -> {} samples in functions",
        d.total.samples[0], d.total.samples[1]
    );
    let _ = writeln!(
        s,
        "  {:>9} {:>9} {:>9}  {:>17}  function",
        "share", "(new)", "change", "samples"
    );
    let take = if o.limit == 0 {
        d.functions.len()
    } else {
        d.functions.len().min(o.limit)
    };
    for f in &d.functions[..take] {
        let name = match &f.module {
            Some(m) => format!("{} [{m}]", f.function),
            None => f.function.clone(),
        };
        let _ = writeln!(
            s,
            "  {:>8.3}% {:>8.3}% {:>+9.3}  {:>17}  {name}",
            f.share[0],
            f.share[1],
            f.share[1] - f.share[0],
            format!("{} -> {}", f.samples[0], f.samples[1])
        );
    }
    gate_text(&mut s, &d.gate, o);
    s
}

pub fn kernel_flame_diff(
    base: &[KernelFunction],
    new: &[KernelFunction],
    o: &DiffOptions,
) -> FlameTree {
    let keep = |fs: &[KernelFunction]| -> Vec<KernelFunction> {
        fs.iter()
            .filter(|f| !o.ignore.as_ref().is_some_and(|re| re.is_match(&f.name)))
            .cloned()
            .collect()
    };
    kernel_flame::diff_tree(&keep(base), &keep(new))
}

// ---- reading the files ----

/// A profile file, by what it holds.
pub enum Profile {
    Jvm(Mct),
    Kernel(Vec<KernelFunction>),
}

/// Reads BASE or NEW: jp-mct/1 JSON, or a `jpctl kernel --json` snapshot. `label` names the
/// side in messages.
pub fn read_profile(path: &std::path::Path, label: &str) -> anyhow::Result<Profile> {
    let text =
        std::fs::read(path).with_context(|| format!("cannot read {label} {}", path.display()))?;
    let head = &text[..text.len().min(512)];
    let is_jvm = head.windows(b"jp-mct/1".len()).any(|w| w == b"jp-mct/1");
    if !is_jvm {
        if let Ok(k) = serde_json::from_slice::<KernelProfileIn>(&text) {
            if k.functions.is_empty() {
                bail!(
                    "{label} {} is an empty kernel profile (no functions sampled)",
                    path.display()
                );
            }
            return Ok(Profile::Kernel(
                k.functions
                    .into_iter()
                    .map(|f| KernelFunction {
                        name: f.name,
                        module: f.module,
                        samples: f.samples,
                    })
                    .collect(),
            ));
        }
    }
    let t = jp_mct::read_json(&text).map_err(|e| {
        anyhow::anyhow!(
            "{label} {}: {e} (jpctl diff reads jp-mct/1 JSON, as the agent's out= or `jpctl jvm export --format json` write, or `jpctl kernel --json`)",
            path.display()
        )
    })?;
    if t.nodes.len() < 2 {
        bail!(
            "{label} {} is an empty profile (no calling contexts: did the program run any profiled code? see the agent's include=/exclude=)",
            path.display()
        );
    }
    Ok(Profile::Jvm(t))
}

/// Refuses trees of different basic-block algorithms: their bytecode counts measure
/// different things, so every context would "change".
pub fn check_same_bba(base: &Mct, new: &Mct) -> anyhow::Result<()> {
    if base.bba != new.bba {
        bail!(
            "BASE was counted with bba={} and NEW with bba={}: their bytecode counts are not comparable; profile both runs with the same bba= agent option",
            base.bba,
            new.bba
        );
    }
    Ok(())
}
