//! Old class files: a version-49 class (no StackMapTable, checked by the old
//! inference verifier) with JSR/RET subroutines, assembled here byte by byte
//! because javac no longer emits them. Counts are derived by hand and checked
//! against the oracle and the agent (both BBAs, -Xverify:all, both JDKs).
//!
//! ```text
//! static int sub(int x)            max_stack 1, max_locals 3
//!    0 iload_0
//!    1 istore_1
//!    2 jsr 10
//!    5 jsr 10
//!    8 iload_1
//!    9 ireturn
//!   10 astore_2                    the subroutine: runs twice per call
//!   11 iinc 1, 3
//!   14 ret 2
//!   per call: 3 + 3 + 1 + 3 + 2 = 12 bytecodes
//!
//! public static void main(String[])    max_stack 2, max_locals 2
//!    0 iconst_0
//!    1 istore_1
//!    2 iload_1
//!    3 iconst_5
//!    4 if_icmpge 18
//!    7 iload_1
//!    8 invokestatic sub(I)I
//!   11 pop
//!   12 iinc 1, 1
//!   15 goto 2
//!   18 return
//!   2 + 5·(3 + 5) + 3 + 1 = 46 bytecodes; sub: 5 calls, 60 bytecodes
//! ```

mod common;

use common::*;
use std::path::Path;

fn u2(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_be_bytes());
}

fn utf8(v: &mut Vec<u8>, s: &str) {
    v.push(1);
    u2(v, s.len() as u16);
    v.extend_from_slice(s.as_bytes());
}

fn method(v: &mut Vec<u8>, name: u16, desc: u16, max_stack: u16, max_locals: u16, code: &[u8]) {
    u2(v, 0x0009); // public static
    u2(v, name);
    u2(v, desc);
    u2(v, 1); // one attribute: Code
    u2(v, 7);
    v.extend_from_slice(&(12 + code.len() as u32).to_be_bytes());
    u2(v, max_stack);
    u2(v, max_locals);
    v.extend_from_slice(&(code.len() as u32).to_be_bytes());
    v.extend_from_slice(code);
    u2(v, 0); // exception table
    u2(v, 0); // attributes
}

fn write_class(dir: &Path) {
    let mut v = vec![0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 49];
    u2(&mut v, 12); // constant pool count
    utf8(&mut v, "Jsr"); // 1
    v.extend_from_slice(&[7, 0, 1]); // 2 Class Jsr
    utf8(&mut v, "java/lang/Object"); // 3
    v.extend_from_slice(&[7, 0, 3]); // 4 Class Object
    utf8(&mut v, "main"); // 5
    utf8(&mut v, "([Ljava/lang/String;)V"); // 6
    utf8(&mut v, "Code"); // 7
    utf8(&mut v, "sub"); // 8
    utf8(&mut v, "(I)I"); // 9
    v.extend_from_slice(&[12, 0, 8, 0, 9]); // 10 NameAndType sub (I)I
    v.extend_from_slice(&[10, 0, 2, 0, 10]); // 11 Methodref Jsr.sub
    u2(&mut v, 0x0021); // public super
    u2(&mut v, 2);
    u2(&mut v, 4);
    u2(&mut v, 0); // interfaces
    u2(&mut v, 0); // fields
    u2(&mut v, 2); // methods
    #[rustfmt::skip]
    let sub = [
        0x1a,             // 0 iload_0
        0x3c,             // 1 istore_1
        0xa8, 0x00, 0x08, // 2 jsr +8 → 10
        0xa8, 0x00, 0x05, // 5 jsr +5 → 10
        0x1b,             // 8 iload_1
        0xac,             // 9 ireturn
        0x4d,             // 10 astore_2
        0x84, 0x01, 0x03, // 11 iinc 1, 3
        0xa9, 0x02,       // 14 ret 2
    ];
    method(&mut v, 8, 9, 1, 3, &sub);
    #[rustfmt::skip]
    let main = [
        0x03,             // 0 iconst_0
        0x3c,             // 1 istore_1
        0x1b,             // 2 iload_1
        0x08,             // 3 iconst_5
        0xa2, 0x00, 0x0e, // 4 if_icmpge +14 → 18
        0x1b,             // 7 iload_1
        0xb8, 0x00, 0x0b, // 8 invokestatic #11
        0x57,             // 11 pop
        0x84, 0x01, 0x01, // 12 iinc 1, 1
        0xa7, 0xff, 0xf3, // 15 goto -13 → 2
        0xb1,             // 18 return
    ];
    method(&mut v, 5, 6, 2, 2, &main);
    u2(&mut v, 0); // class attributes
    std::fs::write(dir.join("Jsr.class"), v).expect("write Jsr.class");
}

const MAIN: &str = "Jsr.main([Ljava/lang/String;)V";
const SUB: &str = "Jsr.sub(I)I";

fn assert_jsr(what: &str, m: &Mct) {
    let main = m.get(&[MAIN]);
    let sub = m.get(&[MAIN, SUB]);
    assert!(
        main.map(|c| (c.calls, c.bytecodes)) == Some((1, 46))
            && sub.map(|c| (c.calls, c.bytecodes)) == Some((5, 60))
            && m.nodes.len() == 2,
        "{what}: expected main 1/46, main → sub 5/60, got:\n{}",
        m.render()
    );
}

fn run(jdk: Jdk) {
    let dir = scratch(&format!("jsr-{}", jdk.name()));
    let classes = dir.join("classes");
    std::fs::create_dir_all(&classes).expect("classes dir");
    write_class(&classes);
    let cp = classes.display().to_string();

    let oracle_out = dir.join("oracle.json");
    let args = vec![
        "-Xint".into(),
        "-Xverify:all".into(),
        format!(
            "-agentpath:{}=out={}",
            oracle_lib(jdk).display(),
            oracle_out.display()
        ),
        "-cp".into(),
        cp.clone(),
        "Jsr".into(),
    ];
    java(jdk, &args, &dir, LIMIT).assert_ok();
    let text = std::fs::read_to_string(&oracle_out).expect("oracle output");
    assert_jsr(
        &format!("oracle on {}", jdk.name()),
        &Mct::parse(&text).expect("oracle JSON"),
    );

    for bba in ["default", "precise"] {
        for gran in [None, Some(5)] {
            let out = dir.join(format!("jsr-{bba}-{gran:?}.json"));
            let args = vec![
                "-Xverify:all".into(),
                format!(
                    "-agentpath:{}={}",
                    agent_lib().display(),
                    agent_opts(bba, gran, &out, "stats=true")
                ),
                "-cp".into(),
                cp.clone(),
                "Jsr".into(),
            ];
            let r = java(jdk, &args, &dir, LIMIT);
            r.assert_ok();
            let what = format!("agent on {} bba={bba} granularity={gran:?}", jdk.name());
            let text = std::fs::read_to_string(&out)
                .unwrap_or_else(|e| panic!("{what}: no profile: {e}\n{}", r.stderr));
            assert!(
                r.stderr.contains("classes_rewritten=1 "),
                "{what}: Jsr was not rewritten:\n{}",
                r.stderr
            );
            assert_jsr(&what, &parse_agent(&text, bba, &what));
        }
    }
}

#[test]
fn jsr_jdk17() {
    run(Jdk::J17);
}

#[test]
fn jsr_jdk25() {
    run(Jdk::J25);
}
