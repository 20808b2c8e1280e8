//! Blocks and their ticks under both BBAs, as `describe_blocks` reports them.

use super::*;

#[test]
fn blocks_default_bba() {
    let m = describe_blocks(&loop_class(49), Bba::Default).unwrap();
    assert_eq!(m.len(), 1);
    let got: Vec<(u32, u32, bool, u32)> = m[0]
        .blocks
        .iter()
        .map(|b| (b.offset, b.instructions, b.loop_head, b.ticks))
        .collect();
    // Leaders: 0, 1 (goto target), 4 (after ifeq), 11 (after goto), 12 (ifeq target).
    // Ticks: longest path to the next checkpoint: block 12 = 2, nop = 1 + 2, body = 5 (its
    // successor is the loop head), head = 1 + max(5, 2) = 6; entry = 1 (then the head).
    assert_eq!(
        got,
        vec![
            (0, 1, false, 1),
            (1, 1, true, 6),
            (4, 5, false, 5),
            (11, 1, false, 3),
            (12, 2, false, 2)
        ]
    );
    assert_eq!(m[0].entry_ticks, 1);
}

#[test]
fn blocks_precise_bba() {
    let m = describe_blocks(&loop_class(49), Bba::Precise).unwrap();
    let got: Vec<(u32, u32, bool, u32)> = m[0]
        .blocks
        .iter()
        .map(|b| (b.offset, b.instructions, b.loop_head, b.ticks))
        .collect();
    // idiv may throw: the block 4..8 is split after it.
    assert_eq!(
        got,
        vec![
            (0, 1, false, 1),
            (1, 1, true, 6),
            (4, 3, false, 5),
            (7, 2, false, 2),
            (11, 1, false, 3),
            (12, 2, false, 2)
        ]
    );
}
