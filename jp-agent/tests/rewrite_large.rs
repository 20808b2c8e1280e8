//! Methods that grow past 32 KiB once counted: far branches are widened (goto -> goto_w;
//! a conditional becomes an inverted branch over a goto_w; in a class with stack map
//! frames the instruction after it gets a frame inferred from the previous frame). Run
//! with -Xverify:all on both JDKs (version 52 with frames, and the same code as version
//! 49 without): same output as the original, exact bytecode counts under both BBAs.

mod rewrite_common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use jpagent::classfile::Bba;
use rewrite_common::*;

const K: usize = 2000;

/// Bytecodes executed by main and gotoFar(2500), by hand from `javap -c`: `if (i == 0)` is
/// `iload_3 ifne` (2), every other test `iload_3 <push k> if_icmpne` (3): 5999 per round;
/// `y += k` is `lload_1 <push k> ladd lstore_1` (4), taken in 2000 rounds; the exit test
/// `iinc iload_3 iload_0 if_icmplt` (4) every round; `rounds++; goto` (5) in 2499 rounds;
/// `lload_1 lreturn` (2) once; the prologue `lconst_0 lstore_1 iconst_0 istore_3` (4).
/// main: `getstatic sipush invokestatic invokevirtual` twice and `return` (9).
const BYTECODES_V52: u64 = 4 + 2500 * 5999 + 2000 * 4 + 2500 * 4 + 2499 * 5 + 2 + 9;
/// condFar(2500): prologue (4), loop test `iload_3 iload_0 if_icmpge` 2501 times, the same
/// 5999 tests per round and 2000 additions, `iinc goto` (2) per round, `lload_1 lreturn`.
const BYTECODES_COND_FAR: u64 = 4 + 2501 * 3 + 2500 * 5999 + 2000 * 4 + 2500 * 2 + 2;

fn source() -> String {
    let mut body = String::new();
    for k in 0..K {
        let _ = writeln!(body, "            if (i == {k}) y += {k};");
    }
    format!(
        r#"public class Big {{
    // while (true) with a return at the end: the back edge (a goto) is the only far branch.
    static long gotoFar(int n) {{
        long y = 0;
        int i = 0;
        while (true) {{
{body}            if (++i >= n) return y;
            rounds++;
        }}
    }}

    static int rounds;

    // The loop test jumps forward over the whole body: a far conditional branch.
    static long condFar(int n) {{
        long y = 0;
        for (int i = 0; i < n; i++) {{
{body}        }}
        return y;
    }}

    public static void main(String[] args) {{
        System.out.println(gotoFar(2500));
        System.out.println(condFar(2500));
    }}
}}
"#
    )
}

/// A method with 281 local slots: the context local is loaded with `wide aload`.
fn locals_source() -> String {
    let decls: String = (0..140)
        .map(|k| format!("        long a{k} = n + {k};\n"))
        .collect();
    let sum: Vec<String> = (0..140).map(|k| format!("a{k}")).collect();
    format!(
        "public class Locals {{\n    static long many(int n) {{\n{decls}        for (int r = 0; r < 2; r++) a0 += r;\n        return {};\n    }}\n\n    public static void main(String[] args) {{\n        System.out.println(many(1));\n    }}\n}}\n",
        sum.join(" + ")
    )
}

fn has_wide_goto(bytes: &[u8], method: &str) -> bool {
    let class = cafebabe::parse_class(bytes).expect("parses");
    let m = class
        .methods
        .iter()
        .find(|m| m.name == method)
        .expect("method");
    m.attributes.iter().any(|a| match &a.data {
        cafebabe::attributes::AttributeData::Code(c) => c.bytecode.as_ref().is_some_and(|b| {
            b.opcodes
                .iter()
                .any(|(_, op)| matches!(op, cafebabe::bytecode::Opcode::Goto(o) if o.abs() > 32767))
        }),
        _ => false,
    })
}

#[test]
fn far_branches_are_widened_or_counted() {
    let jdks = jdks();
    let asm = Path::new("/usr/share/java/asm.jar");
    assert!(
        asm.exists(),
        "{} missing: apt-get install libasm-java",
        asm.display()
    );
    let dir = scratch("large");
    let (h, stubs) = compile_harness(&dir);
    let src = dir.join("Big.java");
    std::fs::write(&src, source()).unwrap();
    let locals = dir.join("Locals.java");
    std::fs::write(&locals, locals_source()).unwrap();
    let v52 = dir.join("v52");
    javac(&[src, locals], &v52, None, "8");
    // The same code as version 49 without frames.
    let tools = dir.join("tools");
    javac(
        &[verify_src().join("Downgrade.java")],
        &tools,
        Some(&asm.display().to_string()),
        "17",
    );
    let v49 = dir.join("v49");
    std::fs::create_dir_all(&v49).unwrap();
    run(Command::new(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(format!("{}:{}", tools.display(), asm.display()))
        .arg("Downgrade")
        .arg(&v52)
        .arg(&v49)
        .arg("Big.class")
        .arg("Locals.class"));
    let expected = format!("{0}\n{0}\n", (K * (K - 1) / 2));
    for (version, orig) in [(52u16, &v52), (49, &v49)] {
        let input = std::fs::read(orig.join("Big.class")).unwrap();
        assert_eq!(u16::from_be_bytes([input[6], input[7]]), version);
        let mut bytecodes = Vec::new();
        for (bba, bname) in [(Bba::Default, "default"), (Bba::Precise, "precise")] {
            let (bytes, stats) = rewrite_changed(&input, bba);
            assert_eq!(
                (stats.methods_instrumented, stats.methods_unwidenable),
                (4, 0),
                "v{version} {bname}"
            );
            assert!(
                has_wide_goto(&bytes, "gotoFar"),
                "gotoFar's back edge became a goto_w"
            );
            assert!(
                has_wide_goto(&bytes, "condFar"),
                "condFar's exit test goes through a goto_w"
            );
            let new = dir.join(format!("new{version}-{bname}"));
            std::fs::create_dir_all(&new).unwrap();
            std::fs::write(new.join("Big.class"), &bytes).unwrap();
            let (lb, _) = rewrite_changed(&std::fs::read(orig.join("Locals.class")).unwrap(), bba);
            // The context local is past 255: `wide aload L` is in the code.
            let class = cafebabe::parse_class(&lb).expect("parses");
            let many = class
                .methods
                .iter()
                .find(|m| m.name == "many")
                .expect("many");
            let l = many
                .attributes
                .iter()
                .find_map(|a| match &a.data {
                    // With bba=precise the pending count follows the context.
                    cafebabe::attributes::AttributeData::Code(c) => {
                        Some(c.max_locals - if bba == Bba::Precise { 2 } else { 1 })
                    }
                    _ => None,
                })
                .expect("code");
            assert!(l > 255);
            let [hi, lo] = l.to_be_bytes();
            assert!(
                lb.windows(4).any(|w| w == [0xc4, 0x19, hi, lo]),
                "wide aload of local {l}"
            );
            if bba == Bba::Precise {
                let [hi, lo] = (l + 1).to_be_bytes();
                assert!(
                    lb.windows(4).any(|w| w == [0xc4, 0x84, hi, lo]),
                    "wide iinc of the pending count {}",
                    l + 1
                );
            }
            std::fs::write(new.join("Locals.class"), &lb).unwrap();
            for (jname, home) in &jdks {
                let java = home.join("bin/java");
                let cp = format!("{}:{}:{}", h.display(), stubs.display(), new.display());
                let out = run(Command::new(&java)
                    .arg("-Xverify:all")
                    .arg("-cp")
                    .arg(&cp)
                    .arg("RunMain")
                    .arg("Big"));
                assert!(
                    out.starts_with(&expected),
                    "JDK {jname} v{version} {bname}: {out}"
                );
                let rt = out.lines().last().unwrap_or("").to_string();
                // 140 x 1 + (0 + ... + 139) + (0 + 1) from the loop.
                let lout = run(Command::new(&java)
                    .arg("-Xverify:all")
                    .arg("-cp")
                    .arg(&cp)
                    .arg("RunMain")
                    .arg("Locals"));
                assert!(
                    lout.starts_with("9871\nRT enters=2 exits=2 "),
                    "JDK {jname} v{version} {bname}: {lout}"
                );
                // main, gotoFar and condFar: balanced entries and exits.
                let enters = 3;
                assert!(
                    rt.starts_with(&format!("RT enters={enters} exits={enters} ")),
                    "{rt}"
                );
                let b: u64 = rt
                    .split(' ')
                    .find_map(|kv| kv.strip_prefix("bytecodes="))
                    .and_then(|v| v.parse().ok())
                    .expect("bytecodes");
                assert_eq!(b, BYTECODES_V52 + BYTECODES_COND_FAR);
                bytecodes.push(b);
                println!("JDK {jname} v{version} bba={bname}: {rt}");
            }
        }
        assert!(
            bytecodes.windows(2).all(|w| w[0] == w[1]),
            "v{version}: both BBAs count the same: {bytecodes:?}"
        );
    }
}
