//! pprof: a gzipped `perftools.profiles.Profile` (github.com/google/pprof,
//! proto/profile.proto), as prost messages with only the fields jp fills declared. Every
//! pprof jp writes goes through these types and [`gzip`]: the Method Call Tree here, and
//! jpd's kernel profile (its own builder, with mappings and addresses).
//!
//! The tree's profile: sample types `calls/count` and `bytecodes/count`; one sample per
//! context, its stack the chain of methods (leaf first); one location per method.
//! Check a file with `go tool pprof -top -sample_index=bytecodes FILE`.

use super::Mct;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::collections::HashMap;
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

/// CPU time per context (jpd's kernel sampler joined to the tree, issue 13): a third
/// sample type `cpu/nanoseconds`. A context's own sample carries its user-mode CPU; its
/// kernel-mode CPU goes to samples one frame deeper, the kernel function that ran, as
/// mixed stacks look in async-profiler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MctCpu {
    /// User-mode CPU (ns) by node index of the tree (missing nodes: 0).
    pub user_ns: Vec<u64>,
    /// (node index, kernel function, ns) of kernel-mode CPU under a context.
    pub kernel: Vec<(usize, Arc<str>, u64)>,
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
        MctCpu { user_ns, kernel }
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
        v
    }
}

/// File name of kernel functions' pprof entries (perf's name for the kernel image).
pub const KERNEL_FILE: &str = "[kernel.kallsyms]";

/// As [`write_pprof`], with CPU per context when `cpu` is given.
pub fn write_pprof_cpu(t: &Mct, cpu: Option<&MctCpu>, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(&gzip(&mct_profile_cpu(t, cpu))?)
}

/// The tree's profile message (not yet encoded).
pub fn mct_profile(t: &Mct) -> Profile {
    mct_profile_cpu(t, None)
}

/// The tree's profile message, with CPU per context when `cpu` is given.
pub fn mct_profile_cpu(t: &Mct, cpu: Option<&MctCpu>) -> Profile {
    let mut strings = Strings::default();
    let count = strings.get("count");
    let mut sample_type: Vec<ValueType> = ["calls", "bytecodes"]
        .into_iter()
        .map(|ty| ValueType {
            r#type: strings.get(ty),
            unit: count,
        })
        .collect();
    if cpu.is_some() {
        sample_type.push(ValueType {
            r#type: strings.get("cpu"),
            unit: strings.get("nanoseconds"),
        });
    }
    let bytecodes = strings.get("bytecodes");

    // One function and one location per distinct method, ids from 1 in first-seen order.
    let mut loc_of: HashMap<&str, u64> = HashMap::new();
    let mut functions: Vec<(u64, usize)> = Vec::new();
    let mut node_loc = vec![0u64; t.nodes.len()];
    t.walk(|i, _| {
        let m: &str = &t.nodes[i].method;
        let next = loc_of.len() as u64 + 1;
        let id = *loc_of.entry(m).or_insert_with(|| {
            functions.push((next, i));
            next
        });
        node_loc[i] = id;
    });

    let mut sample = Vec::new();
    t.walk(|i, _| {
        let mut stack = Vec::new();
        let mut at = Some(i);
        while let Some(j) = at.filter(|&j| j != 0) {
            stack.push(node_loc[j]);
            at = t.nodes[j].parent;
        }
        let n = &t.nodes[i];
        let mut values = vec![value(n.calls), value(n.bytecodes)];
        if let Some(c) = cpu {
            values.push(value(c.user_ns.get(i).copied().unwrap_or(0)));
        }
        sample.push(Sample {
            location_id: stack,
            value: values,
        });
    });
    // Kernel functions under contexts: one location each, after the methods'.
    let mut kernel_loc: HashMap<&str, u64> = HashMap::new();
    let mut kernel_functions: Vec<(u64, &str)> = Vec::new();
    if let Some(c) = cpu {
        let base = loc_of.len() as u64;
        for (node, name, ns) in &c.kernel {
            if *node >= t.nodes.len() {
                continue;
            }
            let next = base + kernel_loc.len() as u64 + 1;
            let id = *kernel_loc.entry(name).or_insert_with(|| {
                kernel_functions.push((next, name));
                next
            });
            let mut stack = vec![id];
            let mut at = Some(*node);
            while let Some(j) = at.filter(|&j| j != 0) {
                stack.push(node_loc[j]);
                at = t.nodes[j].parent;
            }
            sample.push(Sample {
                location_id: stack,
                value: vec![0, 0, value(*ns)],
            });
        }
    }

    let location = functions
        .iter()
        .map(|&(id, _)| id)
        .chain(kernel_functions.iter().map(|&(id, _)| id))
        .map(|id| Location {
            id,
            line: vec![Line { function_id: id }],
            ..Location::default()
        })
        .collect();
    let mut function: Vec<Function> = functions
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
    let kernel_file = if kernel_functions.is_empty() {
        0
    } else {
        strings.get(KERNEL_FILE)
    };
    for &(id, name) in &kernel_functions {
        let n = strings.get(name);
        function.push(Function {
            id,
            name: n,
            system_name: n,
            filename: kernel_file,
        });
    }
    Profile {
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
        ..Profile::default()
    }
}

pub fn write_pprof(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(&gzip(&mct_profile(t))?)
}

/// As [`write_pprof`], with the profile's `time_nanos` (Unix ns) and `duration_nanos`
/// set: a profile of a time window, as Pyroscope reads it.
pub fn write_pprof_timed(
    t: &Mct,
    time_nanos: i64,
    duration_nanos: i64,
    w: &mut dyn Write,
) -> io::Result<()> {
    write_pprof_timed_cpu(t, None, time_nanos, duration_nanos, w)
}

/// As [`write_pprof_timed`], with CPU per context when `cpu` is given.
pub fn write_pprof_timed_cpu(
    t: &Mct,
    cpu: Option<&MctCpu>,
    time_nanos: i64,
    duration_nanos: i64,
    w: &mut dyn Write,
) -> io::Result<()> {
    let p = Profile {
        time_nanos,
        duration_nanos,
        ..mct_profile_cpu(t, cpu)
    };
    w.write_all(&gzip(&p)?)
}

#[cfg(test)]
mod tests {
    use super::super::tests::paper_tree;
    use super::*;
    use flate2::read::GzDecoder;
    use prost::Message as _;
    use std::io::Read;

    #[test]
    fn paper_example_decodes() {
        let mut gz = Vec::new();
        write_pprof(&paper_tree(), &mut gz).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        let p = Profile::decode(raw.as_slice()).unwrap();
        assert_eq!(p, mct_profile(&paper_tree()));
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
        write_pprof_timed(&paper_tree(), -5, 15_000_000_000, &mut gz).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        let p = Profile::decode(raw.as_slice()).unwrap();
        assert_eq!((p.time_nanos, p.duration_nanos), (-5, 15_000_000_000));
        assert_eq!(p.sample, mct_profile(&paper_tree()).sample);
    }
}
