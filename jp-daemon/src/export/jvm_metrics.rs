//! The JVM half of `/metrics`: totals per application — the JVM's main class, a set
//! the deployments on a host fix, capped at [`MAX_MAINS`] labels (later ones are
//! `main="other"`) — and the ingest health of the USDT path. Never a pid, thread or
//! method label.
//!
//! JVMs leave the store (exit + retention); their counts must not leave the counters,
//! or Prometheus would see a counter go down (a reset, i.e. a spike in every rate).
//! [`JvmTotals`] keeps what departed JVMs had counted, per label.
//!
//! CPU (per exact context) is counted per kind of thread (`app`, `gc`, `jit`, `vm`), user and
//! kernel mode together: a sample that waits for its context's definition counts as
//! `app` at once and moves from user to kernel mode when it resolves, so only the sum
//! over modes is monotonic.
//!
//! Time off CPU is counted per kind of wait ([`OFFCPU_KINDS`], a fixed set), named from
//! the kernel function a thread blocked in: only once jpd has the kernel's symbols, so
//! that a period never moves from one kind to another between scrapes.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use super::label::label_value;
use super::prometheus::Family;
use crate::store::jvm::{IngestStats, JvmSummary};

/// Distinct `main` label values before new ones become "other".
pub const MAX_MAINS: usize = 50;
/// The kinds of thread CPU is counted by, in exposition order (see
/// [`crate::store::jvm::cpu::ThreadKind`]).
pub const CPU_KINDS: [&str; 4] = ["app", "gc", "jit", "vm"];
/// The kinds of wait time off CPU is counted by, in exposition order (see
/// [`crate::store::jvm::offcpu::reason_kind`]).
pub const OFFCPU_KINDS: [&str; 7] = [
    "lock",
    "sleep",
    "page_fault",
    "network",
    "disk",
    "run_queue",
    "other",
];
/// Names the kind ([`OFFCPU_KINDS`]) of a reason of time off CPU.
pub type OffcpuKindOf<'a> = &'a dyn Fn(u64) -> &'static str;
/// Longest `main` label value; longer names are cut (see [`label_value`]).
#[cfg(test)]
const MAX_MAIN_CHARS: usize = super::label::MAX_LABEL_BYTES;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MainTotals {
    pub calls: u64,
    pub bytecodes: u64,
    pub threads_live: u64,
    pub jvms: u64,
    /// CPU ns by kind ([`CPU_KINDS`]); `None` while no JVM of the label was joined to
    /// the kernel sampler (no series then, rather than a misleading 0).
    pub cpu_ns: Option<[u64; 4]>,
    /// The JVMs' own records the eBPF program refused, by [`REFUSED_REASONS`].
    pub records_refused: [u64; 2],
    /// Time off CPU (ns) under resolved contexts by kind ([`OFFCPU_KINDS`]); `None` while
    /// no JVM of the label had any (or the kinds could not be named yet).
    pub offcpu_ns: Option<[u64; 7]>,
}

/// Why the eBPF program refused a JVM's own record, in exposition order: over its
/// process's rate, or lost to a full ring (charged to the process that sent it).
pub const REFUSED_REASONS: [&str; 2] = ["rate_limited", "ring_full"];

/// A JVM's refused records by [`REFUSED_REASONS`].
fn records_refused(j: &JvmSummary) -> [u64; 2] {
    [j.ring_rate_limited, j.ring_full]
}

fn add_refused(into: &mut [u64; 2], v: [u64; 2]) {
    for (t, v) in into.iter_mut().zip(v) {
        *t = t.saturating_add(v);
    }
}

/// Per-kind CPU ns of a JVM's summary; `None` when the sampler is not joined to it.
fn cpu_by_kind(j: &JvmSummary) -> Option<[u64; 4]> {
    if j.cpu.is_empty() {
        return None;
    }
    let mut v = [0u64; 4];
    for (kind, user, kernel) in &j.cpu {
        if let Some(i) = CPU_KINDS.iter().position(|k| k == kind) {
            v[i] = v[i].saturating_add(user.saturating_add(*kernel));
        }
    }
    Some(v)
}

/// A JVM's time off CPU by kind; `None` when it has none or kinds cannot be named.
fn offcpu_by_kind(j: &JvmSummary, kind_of: Option<OffcpuKindOf>) -> Option<[u64; 7]> {
    let kind_of = kind_of?;
    if j.offcpu_by_reason.is_empty() {
        return None;
    }
    let mut v = [0u64; 7];
    for &(reason, ns) in &j.offcpu_by_reason {
        let kind = kind_of(reason);
        let i = OFFCPU_KINDS
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(OFFCPU_KINDS.len() - 1);
        v[i] = v[i].saturating_add(ns);
    }
    Some(v)
}

fn add_times<const N: usize>(into: &mut Option<[u64; N]>, v: Option<[u64; N]>) {
    if let Some(v) = v {
        let t = into.get_or_insert([0; N]);
        for (t, v) in t.iter_mut().zip(v) {
            *t = t.saturating_add(v);
        }
    }
}

#[derive(Clone, Debug)]
struct Seen {
    label: String,
    attached_since: SystemTime,
    calls: u64,
    bytecodes: u64,
    cpu_ns: Option<[u64; 4]>,
    records_refused: [u64; 2],
    offcpu_ns: Option<[u64; 7]>,
}

/// What the JVMs that left the store had counted, per label.
#[derive(Debug, Default)]
struct Retired {
    calls: u64,
    bytecodes: u64,
    cpu_ns: Option<[u64; 4]>,
    records_refused: [u64; 2],
    offcpu_ns: Option<[u64; 7]>,
}

/// Monotonic per-label sums over every JVM jpd ever held.
#[derive(Debug, Default)]
pub struct JvmTotals {
    seen: HashMap<u32, Seen>,
    retired: BTreeMap<String, Retired>,
}

impl JvmTotals {
    fn label_for(&self, main: &str) -> String {
        let name = if main.is_empty() { "unknown" } else { main };
        // A JVM chooses its main class: bounded and safe before it is a label.
        let name = label_value(name);
        let known = self.retired.contains_key(&name) || self.seen.values().any(|s| s.label == name);
        let mut labels: Vec<&str> = self.retired.keys().map(String::as_str).collect();
        labels.extend(self.seen.values().map(|s| s.label.as_str()));
        labels.sort_unstable();
        labels.dedup();
        if known || labels.len() < MAX_MAINS {
            name
        } else {
            "other".into()
        }
    }

    fn retire(&mut self, s: Seen) {
        let r = self.retired.entry(s.label).or_default();
        r.calls = r.calls.saturating_add(s.calls);
        r.bytecodes = r.bytecodes.saturating_add(s.bytecodes);
        add_times(&mut r.cpu_ns, s.cpu_ns);
        add_refused(&mut r.records_refused, s.records_refused);
        add_times(&mut r.offcpu_ns, s.offcpu_ns);
    }

    /// Folds the store's current list in; returns the totals per label. `offcpu_kind`
    /// names the kinds of time off CPU; `None` while it cannot (no kernel symbols yet).
    pub fn update(
        &mut self,
        list: &[JvmSummary],
        offcpu_kind: Option<OffcpuKindOf>,
    ) -> BTreeMap<String, MainTotals> {
        let present: std::collections::HashSet<u32> = list.iter().map(|j| j.pid).collect();
        let gone: Vec<u32> = self
            .seen
            .keys()
            .filter(|p| !present.contains(p))
            .copied()
            .collect();
        for pid in gone {
            if let Some(s) = self.seen.remove(&pid) {
                self.retire(s);
            }
        }
        let mut out: BTreeMap<String, MainTotals> = BTreeMap::new();
        // Before its HELLO a JVM has counted nothing and its `main` is only a guess
        // from the command line: it gets a label once the agent has named it.
        for j in list.iter().filter(|j| !j.jdk_version.is_empty()) {
            // The same pid for another JVM (reused pid): the old one is retired.
            if let Some(old) = self.seen.get(&j.pid) {
                if old.attached_since != j.attached_since
                    || j.calls < old.calls
                    || j.bytecodes < old.bytecodes
                {
                    if let Some(old) = self.seen.remove(&j.pid) {
                        self.retire(old);
                    }
                }
            }
            let label = match self.seen.get(&j.pid) {
                Some(s) => s.label.clone(),
                None => self.label_for(&j.main),
            };
            self.seen.insert(
                j.pid,
                Seen {
                    label: label.clone(),
                    attached_since: j.attached_since,
                    calls: j.calls,
                    bytecodes: j.bytecodes,
                    cpu_ns: cpu_by_kind(j),
                    records_refused: records_refused(j),
                    offcpu_ns: offcpu_by_kind(j, offcpu_kind),
                },
            );
            let t = out.entry(label).or_default();
            t.calls = t.calls.saturating_add(j.calls);
            t.bytecodes = t.bytecodes.saturating_add(j.bytecodes);
            add_times(&mut t.cpu_ns, cpu_by_kind(j));
            add_refused(&mut t.records_refused, records_refused(j));
            add_times(&mut t.offcpu_ns, offcpu_by_kind(j, offcpu_kind));
            if j.exited_at.is_none() {
                t.threads_live += u64::from(j.threads_live);
                t.jvms += 1;
            }
        }
        for (label, r) in &self.retired {
            let t = out.entry(label.clone()).or_default();
            t.calls = t.calls.saturating_add(r.calls);
            t.bytecodes = t.bytecodes.saturating_add(r.bytecodes);
            add_times(&mut t.cpu_ns, r.cpu_ns);
            add_refused(&mut t.records_refused, r.records_refused);
            add_times(&mut t.offcpu_ns, r.offcpu_ns);
        }
        out
    }
}

/// Appends the JVM families to `out`.
pub fn render(out: &mut String, per_main: &BTreeMap<String, MainTotals>, stats: &IngestStats) {
    per_main_families(out, per_main);
    ingest_families(out, stats);
    if let Some(c) = &stats.collector {
        collector(out, c);
    }
    if let Some(c) = &stats.offcpu {
        offcpu_dropped(out, c);
    }
}

/// The families labelled by main class.
fn per_main_families(out: &mut String, per_main: &BTreeMap<String, MainTotals>) {
    type Get = fn(&MainTotals) -> f64;
    let per: [(&str, &str, &str, Get); 4] = [
        (
            "jp_jvm_calls_total",
            "counter",
            "Method invocations jp's agent counted, by main class (exited JVMs included).",
            |t| t.calls as f64,
        ),
        (
            "jp_jvm_bytecodes_total",
            "counter",
            "Bytecodes executed as jp's agent counted them, by main class (exited JVMs included).",
            |t| t.bytecodes as f64,
        ),
        (
            "jp_jvm_threads",
            "gauge",
            "Live Java threads of running JVMs, by main class.",
            |t| t.threads_live as f64,
        ),
        (
            "jp_jvm_running",
            "gauge",
            "Running JVMs jpd receives profiles from, by main class.",
            |t| t.jvms as f64,
        ),
    ];
    for (name, kind, help, get) in per {
        let mut f = Family::header(out, name, kind, help);
        for (main, t) in per_main {
            f.sample(name, &[("main", main)], get(t));
        }
    }
    let name = "jp_jvm_cpu_seconds_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "CPU time of JVMs jpd's kernel sampler is joined to, by main class and kind of thread (app, gc, jit, vm; exited JVMs included).",
    );
    for (main, t) in per_main {
        let Some(cpu) = t.cpu_ns else { continue };
        for (kind, ns) in CPU_KINDS.iter().zip(cpu) {
            f.sample(name, &[("main", main), ("kind", kind)], ns as f64 / 1e9);
        }
    }
    let name = "jp_jvm_offcpu_seconds_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "Time threads of JVMs spent off CPU under their calling contexts (kernel.offcpu), by main class and kind of wait (lock, sleep, page_fault, network, disk, run_queue: runnable, waiting for a CPU; other). Exited JVMs included.",
    );
    for (main, t) in per_main {
        let Some(off) = t.offcpu_ns else { continue };
        for (kind, ns) in OFFCPU_KINDS.iter().zip(off) {
            f.sample(name, &[("main", main), ("reason", kind)], ns as f64 / 1e9);
        }
    }
    let name = "jp_jvm_records_refused_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "A JVM's own agent records the eBPF program refused, by main class and reason (rate_limited: over its process's records_per_second_per_process; ring_full: lost to a full ring, charged to the process that sent it). Exited JVMs included.",
    );
    for (main, t) in per_main {
        for (reason, n) in REFUSED_REASONS.iter().zip(t.records_refused) {
            f.sample(name, &[("main", main), ("reason", reason)], n as f64);
        }
    }
}

/// The ingestion's health: JVMs held, records decoded, lost, refused and dropped.
fn ingest_families(out: &mut String, stats: &IngestStats) {
    let name = "jp_jvms";
    let mut f = Family::header(
        out,
        name,
        "gauge",
        "JVMs in jpd's store, running or exited (kept for the retention time).",
    );
    f.sample(name, &[("state", "running")], f64::from(stats.jvms_running));
    f.sample(name, &[("state", "exited")], f64::from(stats.jvms_exited));

    for (name, help, v) in [
        (
            "jp_jvm_records_total",
            "Agent records jpd decoded.",
            stats.records,
        ),
        (
            "jp_jvm_record_bytes_total",
            "Bytes of agent records jpd received.",
            stats.bytes,
        ),
        (
            "jp_jvm_records_lost_total",
            "Agent records lost (sequence gaps); each one makes jpd ask for a re-send.",
            stats.lost,
        ),
        (
            "jp_jvm_resync_requests_total",
            "Re-sends jpd asked agents for.",
            stats.resync_requests,
        ),
        (
            "jp_jvm_limit_drops_total",
            "Updates dropped because a per-JVM limit was reached.",
            stats.limit_drops.saturating_add(stats.jvm_limit_drops),
        ),
        (
            "jp_usdt_probe_hits_total",
            "Times an agent's jp:record USDT probe fired.",
            stats.kernel.fired,
        ),
    ] {
        Family::header(out, name, "counter", help).sample(name, &[], v as f64);
    }
    let name = "jp_jvm_records_malformed_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "Agent records jpd rejected as malformed, by reason.",
    );
    let by_reason = stats.malformed.by_reason();
    if by_reason.is_empty() {
        f.sample(name, &[("reason", "none")], 0.0);
    }
    for (reason, n) in by_reason {
        f.sample(name, &[("reason", reason)], n as f64);
    }
    let name = "jp_usdt_records_dropped_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "Records the eBPF program could not pass on, by reason.",
    );
    for (reason, n) in [
        ("ring_full", stats.kernel.ring_full),
        ("fault", stats.kernel.fault),
        ("too_long", stats.kernel.too_long),
    ] {
        f.sample(name, &[("reason", reason)], n as f64);
    }
    for (name, help, v) in [
        (
            "jp_jvm_store_nodes",
            "Calling-context nodes jpd holds for all JVMs.",
            stats.nodes,
        ),
        (
            "jp_jvm_store_memory_bytes",
            "Memory jpd's JVM store uses (estimate).",
            stats.memory_bytes,
        ),
    ] {
        Family::header(out, name, "gauge", help).sample(name, &[], v as f64);
    }
}

/// What the scheduler program could not time (`kernel.offcpu`), by reason.
fn offcpu_dropped(out: &mut String, c: &crate::store::jvm::offcpu::OffcpuCounters) {
    let name = "jp_offcpu_periods_dropped_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "Periods off CPU of joined JVM threads not timed: over the operator's cap, switch-ins without their switch-out (orphan), a reused thread id (stale), an unreadable context slot, or overwritten before jpd read them (lost).",
    );
    for (reason, n) in [
        ("over_cap", c.over_cap),
        ("orphan", c.orphans),
        ("stale", c.stale),
        ("read_failed", c.read_failed),
        ("lost", c.lost),
    ] {
        f.sample(name, &[("reason", reason)], n as f64);
    }
}

/// The USDT collector's own health: a fleet alert on "agent library refused" or
/// "collector errors rising" finds the hosts where JVMs are not seen.
fn collector(out: &mut String, c: &crate::store::jvm::sink::UsdtStatus) {
    let name = "jp_usdt_library_files";
    let mut f = Family::header(
        out,
        name,
        "gauge",
        "Agent library files jpd's probe is attached to (in use or idle), and refused ones.",
    );
    let idle = c.files.iter().filter(|f| f.idle).count();
    f.sample(name, &[("state", "in_use")], (c.files.len() - idle) as f64);
    f.sample(name, &[("state", "idle")], idle as f64);
    f.sample(name, &[("state", "refused")], c.refused.len() as f64);
    for (name, kind, help, v) in [
        (
            "jp_usdt_scans_total",
            "counter",
            "Scans of /proc for processes that map the agent library.",
            c.scans as f64,
        ),
        (
            "jp_usdt_last_scan_seconds",
            "gauge",
            "Duration of the latest /proc scan.",
            c.last_scan.as_secs_f64(),
        ),
        (
            "jp_usdt_collector_errors_total",
            "counter",
            "Attach, scan and control-write failures of the USDT collector.",
            c.errors as f64,
        ),
    ] {
        Family::header(out, name, kind, help).sample(name, &[], v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn jvm(pid: u32, main: &str, calls: u64, bytecodes: u64, since: u64) -> JvmSummary {
        JvmSummary {
            pid,
            ns_pid: None,
            main: main.into(),
            cmdline: String::new(),
            exe: String::new(),
            jdk_version: "17".into(),
            agent_version: String::new(),
            bba: "default".into(),
            granularity: 0,
            jvm_start_unix_ms: 0,
            threads_live: 3,
            threads_total: 3,
            calls,
            bytecodes,
            attached_since: UNIX_EPOCH + Duration::from_secs(since),
            exited_at: None,
            finished: false,
            complete: true,
            incomplete_reason: String::new(),
            records_lost: 0,
            records_malformed: 0,
            limit_drops: 0,
            ring_rate_limited: 0,
            ring_full: 0,
            records: 0,
            nodes: 0,
            methods: 0,
            last_update: None,
            memory_bytes: 0,
            cpu: Vec::new(),
            cpu_pending_ns: 0,
            cpu_unresolved_ns: 0,
            cpu_read_failed_ns: 0,
            cpu_contexts_ns: 0,
            offcpu_by_reason: Vec::new(),
            publishing_threads: 0,
        }
    }

    #[test]
    fn counts_of_departed_jvms_stay_in_their_labels() {
        let mut t = JvmTotals::default();
        let a = t.update(
            &[jvm(10, "app.Main", 5, 50, 1), jvm(11, "app.Main", 1, 10, 1)],
            None,
        );
        assert_eq!(
            a["app.Main"],
            MainTotals {
                calls: 6,
                bytecodes: 60,
                threads_live: 6,
                jvms: 2,
                cpu_ns: None,
                records_refused: [0, 0],
                offcpu_ns: None,
            }
        );
        // 11 leaves the store; 10 goes on counting.
        let a = t.update(&[jvm(10, "app.Main", 7, 70, 1)], None);
        assert_eq!((a["app.Main"].calls, a["app.Main"].bytecodes), (8, 80));
        // pid 10 reused by another JVM: the old counts are kept.
        let a = t.update(&[jvm(10, "app.Main", 2, 2, 99)], None);
        assert_eq!((a["app.Main"].calls, a["app.Main"].bytecodes), (10, 82));
        assert_eq!(a["app.Main"].jvms, 1);
        let a = t.update(&[], None);
        assert_eq!((a["app.Main"].calls, a["app.Main"].jvms), (10, 0));
    }

    /// A JVM's refused records stay in its label when it leaves the store, and a pid
    /// reused by another JVM starts from its own.
    #[test]
    fn refused_records_are_monotonic_per_label() {
        let refused = |pid, limited, full, since| {
            let mut j = jvm(pid, "app.Main", 1, 1, since);
            (j.ring_rate_limited, j.ring_full) = (limited, full);
            j
        };
        let mut t = JvmTotals::default();
        let a = t.update(&[refused(10, 5, 1, 1), refused(11, 2, 0, 1)], None);
        assert_eq!(a["app.Main"].records_refused, [7, 1]);
        let a = t.update(&[refused(10, 6, 1, 1)], None);
        assert_eq!(a["app.Main"].records_refused, [8, 1]);
        let a = t.update(&[refused(10, 0, 3, 99)], None);
        assert_eq!(a["app.Main"].records_refused, [8, 4]);
    }

    /// CPU by kind sums the JVMs of a label, stays when they leave, and is absent for a
    /// label none of whose JVMs was joined.
    #[test]
    fn cpu_by_kind_is_monotonic_per_label() {
        let joined = |pid, app: u64, gc: u64, since| {
            let mut j = jvm(pid, "app.Main", 1, 1, since);
            j.cpu = vec![("app", app, 5), ("gc", gc, 0), ("vm", 1, 1)];
            j
        };
        let mut t = JvmTotals::default();
        let a = t.update(
            &[
                joined(10, 100, 7, 1),
                joined(11, 10, 0, 1),
                jvm(12, "Other", 1, 1, 1),
            ],
            None,
        );
        assert_eq!(a["app.Main"].cpu_ns, Some([100 + 5 + 10 + 5, 7, 0, 4]));
        assert_eq!(a["Other"].cpu_ns, None);
        // 11 leaves; 10 goes on; pid 10 is then reused by another joined JVM.
        let a = t.update(&[joined(10, 200, 7, 1)], None);
        assert_eq!(a["app.Main"].cpu_ns, Some([205 + 15, 7, 0, 4]));
        let a = t.update(&[joined(10, 1, 0, 99)], None);
        assert_eq!(a["app.Main"].cpu_ns, Some([220 + 6, 7, 0, 6]));
        let a = t.update(&[], None);
        assert_eq!(a["app.Main"].cpu_ns, Some([226, 7, 0, 6]));
    }

    /// Time off CPU by kind sums the JVMs of a label and stays when they leave; no series
    /// until the kinds can be named, nor for a label without time off CPU.
    #[test]
    fn offcpu_by_kind_is_monotonic_per_label() {
        // Reason codes of this test: 1 and 2 are futexes, 3 a socket wait, 0 the run queue.
        let kind_of = |reason: u64| match reason {
            0 => "run_queue",
            1 | 2 => "lock",
            3 => "network",
            _ => "no such kind",
        };
        let waited = |pid, reasons: &[(u64, u64)], since| {
            let mut j = jvm(pid, "app.Main", 1, 1, since);
            j.offcpu_by_reason = reasons.to_vec();
            j
        };
        let mut t = JvmTotals::default();
        let list = [
            waited(10, &[(0, 5), (1, 100), (2, 20)], 1),
            waited(11, &[(3, 7), (9, 1)], 1),
            jvm(12, "Other", 1, 1, 1),
        ];
        assert_eq!(t.update(&list, None)["app.Main"].offcpu_ns, None);
        let a = t.update(&list, Some(&kind_of));
        // lock, sleep, page_fault, network, disk, run_queue, other
        assert_eq!(a["app.Main"].offcpu_ns, Some([120, 0, 0, 7, 0, 5, 1]));
        assert_eq!(a["Other"].offcpu_ns, None);
        // 11 leaves; 10 goes on; pid 10 is then reused by another JVM.
        let a = t.update(
            &[waited(10, &[(0, 6), (1, 200), (2, 20)], 1)],
            Some(&kind_of),
        );
        assert_eq!(a["app.Main"].offcpu_ns, Some([220, 0, 0, 7, 0, 6, 1]));
        let a = t.update(&[waited(10, &[(3, 2)], 99)], Some(&kind_of));
        assert_eq!(a["app.Main"].offcpu_ns, Some([220, 0, 0, 9, 0, 6, 1]));
        let a = t.update(&[], Some(&kind_of));
        assert_eq!(a["app.Main"].offcpu_ns, Some([220, 0, 0, 9, 0, 6, 1]));
    }

    #[test]
    fn a_jvm_is_labelled_once_it_said_hello() {
        let mut t = JvmTotals::default();
        let mut early = jvm(5, "/usr/bin/java -cp x App", 0, 0, 1);
        early.jdk_version.clear();
        assert!(t.update(&[early], None).is_empty());
        let a = t.update(&[jvm(5, "App", 3, 30, 1)], None);
        assert_eq!(a.keys().collect::<Vec<_>>(), ["App"]);
    }

    #[test]
    fn labels_are_bounded() {
        let mut t = JvmTotals::default();
        let many: Vec<JvmSummary> = (0..MAX_MAINS as u32 + 5)
            .map(|i| jvm(100 + i, &format!("m{i:03}"), 1, 1, 1))
            .collect();
        let a = t.update(&many, None);
        assert_eq!(a.len(), MAX_MAINS + 1);
        assert_eq!(a["other"].jvms, 5);
        let a = t.update(
            &[jvm(1, &"x".repeat(500), 1, 1, 1), jvm(2, "", 1, 1, 1)],
            None,
        );
        assert!(a.keys().all(|k| k.chars().count() <= MAX_MAIN_CHARS));
        assert!(a.contains_key("other"));
    }

    /// A main class chosen to retitle terminals and bloat series is a bounded, safe label.
    #[test]
    fn hostile_main_classes_become_safe_labels() {
        let mut t = JvmTotals::default();
        let hostile = format!("\x1b]0;pwned\x07{}", "A".repeat(3000));
        let a = t.update(&[jvm(1, &hostile, 1, 1, 1), jvm(2, "Paper", 1, 1, 1)], None);
        assert!(a.contains_key("Paper"));
        let label = a.keys().find(|k| *k != "Paper").unwrap();
        assert!(
            label.len() <= super::super::label::MAX_LABEL_BYTES,
            "{label}"
        );
        assert!(label.starts_with("__0_pwned_AAA"), "{label}");
        assert!(!label.chars().any(|c| c.is_control()), "{label}");
    }

    #[test]
    fn exposition() {
        let per: BTreeMap<String, MainTotals> = [(
            "Paper".to_string(),
            MainTotals {
                calls: 78,
                bytecodes: 624,
                threads_live: 1,
                jvms: 1,
                cpu_ns: Some([2_500_000_000, 1_000_000, 0, 3]),
                records_refused: [12, 0],
                offcpu_ns: Some([1_500_000_000, 0, 0, 0, 0, 2_000_000, 0]),
            },
        )]
        .into();
        let stats = IngestStats {
            records: 4,
            jvms_running: 1,
            collector: Some(crate::store::jvm::sink::UsdtStatus {
                files: vec![crate::store::jvm::sink::FileStatus {
                    path: "/opt/jp/lib/jp/libjpagent.so".into(),
                    dev: (8, 1),
                    inode: 42,
                    sites: 1,
                    users: vec![],
                    idle: true,
                }],
                scans: 12,
                errors: 2,
                last_scan: std::time::Duration::from_millis(3),
                ..Default::default()
            }),
            ..IngestStats::default()
        };
        let mut out = String::new();
        render(&mut out, &per, &stats);
        for line in [
            "# TYPE jp_jvm_calls_total counter\njp_jvm_calls_total{main=\"Paper\"} 78\n",
            "jp_jvm_bytecodes_total{main=\"Paper\"} 624\n",
            "# TYPE jp_jvm_threads gauge\njp_jvm_threads{main=\"Paper\"} 1\n",
            "jp_jvms{state=\"running\"} 1\njp_jvms{state=\"exited\"} 0\n",
            "jp_jvm_records_total 4\n",
            "# TYPE jp_jvm_cpu_seconds_total counter\njp_jvm_cpu_seconds_total{main=\"Paper\",kind=\"app\"} 2.5\njp_jvm_cpu_seconds_total{main=\"Paper\",kind=\"gc\"} 0.001\njp_jvm_cpu_seconds_total{main=\"Paper\",kind=\"jit\"} 0\njp_jvm_cpu_seconds_total{main=\"Paper\",kind=\"vm\"} 0.000000003\n",
            "jp_jvm_records_malformed_total{reason=\"none\"} 0\n",
            "# TYPE jp_jvm_offcpu_seconds_total counter\njp_jvm_offcpu_seconds_total{main=\"Paper\",reason=\"lock\"} 1.5\njp_jvm_offcpu_seconds_total{main=\"Paper\",reason=\"sleep\"} 0\njp_jvm_offcpu_seconds_total{main=\"Paper\",reason=\"page_fault\"} 0\njp_jvm_offcpu_seconds_total{main=\"Paper\",reason=\"network\"} 0\njp_jvm_offcpu_seconds_total{main=\"Paper\",reason=\"disk\"} 0\njp_jvm_offcpu_seconds_total{main=\"Paper\",reason=\"run_queue\"} 0.002\njp_jvm_offcpu_seconds_total{main=\"Paper\",reason=\"other\"} 0\n",
            "# TYPE jp_jvm_records_refused_total counter\njp_jvm_records_refused_total{main=\"Paper\",reason=\"rate_limited\"} 12\njp_jvm_records_refused_total{main=\"Paper\",reason=\"ring_full\"} 0\n",
            "jp_usdt_records_dropped_total{reason=\"ring_full\"} 0\n",
            "jp_usdt_library_files{state=\"in_use\"} 0\njp_usdt_library_files{state=\"idle\"} 1\njp_usdt_library_files{state=\"refused\"} 0\n",
            "# TYPE jp_usdt_scans_total counter\njp_usdt_scans_total 12\n",
            "jp_usdt_last_scan_seconds 0.003\n",
            "jp_usdt_collector_errors_total 2\n",
        ] {
            assert!(out.contains(line), "{line:?} not in:\n{out}");
        }
    }
}
