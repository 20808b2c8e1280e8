//! Self-contained HTML flame graphs: one file with its styles, script and data inline, no
//! network. The same writer draws a JVM's Method Call Tree, a kernel profile (module →
//! function) and a differential graph of two trees.
//!
//! Big trees: frames narrower than [`DEFAULT_MIN_SHARE`] of the whole are merged, per parent,
//! into one grey "[N smaller frames]" frame, so widths still add up exactly and the file
//! stays small whatever the number of contexts.

use super::{java_signature, Mct};
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

mod types;
pub use types::{idle_note, typed_graphs, SampleType, OFFCPU_FRAME};

/// Frames under 1/20000 of the total (0.005 %, a sixteenth of a pixel at 1200 pixels) are
/// merged: they cannot be seen unzoomed, and zoomed they are at most noise.
pub const DEFAULT_MIN_SHARE: f64 = 0.00005;

const SCRIPT: &str = include_str!("flame.js");
const CUT_NAME: &str = "[smaller frames]";

/// One frame's counts; `base` holds the base profile's in a differential graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCounts {
    /// `None` where calls mean nothing (kernel samples).
    pub calls: Option<u64>,
    pub inclusive: u64,
    pub exclusive: u64,
}

#[derive(Clone, Debug)]
struct FlameNode {
    name: Arc<str>,
    parent: usize,
    children: Vec<usize>,
    now: FrameCounts,
    base: FrameCounts,
}

/// A tree of named frames to draw. Node 0 is the (invisible) root.
#[derive(Clone, Debug)]
pub struct FlameTree {
    pub title: String,
    pub subtitle: String,
    /// What inclusive and exclusive count: "bytecodes", "samples".
    pub unit: String,
    /// Two profiles: frames are coloured by growth (red) and shrinkage (blue).
    pub diff: bool,
    /// A diff of sampled profiles: each side counts as its share of its own total (BASE's
    /// widths scaled to NEW's total), so that a longer run is not all growth. Exact counts
    /// (bytecodes) are compared as they are.
    pub by_share: bool,
    /// A live page (jpd's): reload every N seconds while not zoomed or searching; 0: never.
    pub refresh_seconds: u32,
    nodes: Vec<FlameNode>,
}

impl FlameTree {
    pub fn new(title: &str, unit: &str, diff: bool) -> FlameTree {
        FlameTree {
            title: title.to_string(),
            subtitle: String::new(),
            unit: unit.to_string(),
            diff,
            by_share: false,
            refresh_seconds: 0,
            nodes: vec![FlameNode {
                name: Arc::from(""),
                parent: 0,
                children: Vec::new(),
                now: FrameCounts::default(),
                base: FrameCounts::default(),
            }],
        }
    }

    /// Adds a frame under `parent` (the root if `parent` is not a frame yet).
    pub fn add(
        &mut self,
        parent: usize,
        name: Arc<str>,
        now: FrameCounts,
        base: FrameCounts,
    ) -> usize {
        let i = self.nodes.len();
        let parent = if parent < i { parent } else { 0 };
        self.nodes.push(FlameNode {
            name,
            parent,
            children: Vec::new(),
            now,
            base,
        });
        self.nodes[parent].children.push(i);
        i
    }

    /// A JVM's tree: frames are readable Java signatures, widths inclusive bytecodes.
    pub fn from_mct(t: &Mct, title: &str) -> FlameTree {
        let mut g = FlameTree::new(title, "bytecodes", false);
        let inc = t.inclusive_bytecodes();
        let counts = |i: usize| FrameCounts {
            calls: Some(t.nodes[i].calls),
            inclusive: inc[i],
            exclusive: t.nodes[i].bytecodes,
        };
        g.add_contexts(t, counts, |_, _, _| {});
        g.subtitle = format!("bba={} · {} calling contexts", t.bba, t.nodes.len() - 1);
        g
    }

    /// Adds `t`'s contexts as frames, parents first, each named by its readable Java
    /// signature (converted once per method); `counts(i)` gives context i's counts, and
    /// `then(self, i, k)` runs once context i is frame k.
    pub(crate) fn add_contexts(
        &mut self,
        t: &Mct,
        mut counts: impl FnMut(usize) -> FrameCounts,
        mut then: impl FnMut(&mut FlameTree, usize, usize),
    ) {
        let mut readable: HashMap<&str, Arc<str>> = HashMap::new();
        let mut index = vec![0usize; t.nodes.len()];
        t.walk(|i, _| {
            let n = &t.nodes[i];
            let name = readable
                .entry(&n.method)
                .or_insert_with(|| Arc::from(java_signature(&n.method)))
                .clone();
            let parent = n.parent.map_or(0, |p| index[p]);
            index[i] = self.add(parent, name, counts(i), FrameCounts::default());
            then(self, i, index[i]);
        });
    }

    /// The inclusive totals of the two sides, (now, base).
    fn totals(&self) -> (u64, u64) {
        self.nodes[0].children.iter().fold((0, 0), |(n, b), &c| {
            let c = &self.nodes[c];
            (
                n.saturating_add(c.now.inclusive),
                b.saturating_add(c.base.inclusive),
            )
        })
    }

    /// A frame's width: its own exclusive count (the larger of the two sides in a diff, so
    /// removed code stays visible; [`FlameTree::by_share`]: BASE's scaled to NEW's total)
    /// plus its children's widths.
    fn widths(&self) -> Vec<u64> {
        let (now_total, base_total) = self.totals();
        let scale = |b: u64| -> u64 {
            if !self.by_share || base_total == 0 || now_total == 0 {
                return b;
            }
            let scaled = (u128::from(b) * u128::from(now_total) + u128::from(base_total) / 2)
                / u128::from(base_total);
            u64::try_from(scaled).unwrap_or(u64::MAX)
        };
        let mut w: Vec<u64> = self
            .nodes
            .iter()
            .map(|n| n.now.exclusive.max(scale(n.base.exclusive)))
            .collect();
        // Children are added after their parents.
        for i in (1..self.nodes.len()).rev() {
            let p = self.nodes[i].parent;
            w[p] = w[p].saturating_add(w[i]);
        }
        w
    }
}

/// Writes `t` as a flame graph page. `min_share` (a fraction of the total width) is the
/// merge threshold; see [`DEFAULT_MIN_SHARE`].
pub fn write_flame_html(t: &FlameTree, min_share: f64, w: &mut dyn Write) -> io::Result<()> {
    let legend = if t.diff { DIFF_LEGEND } else { "" };
    write_page(&t.title, legend, &graph_json(t, min_share), w)
}

/// Writes one page of several graphs of the same profile, one per sample type, with a
/// selector that switches between them in the page (no round trip); `default` is drawn
/// first unless the URL's fragment names another (`#type=offcpu`, which the selector
/// keeps up to date so that the URL can be shared). One graph: [`write_flame_html`].
pub fn write_flame_html_types(
    graphs: &[(SampleType, FlameTree)],
    default: SampleType,
    min_share: f64,
    w: &mut dyn Write,
) -> io::Result<()> {
    let [(_, first), ..] = graphs else {
        return write_flame_html(&FlameTree::new("", "", false), min_share, w);
    };
    if graphs.len() == 1 {
        return write_flame_html(first, min_share, w);
    }
    let mut data = String::from("{\"types\":[");
    let mut selector =
        String::from(" <label id=\"types\">sample type <select id=\"type\" autocomplete=\"off\">");
    for (k, (ty, _)) in graphs.iter().enumerate() {
        if k > 0 {
            data.push(',');
        }
        json_str(&mut data, ty.key());
        let selected = if *ty == default { " selected" } else { "" };
        selector.push_str(&format!(
            "<option value=\"{key}\"{selected}>{key}</option>",
            key = ty.key()
        ));
    }
    selector.push_str("</select></label>");
    data.push_str("],\"default\":");
    json_str(&mut data, default.key());
    data.push_str(",\"graphs\":[");
    for (k, (_, g)) in graphs.iter().enumerate() {
        if k > 0 {
            data.push(',');
        }
        data.push_str(&graph_json(g, min_share));
    }
    data.push_str("]}");
    write_page(&first.title, &selector, &data, w)
}

/// The data block of one graph: its frames (pre-order, narrow ones merged), names and
/// totals, as flame.js reads them.
fn graph_json(t: &FlameTree, min_share: f64) -> String {
    let width = t.widths();
    let total = width[0];
    let threshold = (total as f64 * min_share).ceil() as u64;
    let mut names: HashMap<Arc<str>, usize> = HashMap::new();
    let mut name_list: Vec<Arc<str>> = Vec::new();
    let mut intern = |s: &Arc<str>| -> usize {
        *names.entry(s.clone()).or_insert_with(|| {
            name_list.push(s.clone());
            name_list.len() - 1
        })
    };
    let cut_name = intern(&Arc::from(CUT_NAME));
    let mut frames = String::new();
    let mut kept = 0usize;
    let mut merged = 0usize;
    let mut stack: Vec<Item> = Vec::new();
    merge_children(t, &width, threshold, 0, 0, &mut stack, &mut merged);
    while let Some(item) = stack.pop() {
        if !frames.is_empty() {
            frames.push(',');
        }
        kept += 1;
        match item {
            Item::Cut {
                now,
                base,
                width,
                depth,
            } => frame_json(&mut frames, cut_name, depth, width, now, base, t.diff),
            Item::Node(i, depth) => {
                let n = &t.nodes[i];
                let name = intern(&n.name);
                frame_json(&mut frames, name, depth, width[i], n.now, n.base, t.diff);
                merge_children(t, &width, threshold, i, depth + 1, &mut stack, &mut merged);
            }
        }
    }
    let (total_inclusive, base_total) = t.totals();
    let mut subtitle = t.subtitle.clone();
    if merged > 0 {
        subtitle.push_str(&format!(
            " · {merged} contexts under {}% of the width merged into grey frames",
            min_share * 100.0
        ));
    }
    let mut data = String::with_capacity(frames.len() + 1024);
    data.push_str("{\"title\":");
    json_str(&mut data, &t.title);
    data.push_str(",\"subtitle\":");
    json_str(&mut data, &subtitle);
    data.push_str(",\"unit\":");
    json_str(&mut data, &t.unit);
    data.push_str(&format!(
        ",\"diff\":{},\"by_share\":{},\"refresh\":{},\"width\":{total},\"total\":{total_inclusive},\"base_total\":{base_total},\"cut_name\":{cut_name},\"frames_kept\":{kept},\"names\":[",
        t.diff, t.by_share, t.refresh_seconds
    ));
    for (k, s) in name_list.iter().enumerate() {
        if k > 0 {
            data.push(',');
        }
        json_str(&mut data, s);
    }
    data.push_str("],\"frames\":[");
    data.push_str(&frames);
    data.push_str("]}");
    data
}

/// The page around a data block: `extra` (trusted HTML) ends the second bar.
fn write_page(title: &str, extra: &str, data: &str, w: &mut dyn Write) -> io::Result<()> {
    let mut escaped = String::new();
    html_escape(&mut escaped, title);
    write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"generator\" content=\"jp flame graph\">\n<title>{escaped}</title>\n<style>{STYLE}</style></head>\n<body>\n\
         <div id=\"bar\"><b id=\"title\"></b> <span id=\"subtitle\"></span></div>\n\
         <div id=\"bar2\"><input id=\"search\" type=\"search\" placeholder=\"search (regular expression)\" size=\"40\"> \
         <button id=\"reset\">reset zoom</button> <span id=\"status\"></span>{extra}</div>\n\
         <div id=\"graph\"></div><pre id=\"tip\"></pre>\n\
         <script id=\"jp-data\" type=\"application/json\">"
    )?;
    w.write_all(data.as_bytes())?;
    write!(w, "</script>\n<script>{SCRIPT}</script>\n</body></html>\n")
}

/// What the walk in [`write_flame_html`] has yet to write: a frame, or a group of merged ones.
enum Item {
    Node(usize, usize),
    Cut {
        now: FrameCounts,
        base: FrameCounts,
        width: u64,
        depth: usize,
    },
}

/// Pushes `node`'s children onto `stack` so that they pop in name order, the ones narrower
/// than `threshold` merged into one [`Item::Cut`] that pops last.
fn merge_children(
    t: &FlameTree,
    width: &[u64],
    threshold: u64,
    node: usize,
    depth: usize,
    stack: &mut Vec<Item>,
    merged: &mut usize,
) {
    let mut kids: Vec<usize> = t.nodes[node].children.clone();
    kids.sort_by(|&a, &b| t.nodes[a].name.cmp(&t.nodes[b].name).then(a.cmp(&b)));
    let (big, small): (Vec<usize>, Vec<usize>) = kids
        .into_iter()
        .filter(|&k| width[k] > 0)
        .partition(|&k| width[k] >= threshold);
    if !small.is_empty() {
        let mut now = FrameCounts::default();
        let mut base = FrameCounts::default();
        let mut group_width = 0u64;
        for &k in &small {
            let n = &t.nodes[k];
            now.inclusive = now.inclusive.saturating_add(n.now.inclusive);
            base.inclusive = base.inclusive.saturating_add(n.base.inclusive);
            now.calls = add_opt(now.calls, n.now.calls);
            base.calls = add_opt(base.calls, n.base.calls);
            group_width = group_width.saturating_add(width[k]);
        }
        // The group has no children drawn: all of it is its own.
        now.exclusive = now.inclusive;
        base.exclusive = base.inclusive;
        *merged += subtree_size(t, &small);
        stack.push(Item::Cut {
            now,
            base,
            width: group_width,
            depth,
        });
    }
    for &k in big.iter().rev() {
        stack.push(Item::Node(k, depth));
    }
}

fn subtree_size(t: &FlameTree, roots: &[usize]) -> usize {
    let mut stack: Vec<usize> = roots.to_vec();
    let mut count = 0;
    while let Some(i) = stack.pop() {
        count += 1;
        stack.extend_from_slice(&t.nodes[i].children);
    }
    count
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

fn frame_json(
    out: &mut String,
    name: usize,
    depth: usize,
    width: u64,
    now: FrameCounts,
    base: FrameCounts,
    diff: bool,
) {
    let calls = |c: Option<u64>| c.map_or(-1i128, i128::from);
    out.push_str(&format!(
        "[{name},{depth},{width},{},{},{}",
        calls(now.calls),
        now.inclusive,
        now.exclusive
    ));
    if diff {
        out.push_str(&format!(
            ",{},{},{}",
            base.calls.unwrap_or(0),
            base.inclusive,
            base.exclusive
        ));
    }
    out.push(']');
}

/// A JSON string that is also safe inside `<script>`: `<`, `>` and `&` escaped.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn html_escape(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// A JVM's Method Call Tree as a flame graph page (the agent's `format=html`).
pub fn write_html(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    let title = match t.nodes.get(1) {
        Some(_) => "jp method call tree",
        None => "jp method call tree (empty)",
    };
    write_flame_html(&FlameTree::from_mct(t, title), DEFAULT_MIN_SHARE, w)
}

const DIFF_LEGEND: &str = " <span class=\"legend\"><i style=\"background:rgb(255,120,120)\"></i>grew \
<i style=\"background:rgb(120,120,255)\"></i>shrank <i style=\"background:rgb(220,30,30)\"></i>added \
<i style=\"background:repeating-linear-gradient(45deg,#7fa7e0 0 4px,#cfdcf2 4px 8px)\"></i>removed \
<i style=\"background:#e6e6e6\"></i>unchanged</span>";

const STYLE: &str = "body{font:13px system-ui,sans-serif;margin:0;padding:8px 10px;color:#222;background:#fff}\
#bar,#bar2{margin-bottom:6px}#subtitle,#status{color:#555}\
#graph{position:relative;width:100%;overflow:hidden}\
.f{position:absolute;height:17px;box-sizing:border-box;border-right:1px solid #fff;border-bottom:1px solid #fff;\
overflow:hidden;white-space:nowrap;text-overflow:ellipsis;font:11px/16px ui-monospace,monospace;padding-left:2px;cursor:pointer}\
.f:hover{outline:1px solid #000;z-index:1}.f.anc{opacity:.6}.f.match{background:#e020e0!important;color:#fff}\
#tip{position:fixed;display:none;margin:0;background:#fffff0;border:1px solid #999;padding:4px 6px;\
pointer-events:none;font:12px ui-monospace,monospace;z-index:5;box-shadow:2px 2px 4px #0003}\
.legend i{display:inline-block;width:12px;height:12px;margin:0 3px 0 8px;vertical-align:middle}";

#[cfg(test)]
mod tests {
    use super::super::tests::paper_tree;
    use super::super::MethodInfo;
    use super::*;

    fn page(t: &Mct) -> String {
        let mut v = Vec::new();
        write_html(t, &mut v).unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn paper_tree_frames_in_order_with_exact_counts() {
        let s = page(&paper_tree());
        // [name, depth, width, calls, inclusive, exclusive]; names: 0 is the merged group.
        assert!(s.contains(
            "\"names\":[\"[smaller frames]\",\"Paper.main(java.lang.String[])\",\"Paper.\\u003cinit\\u003e()\",\"Paper.f()\",\"Paper.g(int)\",\"Paper.h()\"]"
        ), "{s}");
        assert!(s.contains(
            "\"frames\":[[1,0,624,1,624,5],[2,1,3,1,3,3],[3,1,616,1,616,106],[4,2,500,10,500,445],[5,3,55,55,55,55],[5,2,10,10,10,10]]"
        ), "{s}");
        assert!(!s.contains("http://") && !s.contains("https://") && !s.contains(" src="));
    }

    #[test]
    fn script_cannot_be_closed_by_a_method_name() {
        let mut t = Mct::new("default");
        t.add(
            0,
            MethodInfo {
                name: "A.</script><b>()V".into(),
                file: None,
            },
            1,
            1,
        );
        let s = page(&t);
        assert_eq!(s.matches("</script>").count(), 2, "{s}");
    }

    #[test]
    fn tiny_frames_merge_and_widths_still_add_up() {
        let mut t = Mct::new("default");
        let main = t.add(
            0,
            MethodInfo {
                name: "M.main()V".into(),
                file: None,
            },
            1,
            1_000_000,
        );
        for k in 0..100 {
            t.add(
                main,
                MethodInfo {
                    name: format!("M.tiny{k}()V").into(),
                    file: None,
                },
                1,
                10,
            );
        }
        let mut v = Vec::new();
        write_flame_html(&FlameTree::from_mct(&t, "x"), 0.0001, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        // 101 contexts: main and one group of all 100 tiny ones (10 < 1001000 / 10000).
        assert!(
            s.contains("\"frames\":[[1,0,1001000,1,1001000,1000000],[0,1,1000,100,1000,1000]]"),
            "{s}"
        );
        assert!(
            s.contains("100 contexts under 0.01% of the width merged"),
            "{s}"
        );
    }

    /// Sampled sides of 100 and 400: BASE's widths scale by 4, so a function whose share
    /// fell is as wide as its BASE share (75 % of 400 = 300); the counts stay real.
    #[test]
    fn by_share_scales_base_widths_to_the_new_total() {
        let samples = |n| FrameCounts {
            calls: None,
            inclusive: n,
            exclusive: n,
        };
        let mut t = FlameTree::new("k", "samples", true);
        t.by_share = true;
        t.add(0, Arc::from("a"), samples(200), samples(75));
        t.add(0, Arc::from("b"), samples(200), samples(25));
        let mut v = Vec::new();
        write_flame_html(&t, 0.0, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert!(
            s.contains(
                "\"by_share\":true,\"refresh\":0,\"width\":500,\"total\":400,\"base_total\":100,"
            ),
            "{s}"
        );
        assert!(
            s.contains("\"frames\":[[1,0,300,-1,200,200,0,75,75],[2,0,200,-1,200,200,0,25,25]]"),
            "{s}"
        );
    }
}

#[cfg(test)]
mod size {
    use super::super::MethodInfo;
    use super::*;

    /// A million contexts with skewed counts (a few hot paths, a long tail, like real
    /// programs): the page stays small because invisible frames merge. Prints the size.
    #[test]
    fn a_million_contexts_make_a_small_page() {
        let mut t = Mct::new("default");
        let names: Vec<Arc<str>> = (0..5000)
            .map(|k| Arc::from(format!("p.C{}.m{k}()V", k % 97)))
            .collect();
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut parents = vec![0usize];
        while t.nodes.len() <= 1_000_000 {
            // Prefer recent nodes as parents: deep paths, like call trees.
            let r = next();
            let p = parents[parents.len() - 1 - (r as usize % parents.len().min(64))];
            let name = names[(next() % 5000) as usize].clone();
            // Heavy tail: most contexts run a few bytecodes, some millions.
            let bytecodes = 1u64 << (next() % 24).min(next() % 24);
            let i = t.add(
                p,
                MethodInfo { name, file: None },
                1 + next() % 100,
                bytecodes,
            );
            parents.push(i);
        }
        let mut v = Vec::new();
        write_html(&t, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        let kept = s
            .split("\"frames_kept\":")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap_or("?")
            .to_string();
        println!(
            "1000001-node tree: page {} bytes, {kept} frames kept (threshold {}%)",
            s.len(),
            DEFAULT_MIN_SHARE * 100.0
        );
        // Measured: 7.3 MB, 205 176 frames of 1 000 001 (at most 20 000 frames per depth
        // can be as wide as the threshold). JP_FLAME_PAGE_OUT=FILE keeps the page, to open it.
        if let Some(out) = std::env::var_os("JP_FLAME_PAGE_OUT") {
            std::fs::write(out, &s).unwrap();
        }
        assert!(s.len() < 10_000_000, "{} bytes", s.len());
        let mut coarser = Vec::new();
        write_flame_html(&FlameTree::from_mct(&t, "x"), 0.0001, &mut coarser).unwrap();
        println!("at 0.01%: {} bytes", coarser.len());
        assert!(coarser.len() < s.len());
    }
}
