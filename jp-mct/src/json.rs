//! `jp-mct/1` JSON: `{"format": "jp-mct/1", "bba": B, "root": {"children": [NODE, ...]}}`,
//! `NODE = {"method": M, "calls": n, "bytecodes": n, "children": [...]}`, one node per line,
//! children sorted (see [`Mct::sorted_children`]) so equal trees give identical bytes.

use super::Mct;
use std::io::{self, Write};

pub fn write_json(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    write!(w, "{{\"format\": \"jp-mct/1\", \"bba\": ")?;
    write_str(w, &t.bba)?;
    write!(w, ", \"root\": {{\"children\": [")?;
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
                ", \"calls\": {}, \"bytecodes\": {}, \"children\": [",
                n.calls, n.bytecodes
            )?;
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
    use super::super::{Mct, MethodInfo};
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
