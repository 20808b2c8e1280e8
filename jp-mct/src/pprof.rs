//! pprof: a gzipped `perftools.profiles.Profile` (profile.proto), encoded by hand (only the
//! messages below are needed). Sample types `calls/count` and `bytecodes/count`; one sample
//! per context, its stack the chain of methods (leaf first); one location per method.
//! Check a file with `go tool pprof -top -sample_index=bytecodes FILE`.

use super::Mct;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::collections::HashMap;
use std::io::{self, Write};

/// Protobuf wire helpers: varint-encoded fields and length-delimited sub-messages.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn packed(&mut self, field: u32, vals: &[u64]) {
        let mut inner = Msg::default();
        for &v in vals {
            inner.varint(v);
        }
        self.bytes(field, &inner.0);
    }
}

struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.get(""); // index 0 must be the empty string
        s
    }
    fn get(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The encoded (not yet gzipped) Profile message.
fn encode(t: &Mct) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut p = Msg::default();
    let count = strings.get("count");
    for ty in ["calls", "bytecodes"] {
        let mut vt = Msg::default();
        vt.uint(1, strings.get(ty));
        vt.uint(2, count);
        p.bytes(1, &vt.0);
    }

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

    let mut samples = Msg::default();
    t.walk(|i, _| {
        let mut stack = Vec::new();
        let mut at = Some(i);
        while let Some(j) = at.filter(|&j| j != 0) {
            stack.push(node_loc[j]);
            at = t.nodes[j].parent;
        }
        let n = &t.nodes[i];
        let mut s = Msg::default();
        s.packed(1, &stack);
        s.packed(2, &[n.calls, n.bytecodes]);
        samples.bytes(2, &s.0);
    });
    p.0.extend_from_slice(&samples.0);

    for &(id, _) in &functions {
        let mut line = Msg::default();
        line.uint(1, id);
        let mut loc = Msg::default();
        loc.uint(1, id);
        loc.bytes(4, &line.0);
        p.bytes(4, &loc.0);
    }
    for &(id, node) in &functions {
        let n = &t.nodes[node];
        let mut f = Msg::default();
        f.uint(1, id);
        // name: readable Java form (pprof shortens it further); system_name: the exact JVM
        // name as in the JSON format.
        f.uint(2, strings.get(&super::java_signature(&n.method)));
        f.uint(3, strings.get(&n.method));
        if let Some(file) = &n.file {
            f.uint(4, strings.get(file));
        }
        p.bytes(5, &f.0);
    }
    // period_type (11) and period (12): one bytecode per unit of the bytecodes sample.
    let mut pt = Msg::default();
    pt.uint(1, strings.get("bytecodes"));
    pt.uint(2, count);
    let default_type = strings.get("bytecodes");
    for s in &strings.table {
        p.bytes(6, s.as_bytes());
    }
    p.bytes(11, &pt.0);
    p.uint(12, 1);
    p.uint(14, default_type);
    p.0
}

pub fn write_pprof(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    gzip(&encode(t), w)
}

/// As [`write_pprof`], with the profile's `time_nanos` (field 9, Unix ns) and
/// `duration_nanos` (field 10) set: a profile of a time window, as Pyroscope reads it.
pub fn write_pprof_timed(
    t: &Mct,
    time_nanos: i64,
    duration_nanos: i64,
    w: &mut dyn Write,
) -> io::Result<()> {
    let mut p = Msg(encode(t));
    // Two's complement, as protobuf encodes a negative int64.
    p.uint(9, time_nanos as u64);
    p.uint(10, duration_nanos as u64);
    gzip(&p.0, w)
}

fn gzip(raw: &[u8], w: &mut dyn Write) -> io::Result<()> {
    let mut gz = GzEncoder::new(w, Compression::default());
    gz.write_all(raw)?;
    gz.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::paper_tree;
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read;

    fn varint(b: &[u8], pos: &mut usize) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let x = b[*pos];
            *pos += 1;
            v |= u64::from(x & 0x7f) << shift;
            if x & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    /// (field, varint value or bytes) of a message's top level.
    fn fields(b: &[u8]) -> Vec<(u32, Result<u64, Vec<u8>>)> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < b.len() {
            let k = varint(b, &mut pos);
            let (field, wire) = ((k >> 3) as u32, k & 7);
            match wire {
                0 => out.push((field, Ok(varint(b, &mut pos)))),
                2 => {
                    let n = varint(b, &mut pos) as usize;
                    out.push((field, Err(b[pos..pos + n].to_vec())));
                    pos += n;
                }
                _ => panic!("unexpected wire type {wire}"),
            }
        }
        out
    }

    fn packed(b: &[u8]) -> Vec<u64> {
        let mut pos = 0;
        let mut v = Vec::new();
        while pos < b.len() {
            v.push(varint(b, &mut pos));
        }
        v
    }

    #[test]
    fn paper_example_decodes() {
        let mut gz = Vec::new();
        write_pprof(&paper_tree(), &mut gz).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        let top = fields(&raw);
        let strings: Vec<String> = top
            .iter()
            .filter(|(f, _)| *f == 6)
            .map(|(_, v)| String::from_utf8(v.clone().unwrap_err()).unwrap())
            .collect();
        assert_eq!(strings[0], "");
        let s = |i: u64| strings[i as usize].clone();
        // sample types
        let types: Vec<(String, String)> = top
            .iter()
            .filter(|(f, _)| *f == 1)
            .map(|(_, v)| {
                let f = fields(v.as_ref().unwrap_err());
                (s(f[0].1.clone().unwrap()), s(f[1].1.clone().unwrap()))
            })
            .collect();
        assert_eq!(
            types,
            vec![
                ("calls".into(), "count".into()),
                ("bytecodes".into(), "count".into())
            ]
        );
        // functions: id -> name
        let mut fname = HashMap::new();
        for (_, v) in top.iter().filter(|(f, _)| *f == 5) {
            let f = fields(v.as_ref().unwrap_err());
            fname.insert(f[0].1.clone().unwrap(), s(f[2].1.clone().unwrap()));
        }
        assert_eq!(fname.len(), 5); // h appears in two contexts but is one function
                                    // samples: stack names (leaf first) -> values
        let mut got = Vec::new();
        for (_, v) in top.iter().filter(|(f, _)| *f == 2) {
            let f = fields(v.as_ref().unwrap_err());
            let stack: Vec<String> = packed(f[0].1.as_ref().unwrap_err())
                .iter()
                .map(|id| fname[id].clone())
                .collect();
            got.push((stack.join("<"), packed(f[1].1.as_ref().unwrap_err())));
        }
        assert!(got.contains(&(
            "Paper.h()V<Paper.g(I)V<Paper.f()V<Paper.main([Ljava/lang/String;)V".into(),
            vec![55, 55]
        )));
        assert!(got.contains(&("Paper.main([Ljava/lang/String;)V".into(), vec![1, 5])));
        assert_eq!(got.len(), 6);
    }
}
