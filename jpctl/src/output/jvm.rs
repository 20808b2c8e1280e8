//! What `jpctl jvm list|top|tree` print: tables and JSON from the API's JVM
//! messages. Pure functions; `now_ms` is passed in so that outputs are exact.

use std::fmt::Write as _;

use jp_proto::v1::{
    JvmCut, JvmList, JvmNode, JvmProfile, JvmSummary, JvmTop, JvmTopOrder, Status, UsdtCollector,
};
use serde::Serialize;

use super::percent;

// --- JSON shapes (stable: scripts and tests rely on them) -------------------------

#[derive(Serialize, Debug, PartialEq)]
pub struct ThreadsJson {
    pub live: u32,
    pub total: u32,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct JvmJson<'a> {
    pub pid: u32,
    pub ns_pid: Option<u32>,
    pub main: &'a str,
    pub jdk_version: &'a str,
    pub bba: &'a str,
    pub threads: ThreadsJson,
    pub calls: u64,
    pub bytecodes: u64,
    pub nodes: u64,
    pub attached_since_unix_ms: u64,
    /// null while the JVM runs.
    pub exited_unix_ms: Option<u64>,
    pub complete: bool,
    /// null when complete.
    pub incomplete_reason: Option<&'a str>,
    pub records_lost: u64,
    pub records_malformed: u64,
    /// CPU from jpd's kernel sampler by kind of thread; absent when not joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuJson<'a>>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct CpuJson<'a> {
    pub total_ns: u64,
    pub kinds: Vec<CpuKindJson<'a>>,
    /// Of the app kind: under contexts not received yet, never received, unreadable slot.
    pub pending_ns: u64,
    pub unresolved_ns: u64,
    pub read_failed_ns: u64,
    /// Of the app kind: under the contexts received, what the views show per context.
    pub contexts_ns: u64,
    /// Live threads that publish their current context.
    pub publishing_threads: u32,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct CpuKindJson<'a> {
    pub kind: &'a str,
    pub user_ns: u64,
    pub kernel_ns: u64,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct JvmListJson<'a> {
    pub jvms: Vec<JvmJson<'a>>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct MethodTotalsJson<'a> {
    pub method: &'a str,
    pub file: Option<&'a str>,
    pub calls: u64,
    pub bytecodes: u64,
    pub inclusive_bytecodes: u64,
    /// Absent when jpd's sampler is not joined to the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inclusive_cpu_ns: Option<u64>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct JvmTopJson<'a> {
    pub jvm: Option<JvmJson<'a>>,
    /// "bytecodes", "calls" or "inclusive".
    pub order: &'static str,
    pub total_methods: u32,
    pub methods: Vec<MethodTotalsJson<'a>>,
}

#[derive(Serialize, Debug, PartialEq, Clone, Copy)]
pub struct CutJson {
    pub subtrees: u32,
    pub nodes: u64,
    pub calls: u64,
    pub bytecodes: u64,
    /// CPU of the cut subtrees; absent when jpd's sampler is not joined to the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
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
}

pub fn jvm_json(j: &JvmSummary) -> JvmJson<'_> {
    JvmJson {
        pid: j.pid,
        ns_pid: j.ns_pid,
        main: &j.main,
        jdk_version: &j.jdk_version,
        bba: &j.bba,
        threads: ThreadsJson {
            live: j.threads_live,
            total: j.threads_total,
        },
        calls: j.calls,
        bytecodes: j.bytecodes,
        nodes: j.nodes,
        attached_since_unix_ms: j.attached_since_unix_ms,
        exited_unix_ms: (j.exited_unix_ms != 0).then_some(j.exited_unix_ms),
        complete: j.complete,
        incomplete_reason: (!j.complete).then_some(j.incomplete_reason.as_str()),
        records_lost: j.records_lost,
        records_malformed: j.records_malformed,
        cpu: (!j.cpu.is_empty()).then(|| CpuJson {
            total_ns: cpu_total(j),
            kinds: j
                .cpu
                .iter()
                .map(|k| CpuKindJson {
                    kind: &k.kind,
                    user_ns: k.user_ns,
                    kernel_ns: k.kernel_ns,
                })
                .collect(),
            pending_ns: j.cpu_pending_ns,
            unresolved_ns: j.cpu_unresolved_ns,
            read_failed_ns: j.cpu_read_failed_ns,
            contexts_ns: j.cpu_contexts_ns,
            publishing_threads: j.publishing_threads,
        }),
    }
}

fn cpu_total(j: &JvmSummary) -> u64 {
    j.cpu.iter().map(|k| k.user_ns + k.kernel_ns).sum()
}

/// `cpu 9.01 s: app 96.8 % (on contexts 96.5 %), gc 0.4 %, jit 2.7 %` (kinds with CPU),
/// or None when the kernel sampler is not joined to the JVM. The app's part on contexts
/// is what the per-context columns add up to; when it is none, the line says why if it
/// can: no live thread publishes its context (the agent's `publish=false`, or no report
/// yet).
pub fn cpu_split(j: &JvmSummary) -> Option<String> {
    let total = cpu_total(j);
    if j.cpu.is_empty() {
        return None;
    }
    let pct = |ns: u64| 100.0 * ns as f64 / total.max(1) as f64;
    let parts: Vec<String> = j
        .cpu
        .iter()
        .filter(|k| k.user_ns + k.kernel_ns > 0)
        .map(|k| {
            let share = format!("{} {:.1} %", k.kind, pct(k.user_ns + k.kernel_ns));
            if k.kind != "app" {
                share
            } else if j.cpu_contexts_ns == 0 && j.publishing_threads == 0 && j.threads_live > 0 {
                format!("{share} (none on contexts: no thread publishes its context)")
            } else {
                format!("{share} (on contexts {:.1} %)", pct(j.cpu_contexts_ns))
            }
        })
        .collect();
    Some(format!(
        "cpu {:.2} s: {}",
        total as f64 / 1e9,
        if parts.is_empty() {
            "none sampled yet".to_string()
        } else {
            parts.join(", ")
        }
    ))
}

pub fn jvm_list_json(l: &JvmList) -> JvmListJson<'_> {
    JvmListJson {
        jvms: l.jvms.iter().map(jvm_json).collect(),
    }
}

pub fn order_label(order: i32) -> &'static str {
    match JvmTopOrder::try_from(order) {
        Ok(JvmTopOrder::Calls) => "calls",
        Ok(JvmTopOrder::Inclusive) => "inclusive",
        Ok(JvmTopOrder::Cpu) => "cpu",
        _ => "bytecodes",
    }
}

pub fn jvm_top_json(t: &JvmTop) -> JvmTopJson<'_> {
    JvmTopJson {
        jvm: t.jvm.as_ref().map(jvm_json),
        order: order_label(t.order),
        total_methods: t.total_methods,
        methods: t
            .methods
            .iter()
            .map(|m| MethodTotalsJson {
                method: &m.name,
                file: m.file.as_deref(),
                calls: m.calls,
                bytecodes: m.bytecodes,
                inclusive_bytecodes: m.inclusive_bytecodes,
                cpu_ns: joined(t.jvm.as_ref()).then_some(m.cpu_ns),
                inclusive_cpu_ns: joined(t.jvm.as_ref()).then_some(m.inclusive_cpu_ns),
            })
            .collect(),
    }
}

/// True when jpd's kernel sampler is joined to the JVM: its CPU fields mean something.
fn joined(j: Option<&JvmSummary>) -> bool {
    j.is_some_and(|j| !j.cpu.is_empty())
}

fn cut_json(c: Option<&JvmCut>, joined: bool) -> Option<CutJson> {
    c.map(|c| CutJson {
        subtrees: c.subtrees,
        nodes: c.nodes,
        calls: c.calls,
        bytecodes: c.bytecodes,
        cpu_ns: joined.then_some(c.cpu_ns),
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
    let joined = joined(p.jvm.as_ref());
    JvmTreeJson {
        jvm: p.jvm.as_ref().map(jvm_json),
        max_depth: p.max_depth,
        min_share: p.min_share,
        total_nodes: p.total_nodes,
        cut_nodes: p.cut_nodes,
        root_cut: cut_json(p.root_cut.as_ref(), joined),
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
                    cut: cut_json(n.cut.as_ref(), joined),
                    cpu_ns: joined.then_some(n.cpu_ns),
                    inclusive_cpu_ns: joined.then_some(n.inclusive_cpu_ns),
                }
            })
            .collect(),
    }
}

// --- plain text -------------------------------------------------------------------

/// "Main (pid 123)" or "pid 123" when the main class is not known yet.
fn jvm_name(j: &JvmSummary) -> String {
    let ns = match j.ns_pid {
        Some(n) => format!(", pid {n} in its namespace"),
        None => String::new(),
    };
    if j.main.is_empty() {
        format!("pid {}{ns}", j.pid)
    } else {
        format!("pid {} {}{ns}", j.pid, j.main)
    }
}

/// What went missing, for a JVM whose profile is not complete; empty when complete.
fn incomplete(j: &JvmSummary) -> String {
    if j.complete {
        return String::new();
    }
    let reason = if j.incomplete_reason.is_empty() {
        "reason unknown"
    } else {
        &j.incomplete_reason
    };
    format!(
        "incomplete: {reason} ({} records lost, {} malformed)",
        j.records_lost, j.records_malformed
    )
}

/// A duration in its two largest units: 45s, 1m 5s, 3h 2m, 12d 5h.
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// "attached 1m 5s ago" (running; the JVM may have started earlier) or
/// "exited 3s ago".
fn state(j: &JvmSummary, now_ms: u64) -> String {
    if j.exited_unix_ms != 0 {
        format!(
            "exited {} ago",
            age(now_ms.saturating_sub(j.exited_unix_ms))
        )
    } else if j.attached_since_unix_ms == 0 {
        "running".to_string()
    } else {
        format!(
            "attached {} ago",
            age(now_ms.saturating_sub(j.attached_since_unix_ms))
        )
    }
}

/// `jpctl jvm list`: one line per JVM; incomplete ones marked `*` and explained
/// below the table.
pub fn jvm_list_text(l: &JvmList, now_ms: u64) -> String {
    if l.jvms.is_empty() {
        return "no JVMs: jpd has heard from no JVM running jp's agent with profiler=usdt\n"
            .to_string();
    }
    let mut out = String::new();
    // JDK versions can be long (17.0.15+6-Debian-1deb12u1): the column fits them.
    let jdk_width = l
        .jvms
        .iter()
        .map(|j| j.jdk_version.chars().count())
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        out,
        "{:>7}  {:<jdk_width$} {:<8} {:>7} {:>12} {:>15} {:>9}  {:<20} main",
        "pid", "jdk", "bba", "threads", "calls", "bytecodes", "nodes", "state"
    );
    let mut notes = String::new();
    for j in &l.jvms {
        let mark = if j.complete { "" } else { "*" };
        let main = match (j.main.as_str(), j.ns_pid) {
            ("", Some(n)) => format!("? [pid {n} in its namespace]"),
            ("", None) => "?".to_string(),
            (m, Some(n)) => format!("{m} [pid {n} in its namespace]"),
            (m, None) => m.to_string(),
        };
        let _ = writeln!(
            out,
            "{:>7}  {:<jdk_width$} {:<8} {:>7} {:>12} {:>15} {:>9}  {:<20} {}",
            format!("{}{mark}", j.pid),
            if j.jdk_version.is_empty() {
                "?"
            } else {
                &j.jdk_version
            },
            if j.bba.is_empty() { "?" } else { &j.bba },
            format!("{}/{}", j.threads_live, j.threads_total),
            j.calls,
            j.bytecodes,
            j.nodes,
            state(j, now_ms),
            main
        );
        if let Some(cpu) = cpu_split(j) {
            let _ = writeln!(out, "{:>7}  {cpu}", "");
        }
        if !j.complete {
            let _ = writeln!(notes, "* pid {}: {}", j.pid, incomplete(j));
        }
    }
    out.push_str(&notes);
    out
}

/// `jpctl jvm top`: methods by the requested order, with their share of the
/// JVM's bytecodes.
pub fn jvm_top_text(t: &JvmTop) -> String {
    let j = t.jvm.clone().unwrap_or_default();
    let mut out = format!(
        "{} ({}, bba {}): {} calls, {} bytecodes\n",
        jvm_name(&j),
        if j.jdk_version.is_empty() {
            "jdk ?".to_string()
        } else {
            format!("jdk {}", j.jdk_version)
        },
        if j.bba.is_empty() { "?" } else { &j.bba },
        j.calls,
        j.bytecodes
    );
    let note = incomplete(&j);
    if !note.is_empty() {
        let _ = writeln!(out, "{note}");
    }
    let cpu = cpu_split(&j);
    if let Some(c) = &cpu {
        let _ = writeln!(out, "{c}");
    }
    let by = match JvmTopOrder::try_from(t.order) {
        Ok(JvmTopOrder::Calls) => "calls",
        Ok(JvmTopOrder::Inclusive) => "inclusive bytecodes",
        Ok(JvmTopOrder::Cpu) => "CPU time",
        _ => "exclusive bytecodes",
    };
    let _ = writeln!(
        out,
        "{} of {} methods by {by}",
        t.methods.len(),
        t.total_methods
    );
    let cpu_head = if cpu.is_some() {
        format!("{:>10} {:>10} ", "cpu ms", "incl ms")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{cpu_head}{:>15} {:>6} {:>12} {:>15} {:>6}  method",
        "bytecodes", "share", "calls", "inclusive", "incl%"
    );
    for m in &t.methods {
        let cpu_cols = if cpu.is_some() {
            format!(
                "{:>10.1} {:>10.1} ",
                m.cpu_ns as f64 / 1e6,
                m.inclusive_cpu_ns as f64 / 1e6
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{cpu_cols}{:>15} {:>5.1}% {:>12} {:>15} {:>5.1}%  {}",
            m.bytecodes,
            percent(m.bytecodes, j.bytecodes),
            m.calls,
            m.inclusive_bytecodes,
            percent(m.inclusive_bytecodes, j.bytecodes),
            m.name
        );
    }
    out
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

/// CPU (ns) in the tree's `cpu ms` / `incl ms` columns (`-`: no own CPU, a cut line).
fn cpu_cells(own: Option<u64>, inclusive: u64) -> String {
    let own = own.map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e6));
    format!("{own:>10} {:>10.1} ", inclusive as f64 / 1e6)
}

fn cut_line(out: &mut String, c: &JvmCut, depth: u32, total: u64, cpu: bool) {
    let cpu = if cpu {
        cpu_cells(None, c.cpu_ns)
    } else {
        String::new()
    };
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

fn node_line(out: &mut String, p: &JvmProfile, n: &JvmNode, total: u64, cpu: bool) {
    let (method, _) = method_of(p, n.method_id);
    let cpu = if cpu {
        cpu_cells(Some(n.cpu_ns), n.inclusive_cpu_ns)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{cpu}{:>14} {:>15} {:>15} {:>6}  {}{}",
        n.calls,
        n.inclusive_bytecodes,
        n.bytecodes,
        format!("{:.1}%", percent(n.inclusive_bytecodes, total)),
        indent(n.depth),
        method
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
        if j.bba.is_empty() { "?" } else { &j.bba },
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
/// first: the context's own CPU and with everything below it (cut lines: the cut's).
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
    let cpu = cpu_split(&j);
    if let Some(c) = &cpu {
        let _ = writeln!(out, "{c}");
    }
    let cpu = cpu.is_some();
    let cpu_head = if cpu {
        format!("{:>10} {:>10} ", "cpu ms", "incl ms")
    } else {
        String::new()
    };
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
                cut_line(out, c, d + 1, total, cpu);
            }
        }
    };
    for n in &p.nodes {
        close_to(&mut out, &mut open, n.depth);
        node_line(&mut out, p, n, total, cpu);
        open.push((n.depth, n.cut.as_ref()));
    }
    close_to(&mut out, &mut open, 0);
    if let Some(c) = &p.root_cut {
        cut_line(&mut out, c, 0, total, cpu);
    }
    out
}

/// The JVM lines of `jpctl status`; empty when jpd has no JVM status.
pub fn status_jvm_text(s: &Status) -> String {
    let Some(v) = &s.jvm else {
        return String::new();
    };
    let mut out = format!(
        "jvm: {} attached, {} exited and kept\n",
        v.jvms_attached, v.jvms_exited
    );
    let _ = writeln!(
        out,
        "  records  {} ({} bytes), {} lost (sequence gaps), {} malformed",
        v.records, v.bytes, v.lost, v.malformed
    );
    for m in &v.malformed_by_reason {
        let _ = writeln!(out, "    malformed: {} {}", m.records, m.reason);
    }
    let _ = writeln!(
        out,
        "  probes   {} fired, {} ring buffer full, {} faults, {} too long",
        v.fired, v.ring_full, v.faults, v.too_long
    );
    let _ = writeln!(
        out,
        "  nodes    {} ({} bytes of memory)",
        v.nodes, v.memory_bytes
    );
    match &v.collector {
        None => out.push_str("  usdt     no collector (usdt.enabled = false)\n"),
        Some(c) => collector_text(&mut out, c),
    }
    out
}

/// Why a JVM is or is not seen: the files the probe is attached to, those refused and why.
fn collector_text(out: &mut String, c: &UsdtCollector) {
    let _ = writeln!(
        out,
        "  usdt     {} library file(s), {} process(es), {} scans (last {} us), {} generations written, {} errors",
        c.files.len(),
        c.processes,
        c.scans,
        c.last_scan_us,
        c.generations_written,
        c.errors
    );
    for f in &c.files {
        let users = if f.idle {
            "idle, kept attached".to_string()
        } else {
            format!("{} process(es)", f.processes)
        };
        let _ = writeln!(out, "    attached {} ({users})", f.path);
    }
    for r in &c.refused {
        let _ = writeln!(out, "    refused  {}: {}", r.path, r.reason);
    }
    if !c.last_error.is_empty() {
        let _ = writeln!(out, "    last error: {}", c.last_error);
    }
}

pub fn status_jvm_json(s: &Status) -> serde_json::Value {
    let v = s.jvm.clone().unwrap_or_default();
    serde_json::json!({
        "jvms_attached": v.jvms_attached,
        "jvms_exited": v.jvms_exited,
        "records": v.records,
        "bytes": v.bytes,
        "lost": v.lost,
        "malformed": v.malformed,
        "malformed_by_reason": v.malformed_by_reason.iter().map(|m| serde_json::json!({
            "reason": m.reason,
            "records": m.records,
        })).collect::<Vec<_>>(),
        "fired": v.fired,
        "ring_full": v.ring_full,
        "faults": v.faults,
        "too_long": v.too_long,
        "nodes": v.nodes,
        "memory_bytes": v.memory_bytes,
        "collector": v.collector.as_ref().map(|c| serde_json::json!({
            "files": c.files.iter().map(|f| serde_json::json!({
                "path": f.path,
                "probe_sites": f.probe_sites,
                "processes": f.processes,
                "idle": f.idle,
            })).collect::<Vec<_>>(),
            "refused": c.refused.iter().map(|r| serde_json::json!({
                "path": r.path,
                "reason": r.reason,
            })).collect::<Vec<_>>(),
            "processes": c.processes,
            "scans": c.scans,
            "last_scan_us": c.last_scan_us,
            "generations_written": c.generations_written,
            "errors": c.errors,
            "last_error": c.last_error,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_proto::v1::JvmMethod;

    #[test]
    fn status_names_attached_idle_and_refused_library_files() {
        let s = Status {
            jvm: Some(jp_proto::v1::JvmStatus {
                collector: Some(UsdtCollector {
                    files: vec![
                        jp_proto::v1::UsdtFile {
                            path: "/opt/jp/lib/jp/libjpagent.so".into(),
                            probe_sites: 1,
                            processes: 2,
                            idle: false,
                        },
                        jp_proto::v1::UsdtFile {
                            path: "/old/libjpagent.so".into(),
                            probe_sites: 1,
                            processes: 0,
                            idle: true,
                        },
                    ],
                    refused: vec![jp_proto::v1::UsdtRefusedFile {
                        path: "/tmp/libjpagent.so".into(),
                        reason: "no USDT probe jp:record".into(),
                    }],
                    processes: 2,
                    scans: 9,
                    last_scan_us: 812,
                    generations_written: 3,
                    errors: 0,
                    last_error: String::new(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = status_jvm_text(&s);
        let usdt: Vec<&str> = text.lines().skip(4).collect();
        assert_eq!(
            usdt,
            [
                "  usdt     2 library file(s), 2 process(es), 9 scans (last 812 us), 3 generations written, 0 errors",
                "    attached /opt/jp/lib/jp/libjpagent.so (2 process(es))",
                "    attached /old/libjpagent.so (idle, kept attached)",
                "    refused  /tmp/libjpagent.so: no USDT probe jp:record",
            ]
        );
        let json = status_jvm_json(&s);
        assert_eq!(json["collector"]["files"][1]["idle"], true);
        assert_eq!(
            json["collector"]["refused"][0]["reason"],
            "no USDT probe jp:record"
        );
    }

    fn jvm(pid: u32, jdk: &str) -> JvmSummary {
        JvmSummary {
            pid,
            main: "Loop".into(),
            jdk_version: jdk.into(),
            bba: "precise".into(),
            threads_live: 1,
            threads_total: 1,
            calls: 10,
            bytecodes: 100,
            nodes: 3,
            attached_since_unix_ms: 1_000,
            complete: true,
            ..Default::default()
        }
    }

    #[test]
    fn list_fits_long_jdk_versions_and_says_when_empty() {
        let l = JvmList {
            jvms: vec![jvm(1, "17.0.15+6-Debian-1deb12u1"), jvm(22, "25")],
        };
        let t = jvm_list_text(&l, 4_000);
        assert_eq!(
            t,
            concat!(
                "    pid  jdk                       bba      threads        calls       bytecodes     nodes  state                main\n",
                "      1  17.0.15+6-Debian-1deb12u1 precise      1/1           10             100         3  attached 3s ago      Loop\n",
                "     22  25                        precise      1/1           10             100         3  attached 3s ago      Loop\n",
            )
        );
        assert_eq!(
            jvm_list_text(&JvmList::default(), 0),
            "no JVMs: jpd has heard from no JVM running jp's agent with profiler=usdt\n"
        );
    }

    #[test]
    fn ages_keep_two_units() {
        assert_eq!(age(999), "0s");
        assert_eq!(age(65_000), "1m 5s");
        assert_eq!(age(3 * 3_600_000 + 120_000 + 5_000), "3h 2m");
        assert_eq!(age(90_061_000), "1d 1h");
    }

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
        };
        let c = |nodes, bytecodes, cpu_ns| JvmCut {
            subtrees: 1,
            nodes,
            calls: nodes,
            bytecodes,
            cpu_ns,
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
        }
    }

    fn joined_jvm() -> JvmSummary {
        let kind = |kind: &str, user_ns, kernel_ns| jp_proto::v1::JvmCpuKind {
            kind: kind.into(),
            user_ns,
            kernel_ns,
        };
        JvmSummary {
            cpu: vec![kind("app", 12_000_000, 300_000), kind("gc", 700_000, 0)],
            cpu_contexts_ns: 12_000_000,
            publishing_threads: 1,
            ..jvm(1, "17")
        }
    }

    #[test]
    fn the_cpu_split_says_when_no_thread_publishes_its_context() {
        let publishing = cpu_split(&joined_jvm());
        assert_eq!(
            publishing.as_deref(),
            Some("cpu 0.01 s: app 94.6 % (on contexts 92.3 %), gc 5.4 %")
        );
        let silent = JvmSummary {
            cpu_contexts_ns: 0,
            publishing_threads: 0,
            threads_live: 2,
            ..joined_jvm()
        };
        assert_eq!(
            cpu_split(&silent).as_deref(),
            Some("cpu 0.01 s: app 94.6 % (none on contexts: no thread publishes its context), gc 5.4 %")
        );
        // Its threads ended: the CPU they had on contexts is still shown as such.
        let ended = JvmSummary {
            publishing_threads: 0,
            threads_live: 0,
            ..joined_jvm()
        };
        assert_eq!(cpu_split(&ended), publishing);
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
}
