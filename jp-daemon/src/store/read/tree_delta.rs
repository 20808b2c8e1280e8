//! A JVM's Method Call Tree over a time window: the difference of two readings of the
//! merged tree, context by context (a context is its path of methods from the root).

use jp_mct::{Mct, MethodInfo};

/// `after - before` per calling context; contexts new in `after` keep their counts.
/// Counts never go below zero (a re-send may briefly show less than before).
pub fn mct_delta(before: &Mct, after: &Mct) -> Mct {
    mct_delta_mapped(before, after).0
}

/// [`mct_delta`], and where each node of `after` went in it (every one is there, at
/// another index: the delta is built depth first). CPU per context, which is indexed by
/// `after`'s nodes, follows with [`jp_mct::MctCpu::remap`].
pub fn mct_delta_mapped(before: &Mct, after: &Mct) -> (Mct, Vec<Option<usize>>) {
    let mut map = vec![None; after.nodes.len()];
    if let Some(root) = map.first_mut() {
        *root = Some(0);
    }
    let mut out = Mct::new(&after.bba);
    // (node in `after`, same context in `before` if any, node in `out`)
    let mut stack: Vec<(usize, Option<usize>, usize)> = vec![(0, Some(0), 0)];
    while let Some((a, b, o)) = stack.pop() {
        let Some(node) = after.nodes.get(a) else {
            continue;
        };
        for &c in &node.children {
            let Some(cn) = after.nodes.get(c) else {
                continue;
            };
            // A context is its path of method names: a method's source file may only be
            // known later (its class's details arrive after the first counts).
            let bc = b.and_then(|b| before.nodes.get(b)).and_then(|bn| {
                bn.children
                    .iter()
                    .copied()
                    .find(|&x| before.nodes.get(x).is_some_and(|x| x.method == cn.method))
            });
            let (pc, pb) = bc
                .and_then(|x| before.nodes.get(x))
                .map_or((0, 0), |x| (x.calls, x.bytecodes));
            let oc = out.add(
                o,
                MethodInfo {
                    name: cn.method.clone(),
                    file: cn.file.clone(),
                },
                cn.calls.saturating_sub(pc),
                cn.bytecodes.saturating_sub(pb),
            );
            if let Some(m) = map.get_mut(c) {
                *m = Some(oc);
            }
            stack.push((c, bc, oc));
        }
    }
    (out, map)
}
