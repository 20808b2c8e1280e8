//! CPU in jpctl's views, for real: jpd's kernel sampler joined to a JVM running
//! `tests/fixtures/jvm/CpuViews.java` (a() spins in its own body for twice the iterations of b(),
//! both called by spin()), on JDK 17 and 25. `jpctl jvm tree --json` gives each
//! context's CPU (a's twice b's, the sums add up along the tree and into a cut), and
//! `jpctl top` in tmux shows a `cpu%` column with a's CPU, and sorts by it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::cpu::{assert_two_to_one, compile, cpu_of_kind, jdks, wait_listed, Jvm, CONFIG};
use crate::support::fleet::tool;
use crate::support::jpd::Jpd;
use crate::support::require_root;
use crate::support::tmux::Tmux;

/// One sample of jpd's default sampler (997 Hz), as cpu.rs counts it.
const PERIOD_NS: u64 = 1_000_000_000 / 997;

/// `CpuViews.class` for one JDK, compiled fresh in this test process.
fn classes(tag: &str, home: &Path) -> PathBuf {
    compile("CpuViews", tag, home)
}

/// `CpuViews SECONDS 1` with the agent (as cpu.rs starts CpuSplit).
fn start(home: &Path, dir: &Path, seconds: u32) -> Jvm {
    Jvm::launch(
        &[],
        home,
        dir,
        "CpuViews",
        &[seconds.to_string(), "1".to_string()],
    )
}

fn ns(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} (ns) in {v}"))
}

/// Each node's parent (index of the closest earlier node one level up; None at the top).
fn parents(nodes: &[Value]) -> Vec<Option<usize>> {
    let mut path: Vec<usize> = Vec::new();
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let depth = n["depth"].as_u64().expect("depth") as usize;
            path.truncate(depth);
            let parent = path.last().copied();
            path.push(i);
            parent
        })
        .collect()
}

/// Every node's inclusive CPU is its own, its shown children's and its cut's, exactly.
fn assert_sums_add_up(what: &str, tree: &Value) {
    let nodes = tree["nodes"].as_array().expect("nodes");
    let parents = parents(nodes);
    let mut below = vec![0u64; nodes.len()];
    for (i, p) in parents.iter().enumerate() {
        if let Some(p) = p {
            below[*p] += ns(&nodes[i], "inclusive_cpu_ns");
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let cut = n["cut"].as_object().map_or(0, |_| ns(&n["cut"], "cpu_ns"));
        assert_eq!(
            ns(n, "inclusive_cpu_ns"),
            ns(n, "cpu_ns") + below[i] + cut,
            "{what}: node {i} {n}"
        );
    }
}

/// The one node of `method` (the program has one worker thread: one context each).
fn only<'a>(nodes: &'a [Value], prefix: &str) -> (usize, &'a Value) {
    let found: Vec<(usize, &Value)> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n["method"].as_str().is_some_and(|m| m.starts_with(prefix)))
        .collect();
    assert_eq!(found.len(), 1, "contexts of {prefix}: {found:?}");
    found[0]
}

/// Waits until jpd has every CPU sample of the finished work under its context.
fn settled(d: &Jpd, pid: u32) -> Value {
    // The worker ended (its last records are in) and the kernel collector has read its
    // last samples (a pass later); none waits for its node any more.
    std::thread::sleep(Duration::from_millis(2500));
    wait_listed(d, pid, "sampled", |j| {
        cpu_of_kind(j, "app") > 0 && j["cpu"]["pending_ns"].as_u64() == Some(0)
    })
}

/// `jpctl jvm tree --json`: a's own CPU is twice b's (a() has no callee: its context's
/// CPU is its own), both under spin(), whose inclusive CPU holds them; every node's sums
/// add up; `--min-share 50%` cuts b below spin with b's CPU in the cut; the text has
/// the CPU columns.
#[test]
fn jvm_tree_shows_cpu_per_context_two_to_one() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = classes(tag, &home);
        let mut jvm = start(&home, &dir, 4);
        jvm.expect_line("started");
        jvm.expect_line("done");
        let pid = jvm.pid();
        let listed = settled(&d, pid);
        let pid_s = pid.to_string();
        let tree = d.jpctl_json(&["jvm", "tree", &pid_s, "--json"]);
        let text = tree.to_string();
        let nodes = tree["nodes"].as_array().expect("nodes");
        assert_sums_add_up(tag, &tree);
        let (ia, a) = only(nodes, "CpuViews.a(");
        let (ib, b) = only(nodes, "CpuViews.b(");
        assert_eq!(
            ns(a, "cpu_ns"),
            ns(a, "inclusive_cpu_ns"),
            "{tag}: a calls nothing"
        );
        assert_two_to_one(tag, ns(a, "cpu_ns"), ns(b, "cpu_ns"), PERIOD_NS, &text);
        let parents = parents(nodes);
        let spin = parents[ia].expect("a has a parent");
        assert_eq!(parents[ib], Some(spin), "{tag}: a and b have one parent");
        let spin_node = &nodes[spin];
        assert!(
            spin_node["method"]
                .as_str()
                .is_some_and(|m| m.starts_with("CpuViews.spin(")),
            "{tag}: {spin_node}"
        );
        assert!(
            ns(spin_node, "inclusive_cpu_ns")
                >= ns(a, "inclusive_cpu_ns") + ns(b, "inclusive_cpu_ns"),
            "{tag}: spin {spin_node}, a {a}, b {b}"
        );
        // The contexts hold no more than jpd lists as the app's CPU.
        let top: u64 = parents
            .iter()
            .zip(nodes)
            .filter(|(p, _)| p.is_none())
            .map(|(_, n)| ns(n, "inclusive_cpu_ns"))
            .sum();
        let app = cpu_of_kind(&listed, "app");
        assert!(top <= app, "{tag}: {top} ns in contexts, app {app} ns");

        // b holds a third of spin's bytecodes: cut at 50 %, its CPU moves into the cut.
        let cut = d.jpctl_json(&["jvm", "tree", &pid_s, "--json", "--min-share", "50"]);
        assert_sums_add_up(&format!("{tag}, min share 50%"), &cut);
        let cut_nodes = cut["nodes"].as_array().expect("nodes");
        let (ispin, spin_cut) = only(cut_nodes, "CpuViews.spin(");
        assert_eq!(
            ns(spin_cut, "inclusive_cpu_ns"),
            ns(spin_node, "inclusive_cpu_ns"),
            "{tag}: the cut keeps spin's CPU"
        );
        assert!(
            cut_nodes[ispin + 1..]
                .iter()
                .all(|n| n["method"].as_str() != b["method"].as_str()),
            "{tag}: b is cut: {cut}"
        );
        assert!(
            ns(&spin_cut["cut"], "cpu_ns") >= ns(b, "inclusive_cpu_ns"),
            "{tag}: spin's cut {spin_cut} holds b {b}"
        );
        let out = d.jpctl_output(&["jvm", "tree", &pid_s, "--depth", "2"]);
        assert!(
            out.lines()
                .any(|l| l.starts_with("    cpu ms    incl ms          calls")),
            "{tag}: no CPU columns:\n{out}"
        );
        jvm.finish();
    }
    d.stop();
}

/// The JVM pane's rows: the percentage in the column before the method name (`cpu%`,
/// or `off%` when shown), by method.
pub(crate) fn percent_before(screen: &str, method: &str) -> Option<f64> {
    screen.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        let at = cols.iter().position(|c| *c == method)?;
        cols.get(at.checked_sub(1)?)?
            .strip_suffix('%')?
            .parse()
            .ok()
    })
}

/// The first method row under the JVM pane's header, which ends with `header_end`.
pub(crate) fn first_jvm_row(screen: &str, header_end: &str) -> Option<String> {
    let mut lines = screen.lines().skip_while(|l| !l.starts_with("┌ JVM "));
    lines.find(|l| l.contains(header_end))?;
    lines.next().map(str::to_string)
}

/// `jpctl top` in tmux while CpuViews spins: the JVM pane has a `cpu%` column with a's
/// CPU (about 2/3 of one CPU), the JVM's CPU in its title, and `s` sorts by it (a first).
#[test]
fn jpctl_top_shows_cpu_per_method_in_tmux() {
    require_root();
    let bin = tool("tmux", "tmux");
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = classes(&format!("{tag}-top"), &home);
        let mut jvm = start(&home, &dir, 60);
        jvm.expect_line("started");
        let pid = jvm.pid();
        wait_listed(&d, pid, "joined", |j| cpu_of_kind(j, "app") > 0);
        let tmux = Tmux::session(bin.clone(), &format!("jp-views-{pid}"));
        tmux.jpctl_top(&d.socket);
        tmux.wait_for("the JVM pane", |t| t.screen().contains("┌ JVM "));
        tmux.show_jvm(pid);
        tmux.wait_for(&format!("{tag}: a's cpu% above 0"), |t| {
            percent_before(&t.screen(), "CpuViews.a()").is_some_and(|p| p > 0.0)
        });
        let screen = tmux.screen();
        assert!(
            screen.contains(&format!(" JVM {pid} CpuViews cpu ")),
            "{tag}: no CPU in the title:\n{screen}"
        );
        // Tab twice: the JVM pane; s: the sort after bc/s is cpu% for a joined JVM.
        tmux.cmd(&["send-keys", "-t", "top", "Tab", "Tab", "s"]);
        tmux.wait_for(&format!("{tag}: sorted by cpu%, a first"), |t| {
            let s = t.screen();
            s.contains("sort: cpu%)")
                && first_jvm_row(&s, " cpu% method").is_some_and(|r| r.contains(" CpuViews.a() "))
        });
        tmux.quit_top();
        drop(tmux);
        drop(jvm);
    }
    d.stop();
}
