//! One interval's profiles: the kernel profile and each JVM's Method Call Tree, each the
//! difference since the previous collection, labelled for Pyroscope.
//!
//! Series labels (bounded: one series per host for the kernel, one per main class and
//! host for JVMs):
//! - `service_name`: `jp-kernel` for the kernel, the JVM's main class otherwise (a pid
//!   would make a new series at every restart of a service; two JVMs of one main class
//!   on a host simply add up, as Pyroscope sums profiles of a series);
//! - `__name__`: `process_cpu` for the kernel — the name Pyroscope and Grafana give CPU
//!   profiles with the same sample types (samples/count, cpu/nanoseconds), so they
//!   show it as CPU time — and `jvm_mct` for the trees (calls/count, bytecodes/count,
//!   and cpu/nanoseconds when jpd's kernel sampler is joined to the JVM: CPU per exact
//!   context, kernel functions as leaf frames; then offcpu/nanoseconds and
//!   wall/nanoseconds when the JVM has time off CPU (`kernel.offcpu`), the wait's kind
//!   and kernel function as leaf frames — the CPU window's `MctCpu` carries them);
//! - `host`: the host name, unless a static label sets it;
//! - `__delta__ = "false"`: the profile already is a delta, the server must not
//!   difference it again (the label Alloy sets for the same reason);
//! - the static `labels` of the configuration.
//!
//! Exactness: a JVM's baseline is everything pushed for it so far, per calling context
//! (the running maximum of its counts), so a tree that briefly shows less (a re-send)
//! is never pushed twice, and the pushed deltas of a JVM add up to its final tree. CPU's
//! baseline is the JVM's CPU per context at the last push (its counts only grow).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jp_mct::pprof::Profile;
use jp_mct::{Mct, MethodInfo, PprofOptions, TimeRange};

use super::wire::{uuid_v4, LabelPair, RawProfileSeries, RawSample};
use crate::export::label::label_value;
use crate::export::{kernel_pprof, mct_pprof, ExportState};
use crate::store::jvm::{CpuSnapshot, JvmSummary};
use crate::store::read::{self, KernelSince, ReadJvm, ReadWindows};

pub const KERNEL_SERVICE: &str = "jp-kernel";
pub const KERNEL_PROFILE_NAME: &str = "process_cpu";
pub const JVM_PROFILE_NAME: &str = "jvm_mct";
/// `service_name` of a JVM whose main class jpd does not know.
pub const UNKNOWN_MAIN: &str = "unknown-jvm";

/// What was collected before, per source.
pub struct Baselines {
    /// The pusher run these belong to (a disable starts a new one).
    pub epoch: u64,
    kernel: Option<KernelSince>,
    jvms: HashMap<u32, JvmBase>,
    /// The previous collection (or the start of the run).
    prev: SystemTime,
    /// The window store's count at the last push: later windows are pushed next.
    pub(super) windows_seen: u64,
}

struct JvmBase {
    /// Tells a reused pid from the same JVM.
    start_ms: u64,
    generation: Option<u64>,
    pushed: Option<Mct>,
    /// CPU per context pushed so far (when joined).
    cpu: Option<CpuSnapshot>,
    /// End of the last pushed window.
    until: SystemTime,
}

/// What the labels are made of.
pub struct Labeling {
    pub host: String,
    pub labels: BTreeMap<String, String>,
    pub kernel: bool,
    pub jvms: bool,
}

impl Baselines {
    /// Starts a run at `now`: the kernel's counts so far are the baseline (the first
    /// kernel profile is the first interval); JVMs are pushed whole when first seen,
    /// since their trees add up from the JVM's start.
    pub fn new(epoch: u64, sources: &ExportState, now: SystemTime) -> Baselines {
        Baselines {
            epoch,
            kernel: Some(KernelSince::at(
                sources.stores.kernel.kernel_totals().counts,
                now,
            )),
            jvms: HashMap::new(),
            prev: now,
            // Windows kept before this run were pushed by an earlier one, or by none.
            windows_seen: sources.stores.windows.windows_since(u64::MAX).1,
        }
    }
}

pub(super) fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

pub(super) fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn series(name: &str, service: &str, l: &Labeling, profile: Vec<u8>) -> RawProfileSeries {
    series_with(name, service, l, &[], profile)
}

/// A series, with `extra` labels besides the ones every series has.
pub(super) fn series_with(
    name: &str,
    service: &str,
    l: &Labeling,
    extra: &[(&str, &str)],
    profile: Vec<u8>,
) -> RawProfileSeries {
    let mut m: BTreeMap<&str, &str> = BTreeMap::new();
    m.insert("host", &l.host);
    for (k, v) in &l.labels {
        m.insert(k, v);
    }
    for (k, v) in extra {
        m.insert(k, v);
    }
    m.insert("service_name", service);
    m.insert("__name__", name);
    m.insert("__delta__", "false");
    RawProfileSeries {
        labels: m
            .into_iter()
            .map(|(k, v)| LabelPair {
                name: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        samples: vec![RawSample {
            raw_profile: profile,
            id: uuid_v4(),
        }],
    }
}

/// Where one interval's profiles go: each pusher encodes them its own way.
pub trait IntervalSink {
    /// The kernel profile of the interval.
    fn kernel(&mut self, p: &Profile) -> std::io::Result<()>;
    /// A JVM's tree since its last push (`options`: its CPU and time window).
    fn jvm(
        &mut self,
        s: &JvmSummary,
        delta: &Mct,
        options: PprofOptions<'_>,
    ) -> std::io::Result<()>;
}

/// Which sources a pusher sends.
#[derive(Clone, Copy, Debug)]
pub struct Sources {
    pub kernel: bool,
    pub jvms: bool,
}

/// Pyroscope's series: gzipped pprof, labelled.
struct Series<'a> {
    l: &'a Labeling,
    out: Vec<RawProfileSeries>,
}

impl IntervalSink for Series<'_> {
    fn kernel(&mut self, p: &Profile) -> std::io::Result<()> {
        let gz = jp_mct::pprof::gzip(p)?;
        self.out
            .push(series(KERNEL_PROFILE_NAME, KERNEL_SERVICE, self.l, gz));
        Ok(())
    }

    fn jvm(
        &mut self,
        s: &JvmSummary,
        delta: &Mct,
        options: PprofOptions<'_>,
    ) -> std::io::Result<()> {
        let mut profile = Vec::new();
        mct_pprof::write_pprof(delta, options, &mut profile)?;
        let service = service_name(&s.main);
        self.out
            .push(series(JVM_PROFILE_NAME, &service, self.l, profile));
        Ok(())
    }
}

/// Collects the profiles of the interval ending `now` and moves the baselines there.
pub fn collect(
    b: &mut Baselines,
    sources: &ExportState,
    l: &Labeling,
    now: SystemTime,
) -> Vec<RawProfileSeries> {
    let mut sink = Series { l, out: Vec::new() };
    let what = Sources {
        kernel: l.kernel,
        jvms: l.jvms,
    };
    collect_into(b, sources, what, now, &mut sink);
    sink.out
}

/// Collects the profiles of the interval ending `now` into `sink` and moves the
/// baselines there.
pub fn collect_into(
    b: &mut Baselines,
    sources: &ExportState,
    what: Sources,
    now: SystemTime,
    sink: &mut dyn IntervalSink,
) {
    if what.kernel {
        kernel(b, sources, now, sink);
    }
    if what.jvms {
        jvms(b, sources, now, sink);
    }
    b.prev = now;
}

fn kernel(b: &mut Baselines, sources: &ExportState, now: SystemTime, sink: &mut dyn IntervalSink) {
    let view = sources.stores.kernel.kernel_totals();
    let Some(symbols) = view.symbols else {
        // Nothing can be named yet: the window grows until the symbols are loaded.
        return;
    };
    let (window, start) = match &b.kernel {
        Some(since) => since.window(&view.counts),
        None => (view.counts.clone(), b.prev),
    };
    // Offsets from _stext: the server's readers are not the host's root.
    let p = kernel_pprof::window_profile(&window, &view.status, &symbols, start, now);
    match sink.kernel(&p) {
        Ok(()) => b.kernel = Some(KernelSince::at(view.counts, now)),
        Err(e) => log::warn!("cannot encode the kernel profile: {e}"),
    }
}

fn jvms(b: &mut Baselines, sources: &ExportState, now: SystemTime, sink: &mut dyn IntervalSink) {
    let list = sources.stores.jvm.list();
    b.jvms.retain(|pid, _| list.iter().any(|s| s.pid == *pid));
    // Names the kernel frames of the JVMs' CPU per context.
    let symbols = sources.stores.kernel.symbols();
    for s in list {
        if s.main.is_empty() && s.exited_at.is_none() {
            // Not named yet (its hello has not arrived): wait rather than split its
            // counts between two series; nothing is lost, the baseline stays.
            continue;
        }
        let jvm_start = UNIX_EPOCH + Duration::from_millis(s.jvm_start_unix_ms);
        let base = b.jvms.entry(s.pid).or_insert_with(|| JvmBase {
            start_ms: s.jvm_start_unix_ms,
            generation: None,
            pushed: None,
            cpu: None,
            until: jvm_start.max(b.prev),
        });
        if base.start_ms != s.jvm_start_unix_ms {
            *base = JvmBase {
                start_ms: s.jvm_start_unix_ms,
                generation: None,
                pushed: None,
                cpu: None,
                until: jvm_start.max(b.prev),
            };
        }
        // The change counter and the tree at one moment: a change in between would be
        // pushed with the next interval anyway, but never missed.
        let Some((generation, snapshot)) = sources
            .stores
            .jvm
            .snapshot_if_changed(s.pid, base.generation)
        else {
            continue;
        };
        let (whole_delta, cpu) = read::tree_since(
            base.pushed.as_ref(),
            base.cpu.as_ref(),
            &snapshot,
            symbols.as_deref(),
        );
        let (delta, kept) = prune_mapped(&whole_delta, cpu.as_ref());
        let cpu = cpu.map(|c| c.remap(&kept, delta.nodes.len()));
        base.generation = Some(generation);
        if delta.nodes.len() <= 1 {
            continue;
        }
        let start = base.until;
        // The profile's time and duration: Pyroscope takes them as its timestamp.
        let options = PprofOptions {
            cpu: cpu.as_ref(),
            time: Some(TimeRange {
                time_nanos: unix_nanos(start),
                duration_nanos: nanos(now.duration_since(start).unwrap_or_default()),
            }),
        };
        if let Err(e) = sink.jvm(&s, &delta, options) {
            log::warn!("cannot encode JVM {}'s tree: {e}", s.pid);
            base.generation = None;
            continue;
        }
        match &mut base.pushed {
            Some(t) => add_into(t, &delta),
            None => base.pushed = Some(delta),
        }
        if let Some(c) = snapshot.cpu() {
            base.cpu = Some(c.clone());
        }
        base.until = now;
    }
}

/// A JVM's `service_name`: its main class, bounded and safe (the JVM chose it, and
/// could otherwise pose as another service or get the whole push rejected).
pub(crate) fn service_name(main: &str) -> String {
    if main.is_empty() {
        UNKNOWN_MAIN.to_string()
    } else {
        label_value(main)
    }
}

/// `t` without the contexts whose whole subtree counted nothing (a delta is mostly those).
pub fn prune(t: &Mct) -> Mct {
    prune_mapped(t, None).0
}

/// [`prune`], keeping the contexts with CPU in `cpu` too; and where each node of `t` went
/// (`None`: pruned).
pub fn prune_mapped(t: &Mct, cpu: Option<&jp_mct::MctCpu>) -> (Mct, Vec<Option<usize>>) {
    let with_cpu = cpu.map(|c| c.nodes_with_cpu(t.nodes.len()));
    let mut keep = vec![false; t.nodes.len()];
    for i in (1..t.nodes.len()).rev() {
        let n = &t.nodes[i];
        let has_cpu = with_cpu.as_ref().is_some_and(|w| w.get(i) == Some(&true));
        if n.calls != 0 || n.bytecodes != 0 || has_cpu {
            keep[i] = true;
        }
        if keep[i] {
            if let Some(p) = n.parent.filter(|&p| p < i) {
                keep[p] = true;
            }
        }
    }
    let mut out = Mct::new(&t.bba);
    let mut new_index = vec![None; t.nodes.len()];
    if let Some(root) = new_index.first_mut() {
        *root = Some(0);
    }
    for i in 1..t.nodes.len() {
        if !keep[i] {
            continue;
        }
        let n = &t.nodes[i];
        let parent = n
            .parent
            .map_or(0, |p| new_index.get(p).copied().flatten().unwrap_or(0));
        new_index[i] = Some(out.add(
            parent,
            MethodInfo {
                name: Arc::clone(&n.method),
                file: n.file.clone(),
            },
            n.calls,
            n.bytecodes,
        ));
    }
    (out, new_index)
}

/// Adds `delta`'s counts into `base`, context by context (contexts new to `base` are
/// created).
pub fn add_into(base: &mut Mct, delta: &Mct) {
    let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
    while let Some((d, b)) = stack.pop() {
        let Some(dn) = delta.nodes.get(d) else {
            continue;
        };
        // By method name only, as `mct_delta` (the file may arrive later); by an index,
        // not one by one: a node may have a JVM's whole method table as children.
        let mut children: HashMap<Arc<str>, usize> = HashMap::new();
        if let Some(bn) = base.nodes.get(b) {
            for &x in &bn.children {
                if let Some(xn) = base.nodes.get(x) {
                    children.entry(Arc::clone(&xn.method)).or_insert(x);
                }
            }
        }
        for &c in &dn.children {
            let Some(cn) = delta.nodes.get(c) else {
                continue;
            };
            let bc = match children.get(&cn.method).copied() {
                Some(x) => {
                    let n = &mut base.nodes[x];
                    n.calls = n.calls.saturating_add(cn.calls);
                    n.bytecodes = n.bytecodes.saturating_add(cn.bytecodes);
                    if cn.file.is_some() {
                        n.file = cn.file.clone();
                    }
                    x
                }
                None => {
                    let x = base.add(
                        b,
                        MethodInfo {
                            name: Arc::clone(&cn.method),
                            file: cn.file.clone(),
                        },
                        cn.calls,
                        cn.bytecodes,
                    );
                    children.insert(Arc::clone(&cn.method), x);
                    x
                }
            };
            stack.push((c, bc));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use prost::Message;
    use std::io::Read as _;

    fn info(name: &str) -> MethodInfo {
        MethodInfo {
            name: Arc::from(name),
            file: None,
        }
    }

    /// (path, calls, bytecodes) of every node but the root, sorted.
    fn rows(t: &Mct) -> Vec<(String, u64, u64)> {
        let mut out = Vec::new();
        for (i, n) in t.nodes.iter().enumerate().skip(1) {
            let mut path = vec![n.method.to_string()];
            let mut at = n.parent;
            while let Some(p) = at.filter(|&p| p != 0) {
                path.push(t.nodes[p].method.to_string());
                at = t.nodes[p].parent;
            }
            path.reverse();
            out.push((path.join(">"), t.nodes[i].calls, t.nodes[i].bytecodes));
        }
        out.sort();
        out
    }

    #[test]
    fn prune_keeps_paths_to_counts() {
        let mut t = Mct::new("precise");
        let m = t.add(0, info("main"), 0, 0);
        let f = t.add(m, info("f"), 0, 0);
        t.add(f, info("g"), 0, 3);
        let h = t.add(m, info("h"), 0, 0);
        t.add(h, info("k"), 0, 0);
        let p = prune(&t);
        assert_eq!(
            rows(&p),
            [
                ("main".to_string(), 0, 0),
                ("main>f".to_string(), 0, 0),
                ("main>f>g".to_string(), 0, 3)
            ]
        );
        assert_eq!(prune(&Mct::new("x")).nodes.len(), 1);
    }

    /// A window's CPU follows its contexts through the delta and the pruning: a context
    /// whose counts did not move but whose CPU did is pushed, with its kernel function.
    #[test]
    fn cpu_follows_its_contexts_into_the_pushed_delta() {
        let mut before = Mct::new("precise");
        let m = before.add(0, info("main"), 1, 1);
        before.add(m, info("idle"), 1, 1);
        before.add(m, info("read"), 1, 1);
        let mut after = before.clone();
        let f = after.add(m, info("f"), 2, 20);
        let read = after.nodes[m].children[1];
        assert_eq!(after.nodes[read].method.as_ref(), "read");
        // CPU indexed by `after`'s nodes: f ran 3 µs in user mode; read() was in the
        // kernel for 5 µs without a new call or bytecode.
        let mut user_ns = vec![0; after.nodes.len()];
        user_ns[f] = 3_000;
        let cpu = jp_mct::MctCpu {
            user_ns,
            kernel: vec![(read, Arc::from("read_zero"), 5_000)],
            ..jp_mct::MctCpu::default()
        };
        let (whole, map) = jp_mct::mct_delta_mapped(&before, &after);
        let cpu = cpu.remap(&map, whole.nodes.len());
        let (delta, kept) = prune_mapped(&whole, Some(&cpu));
        let cpu = cpu.remap(&kept, delta.nodes.len());
        assert_eq!(
            rows(&delta),
            [
                ("main".to_string(), 0, 0),
                ("main>f".to_string(), 2, 20),
                ("main>read".to_string(), 0, 0),
            ]
        );
        let index_of = |name: &str| {
            (1..delta.nodes.len())
                .find(|&i| delta.nodes[i].method.as_ref() == name)
                .unwrap()
        };
        assert_eq!(cpu.user_ns[index_of("f")], 3_000);
        assert_eq!(cpu.user_ns.iter().sum::<u64>(), 3_000);
        assert_eq!(
            cpu.kernel,
            [(index_of("read"), Arc::from("read_zero"), 5_000)]
        );
        // Without CPU, the same delta prunes read() away.
        assert_eq!(prune(&whole).nodes.len(), 3);
    }

    /// A tree that goes back (a re-send) and forward again: the pushed deltas add up to
    /// the final tree, never more.
    #[test]
    fn deltas_against_the_running_maximum_add_up_to_the_last_tree() {
        let tree = |f: u64, g: u64| {
            let mut t = Mct::new("precise");
            let m = t.add(0, info("main"), 1, 1);
            t.add(m, info("f"), f, 10 * f);
            if g > 0 {
                t.add(m, info("g"), g, g);
            }
            t
        };
        let mut pushed: Option<Mct> = None;
        let mut total = Mct::new("precise");
        for t in [tree(2, 0), tree(1, 5), tree(4, 5), tree(4, 7)] {
            let before = pushed.clone().unwrap_or_else(|| Mct::new("precise"));
            let d = prune(&jp_mct::mct_delta(&before, &t));
            add_into(&mut total, &d);
            match &mut pushed {
                Some(p) => add_into(p, &d),
                None => pushed = Some(d),
            }
        }
        assert_eq!(rows(&total), rows(&tree(4, 7)));
    }

    /// A method's file known only later is the same context, not a new one.
    #[test]
    fn a_file_arriving_later_is_the_same_context() {
        let tree = |calls: u64, file: Option<&str>| {
            let mut t = Mct::new("precise");
            t.add(
                0,
                MethodInfo {
                    name: Arc::from("M.main"),
                    file: file.map(Arc::from),
                },
                calls,
                calls,
            );
            t
        };
        let first = prune(&jp_mct::mct_delta(&Mct::new("precise"), &tree(1, None)));
        let mut pushed = first.clone();
        let second = prune(&jp_mct::mct_delta(&pushed, &tree(3, Some("M.java"))));
        assert_eq!(rows(&second), [("M.main".to_string(), 2, 2)]);
        add_into(&mut pushed, &second);
        assert_eq!(rows(&pushed), [("M.main".to_string(), 3, 3)]);
        assert_eq!(pushed.nodes[1].file.as_deref(), Some("M.java"));
    }

    #[test]
    fn service_names_are_bounded_and_safe() {
        assert_eq!(service_name("FleetPaper"), "FleetPaper");
        assert_eq!(service_name(""), UNKNOWN_MAIN);
        let hostile = service_name(&format!("\x1b]0;pwned\x07{}", "A".repeat(3000)));
        assert!(hostile.len() <= 128, "{hostile}");
        assert!(hostile.starts_with("__0_pwned_AAA"), "{hostile}");
        // Posing as another service by a lookalike or a control character fails.
        assert_ne!(service_name("FleetPaper\u{200b}"), "FleetPaper");
    }

    #[test]
    fn timed_pprof_sets_time_and_duration() {
        let mut t = Mct::new("precise");
        t.add(0, info("main"), 1, 2);
        let options = PprofOptions {
            cpu: None,
            time: Some(TimeRange {
                time_nanos: 1_700_000_000_000_000_000,
                duration_nanos: 15_000_000_000,
            }),
        };
        let mut gz = Vec::new();
        jp_mct::write_pprof(&t, options, &mut gz).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(gz.as_slice()).read_to_end(&mut raw).unwrap();
        let p = jp_mct::pprof::Profile::decode(raw.as_slice()).unwrap();
        assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
        assert_eq!(p.duration_nanos, 15_000_000_000);
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].value, [1, 2]);
    }
}
