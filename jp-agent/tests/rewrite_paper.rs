//! The paper's example (javac 17): the rewriter's static block structure, and the
//! rewritten program run against the stub runtime, which sums every `Rt.count`.
//!
//! `javap -c Paper` (javac 17):
//! ```text
//! main:   0 new Paper; 3 dup; 4 invokespecial <init>; 7 invokevirtual f; 10 return
//! <init>: 0 aload_0; 1 invokespecial Object.<init>; 4 return
//! f:      0 iconst_1; 1 istore_1; 2 iload_1; 3 bipush 10; 5 if_icmpgt 23; 8 aload_0;
//!         9 invokevirtual h; 12 aload_0; 13 iload_1; 14 invokevirtual g; 17 iinc 1,1;
//!         20 goto 2; 23 return
//! g:      0 iconst_0; 1 istore_2; 2 iload_2; 3 iload_1; 4 if_icmpge 17; 7 aload_0;
//!         8 invokevirtual h; 11 iinc 2,1; 14 goto 2; 17 return
//! h:      0 return
//! ```
//! Default BBA blocks (leaders: 0, branch targets, after branches/returns):
//! - main [5] -> 5 bytecodes. <init> [3] -> 3.
//! - f [0-1: 2] [2-5: 3, loop head] [8-20: 7] [23: 1]: the head runs 11 times, the body 10:
//!   2 + 11*3 + 10*7 + 1 = 106.
//! - g(n) [2] [3, loop head] [7-14: 4] [1]: 2 + 3(n+1) + 4n + 1 = 6 + 7n; over n = 1..10:
//!   60 + 7*55 = 445.
//! - h [1]: 1 each, 10 calls from f and 55 from g.
//!
//! Precise BBA: invocations and `new` also end blocks; each path still executes the same
//! instructions, so the sums are the same:
//! - main [new] [dup invokespecial] [invokevirtual] [return] = 1+2+1+1.
//! - <init> [aload_0 invokespecial] [return] = 2+1.
//! - f [2] [3] [aload_0 invokevirtual h: 2] [aload_0 iload_1 invokevirtual g: 3]
//!   [iinc goto: 2] [1]: body 2+3+2 = 7 as before.
//! - g [2] [3] [aload_0 invokevirtual: 2] [iinc goto: 2] [1]: body 4 as before.
//!
//! Ticks (longest path to the next checkpoint): f: entry 2 (then the loop head), head
//! 3 + max(7, 1) = 10; g: entry 2, head 3 + 4 = 7. Executed: f's head 11 times, g's head
//! n+1 times: 11 + 65 = 76.
//!
//! Whole run: 5 + 3 + 106 + 10 + 445 + 55 = 624 bytecodes; 1 + 1 + 1 + 10 + 10 + 55 = 78
//! calls.

mod rewrite_common;

use std::process::Command;

use jpagent::classfile::{describe_blocks, Bba};
use rewrite_common::*;

const PAPER: &str = r#"
public class Paper {
    public static void main(String[] args) {
        new Paper().f();
    }

    void f() {
        for (int i = 1; i <= 10; i++) {
            h();
            g(i);
        }
    }

    void g(int n) {
        for (int j = 0; j < n; j++) {
            h();
        }
    }

    void h() {
    }
}
"#;

type Shape = Vec<(&'static str, u32, Vec<(u32, u32, bool, u32)>)>;

/// (method, entry ticks, [(offset, instructions, loop head, ticks)]) per BBA.
fn expected(bba: Bba) -> Shape {
    match bba {
        Bba::Default => vec![
            ("<init>", 3, vec![(0, 3, false, 3)]),
            ("main", 5, vec![(0, 5, false, 5)]),
            (
                "f",
                2,
                vec![
                    (0, 2, false, 2),
                    (2, 3, true, 10),
                    (8, 7, false, 7),
                    (23, 1, false, 1),
                ],
            ),
            (
                "g",
                2,
                vec![
                    (0, 2, false, 2),
                    (2, 3, true, 7),
                    (7, 4, false, 4),
                    (17, 1, false, 1),
                ],
            ),
            ("h", 1, vec![(0, 1, false, 1)]),
        ],
        Bba::Precise => vec![
            ("<init>", 3, vec![(0, 2, false, 3), (4, 1, false, 1)]),
            (
                "main",
                5,
                vec![
                    (0, 1, false, 5),
                    (3, 2, false, 4),
                    (7, 1, false, 2),
                    (10, 1, false, 1),
                ],
            ),
            (
                "f",
                2,
                vec![
                    (0, 2, false, 2),
                    (2, 3, true, 10),
                    (8, 2, false, 7),
                    (12, 3, false, 5),
                    (17, 2, false, 2),
                    (23, 1, false, 1),
                ],
            ),
            (
                "g",
                2,
                vec![
                    (0, 2, false, 2),
                    (2, 3, true, 7),
                    (7, 2, false, 4),
                    (11, 2, false, 2),
                    (17, 1, false, 1),
                ],
            ),
            ("h", 1, vec![(0, 1, false, 1)]),
        ],
    }
}

#[test]
fn paper_example_blocks_and_counts() {
    let jdks = jdks();
    let dir = scratch("paper");
    let (h, stubs) = compile_harness(&dir);
    let src = dir.join("Paper.java");
    std::fs::write(&src, PAPER).unwrap();
    let orig = dir.join("orig");
    javac(&[src], &orig, None, "17");
    let input = std::fs::read(orig.join("Paper.class")).unwrap();
    for (bba, bname) in [(Bba::Default, "default"), (Bba::Precise, "precise")] {
        let got: Shape = describe_blocks(&input, bba)
            .unwrap()
            .into_iter()
            .map(|m| {
                let name: &'static str = Box::leak(m.name.into_boxed_str());
                (
                    name,
                    m.entry_ticks,
                    m.blocks
                        .iter()
                        .map(|b| (b.offset, b.instructions, b.loop_head, b.ticks))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(got, expected(bba), "bba={bname}");
        let (bytes, stats) = rewrite_changed(&input, bba);
        assert_eq!(stats.methods_instrumented, 5);
        let new = dir.join(bname);
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("Paper.class"), bytes).unwrap();
        for (jname, home) in &jdks {
            let cp = format!("{}:{}:{}", h.display(), stubs.display(), new.display());
            let out = run(Command::new(home.join("bin/java"))
                .arg("-Xverify:all")
                .arg("-cp")
                .arg(&cp)
                .arg("RunMain")
                .arg("Paper"));
            let calls = if bba == Bba::Default {
                // main 1, <init> 1, f 1 + 11 heads + 10 bodies + 1, g over its 10 calls:
                // 10 entries + 65 heads + 55 bodies + 10 returns, h 65.
                1 + 1 + 23 + (10 + 65 + 55 + 10) + 65
            } else {
                // Blocks: main 4, <init> 2, f 1 + 11 + 10 x 3 + 1, g 10 + 65 + 55 x 2 + 10,
                // h 65; all but <init> keep a pending count: their blocks `iinc` a local
                // (the stub sees no call; their bytecodes reach it through Rt.flush and
                // Rt.exitPending, and still add up to 624).
                2
            };
            assert_eq!(
                out,
                format!("RT enters=78 exits=78 counts={calls} bytecodes=624 ticks=76 caughts=0\n"),
                "JDK {jname} bba={bname}"
            );
            println!("JDK {jname} bba={bname}: {}", out.trim());
        }
    }
}
