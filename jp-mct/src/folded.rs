//! Flame-graph input (Brendan Gregg's folded stacks): `frame;frame;frame count`, one line per
//! context with exclusive bytecodes > 0. Frames are `pkg.Class.name(type,type)` because the
//! JVM descriptor's `;` is the separator of this format. A line keeps at most
//! [`MAX_STACK_FRAMES`] frames: the contexts deeper than that add up into one line per
//! context at the cap, ending in a marked frame (as in pprof, see
//! [`crate::folded_frame_name`]), so a chain costs O(cap²) bytes, not O(depth²).

use super::{folded_frame_name, java_signature, Mct, MAX_STACK_FRAMES};
use std::collections::HashMap;
use std::io::{self, Write};

pub fn write_folded(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    write_folded_folding(t, w).map(|_| ())
}

/// [`write_folded`], returning how many contexts were deeper than the cap and went into
/// their folded line (jpd counts them, so that a shortened profile is never silent).
pub fn write_folded_folding(t: &Mct, w: &mut dyn Write) -> io::Result<u64> {
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
    // Per context at the cap (in walk order): the bytecodes folded under it and the
    // deepest folded context's frames past the cap.
    let mut folded: Vec<(usize, u64, usize)> = Vec::new();
    let mut deeper = 0u64;
    let mut result = Ok(());
    t.walk(|i, depth| {
        if result.is_err() {
            return;
        }
        let n = &t.nodes[i];
        if depth >= MAX_STACK_FRAMES {
            // The path stops at the context at the cap.
            let anchor = path[MAX_STACK_FRAMES - 1];
            if folded.last().is_none_or(|f| f.0 != anchor) {
                folded.push((anchor, 0, 0));
            }
            deeper += 1;
            if let Some(f) = folded.last_mut() {
                f.1 = f.1.wrapping_add(n.bytecodes);
                f.2 = f.2.max(depth + 1 - MAX_STACK_FRAMES);
            }
            return;
        }
        path.truncate(depth);
        path.push(i);
        if n.bytecodes == 0 {
            return;
        }
        let line = path.iter().map(|&p| names[p]).collect::<Vec<_>>().join(";");
        result = writeln!(w, "{line} {}", n.bytecodes);
    });
    result?;
    for (anchor, bytecodes, deepest) in folded.into_iter().filter(|f| f.1 != 0) {
        let mut stack = Vec::new();
        let mut at = Some(anchor);
        while let Some(j) = at.filter(|&j| j != 0) {
            stack.push(names[j]);
            at = t.nodes[j].parent;
        }
        stack.reverse();
        writeln!(
            w,
            "{};{} {bytecodes}",
            stack.join(";"),
            folded_frame_name(deepest)
        )?;
    }
    Ok(deeper)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{chain, paper_tree};
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

    #[test]
    fn a_deep_chain_folds_below_the_cap_into_one_marked_line() {
        const DEPTH: usize = 100_000;
        let mut v = Vec::new();
        let deeper = write_folded_folding(&chain(DEPTH), &mut v).unwrap();
        // Every context past the cap went into the one folded line.
        assert_eq!(deeper, (DEPTH - MAX_STACK_FRAMES) as u64);
        // Σ depth lines of up to 4 bytes a frame: 2048²/2 · 4 B ≈ 8.4 MB (uncapped:
        // 100 000²/2 · 4 B = 20 GB).
        assert!(v.len() < 10 << 20, "{} bytes", v.len());
        let text = String::from_utf8(v).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), MAX_STACK_FRAMES + 1);
        for (k, line) in lines[..MAX_STACK_FRAMES].iter().enumerate() {
            assert_eq!(line.split(';').count(), k + 1, "line {k}");
            assert!(
                line.ends_with(&format!("m{} 1", k % 1000)),
                "line {k}: {line}"
            );
        }
        let last = lines[MAX_STACK_FRAMES];
        let folded = DEPTH - MAX_STACK_FRAMES;
        let frames: Vec<&str> = last.split(';').collect();
        assert_eq!(frames.len(), MAX_STACK_FRAMES + 1);
        assert_eq!(
            frames[MAX_STACK_FRAMES - 1],
            format!("m{}", (MAX_STACK_FRAMES - 1) % 1000)
        );
        assert_eq!(
            frames[MAX_STACK_FRAMES],
            format!("[jp: {folded} deeper frames folded] {folded}")
        );
    }
}
