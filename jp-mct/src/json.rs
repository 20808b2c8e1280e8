//! `jp-mct/1` JSON: `{"format": "jp-mct/1", "bba": B, "root": {"children": [NODE, ...]}}`,
//! `NODE = {"method": M, "calls": n, "bytecodes": n, "children": [...]}`, one node per line,
//! children sorted (see [`Mct::sorted_children`]) so equal trees give identical bytes.
//!
//! CPU per context (jpd's kernel sampler joined to the JVM) grows the format compatibly
//! (readers skip unknown keys): the document says `"cpu_unit": "nanoseconds"`, and a
//! node with CPU has, after its counts, `"cpu": {"user": n, "kernel": n, "kernel_functions":
//! {F: n, ...}}` (self time of the context; the kernel functions under it, by name).
//! A node with time off CPU (jpd's scheduler program) has, after that, `"offcpu": {"ns":
//! n, "kinds": {KIND: n, ...}, "functions": {F: n, ...}}` (time the context's threads
//! spent off CPU, by kind of wait and by the kernel function they blocked in). When the
//! off-CPU time of idle contexts was left out, the document says how much after the
//! unit: `"offcpu_idle_hidden_ns": n`. Time off CPU while no instrumented frame ran (the
//! root context: a pool thread between tasks) is the root's: `"root": {"offcpu": {...},
//! "children": [...]}`.
//! Without CPU the bytes are exactly the agent's.

use super::{Mct, MctCpu};
use std::collections::HashMap;
use std::io::{self, Write};

pub fn write_json(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    write_json_cpu(t, None, w)
}

/// Kernel CPU of one context: (function, ns), by function name.
type KernelOf<'c> = HashMap<usize, Vec<(&'c str, u64)>>;

/// As [`write_json`], with each context's CPU when `cpu` is given.
pub fn write_json_cpu(t: &Mct, cpu: Option<&MctCpu>, w: &mut dyn Write) -> io::Result<()> {
    let mut kernel_of: KernelOf = HashMap::new();
    if let Some(c) = cpu {
        for (node, f, ns) in &c.kernel {
            kernel_of.entry(*node).or_default().push((f, *ns));
        }
        for v in kernel_of.values_mut() {
            v.sort_unstable();
        }
    }
    let mut offcpu_of: HashMap<usize, Vec<&crate::OffcpuTime>> = HashMap::new();
    for o in cpu.map_or(&[][..], |c| c.offcpu.as_slice()) {
        offcpu_of.entry(o.node).or_default().push(o);
    }
    write!(w, "{{\"format\": \"jp-mct/1\", \"bba\": ")?;
    write_str(w, &t.bba)?;
    if let Some(c) = cpu {
        write!(w, ", \"cpu_unit\": \"nanoseconds\"")?;
        if c.offcpu_idle_hidden_ns > 0 {
            write!(
                w,
                ", \"offcpu_idle_hidden_ns\": {}",
                c.offcpu_idle_hidden_ns
            )?;
        }
    }
    write!(w, ", \"root\": {{")?;
    // Time off CPU while no instrumented frame ran (a pool thread between tasks).
    if let Some(o) = offcpu_of.get(&0) {
        write_node_offcpu(w, o)?;
        w.write_all(b", ")?;
    }
    write!(w, "\"children\": [")?;
    // (sorted children of an open node, next position); iterative for deep trees.
    let ranks = t.name_ranks();
    let mut stack: Vec<(Vec<usize>, usize)> = vec![(t.sorted_children_ranked(0, &ranks), 0)];
    while let Some(top) = stack.last_mut() {
        if let Some(&i) = top.0.get(top.1) {
            w.write_all(if top.1 == 0 { b"\n" } else { b",\n" })?;
            top.1 += 1;
            let n = &t.nodes[i];
            write!(w, "{{\"method\": ")?;
            write_str(w, &n.method)?;
            write!(
                w,
                ", \"calls\": {}, \"bytecodes\": {}",
                n.calls, n.bytecodes
            )?;
            if let Some(c) = cpu {
                write_node_cpu(w, c, &kernel_of, i)?;
                if let Some(o) = offcpu_of.get(&i) {
                    w.write_all(b", ")?;
                    write_node_offcpu(w, o)?;
                }
            }
            w.write_all(b", \"children\": [")?;
            let kids = t.sorted_children_ranked(i, &ranks);
            if kids.is_empty() {
                w.write_all(b"]}")?;
            } else {
                stack.push((kids, 0));
            }
        } else {
            let nonempty = !top.0.is_empty();
            stack.pop();
            w.write_all(if nonempty { b"\n]" } else { b"]" })?;
            if !stack.is_empty() {
                w.write_all(b"}")?;
            }
        }
    }
    w.write_all(b"}}\n")
}

/// `, "cpu": {...}` of node `i`, when it has CPU.
fn write_node_cpu(w: &mut dyn Write, c: &MctCpu, kernel_of: &KernelOf, i: usize) -> io::Result<()> {
    let user = c.user_ns.get(i).copied().unwrap_or(0);
    let functions = kernel_of.get(&i).map_or(&[][..], Vec::as_slice);
    let kernel: u64 = functions.iter().map(|(_, ns)| ns).sum();
    if user == 0 && kernel == 0 {
        return Ok(());
    }
    write!(w, ", \"cpu\": {{\"user\": {user}, \"kernel\": {kernel}")?;
    if !functions.is_empty() {
        w.write_all(b", \"kernel_functions\": {")?;
        for (k, (f, ns)) in functions.iter().enumerate() {
            if k > 0 {
                w.write_all(b", ")?;
            }
            write_str(w, f)?;
            write!(w, ": {ns}")?;
        }
        w.write_all(b"}")?;
    }
    w.write_all(b"}")
}

/// `"offcpu": {...}` of one node's off-CPU times.
fn write_node_offcpu(w: &mut dyn Write, times: &[&crate::OffcpuTime]) -> io::Result<()> {
    let mut kinds: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut functions: std::collections::BTreeMap<&str, u64> = Default::default();
    for o in times {
        *kinds.entry(&o.kind).or_default() += o.ns;
        *functions.entry(&o.function).or_default() += o.ns;
    }
    let total: u64 = kinds.values().sum();
    write!(w, "\"offcpu\": {{\"ns\": {total}")?;
    for (key, map) in [("kinds", &kinds), ("functions", &functions)] {
        write!(w, ", \"{key}\": {{")?;
        for (k, (name, ns)) in map.iter().enumerate() {
            if k > 0 {
                w.write_all(b", ")?;
            }
            write_str(w, name)?;
            write!(w, ": {ns}")?;
        }
        w.write_all(b"}")?;
    }
    w.write_all(b"}")
}

fn write_str(w: &mut dyn Write, s: &str) -> io::Result<()> {
    w.write_all(b"\"")?;
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        w.write_all(s.as_bytes())?;
        return w.write_all(b"\"");
    }
    for c in s.chars() {
        match c {
            '"' => w.write_all(b"\\\"")?,
            '\\' => w.write_all(b"\\\\")?,
            c if (c as u32) < 0x20 => write!(w, "\\u{:04x}", c as u32)?,
            c => {
                let mut b = [0u8; 4];
                w.write_all(c.encode_utf8(&mut b).as_bytes())?;
            }
        }
    }
    w.write_all(b"\"")
}

#[cfg(test)]
mod tests {
    use super::super::tests::paper_tree;
    use super::super::{Mct, MctCpu, MethodInfo};
    use super::*;

    fn json(t: &Mct) -> String {
        let mut v = Vec::new();
        write_json(t, &mut v).unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn paper_example_exact() {
        let expected = concat!(
            "{\"format\": \"jp-mct/1\", \"bba\": \"precise\", \"root\": {\"children\": [\n",
            "{\"method\": \"Paper.main([Ljava/lang/String;)V\", \"calls\": 1, \"bytecodes\": 5, \"children\": [\n",
            "{\"method\": \"Paper.<init>()V\", \"calls\": 1, \"bytecodes\": 3, \"children\": []},\n",
            "{\"method\": \"Paper.f()V\", \"calls\": 1, \"bytecodes\": 106, \"children\": [\n",
            "{\"method\": \"Paper.g(I)V\", \"calls\": 10, \"bytecodes\": 445, \"children\": [\n",
            "{\"method\": \"Paper.h()V\", \"calls\": 55, \"bytecodes\": 55, \"children\": []}\n",
            "]},\n",
            "{\"method\": \"Paper.h()V\", \"calls\": 10, \"bytecodes\": 10, \"children\": []}\n",
            "]}\n",
            "]}\n",
            "]}}\n",
        );
        assert_eq!(json(&paper_tree()), expected);
    }

    /// CPU keys only where a context has CPU; kernel functions by name; the document
    /// says its unit; read back, the tree is the same (readers skip the new keys).
    #[test]
    fn cpu_grows_the_format_compatibly() {
        let t = paper_tree();
        let kids = t.sorted_children(0);
        let main = kids[0];
        let f = t.nodes[main]
            .children
            .iter()
            .copied()
            .find(|&c| t.nodes[c].method.as_ref() == "Paper.f()V")
            .unwrap();
        let mut user_ns = vec![0; t.nodes.len()];
        user_ns[f] = 7_000;
        let cpu = MctCpu {
            user_ns,
            kernel: vec![
                (f, "read_zero".into(), 2_000),
                (f, "do_syscall_64".into(), 1_000),
                (main, "x\"y".into(), 5),
            ],
            ..MctCpu::default()
        };
        let mut v = Vec::new();
        write_json_cpu(&t, Some(&cpu), &mut v).unwrap();
        let text = String::from_utf8(v.clone()).unwrap();
        assert!(text.starts_with("{\"format\": \"jp-mct/1\", \"bba\": \"precise\", \"cpu_unit\": \"nanoseconds\", \"root\""), "{text}");
        assert!(text.contains("{\"method\": \"Paper.main([Ljava/lang/String;)V\", \"calls\": 1, \"bytecodes\": 5, \"cpu\": {\"user\": 0, \"kernel\": 5, \"kernel_functions\": {\"x\\\"y\": 5}}, \"children\": [\n"), "{text}");
        assert!(text.contains("{\"method\": \"Paper.f()V\", \"calls\": 1, \"bytecodes\": 106, \"cpu\": {\"user\": 7000, \"kernel\": 3000, \"kernel_functions\": {\"do_syscall_64\": 1000, \"read_zero\": 2000}}, \"children\": [\n"), "{text}");
        assert_eq!(text.matches("\"cpu\"").count(), 2, "{text}");
        assert_eq!(crate::read_json(&v).unwrap().nodes.len(), t.nodes.len());
        assert_eq!(json(&crate::read_json(&v).unwrap()), json(&t));
    }

    /// The root's off-CPU time (no instrumented frame running) and the idle time left
    /// out are written, and readers still read the tree.
    #[test]
    fn root_offcpu_and_hidden_idle_time_are_written() {
        let t = paper_tree();
        let cpu = MctCpu {
            user_ns: vec![0; t.nodes.len()],
            offcpu: vec![crate::OffcpuTime {
                node: 0,
                kind: "lock".into(),
                function: "futex_do_wait".into(),
                ns: 40,
            }],
            offcpu_idle_hidden_ns: 1234,
            ..MctCpu::default()
        };
        let mut v = Vec::new();
        write_json_cpu(&t, Some(&cpu), &mut v).unwrap();
        let text = String::from_utf8(v.clone()).unwrap();
        assert!(text.starts_with("{\"format\": \"jp-mct/1\", \"bba\": \"precise\", \"cpu_unit\": \"nanoseconds\", \"offcpu_idle_hidden_ns\": 1234, \"root\": {\"offcpu\": {\"ns\": 40, \"kinds\": {\"lock\": 40}, \"functions\": {\"futex_do_wait\": 40}}, \"children\": [\n"), "{text}");
        assert_eq!(json(&crate::read_json(&v).unwrap()), json(&t));
    }

    #[test]
    fn empty_tree_and_escapes() {
        assert_eq!(
            json(&Mct::new("default")),
            "{\"format\": \"jp-mct/1\", \"bba\": \"default\", \"root\": {\"children\": []}}\n"
        );
        let mut t = Mct::new("default");
        t.add(
            0,
            MethodInfo {
                name: "a\"b\\c\u{1}é".into(),
                file: None,
            },
            u64::MAX,
            0,
        );
        assert_eq!(
            json(&t),
            "{\"format\": \"jp-mct/1\", \"bba\": \"default\", \"root\": {\"children\": [\n\
             {\"method\": \"a\\\"b\\\\c\\u0001é\", \"calls\": 18446744073709551615, \"bytecodes\": 0, \"children\": []}\n\
             ]}}\n"
        );
    }
}
