//! `jpctl jvm tree`: a JVM's merged call tree as jpd cut it, as indented lines or `--json`.

use std::fmt::Write as _;

use jp_proto::v1::{JvmCut, JvmNode, JvmProfile, JvmSummary};
use serde::Serialize;

use super::summary::{cpu_split, incomplete, joined, jvm_json, jvm_name, JvmJson};
use crate::output::percent;
use crate::output::text::printable;

#[derive(Serialize, Debug, PartialEq, Clone, Copy)]
pub struct CutJson {
    pub subtrees: u32,
    pub nodes: u64,
    pub calls: u64,
    pub bytecodes: u64,
    /// CPU of the cut subtrees; absent when jpd's sampler is not joined to the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// Time off CPU and wall time of the cut subtrees; absent when jpd does not measure
    /// off-CPU time for the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offcpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ns: Option<u64>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct NodeJson<'a> {
    pub depth: u32,
    pub method: &'a str,
    pub file: Option<&'a str>,
    pub calls: u64,
    pub bytecodes: u64,
    pub inclusive_bytecodes: u64,
    pub cut: Option<CutJson>,
    /// CPU in the context itself and with everything below it; absent when jpd's
    /// sampler is not joined to the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inclusive_cpu_ns: Option<u64>,
    /// Time off CPU and wall time (CPU + off CPU) in the context itself and with
    /// everything below it; absent when jpd does not measure off-CPU time for the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offcpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inclusive_offcpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inclusive_wall_ns: Option<u64>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct JvmTreeJson<'a> {
    pub jvm: Option<JvmJson<'a>>,
    pub max_depth: u32,
    pub min_share: f64,
    pub total_nodes: u64,
    pub cut_nodes: u64,
    pub root_cut: Option<CutJson>,
    /// Pre-order; a node's parent is the closest earlier node one level up.
    pub nodes: Vec<NodeJson<'a>>,
    /// Off-CPU time of idle threads left out (absent without off-CPU time; `--all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offcpu_idle_hidden_ns: Option<u64>,
}

/// Which time columns a tree shows: CPU when jpd's sampler is joined to the JVM, off-CPU
/// and wall time when jpd measured time off CPU for it.
#[derive(Clone, Copy, Debug)]
struct Shown {
    cpu: bool,
    offcpu: bool,
}

impl Shown {
    fn of(p: &JvmProfile) -> Shown {
        // The whole tree's time off CPU: its top-level contexts' and the top-level cut.
        let offcpu = p
            .nodes
            .iter()
            .filter(|n| n.depth == 0)
            .any(|n| n.inclusive_offcpu_ns > 0)
            || p.root_cut.as_ref().is_some_and(|c| c.offcpu_ns > 0)
            || p.offcpu_idle_hidden_ns > 0;
        Shown {
            cpu: joined(p.jvm.as_ref()),
            offcpu,
        }
    }
}

fn cut_json(c: Option<&JvmCut>, shown: Shown) -> Option<CutJson> {
    c.map(|c| CutJson {
        subtrees: c.subtrees,
        nodes: c.nodes,
        calls: c.calls,
        bytecodes: c.bytecodes,
        cpu_ns: shown.cpu.then_some(c.cpu_ns),
        offcpu_ns: shown.offcpu.then_some(c.offcpu_ns),
        wall_ns: shown.offcpu.then_some(c.cpu_ns.saturating_add(c.offcpu_ns)),
    })
}

/// Method name and file of an id; `?ID` if jpd sent no such id (never expected).
fn method_of(p: &JvmProfile, id: u32) -> (&str, Option<&str>) {
    // Ids are indexes in jpd's answers; search if they are not.
    let m = p
        .methods
        .get(id as usize)
        .filter(|m| m.id == id)
        .or_else(|| p.methods.iter().find(|m| m.id == id));
    match m {
        Some(m) => (m.name.as_str(), m.file.as_deref()),
        None => ("?", None),
    }
}

pub fn jvm_tree_json(p: &JvmProfile) -> JvmTreeJson<'_> {
    let shown = Shown::of(p);
    let off = |ns: u64| shown.offcpu.then_some(ns);
    JvmTreeJson {
        jvm: p.jvm.as_ref().map(jvm_json),
        max_depth: p.max_depth,
        min_share: p.min_share,
        total_nodes: p.total_nodes,
        cut_nodes: p.cut_nodes,
        root_cut: cut_json(p.root_cut.as_ref(), shown),
        nodes: p
            .nodes
            .iter()
            .map(|n| {
                let (method, file) = method_of(p, n.method_id);
                NodeJson {
                    depth: n.depth,
                    method,
                    file,
                    calls: n.calls,
                    bytecodes: n.bytecodes,
                    inclusive_bytecodes: n.inclusive_bytecodes,
                    cut: cut_json(n.cut.as_ref(), shown),
                    cpu_ns: shown.cpu.then_some(n.cpu_ns),
                    inclusive_cpu_ns: shown.cpu.then_some(n.inclusive_cpu_ns),
                    offcpu_ns: off(n.offcpu_ns),
                    inclusive_offcpu_ns: off(n.inclusive_offcpu_ns),
                    wall_ns: off(n.cpu_ns.saturating_add(n.offcpu_ns)),
                    inclusive_wall_ns: off(n
                        .inclusive_cpu_ns
                        .saturating_add(n.inclusive_offcpu_ns)),
                }
            })
            .collect(),
        offcpu_idle_hidden_ns: shown.offcpu.then_some(p.offcpu_idle_hidden_ns),
    }
}

/// Indentation is capped (deep recursions), the depth printed beyond the cap.
const MAX_INDENT: usize = 40;

fn indent(depth: u32) -> String {
    let d = depth as usize;
    let mut s = "  ".repeat(d.min(MAX_INDENT));
    if d > MAX_INDENT {
        let _ = write!(s, "[{d}] ");
    }
    s
}

/// A time (ns) in two of the tree's columns, own and inclusive, in ms (`-`: no own
/// time, a cut line).
fn time_cells(own: Option<u64>, inclusive: u64) -> String {
    let own = own.map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e6));
    format!("{own:>10} {:>10.1} ", inclusive as f64 / 1e6)
}

/// The time columns of a line: CPU, then off CPU and wall, as `shown`.
/// `own`: (cpu, off CPU) of the context itself, `None` on a cut line.
fn time_columns(shown: Shown, own: Option<(u64, u64)>, inclusive: (u64, u64)) -> String {
    let mut s = String::new();
    if shown.cpu {
        s += &time_cells(own.map(|o| o.0), inclusive.0);
    }
    if shown.offcpu {
        let wall = |(cpu, off): (u64, u64)| cpu.saturating_add(off);
        s += &time_cells(own.map(|o| o.1), inclusive.1);
        s += &time_cells(own.map(wall), wall(inclusive));
    }
    s
}

fn cut_line(out: &mut String, c: &JvmCut, depth: u32, total: u64, shown: Shown) {
    let cpu = time_columns(shown, None, (c.cpu_ns, c.offcpu_ns));
    let _ = writeln!(
        out,
        "{cpu}{:>14} {:>15} {:>15} {:>6}  {}[cut: {} subtree{}, {} node{}]",
        c.calls,
        c.bytecodes,
        "-",
        format!("{:.1}%", percent(c.bytecodes, total)),
        indent(depth),
        c.subtrees,
        if c.subtrees == 1 { "" } else { "s" },
        c.nodes,
        if c.nodes == 1 { "" } else { "s" },
    );
}

fn node_line(out: &mut String, p: &JvmProfile, n: &JvmNode, total: u64, shown: Shown) {
    let (method, _) = method_of(p, n.method_id);
    let cpu = time_columns(
        shown,
        Some((n.cpu_ns, n.offcpu_ns)),
        (n.inclusive_cpu_ns, n.inclusive_offcpu_ns),
    );
    let _ = writeln!(
        out,
        "{cpu}{:>14} {:>15} {:>15} {:>6}  {}{}",
        n.calls,
        n.inclusive_bytecodes,
        n.bytecodes,
        format!("{:.1}%", percent(n.inclusive_bytecodes, total)),
        indent(n.depth),
        printable(method)
    );
}

/// The tree's first line: the JVM, its totals, and what was cut by which limits.
fn tree_head(p: &JvmProfile, j: &JvmSummary, total: u64) -> String {
    let mut limits = Vec::new();
    if p.max_depth > 0 {
        limits.push(format!("depth {}", p.max_depth));
    }
    if p.min_share > 0.0 {
        limits.push(format!("min share {}%", p.min_share * 100.0));
    }
    let limits = if limits.is_empty() {
        String::new()
    } else {
        format!(" ({})", limits.join(", "))
    };
    format!(
        "{} (bba {}): {} calls, {} bytecodes; {} nodes, {} shown, {} cut{limits}\n",
        jvm_name(j),
        if j.bba.is_empty() {
            "?".into()
        } else {
            printable(&j.bba)
        },
        j.calls,
        total,
        p.total_nodes,
        p.nodes.len(),
        p.cut_nodes
    )
}

/// `jpctl jvm tree`: the tree as jpd cut it, one line per calling context
/// (calls, inclusive and exclusive bytecodes, share of the JVM's bytecodes), and
/// one `[cut: …]` line with the sums of what was left out below a node. When jpd's
/// sampler is joined to the JVM, the CPU split as in `jvm top` and two CPU columns
/// first: the context's own CPU and with everything below it (cut lines: the cut's);
/// when jpd measured time off CPU for the JVM, then the same two for off-CPU and for
/// wall time (CPU + off CPU).
pub fn jvm_tree_text(p: &JvmProfile) -> String {
    let j = p.jvm.clone().unwrap_or_default();
    // The whole tree's bytecodes, from the answer itself.
    let total = p
        .nodes
        .iter()
        .filter(|n| n.depth == 0)
        .map(|n| n.inclusive_bytecodes)
        .sum::<u64>()
        + p.root_cut.as_ref().map_or(0, |c| c.bytecodes);
    let mut out = tree_head(p, &j, total);
    let note = incomplete(&j);
    if !note.is_empty() {
        let _ = writeln!(out, "{note}");
    }
    if let Some(c) = cpu_split(&j) {
        let _ = writeln!(out, "{c}");
    }
    let shown = Shown::of(p);
    let mut cpu_head = String::new();
    if shown.cpu {
        let _ = write!(cpu_head, "{:>10} {:>10} ", "cpu ms", "incl ms");
    }
    if shown.offcpu {
        let _ = write!(
            cpu_head,
            "{:>10} {:>10} {:>10} {:>10} ",
            "offcpu ms", "off incl", "wall ms", "wall incl"
        );
    }
    let _ = writeln!(
        out,
        "{cpu_head}{:>14} {:>15} {:>15} {:>6}  method",
        "calls", "inclusive", "exclusive", "share"
    );
    // A node's cut line comes after its last shown descendant: keep open nodes.
    let mut open: Vec<(u32, Option<&JvmCut>)> = Vec::new();
    let close_to = |out: &mut String, open: &mut Vec<(u32, Option<&JvmCut>)>, depth: u32| {
        while open.last().is_some_and(|(d, _)| *d >= depth) {
            if let Some((d, Some(c))) = open.pop() {
                cut_line(out, c, d + 1, total, shown);
            }
        }
    };
    for n in &p.nodes {
        close_to(&mut out, &mut open, n.depth);
        node_line(&mut out, p, n, total, shown);
        open.push((n.depth, n.cut.as_ref()));
    }
    close_to(&mut out, &mut open, 0);
    if let Some(c) = &p.root_cut {
        cut_line(&mut out, c, 0, total, shown);
    }
    if p.offcpu_idle_hidden_ns > 0 {
        let _ = writeln!(out, "{}", super::top::idle_note(p.offcpu_idle_hidden_ns));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::summary::fixtures::{joined_jvm, jvm};
    use super::*;
    use jp_proto::v1::JvmMethod;

    /// A tree cut below `a` and at the top, with CPU in the answer: jpctl shows it
    /// only when the summary says the sampler is joined (`joined_jvm`).
    fn cut_profile(summary: JvmSummary) -> JvmProfile {
        let m = |id: u32, name: &str| JvmMethod {
            id,
            name: name.into(),
            file: None,
        };
        let n = |method_id, depth, inclusive, cut: Option<JvmCut>, cpu: [u64; 2]| JvmNode {
            method_id,
            depth,
            calls: 1,
            bytecodes: 1,
            inclusive_bytecodes: inclusive,
            cut,
            cpu_ns: cpu[0],
            inclusive_cpu_ns: cpu[1],
            ..Default::default()
        };
        let c = |nodes, bytecodes, cpu_ns| JvmCut {
            subtrees: 1,
            nodes,
            calls: nodes,
            bytecodes,
            cpu_ns,
            ..Default::default()
        };
        JvmProfile {
            jvm: Some(summary),
            methods: vec![m(0, "a"), m(1, "b"), m(2, "c")],
            nodes: vec![
                n(0, 0, 90, Some(c(2, 20, 8_800_000)), [1_500_000, 12_300_000]),
                n(1, 1, 60, None, [2_000_000, 2_000_000]),
                n(2, 42, 50, None, [0, 0]),
            ],
            root_cut: Some(c(1, 10, 100_000)),
            total_nodes: 6,
            cut_nodes: 3,
            max_depth: 0,
            min_share: 0.1,
            ..Default::default()
        }
    }

    #[test]
    fn tree_cut_lines_follow_the_last_shown_descendant_and_deep_nodes_say_their_depth() {
        let p = cut_profile(jvm(1, "17"));
        let t = jvm_tree_text(&p);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "pid 1 Loop (bba precise): 10 calls, 100 bytecodes; 6 nodes, 3 shown, 3 cut (min share 10%)"
        );
        // Not joined: no CPU line or columns, whatever the nodes' CPU fields hold.
        assert_eq!(
            &lines[1..],
            [
                "         calls       inclusive       exclusive  share  method",
                "             1              90               1  90.0%  a",
                "             1              60               1  60.0%    b",
                &format!(
                    "             1              50               1  50.0%  {}[42] c",
                    "  ".repeat(40)
                ),
                "             2              20               -  20.0%    [cut: 1 subtree, 2 nodes]",
                "             1              10               -  10.0%  [cut: 1 subtree, 1 node]",
            ]
        );
    }

    #[test]
    fn a_joined_tree_shows_the_cpu_split_and_cpu_columns_first() {
        let t = jvm_tree_text(&cut_profile(joined_jvm()));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            &lines[1..],
            [
                "cpu 0.01 s: app 94.6 % (on contexts 92.3 %), gc 5.4 %",
                "    cpu ms    incl ms          calls       inclusive       exclusive  share  method",
                "       1.5       12.3              1              90               1  90.0%  a",
                "       2.0        2.0              1              60               1  60.0%    b",
                &format!(
                    "       0.0        0.0              1              50               1  50.0%  {}[42] c",
                    "  ".repeat(40)
                ),
                "         -        8.8              2              20               -  20.0%    [cut: 1 subtree, 2 nodes]",
                "         -        0.1              1              10               -  10.0%  [cut: 1 subtree, 1 node]",
            ]
        );
    }

    #[test]
    fn tree_json_has_cpu_fields_only_when_joined() {
        let plain = serde_json::to_value(jvm_tree_json(&cut_profile(jvm(1, "17")))).unwrap();
        assert_eq!(
            plain["nodes"][0],
            serde_json::json!({"depth": 0, "method": "a", "file": null, "calls": 1,
                "bytecodes": 1, "inclusive_bytecodes": 90,
                "cut": {"subtrees": 1, "nodes": 2, "calls": 2, "bytecodes": 20}})
        );
        assert_eq!(
            plain["root_cut"],
            serde_json::json!({"subtrees": 1, "nodes": 1, "calls": 1, "bytecodes": 10})
        );
        let joined = serde_json::to_value(jvm_tree_json(&cut_profile(joined_jvm()))).unwrap();
        assert_eq!(
            joined["nodes"][0],
            serde_json::json!({"depth": 0, "method": "a", "file": null, "calls": 1,
                "bytecodes": 1, "inclusive_bytecodes": 90,
                "cut": {"subtrees": 1, "nodes": 2, "calls": 2, "bytecodes": 20,
                        "cpu_ns": 8_800_000},
                "cpu_ns": 1_500_000, "inclusive_cpu_ns": 12_300_000})
        );
        // A context without samples says 0, not nothing: the JVM is joined.
        assert_eq!(
            (
                &joined["nodes"][2]["cpu_ns"],
                &joined["nodes"][2]["inclusive_cpu_ns"]
            ),
            (&serde_json::json!(0), &serde_json::json!(0))
        );
        assert_eq!(joined["root_cut"]["cpu_ns"], 100_000);
    }

    /// [`cut_profile`] with time off CPU: a 4 ms, b 1 ms (so a's subtree 5 ms), the cut
    /// below a 2 ms, the top-level cut 0.
    fn offcpu_profile() -> JvmProfile {
        let mut p = cut_profile(joined_jvm());
        for (n, own, inclusive) in [(0, 4_000_000, 7_000_000), (1, 1_000_000, 1_000_000)] {
            p.nodes[n].offcpu_ns = own;
            p.nodes[n].inclusive_offcpu_ns = inclusive;
        }
        if let Some(c) = p.nodes[0].cut.as_mut() {
            c.offcpu_ns = 2_000_000;
        }
        p
    }

    #[test]
    fn a_tree_with_time_off_cpu_shows_off_cpu_and_wall_columns_after_the_cpu() {
        let t = jvm_tree_text(&offcpu_profile());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            &lines[2..],
            [
                "    cpu ms    incl ms  offcpu ms   off incl    wall ms  wall incl          calls       inclusive       exclusive  share  method",
                "       1.5       12.3        4.0        7.0        5.5       19.3              1              90               1  90.0%  a",
                "       2.0        2.0        1.0        1.0        3.0        3.0              1              60               1  60.0%    b",
                &format!(
                    "       0.0        0.0        0.0        0.0        0.0        0.0              1              50               1  50.0%  {}[42] c",
                    "  ".repeat(40)
                ),
                "         -        8.8          -        2.0          -       10.8              2              20               -  20.0%    [cut: 1 subtree, 2 nodes]",
                "         -        0.1          -        0.0          -        0.1              1              10               -  10.0%  [cut: 1 subtree, 1 node]",
            ]
        );
        // Without time off CPU anywhere (the columns of `a_joined_tree_shows…`): none.
        assert!(!jvm_tree_text(&cut_profile(joined_jvm())).contains("offcpu"));
    }

    #[test]
    fn tree_json_has_off_cpu_and_wall_fields_only_with_time_off_cpu() {
        let v = serde_json::to_value(jvm_tree_json(&offcpu_profile())).unwrap();
        assert_eq!(
            v["nodes"][0],
            serde_json::json!({"depth": 0, "method": "a", "file": null, "calls": 1,
                "bytecodes": 1, "inclusive_bytecodes": 90,
                "cut": {"subtrees": 1, "nodes": 2, "calls": 2, "bytecodes": 20,
                        "cpu_ns": 8_800_000, "offcpu_ns": 2_000_000, "wall_ns": 10_800_000},
                "cpu_ns": 1_500_000, "inclusive_cpu_ns": 12_300_000,
                "offcpu_ns": 4_000_000, "inclusive_offcpu_ns": 7_000_000,
                "wall_ns": 5_500_000, "inclusive_wall_ns": 19_300_000})
        );
        assert_eq!(
            v["root_cut"],
            serde_json::json!({"subtrees": 1, "nodes": 1, "calls": 1, "bytecodes": 10,
                "cpu_ns": 100_000, "offcpu_ns": 0, "wall_ns": 100_000})
        );
        let joined = serde_json::to_value(jvm_tree_json(&cut_profile(joined_jvm()))).unwrap();
        assert_eq!(joined["nodes"][0].get("offcpu_ns"), None);
        assert_eq!(joined["nodes"][0]["cut"].get("wall_ns"), None);
    }
}
