//! Indented text: calls, inclusive and exclusive bytecodes, then the method, two spaces of
//! indentation per level (capped, with the depth printed, so deep recursions stay readable).

use super::Mct;
use std::io::{self, Write};

const MAX_INDENT: usize = 40;

pub fn write_tree(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    let inc = t.inclusive_bytecodes();
    let total: u64 = t
        .nodes
        .iter()
        .fold(0u64, |a, n| a.wrapping_add(n.bytecodes));
    let calls: u64 = t.nodes.iter().fold(0u64, |a, n| a.wrapping_add(n.calls));
    writeln!(
        w,
        "# jp method call tree, bba={}: {calls} calls, {total} bytecodes",
        t.bba
    )?;
    writeln!(
        w,
        "# {:>14} {:>18} {:>18}  method",
        "calls", "inclusive", "exclusive"
    )?;
    let mut result = Ok(());
    t.walk(|i, depth| {
        if result.is_err() {
            return;
        }
        let n = &t.nodes[i];
        let indent = "  ".repeat(depth.min(MAX_INDENT));
        let deep = if depth > MAX_INDENT {
            format!("[{depth}] ")
        } else {
            String::new()
        };
        result = writeln!(
            w,
            "  {:>14} {:>18} {:>18}  {indent}{deep}{}",
            n.calls, inc[i], n.bytecodes, n.method
        );
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
        write_tree(&paper_tree(), &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "# jp method call tree, bba=precise: 78 calls, 624 bytecodes"
        );
        let rows: Vec<Vec<&str>> = lines[2..]
            .iter()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            vec![
                vec!["1", "624", "5", "Paper.main([Ljava/lang/String;)V"],
                vec!["1", "3", "3", "Paper.<init>()V"],
                vec!["1", "616", "106", "Paper.f()V"],
                vec!["10", "500", "445", "Paper.g(I)V"],
                vec!["55", "55", "55", "Paper.h()V"],
                vec!["10", "10", "10", "Paper.h()V"],
            ]
        );
        assert!(
            lines[5].ends_with("      Paper.g(I)V"),
            "indentation: {:?}",
            lines[5]
        );
    }
}
