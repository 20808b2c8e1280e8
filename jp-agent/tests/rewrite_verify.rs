//! The JVM accepts what the rewriter produces: every class of real jars and of the
//! JDK's own modules is rewritten (both BBAs) and linked with `-Xverify:all` on JDK 17
//! and JDK 25. Classes must link exactly as well as the originals do (a class whose
//! dependency is missing fails the same way in both), with zero VerifyErrors.
//!
//! Modes: both BBAs, and the default BBA with every branch widened as if out of reach
//! (goto_w everywhere, and a frame inferred after every conditional branch).
//! Default: rhino (js.jar) and h2 and the `java.base` module. `JP_REWRITE_FULL=1`: more
//! jars (jython, xalan, xerces, guava, icu4j, asm) and every JDK module.
//! Needs: both JDKs, `unzip`, the Debian jars (librhino-java, libh2-java, ...).

mod rewrite_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rewrite_common::*;

fn harness(java: &Path, pre: &[String], h: &Path, args: &[String]) -> Linked {
    let mut c = Command::new(java);
    c.arg("-Xverify:all")
        .args(pre)
        .arg("-cp")
        .arg(h)
        .arg("VerifyHarness")
        .args(args);
    parse_harness(&run(&mut c))
}

fn assert_broken_rejected(l: &Linked, what: &str) {
    let hit = l
        .fails
        .iter()
        .any(|((_, c), (e, _))| c == "jp.rt.Broken" && e == "java.lang.VerifyError");
    assert!(
        hit,
        "{what}: the deliberately broken class was not rejected: the harness does not verify"
    );
}

fn ok_count(l: &Linked) -> u64 {
    l.summary
        .iter()
        .filter(|(d, _)| !d.ends_with("/broken"))
        .map(|(_, (_, ok))| ok)
        .sum()
}

#[test]
fn real_jars_verify_on_both_jdks() {
    verify_jars("jars", false);
}

/// The same jars as version 49 without frames (ASM, `libasm-java`): the old inference
/// verifier checks the rewritten code. Classes that cannot be version 49 (invokedynamic)
/// fail the same way before and after rewriting.
#[test]
fn real_jars_as_version_49_verify_on_both_jdks() {
    verify_jars("jars49", true);
}

fn verify_jars(name: &str, downgrade: bool) {
    let t0 = Instant::now();
    let jdks = jdks();
    let dir = scratch(name);
    let (h, _) = compile_harness(&dir);
    let mut jars = vec!["js", "h2"];
    if full_sweep() {
        jars.extend([
            "jython",
            "xalan2",
            "serializer",
            "xercesImpl",
            "guava",
            "icu4j",
            "asm-all",
        ]);
    }
    let mut orig = dir.join("orig");
    for j in &jars {
        extract_jar(
            &Path::new("/usr/share/java").join(format!("{j}.jar")),
            &orig.join(j),
        );
    }
    if downgrade {
        let asm = Path::new("/usr/share/java/asm.jar");
        assert!(
            asm.exists(),
            "{} missing: apt-get install libasm-java",
            asm.display()
        );
        let tools = dir.join("tools");
        javac(
            &[verify_src().join("Downgrade.java")],
            &tools,
            Some(&asm.display().to_string()),
            "17",
        );
        let v49 = dir.join("orig49");
        for j in &jars {
            run(Command::new(Path::new(JDK17).join("bin/java"))
                .arg("-cp")
                .arg(format!("{}:{}", tools.display(), asm.display()))
                .arg("Downgrade")
                .arg(orig.join(j))
                .arg(v49.join(j)));
        }
        orig = v49;
    }
    let broken = orig.join("broken/jp/rt");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("Broken.class"), broken_class()).unwrap();
    let dirs = |root: &Path| -> Vec<String> {
        let mut v: Vec<String> = jars
            .iter()
            .map(|j| root.join(j).display().to_string())
            .collect();
        v.push(root.join("broken").display().to_string());
        v
    };
    let mut report = Vec::new();
    for mode in MODES {
        let bname = mode.name;
        let root = dir.join(bname);
        let mut total = TreeStats::default();
        for j in &jars {
            let t = rewrite_tree(&orig.join(j), &root.join(j), mode, &|_| false);
            assert!(
                t.errors.is_empty(),
                "{j}: classes the rewriter rejected: {:?}",
                &t.errors[..t.errors.len().min(10)]
            );
            total.classes += t.classes;
            total.changed += t.changed;
            total.unchanged += t.unchanged;
            add_stats(&mut total.stats, &t.stats);
        }
        rewrite_tree(&orig.join("broken"), &root.join("broken"), mode, &|_| true);
        report.push(format!(
            "{name} mode={bname}: {} classes, {} rewritten, {} unchanged; methods {} instrumented, {} too large, {} unwidenable, {} <init> without catch-all, {} type annotation attributes remapped, {} dropped",
            total.classes, total.changed, total.unchanged, total.stats.methods_instrumented, total.stats.methods_too_large,
            total.stats.methods_unwidenable, total.stats.methods_without_catch_all, total.stats.type_annotations_remapped,
                total.stats.type_annotations_dropped
        ));
    }
    for (jname, home) in &jdks {
        let java = home.join("bin/java");
        let base = harness(&java, &[], &h, &dirs(&orig));
        assert_broken_rejected(&base, "original classes");
        for Mode { name: bname, .. } in MODES {
            let new = harness(&java, &[], &h, &dirs(&dir.join(bname)));
            assert_broken_rejected(&new, "rewritten classes");
            let bad = new_failures(&base, &new);
            assert!(
                bad.is_empty(),
                "JDK {jname} mode={bname}: {} classes fail only when rewritten:\n{}",
                bad.len(),
                bad.join("\n")
            );
            let verify_errors = new
                .fails
                .iter()
                .filter(|((_, c), (e, _))| {
                    c != "jp.rt.Broken"
                        && (e.contains("VerifyError") || e.contains("ClassFormatError"))
                })
                .count();
            if !downgrade {
                assert_eq!(verify_errors, 0);
            }
            report.push(format!(
                "{name} JDK {jname} mode={bname}: {} classes linked with -Xverify:all (originals: {}), {} fail as the originals do",
                ok_count(&new), ok_count(&base), new.fails.len() - 1
            ));
        }
    }
    println!("{}\n(in {:?})", report.join("\n"), t0.elapsed());
}

/// Rewritten JDK classes are put in front of the JDK's with --patch-module (java.* cannot
/// be defined by another loader); the stubs go into java.base (the boot loader cannot see
/// -Xbootclasspath/a early enough) and `jp.rt` is exported to every module.
/// `java/lang/Object` stays as it is: instrumenting its constructor runs Java code before
/// the VM can run any (that is the agent's business with jdk=true, not the verifier's).
#[test]
fn jdk_modules_verify_on_their_own_jdk() {
    let t0 = Instant::now();
    let jdks = jdks();
    let dir = scratch("jdk");
    let (h, stubs) = compile_harness(&dir);
    let mut report = Vec::new();
    for (jname, home) in &jdks {
        let orig = dir.join(format!("jdk{jname}-orig"));
        let mut c = Command::new(home.join("bin/jimage"));
        c.arg("extract").arg(format!("--dir={}", orig.display()));
        if !full_sweep() {
            c.arg("--include").arg("regex:/java\\.base/.*\\.class");
        }
        c.arg(home.join("lib/modules"));
        run(&mut c);
        let mut modules: Vec<String> = std::fs::read_dir(&orig)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        modules.sort();
        assert!(modules.contains(&"java.base".to_string()));
        let java = home.join("bin/java");
        let base_dirs: Vec<String> = modules
            .iter()
            .map(|m| orig.join(m).display().to_string())
            .collect();
        let mut base_args = vec!["-boot".to_string()];
        base_args.extend(base_dirs);
        let base = harness(
            &java,
            &["--add-modules".into(), "ALL-SYSTEM".into()],
            &h,
            &base_args,
        );
        for mode in MODES {
            let bname = mode.name;
            let new_root = dir.join(format!("jdk{jname}-{bname}"));
            let mut total = TreeStats::default();
            for m in &modules {
                let t = rewrite_tree(&orig.join(m), &new_root.join(m), mode, &|rel: &Path| {
                    rel == Path::new("java/lang/Object.class")
                });
                assert!(
                    t.errors.is_empty(),
                    "{m}: classes the rewriter rejected: {:?}",
                    &t.errors[..t.errors.len().min(10)]
                );
                total.classes += t.classes;
                total.changed += t.changed;
                total.unchanged += t.unchanged;
                add_stats(&mut total.stats, &t.stats);
            }
            // Stubs and the negative control into java.base.
            let jb = new_root.join("java.base");
            for f in ["jp/rt/Rt.class", "jp/rt/Node.class"] {
                std::fs::create_dir_all(jb.join("jp/rt")).unwrap();
                std::fs::copy(stubs.join(f), jb.join(f)).unwrap();
            }
            std::fs::write(jb.join("jp/rt/Broken.class"), broken_class()).unwrap();
            let mut pre: Vec<String> = vec!["--add-modules".into(), "ALL-SYSTEM".into()];
            let mut args = vec!["-boot".to_string()];
            for m in &modules {
                pre.push(format!("--patch-module={m}={}", new_root.join(m).display()));
                pre.push(format!("--add-exports=java.base/jp.rt={m}"));
                args.push(new_root.join(m).display().to_string());
            }
            let new = harness(&java, &pre, &h, &args);
            assert_broken_rejected(&new, "patched JDK classes");
            let bad = new_failures(&base, &new);
            let bad: Vec<String> = bad
                .into_iter()
                .filter(|l| !l.contains(" jp.rt.Broken:"))
                .collect();
            assert!(
                bad.is_empty(),
                "JDK {jname} mode={bname}: {} classes fail only when rewritten:\n{}",
                bad.len(),
                bad.join("\n")
            );
            let linked: u64 = new.summary.values().map(|(_, ok)| ok).sum::<u64>() - 2; // minus Rt, Node
            report.push(format!(
                "JDK {jname} mode={bname}: {} modules, {} classes ({} rewritten, {} unchanged); methods {} instrumented, {} too large, {} unwidenable, {} <init> without catch-all, {} type annotation attributes remapped, {} dropped; {} classes linked with -Xverify:all while running on the rewritten JDK (originals: {})",
                modules.len(), total.classes, total.changed, total.unchanged, total.stats.methods_instrumented,
                total.stats.methods_too_large, total.stats.methods_unwidenable, total.stats.methods_without_catch_all,
                total.stats.type_annotations_remapped,
                total.stats.type_annotations_dropped, linked, base.summary.values().map(|(_, ok)| ok).sum::<u64>()
            ));
            let _ = std::fs::remove_dir_all(&new_root);
        }
        let _ = std::fs::remove_dir_all(&orig);
    }
    println!("{}\n(in {:?})", report.join("\n"), t0.elapsed());
    let _: Option<PathBuf> = None;
}
