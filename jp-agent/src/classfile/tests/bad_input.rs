//! Corrupt or malformed input gives an error, never a panic.

use super::code_layout::far_loop;
use super::*;

#[test]
fn corrupt_inputs_never_panic() {
    let mut inputs = vec![
        loop_class(49),
        loop_class(52),
        far_loop(52, 40, true),
        far_loop(49, 40, false),
    ];
    let mut b = ClassBuilder::new(49);
    b.method(
        0x0009,
        "m",
        "(I)I",
        Body {
            max_stack: 2,
            max_locals: 1,
            code: &[0x03, 0x6c, 0xac, 0x57, 0x03, 0xac],
            exc: &[(0, 3, 3, 0)],
            frames: None,
        },
    );
    inputs.push(b.build());
    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut outcomes = [0usize; 3];
    for input in &inputs {
        for cut in 0..input.len() {
            let _ = rewrite_class(&input[..cut], &RewriteOptions::default(), &mut Ids);
        }
        for _ in 0..3000 {
            let mut v = input.clone();
            for _ in 0..(1 + next() % 4) {
                let i = (next() % v.len() as u64) as usize;
                v[i] = next() as u8;
            }
            for bba in [Bba::Default, Bba::Precise] {
                match rewrite_class(
                    &v,
                    &RewriteOptions {
                        bba,
                        pass_context: true,
                        out_of_line_entry: false,
                    },
                    &mut Ids,
                ) {
                    Ok(Rewritten::Changed { bytes, .. }) => {
                        outcomes[0] += 1;
                        // What we produce from a class that still parses must parse too.
                        let _ = describe_blocks(&bytes, bba);
                    }
                    Ok(Rewritten::Unchanged { .. }) => outcomes[1] += 1,
                    Err(_) => outcomes[2] += 1,
                }
            }
        }
    }
    assert!(outcomes[0] > 0 && outcomes[2] > 0, "{outcomes:?}");
}

#[test]
fn bad_descriptors_are_errors() {
    // A compressed frame makes the rewriter read the descriptor's types.
    for desc in ["([", "(L", "(Lx", "([[", "(I", "(Q)V"] {
        let mut b = ClassBuilder::new(52);
        let code = [0x03, 0x99, 0x00, 0x03, 0xb1];
        b.method(
            0x0009,
            "m",
            desc,
            Body {
                max_stack: 1,
                max_locals: 4,
                code: &code,
                exc: &[],
                frames: Some(&[0, 1, 4]),
            },
        );
        let r = rewrite_class(&b.build(), &RewriteOptions::default(), &mut Ids);
        assert!(r.is_err(), "{desc}: {r:?}");
    }
}
