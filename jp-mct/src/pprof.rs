//! pprof: a gzipped `perftools.profiles.Profile` (github.com/google/pprof,
//! proto/profile.proto), as prost messages with only the fields jp fills declared. Every
//! pprof jp writes goes through these types and [`gzip`]: the Method Call Tree here, and
//! jpd's kernel profile (its own builder, with mappings and addresses).
//!
//! The tree's profile: sample types `calls/count` and `bytecodes/count`; one sample per
//! context, its stack the chain of methods (leaf first); one location per method.
//! [`write_pprof`] is its one writer; what else a profile carries (CPU per context, a
//! time window) is said by one [`PprofOptions`]. A stack keeps at most
//! [`MAX_STACK_FRAMES`] frames: a hostile or runaway recursion would otherwise make the
//! profile grow with the square of its depth (see [`stacks`]).
//! Check a file with `go tool pprof -top -sample_index=bytecodes FILE`.

mod stacks;

use super::{Mct, MAX_STACK_FRAMES};
use flate2::write::GzEncoder;
use flate2::Compression;
pub use stacks::folded_frame_name;
use stacks::{ContextStacks, OtherFrame, OtherFrames};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::sync::Arc;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// The profile's string table: [`Strings::get`] gives a string's index, adding it the
/// first time; index 0 is the empty string, as pprof requires.
pub struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Strings {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.get("");
        s
    }
}

impl Strings {
    pub fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = i64::try_from(self.table.len()).unwrap_or(i64::MAX);
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    /// The table, for [`Profile::string_table`].
    pub fn into_table(self) -> Vec<String> {
        self.table
    }
}

/// A count as a pprof value (an `int64`): beyond `i64::MAX` it stays `i64::MAX`.
pub fn value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Encodes and gzips `p`, as `go tool pprof` and Pyroscope expect.
pub fn gzip(p: &Profile) -> io::Result<Vec<u8>> {
    let raw = prost::Message::encode_to_vec(p);
    let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 2), Compression::default());
    gz.write_all(&raw)?;
    gz.finish()
}

/// CPU time per context (jpd's kernel sampler joined to the tree): a third
/// sample type `cpu/nanoseconds`. A context's own sample carries its user-mode CPU; its
/// kernel-mode CPU goes to samples one frame deeper, the kernel function that ran, as
/// mixed stacks look in async-profiler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MctCpu {
    /// User-mode CPU (ns) by node index of the tree (missing nodes: 0).
    pub user_ns: Vec<u64>,
    /// (node index, kernel function, ns) of kernel-mode CPU under a context.
    pub kernel: Vec<(usize, Arc<str>, u64)>,
    /// Time off CPU under contexts (jpd's scheduler program): with any, the profile has
    /// two more sample types, `offcpu` and `wall` (= cpu + offcpu), in nanoseconds.
    pub offcpu: Vec<OffcpuTime>,
    /// Off-CPU time (ns) of idle contexts (threads waiting for work) left out of
    /// `offcpu`: said in the profile's comments and the JSON's document.
    pub offcpu_idle_hidden_ns: u64,
}

/// Time a context spent off CPU for one reason.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OffcpuTime {
    /// Node index of the context.
    pub node: usize,
    /// The kind of wait ("lock", "network", "disk", "sleep", "run_queue"…).
    pub kind: Arc<str>,
    /// The kernel function the thread blocked in (or what stands for it).
    pub function: Arc<str>,
    pub ns: u64,
}

impl MctCpu {
    /// The same CPU on another tree of `nodes` nodes, `map[i]` being the new index of
    /// node `i` (`None`: the node is not in the new tree, and neither is its CPU).
    pub fn remap(&self, map: &[Option<usize>], nodes: usize) -> MctCpu {
        let at = |i: usize| map.get(i).copied().flatten().filter(|&j| j < nodes);
        let mut user_ns = vec![0u64; nodes];
        for (i, &ns) in self.user_ns.iter().enumerate() {
            if let Some(j) = at(i) {
                user_ns[j] = user_ns[j].saturating_add(ns);
            }
        }
        let mut kernel: Vec<(usize, Arc<str>, u64)> = self
            .kernel
            .iter()
            .filter_map(|(i, f, ns)| Some((at(*i)?, Arc::clone(f), *ns)))
            .collect();
        kernel.sort();
        let mut offcpu: Vec<OffcpuTime> = self
            .offcpu
            .iter()
            .filter_map(|o| {
                Some(OffcpuTime {
                    node: at(o.node)?,
                    ..o.clone()
                })
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

    /// Which of a tree's `nodes` nodes have CPU of their own.
    pub fn nodes_with_cpu(&self, nodes: usize) -> Vec<bool> {
        let mut v = vec![false; nodes];
        for (i, &ns) in self.user_ns.iter().enumerate() {
            if ns > 0 {
                if let Some(b) = v.get_mut(i) {
                    *b = true;
                }
            }
        }
        for (i, _, ns) in &self.kernel {
            if let Some(b) = v.get_mut(*i).filter(|_| *ns > 0) {
                *b = true;
            }
        }
        for o in &self.offcpu {
            if let Some(b) = v.get_mut(o.node).filter(|_| o.ns > 0) {
                *b = true;
            }
        }
        v
    }
}

/// File name of kernel functions' pprof entries (perf's name for the kernel image).
pub const KERNEL_FILE: &str = "[kernel.kallsyms]";

/// A profile's time window, as Pyroscope reads it: its start (Unix ns) and length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub time_nanos: i64,
    pub duration_nanos: i64,
}

/// What a tree's profile carries besides the tree's counts;
/// `PprofOptions::default()` is the tree alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct PprofOptions<'a> {
    /// CPU per context: a third sample type, `cpu/nanoseconds`.
    pub cpu: Option<&'a MctCpu>,
    /// The profile's `time_nanos` and `duration_nanos`: a profile of a time window.
    pub time: Option<TimeRange>,
}

/// Writes the tree's profile, gzipped: every pprof of a Method Call Tree is written here.
pub fn write_pprof(t: &Mct, options: PprofOptions<'_>, w: &mut dyn Write) -> io::Result<()> {
    write_pprof_folding(t, options, w).map(|_| ())
}

/// [`write_pprof`], returning how many contexts were deeper than
/// [`MAX_STACK_FRAMES`] and went into folded samples (see [`stacks`]).
pub fn write_pprof_folding(
    t: &Mct,
    options: PprofOptions<'_>,
    w: &mut dyn Write,
) -> io::Result<u64> {
    let (profile, folded) = mct_profile(t, options);
    w.write_all(&gzip(&profile)?)?;
    Ok(folded)
}

/// The tree's profile message (not yet encoded), and the contexts folded.
pub(crate) fn mct_profile(t: &Mct, options: PprofOptions<'_>) -> (Profile, u64) {
    let mut strings = Strings::default();
    let with_offcpu = options.cpu.is_some_and(|c| !c.offcpu.is_empty());
    let mut sample_type = sample_types(&mut strings, options.cpu.is_some());
    if with_offcpu {
        sample_type.extend(["offcpu", "wall"].map(|ty| ValueType {
            r#type: strings.get(ty),
            unit: strings.get("nanoseconds"),
        }));
    }
    // Both are in the table already (the sample types').
    let (count, bytecodes) = (strings.get("count"), strings.get("bytecodes"));
    let methods = MethodLocations::of(t);
    let mut others = OtherFrames::after(methods.first_node.len() as u64);
    let mut contexts = ContextStacks::walk(t, &methods.of_node, options.cpu);
    let mut sample = std::mem::take(&mut contexts.samples);
    sample.extend(contexts.folded_samples(&mut others));
    if let Some(c) = options.cpu {
        kernel_samples(t, c, &methods, &contexts, &mut others, &mut sample);
        if with_offcpu {
            // Wall time: a sample's CPU, and the off-CPU samples' time.
            for s in &mut sample {
                s.value.resize(3, 0);
                let cpu = s.value[2];
                s.value.extend([0, cpu]);
            }
            offcpu_samples(t, c, &methods, &contexts, &mut others, &mut sample);
        }
    }
    let location = methods
        .first_node
        .iter()
        .map(|&(id, _)| id)
        .chain(others.ids())
        .map(|id| Location {
            id,
            line: vec![Line { function_id: id }],
            ..Location::default()
        })
        .collect();
    let function = functions(t, &methods, &others, &mut strings);
    let hidden = options.cpu.map_or(0, |c| c.offcpu_idle_hidden_ns);
    let comment = if hidden > 0 {
        vec![strings.get(&idle_comment(hidden))]
    } else {
        Vec::new()
    };
    let time = options.time.unwrap_or_default();
    let profile = Profile {
        sample_type,
        sample,
        location,
        function,
        // One bytecode per unit of the bytecodes sample.
        period_type: Some(ValueType {
            r#type: bytecodes,
            unit: count,
        }),
        period: 1,
        default_sample_type: bytecodes,
        string_table: strings.into_table(),
        time_nanos: time.time_nanos,
        duration_nanos: time.duration_nanos,
        comment,
        ..Profile::default()
    };
    (profile, contexts.folded_contexts)
}

/// The profile's comment when idle contexts' off-CPU time was left out.
pub fn idle_comment(hidden_ns: u64) -> String {
    format!("offcpu: {hidden_ns} ns of idle threads (waiting for work) not shown; --all shows them")
}

/// `calls/count`, `bytecodes/count`, and `cpu/nanoseconds` when the profile has CPU.
fn sample_types(strings: &mut Strings, with_cpu: bool) -> Vec<ValueType> {
    let count = strings.get("count");
    let mut types: Vec<ValueType> = ["calls", "bytecodes"]
        .into_iter()
        .map(|ty| ValueType {
            r#type: strings.get(ty),
            unit: count,
        })
        .collect();
    if with_cpu {
        types.push(ValueType {
            r#type: strings.get("cpu"),
            unit: strings.get("nanoseconds"),
        });
    }
    types
}

/// One function and one location per distinct method, ids from 1 in walk order (the
/// same id for both).
struct MethodLocations {
    /// The location of each node's method (the root's: 0).
    of_node: Vec<u64>,
    /// (location id, the first node of its method), in id order.
    first_node: Vec<(u64, usize)>,
}

impl MethodLocations {
    fn of(t: &Mct) -> MethodLocations {
        let mut id_of: HashMap<&str, u64> = HashMap::new();
        let mut first_node: Vec<(u64, usize)> = Vec::new();
        let mut of_node = vec![0u64; t.nodes.len()];
        t.walk(|i, _| {
            let next = id_of.len() as u64 + 1;
            let id = *id_of.entry(&t.nodes[i].method).or_insert_with(|| {
                first_node.push((next, i));
                next
            });
            of_node[i] = id;
        });
        MethodLocations {
            of_node,
            first_node,
        }
    }
}

/// The kernel-mode CPU under contexts: one sample per (context, kernel function), its
/// stack the kernel function's location over the context's (folded contexts: over their
/// folded sample's stack, one sample per (folded stack, kernel function)).
fn kernel_samples(
    t: &Mct,
    cpu: &MctCpu,
    methods: &MethodLocations,
    contexts: &ContextStacks,
    others: &mut OtherFrames,
    sample: &mut Vec<Sample>,
) {
    let mut folded: BTreeMap<(usize, u64), u64> = BTreeMap::new();
    for (node, name, ns) in &cpu.kernel {
        if *node >= t.nodes.len() {
            continue;
        }
        let id = others.id(OtherFrame::Kernel, name);
        if let Some(group) = contexts.group_of(*node) {
            let at = folded.entry((group, id)).or_insert(0);
            *at = at.saturating_add(*ns);
            continue;
        }
        let mut stack = vec![id];
        stack.extend(contexts.stack_of(t, &methods.of_node, *node));
        sample.push(Sample {
            location_id: stack,
            value: vec![0, 0, value(*ns)],
        });
    }
    for ((group, id), ns) in folded {
        let mut stack = vec![id];
        stack.extend(contexts.folded_stack(group, others));
        sample.push(Sample {
            location_id: stack,
            value: vec![0, 0, value(ns)],
        });
    }
}

/// The time off CPU under contexts: one sample per (context, reason), its stack the
/// kernel function the thread blocked in over a frame naming the kind of wait, over the
/// context's stack (as async-profiler's wall-clock stacks end in the blocking call).
fn offcpu_samples(
    t: &Mct,
    cpu: &MctCpu,
    methods: &MethodLocations,
    contexts: &ContextStacks,
    others: &mut OtherFrames,
    sample: &mut Vec<Sample>,
) {
    for o in &cpu.offcpu {
        if o.node >= t.nodes.len() {
            continue;
        }
        let mut stack = vec![
            others.id(OtherFrame::Kernel, &o.function),
            others.id(OtherFrame::Folded, &format!("off-CPU: {}", o.kind)),
        ];
        match contexts.group_of(o.node) {
            Some(group) => stack.extend(contexts.folded_stack(group, others)),
            None => stack.extend(contexts.stack_of(t, &methods.of_node, o.node)),
        }
        let ns = value(o.ns);
        sample.push(Sample {
            location_id: stack,
            value: vec![0, 0, 0, ns, ns],
        });
    }
}

/// The methods' functions, then the other frames' (kernel functions in [`KERNEL_FILE`]).
fn functions(
    t: &Mct,
    methods: &MethodLocations,
    others: &OtherFrames,
    strings: &mut Strings,
) -> Vec<Function> {
    let mut function: Vec<Function> = methods
        .first_node
        .iter()
        .map(|&(id, node)| {
            let n = &t.nodes[node];
            Function {
                id,
                // name: readable Java form (pprof shortens it further); system_name: the
                // exact JVM name as in the JSON format.
                name: strings.get(&super::java_signature(&n.method)),
                system_name: strings.get(&n.method),
                filename: n.file.as_deref().map_or(0, |f| strings.get(f)),
            }
        })
        .collect();
    for (id, kind, name) in others.frames() {
        let n = strings.get(name);
        let filename = match kind {
            OtherFrame::Kernel => strings.get(KERNEL_FILE),
            OtherFrame::Folded => 0,
        };
        function.push(Function {
            id,
            name: n,
            system_name: n,
            filename,
        });
    }
    function
}
#[cfg(test)]
mod tests {
    use super::super::tests::{chain, paper_tree};
    use super::*;
    use flate2::read::GzDecoder;
    use prost::Message as _;
    use std::io::Read;

    #[test]
    fn offcpu_time_adds_offcpu_and_wall_types_with_the_reason_as_leaf_frames() {
        let t = paper_tree();
        let f = (0..t.nodes.len())
            .find(|&i| t.nodes[i].method.as_ref() == "Paper.f()V")
            .unwrap();
        let mut user_ns = vec![0; t.nodes.len()];
        user_ns[f] = 7;
        let cpu = MctCpu {
            user_ns,
            offcpu: vec![OffcpuTime {
                node: f,
                kind: Arc::from("lock"),
                function: Arc::from("futex_do_wait"),
                ns: 1000,
            }],
            ..MctCpu::default()
        };
        let options = PprofOptions {
            cpu: Some(&cpu),
            ..PprofOptions::default()
        };
        let p = mct_profile(&t, options).0;
        let s = |i: i64| p.string_table[i as usize].clone();
        let types: Vec<String> = p.sample_type.iter().map(|t| s(t.r#type)).collect();
        assert_eq!(types, ["calls", "bytecodes", "cpu", "offcpu", "wall"]);
        let fname: HashMap<u64, String> = p.function.iter().map(|f| (f.id, s(f.name))).collect();
        let got: Vec<(String, Vec<i64>)> = p
            .sample
            .iter()
            .filter(|smp| smp.value[2..].iter().any(|&v| v > 0))
            .map(|smp| {
                let stack: Vec<&str> = smp
                    .location_id
                    .iter()
                    .map(|id| fname[id].as_str())
                    .collect();
                (stack.join("<"), smp.value.clone())
            })
            .collect();
        // The context's own sample: its CPU is its wall time; the off-CPU sample: the
        // kernel function over the kind, over the context.
        assert_eq!(
            got,
            [
                (
                    "Paper.f()<Paper.main(java.lang.String[])".to_string(),
                    vec![1, 106, 7, 0, 7]
                ),
                (
                    "futex_do_wait<off-CPU: lock<Paper.f()<Paper.main(java.lang.String[])"
                        .to_string(),
                    vec![0, 0, 0, 1000, 1000]
                ),
            ]
        );
    }

    #[test]
    fn paper_example_decodes() {
        let mut gz = Vec::new();
        write_pprof(&paper_tree(), PprofOptions::default(), &mut gz).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        let p = Profile::decode(raw.as_slice()).unwrap();
        assert_eq!(p, mct_profile(&paper_tree(), PprofOptions::default()).0);
        assert_eq!(p.string_table[0], "");
        let s = |i: i64| p.string_table[i as usize].clone();
        let types: Vec<(String, String)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(
            types,
            vec![
                ("calls".into(), "count".into()),
                ("bytecodes".into(), "count".into())
            ]
        );
        assert_eq!(s(p.default_sample_type), "bytecodes");
        assert_eq!(p.period, 1);
        // functions: id -> system name
        let fname: HashMap<u64, String> = p
            .function
            .iter()
            .map(|f| (f.id, s(f.system_name)))
            .collect();
        assert_eq!(fname.len(), 5); // h appears in two contexts but is one function
        assert!(p
            .location
            .iter()
            .all(|l| l.line.len() == 1 && fname.contains_key(&l.line[0].function_id)));
        // samples: stack names (leaf first) -> values
        let got: Vec<(String, Vec<i64>)> = p
            .sample
            .iter()
            .map(|smp| {
                let stack: Vec<String> =
                    smp.location_id.iter().map(|id| fname[id].clone()).collect();
                (stack.join("<"), smp.value.clone())
            })
            .collect();
        assert!(got.contains(&(
            "Paper.h()V<Paper.g(I)V<Paper.f()V<Paper.main([Ljava/lang/String;)V".into(),
            vec![55, 55]
        )));
        assert!(got.contains(&("Paper.main([Ljava/lang/String;)V".into(), vec![1, 5])));
        assert_eq!(got.len(), 6);
    }

    #[test]
    fn timed_profile_carries_its_window() {
        let mut gz = Vec::new();
        let time = TimeRange {
            time_nanos: -5,
            duration_nanos: 15_000_000_000,
        };
        let options = PprofOptions {
            time: Some(time),
            ..PprofOptions::default()
        };
        write_pprof(&paper_tree(), options, &mut gz).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        let p = Profile::decode(raw.as_slice()).unwrap();
        assert_eq!((p.time_nanos, p.duration_nanos), (-5, 15_000_000_000));
        assert_eq!(
            p.sample,
            mct_profile(&paper_tree(), PprofOptions::default()).0.sample
        );
    }

    fn decode(gz: &[u8]) -> (Profile, usize) {
        let mut raw = Vec::new();
        GzDecoder::new(gz).read_to_end(&mut raw).unwrap();
        (Profile::decode(raw.as_slice()).unwrap(), raw.len())
    }

    #[test]
    fn a_deep_chain_folds_below_the_cap_into_one_marked_frame() {
        const DEPTH: usize = 100_000;
        let folded = DEPTH - MAX_STACK_FRAMES;
        let t = chain(DEPTH);
        // Kernel CPU at the cap's context, below it (folded) and far below it.
        let cap_node = MAX_STACK_FRAMES;
        let cpu = MctCpu {
            user_ns: vec![5; DEPTH + 1],
            kernel: vec![
                (cap_node, Arc::from("read"), 7),
                (cap_node + 1, Arc::from("read"), 11),
                (DEPTH, Arc::from("read"), 13),
            ],
            ..MctCpu::default()
        };
        let options = PprofOptions {
            cpu: Some(&cpu),
            ..PprofOptions::default()
        };
        let mut gz = Vec::new();
        assert_eq!(
            write_pprof_folding(&t, options, &mut gz).unwrap(),
            folded as u64
        );
        let (p, raw) = decode(&gz);
        // 2048²/2 location ids of 2 bytes ≈ 4.2 MB (uncapped: 100 000²/2 · 3 B = 15 GB).
        assert!(raw < 6 << 20, "{raw} bytes");
        let s = |i: i64| p.string_table[i as usize].clone();
        let name: HashMap<u64, String> = p.function.iter().map(|f| (f.id, s(f.name))).collect();
        assert_eq!(p.sample.len(), MAX_STACK_FRAMES + 1 + 2);
        for (k, smp) in p.sample[..MAX_STACK_FRAMES].iter().enumerate() {
            assert_eq!(smp.location_id.len(), k + 1, "sample {k}");
            assert_eq!(name[&smp.location_id[0]], format!("m{}", k % 1000));
            assert_eq!(smp.value, vec![1, 1, 5]);
        }
        let marked = format!("[jp: {folded} deeper frames folded]");
        let f = folded as i64;
        let last = &p.sample[MAX_STACK_FRAMES];
        assert_eq!(last.location_id.len(), MAX_STACK_FRAMES + 1);
        assert_eq!(name[&last.location_id[0]], marked);
        assert_eq!(
            last.location_id[1..],
            p.sample[MAX_STACK_FRAMES - 1].location_id[..]
        );
        assert_eq!(last.value, vec![f, f, 5 * f]);
        // The cap's own context keeps its kernel sample; the folded ones add up.
        let kernel: Vec<(String, String, usize, Vec<i64>)> = p.sample[MAX_STACK_FRAMES + 1..]
            .iter()
            .map(|smp| {
                let ids = &smp.location_id;
                (
                    name[&ids[0]].clone(),
                    name[&ids[1]].clone(),
                    ids.len(),
                    smp.value.clone(),
                )
            })
            .collect();
        let cap_method = format!("m{}", (MAX_STACK_FRAMES - 1) % 1000);
        assert_eq!(
            kernel,
            vec![
                (
                    "read".into(),
                    cap_method,
                    MAX_STACK_FRAMES + 1,
                    vec![0, 0, 7]
                ),
                ("read".into(), marked, MAX_STACK_FRAMES + 2, vec![0, 0, 24]),
            ]
        );
    }
}
