//! JSR/RET (class version 49, no stack map frames, checked by the old inference
//! verifier): a fixture generated with Debian's ASM (`libasm-java`, a test tool only)
//! is rewritten with both BBAs, verified with -Xverify:all and run on JDK 17 and 25.
//!
//! Counts executed by `JsrFixture.main` (derived by hand from GenJsr.java):
//! - main: 4 + 4 + 4 (three println(call)) + 5 (new, dup, iconst_1, invokespecial, pop)
//!   + 3 (println(counter)) + 1 (return) = 21
//! - run(5): iload_0 ifge (2) + iload_0 iconst_2 imul istore_1 (4) + jsr (1)
//!   + subroutine astore_2 getstatic iconst_1 iadd putstatic ret (6) + iload_1 ireturn (2) = 15
//! - run(-3): 2 + new dup invokespecial athrow (4) + handler astore_3 iconst_m1 istore_1 jsr (4)
//!   + subroutine (6) + iload_1 ireturn (2) = 18
//! - loop(4): iconst_0 istore_1 (2) + head 5 x 3 + 4 x (jsr 1 + subroutine 6 + iinc goto 2)
//!   + iload_1 ireturn (2) = 2 + 15 + 36 + 2 = 55
//! - <init>(1): aload_0 invokespecial jsr (3) + astore_2 ret (2) + return (1) = 6
//!
//! Total 115 bytecodes, 5 method entries and exits, 1 handler entry. Checkpoints (ticks):
//! the loop head (5 times), targets of backward `ret` edges: the iinc after the loop's jsr
//! (4), the two returns after run's jsrs (1 each), the return after <init>'s jsr (1), and
//! the handler (1): 13.

mod rewrite_common;

use std::path::Path;
use std::process::Command;

use jpagent::classfile::Bba;
use rewrite_common::*;

const ASM: &str = "/usr/share/java/asm.jar";

#[test]
fn jsr_ret_fixture_verifies_and_counts() {
    assert!(
        Path::new(ASM).exists(),
        "{ASM} missing: apt-get install libasm-java"
    );
    let jdks = jdks();
    let dir = scratch("jsr");
    let (h, stubs) = compile_harness(&dir);
    let gen = dir.join("gen");
    javac(&[verify_src().join("GenJsr.java")], &gen, Some(ASM), "17");
    let orig = dir.join("orig");
    std::fs::create_dir_all(&orig).unwrap();
    run(Command::new(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(format!("{}:{ASM}", gen.display()))
        .arg("GenJsr")
        .arg(&orig));
    let input = std::fs::read(orig.join("JsrFixture.class")).unwrap();
    assert_eq!(u16::from_be_bytes([input[6], input[7]]), 49);
    let expected_out = "10\n-1\n4\n8\n";
    for (jname, home) in &jdks {
        let java = home.join("bin/java");
        let out = run(Command::new(&java)
            .arg("-Xverify:all")
            .arg("-cp")
            .arg(format!("{}:{}", h.display(), orig.display()))
            .arg("JsrFixture"));
        assert_eq!(out, expected_out, "JDK {jname}: the original fixture");
        for (bba, bname) in [(Bba::Default, "default"), (Bba::Precise, "precise")] {
            let (bytes, stats) = rewrite_changed(&input, bba);
            assert_eq!(stats.methods_instrumented, 4);
            assert_eq!(stats.methods_without_catch_all, 0);
            let new = dir.join(format!("new-{bname}"));
            std::fs::create_dir_all(&new).unwrap();
            std::fs::write(new.join("JsrFixture.class"), &bytes).unwrap();
            let cp = format!("{}:{}:{}", h.display(), stubs.display(), new.display());
            let out = run(Command::new(&java)
                .arg("-Xverify:all")
                .arg("-cp")
                .arg(&cp)
                .arg("RunMain")
                .arg("JsrFixture"));
            assert_eq!(
                out,
                format!("{expected_out}RT enters=5 exits=5 counts={} bytecodes=115 ticks=13 caughts=1\n", counts(bba)),
                "JDK {jname} bba={bname}"
            );
            println!(
                "JDK {jname} bba={bname}: JsrFixture verified and ran: {}",
                out.lines().last().unwrap_or("")
            );
        }
    }
}

/// Blocks entered (calls of Rt.count), by hand along the same paths as the module doc.
fn counts(bba: Bba) -> u32 {
    match bba {
        // main: 1 block. run(5): [iload_0 ifge] [iload_0..jsr] [subroutine] [iload_1 ireturn] = 4.
        // run(-3): [iload_0 ifge] [new..athrow] [handler..jsr] [subroutine] [iload_1 ireturn] = 5.
        // loop(4): [iconst_0 istore_1] + 5 x [head] + 4 x ([jsr] [subroutine] [iinc goto])
        // + [iload_1 ireturn] = 19. <init>: [aload_0 invokespecial jsr] [astore_2 ret] [return] = 3.
        Bba::Default => 1 + 4 + 5 + 19 + 3,
        // main: 3 x ([getstatic] [bipush invokestatic] [invokevirtual]) + [new]
        // [dup iconst_1 invokespecial] [pop getstatic] [getstatic] [invokevirtual] [return] = 15.
        // Each subroutine of run: [astore_2 getstatic] [iconst_1 iadd putstatic] [ret] = 3 blocks.
        // run(5): 3 + 3 = 6. run(-3): [iload_0 ifge] [new] [dup invokespecial] [athrow]
        // [handler..jsr] + 3 + [iload_1 ireturn] = 9. loop(4): 1 + 5 + 4 x (1 + 3 + 1) + 1 = 27.
        // <init>: [aload_0 invokespecial] [jsr] [astore_2 ret] [return] = 4.
        // All but <init> keep a pending count: their blocks `iinc` a local (the stub sees
        // no call; their bytecodes reach it through Rt.flush and Rt.exitPending).
        Bba::Precise => 4,
    }
}
