//! Compiles the Java half of the agent (`java/`) and packs two jars:
//! - `jp-rt.jar` (package `jp.rt`): embedded into `libjpagent.so` and appended to the
//!   bootstrap class path at load time (or, for windows, its classes defined into the boot
//!   loader one by one), so that every class loader sees the runtime;
//! - `jp-agent.jar` (package `jp.agent`): the `-javaagent` entry point.
//!
//! `jp-agent.jar` is also copied next to the cdylib (`$CARGO_TARGET_DIR/<profile>/`),
//! which is where `cargo xtask build` and the tests pick it up.
//!
//! The JDK is `$JP_JAVA_HOME`, else `$JAVA_HOME`, else the Debian OpenJDK 17 path.
//! Classes are compiled for 17 (`-source 17 -target 17`) so that they load on every
//! supported JVM.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const DEFAULT_JDK: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

fn main() {
    if let Err(e) = run() {
        eprintln!("jp-agent build.rs: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let java_dir = manifest_dir.join("java");
    println!("cargo:rerun-if-changed={}", java_dir.display());
    println!("cargo:rerun-if-env-changed=JP_JAVA_HOME");
    println!("cargo:rerun-if-env-changed=JAVA_HOME");
    // HotSpot unloads an agent library whose first Agent_OnAttach returns an error, even
    // when that call already started the agent (threads, callbacks, a JVMTI environment):
    // the JVM then crashed at exit. Marked nodelete, the library stays mapped once loaded.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");

    let jdk = env::var_os("JP_JAVA_HOME")
        .or_else(|| env::var_os("JAVA_HOME"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_JDK));
    let javac = jdk.join("bin/javac");
    let jar = jdk.join("bin/jar");
    if !javac.exists() || !jar.exists() {
        return Err(format!(
            "need a JDK (javac and jar) at {} — install openjdk-17-jdk-headless or set JP_JAVA_HOME",
            jdk.display()
        ));
    }

    let mut sources = Vec::new();
    collect_java(&java_dir, &mut sources)?;
    sources.sort();
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }

    let classes = out_dir.join("classes");
    if classes.exists() {
        fs::remove_dir_all(&classes).map_err(|e| format!("clean {}: {e}", classes.display()))?;
    }
    fs::create_dir_all(&classes).map_err(|e| e.to_string())?;
    let status = Command::new(&javac)
        .args([
            // Not `--release 17`, which refuses `--add-exports`: the context slot
            // (ContextSlot.java) uses jdk.internal.misc.Unsafe, exported to the runtime at
            // VM init by JVMTI. Class files for 17 either way. The JIT's inlining
            // annotations (jdk.internal.vm.annotation) are honoured for boot classes, which
            // the runtime is; they are only named in class files, never loaded.
            "-source",
            "17",
            "-target",
            "17",
            "--add-exports",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
            "--add-exports",
            "java.base/jdk.internal.vm.annotation=ALL-UNNAMED",
            "-g",
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-d",
        ])
        .arg(&classes)
        .args(&sources)
        .status()
        .map_err(|e| format!("run {}: {e}", javac.display()))?;
    if !status.success() {
        return Err(format!("javac failed ({status})"));
    }

    // Runtime jar: only jp/rt. No manifest: it is a plain class path entry. Stored, not
    // deflated: windows define its classes straight from the entries (`bootjar`).
    let rt_jar = out_dir.join("jp-rt.jar");
    let _ = fs::remove_file(&rt_jar);
    run_tool(
        Command::new(&jar)
            .arg("--create")
            .arg("--no-manifest")
            .arg("--no-compress")
            .arg("--file")
            .arg(&rt_jar)
            .arg("-C")
            .arg(&classes)
            .arg("jp/rt"),
    )?;

    // Agent jar: jp/agent and jp/rt, with a manifest naming the Premain-Class and putting
    // the jar itself on the boot class path (the JPLIS agent appends it in the OnLoad phase,
    // which is quieter and earlier than the native code could in premain).
    let manifest = out_dir.join("MANIFEST.MF");
    fs::write(
        &manifest,
        "Premain-Class: jp.agent.Premain\nBoot-Class-Path: jp-agent.jar\n\
         Can-Retransform-Classes: true\nCan-Redefine-Classes: false\nEnable-Native-Access: ALL-UNNAMED\n",
    )
    .map_err(|e| e.to_string())?;
    let agent_jar = out_dir.join("jp-agent.jar");
    let _ = fs::remove_file(&agent_jar);
    run_tool(
        Command::new(&jar)
            .arg("--create")
            .arg("--file")
            .arg(&agent_jar)
            .arg("--manifest")
            .arg(&manifest)
            .arg("-C")
            .arg(&classes)
            .arg("jp/agent")
            .arg("-C")
            .arg(&classes)
            .arg("jp/rt"),
    )?;

    // OUT_DIR is <target>/<profile>/build/jp-agent-<hash>/out: the profile dir is 3 up.
    if let Some(profile_dir) = out_dir.ancestors().nth(3) {
        let dest = profile_dir.join("jp-agent.jar");
        fs::copy(&agent_jar, &dest).map_err(|e| format!("copy jar to {}: {e}", dest.display()))?;
        println!("cargo:rustc-env=JP_AGENT_JAR_PATH={}", dest.display());
    }
    println!("cargo:rustc-env=JP_RT_JAR={}", rt_jar.display());
    Ok(())
}

fn run_tool(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

fn collect_java(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            collect_java(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "java") {
            out.push(path);
        }
    }
    Ok(())
}
