//! The agent calls JNI and JVMTI functions through their function tables by slot number,
//! written by hand in `src/ffi/`. A wrong number calls another function with the wrong
//! arguments, so every slot constant there is checked against the JDK's own headers: a C
//! program compiled with gcc against each JDK's `jni.h` and `jvmti.h` prints the `offsetof`
//! of each function in its table, in pointers.
mod common;

use common::{scratch, Jdk};
use std::process::Command;

/// One hand-written slot: the Rust constant, its value, and the C table and member it names.
struct Slot {
    rust: String,
    index: usize,
    table: &'static str,
    member: String,
}

/// `pub const NAME: usize = N;` lines of the `mod slot { … }` block of `source`.
fn slot_block(source: &str) -> Vec<(String, usize)> {
    let start = source.find("mod slot {").expect("a `mod slot` block");
    let end = start + source[start..].find("\n}").expect("the end of `mod slot`");
    source[start..end].lines().filter_map(parse_const).collect()
}

fn parse_const(line: &str) -> Option<(String, usize)> {
    let rest = line.trim().strip_prefix("pub ").unwrap_or(line.trim());
    let rest = rest.strip_prefix("const ")?;
    let (name, value) = rest.split_once(": usize = ")?;
    Some((name.to_string(), value.trim_end_matches(';').parse().ok()?))
}

/// `FIND_CLASS` → `FindClass`; the headers keep `UTF`, `VM` and `ID` upper-case.
fn member_name(rust: &str) -> String {
    rust.split('_')
        .map(|w| match w {
            "UTF" | "VM" | "ID" => w.to_string(),
            _ => {
                let lower = w.to_ascii_lowercase();
                let mut c = lower.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            }
        })
        .collect()
}

fn slots() -> Vec<Slot> {
    let jni = include_str!("../src/ffi/jni.rs");
    let jvmti = include_str!("../src/ffi/jvmti.rs");
    let mut slots = Vec::new();
    for (rust, index) in slot_block(jni) {
        let member = member_name(&rust);
        slots.push(Slot {
            rust,
            index,
            table: "struct JNINativeInterface_",
            member,
        });
    }
    // JVMTI slot numbers are 1-based, as jvmti.h numbers them (slot 1 is reserved).
    for (rust, index) in slot_block(jvmti) {
        let member = member_name(&rust);
        slots.push(Slot {
            rust,
            index: index - 1,
            table: "struct jvmtiInterface_1_",
            member,
        });
    }
    // The JavaVM invoke interface: `const VM_NAME: usize = N;` lines, member by name.
    let vm_slots: Vec<_> = jni
        .lines()
        .filter(|l| l.starts_with("const VM_"))
        .filter_map(parse_const)
        .collect();
    assert!(
        vm_slots.iter().any(|(r, _)| r == "VM_GET_ENV"),
        "VM_GET_ENV in src/ffi/jni.rs"
    );
    for (rust, index) in vm_slots {
        let member = member_name(rust.trim_start_matches("VM_"));
        slots.push(Slot {
            rust,
            index,
            table: "struct JNIInvokeInterface_",
            member,
        });
    }
    slots
}

fn check(jdk: Jdk) {
    let slots = slots();
    assert!(
        slots.len() > 30,
        "only {} slots found in src/ffi/",
        slots.len()
    );
    let dir = scratch(&format!("ffi-slots-{}", jdk.name()));
    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n#include <jni.h>\n#include <jvmti.h>\nint main(void) {\n");
    for s in &slots {
        c.push_str(&format!(
            "    printf(\"%zu\\n\", offsetof({}, {}) / sizeof(void *));\n",
            s.table, s.member
        ));
    }
    c.push_str("    return 0;\n}\n");
    std::fs::write(dir.join("slots.c"), c).unwrap();
    let include = jdk.home().join("include");
    let out = Command::new("gcc")
        .current_dir(&dir)
        .arg(format!("-I{}", include.display()))
        .arg(format!("-I{}", include.join("linux").display()))
        .args(["-o", "slots", "slots.c"])
        .output()
        .expect("gcc (cargo xtask setup installs it)");
    assert!(
        out.status.success(),
        "{}: gcc failed (a slot names no function of the header?):\n{}",
        jdk.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(dir.join("slots")).output().unwrap();
    assert!(run.status.success());
    let printed: Vec<usize> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(printed.len(), slots.len());
    let wrong: Vec<String> = slots
        .iter()
        .zip(&printed)
        .filter(|(s, &header)| s.index != header)
        .map(|(s, header)| {
            format!(
                "{} = {} but {}::{} is at {header}",
                s.rust, s.index, s.table, s.member
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{}: {wrong:#?}", jdk.name());
}

#[test]
fn member_names_follow_the_headers() {
    assert_eq!(member_name("GET_STRING_UTF_CHARS"), "GetStringUTFChars");
    assert_eq!(member_name("GET_JAVA_VM"), "GetJavaVM");
    assert_eq!(member_name("GET_STATIC_METHOD_ID"), "GetStaticMethodID");
    assert_eq!(
        member_name("CALL_STATIC_VOID_METHOD_A"),
        "CallStaticVoidMethodA"
    );
}

#[test]
fn slots_match_jdk17_headers() {
    check(Jdk::J17);
}

#[test]
fn slots_match_jdk25_headers() {
    check(Jdk::J25);
}
