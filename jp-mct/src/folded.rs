//! Flame-graph input (Brendan Gregg's folded stacks): `frame;frame;frame count`, one line per
//! context with exclusive bytecodes > 0. Frames are `pkg.Class.name(type,type)` because the
//! JVM descriptor's `;` is the separator of this format.

use super::{java_signature, Mct};
use std::collections::HashMap;
use std::io::{self, Write};

pub fn write_folded(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    let mut readable: HashMap<&str, String> = HashMap::new();
    for n in &t.nodes {
        readable
            .entry(&n.method)
            .or_insert_with(|| java_signature(&n.method));
    }
    let names: Vec<&str> = t
        .nodes
        .iter()
        .map(|n| readable[&*n.method].as_str())
        .collect();
    let mut path: Vec<usize> = Vec::new();
    let mut result = Ok(());
    t.walk(|i, depth| {
        if result.is_err() {
            return;
        }
        path.truncate(depth);
        path.push(i);
        let n = &t.nodes[i];
        if n.bytecodes == 0 {
            return;
        }
        let line = path.iter().map(|&p| names[p]).collect::<Vec<_>>().join(";");
        result = writeln!(w, "{line} {}", n.bytecodes);
    });
    result
}

#[cfg(test)]
mod tests {
    use super::super::tests::paper_tree;
    use super::*;

    #[test]
    fn paper_example_exact() {
        let mut v = Vec::new();
        write_folded(&paper_tree(), &mut v).unwrap();
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "Paper.main(java.lang.String[]) 5\n\
             Paper.main(java.lang.String[]);Paper.<init>() 3\n\
             Paper.main(java.lang.String[]);Paper.f() 106\n\
             Paper.main(java.lang.String[]);Paper.f();Paper.g(int) 445\n\
             Paper.main(java.lang.String[]);Paper.f();Paper.g(int);Paper.h() 55\n\
             Paper.main(java.lang.String[]);Paper.f();Paper.h() 10\n"
        );
    }
}
