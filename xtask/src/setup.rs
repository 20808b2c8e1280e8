//! `cargo xtask setup`: install whatever is missing, and nothing else, so that a
//! second run costs a second.
use std::process::Command;

use anyhow::{bail, Result};

use crate::cmd::{self, probe};

/// Debian packages jp's build, tests and benchmarks need, with why.
const PACKAGES: &[(&str, &str)] = &[
    (
        "llvm-22-dev",
        "bpf-linker links eBPF objects with LLVM 22 (the nightly's LLVM)",
    ),
    (
        "libpolly-22-dev",
        "needed to link bpf-linker against llvm-22",
    ),
    ("protobuf-compiler", "protoc, for the gRPC API (proto/)"),
    (
        "openjdk-17-jdk-headless",
        "javac/jar for the agent's Java runtime; JDK 17 tests",
    ),
    (
        "libasm-java",
        "test-only: generates JSR/RET (class version 49) fixtures",
    ),
    ("rhino", "real-program test: JavaScript"),
    ("jython", "real-program test: Python"),
    ("libh2-java", "real-program test: SQL"),
    ("libxalan2-java", "real-program test: XSLT"),
    ("liblucene8-java", "real-program test: indexing and search"),
    ("linux-perf", "benchmark: perf record side by side with jp"),
    (
        "systemtap-sdt-dev",
        "test-only: <sys/sdt.h> for the USDT test programs",
    ),
    (
        "gcc",
        "test-only: builds the JVMTI oracle and the USDT test programs",
    ),
    (
        "unzip",
        "test-only: the rewriter's verification sweep lists jar entries",
    ),
    (
        "binutils",
        "test-only: readelf, the independent oracle of the USDT note parser",
    ),
    (
        "systemd",
        "test-only: systemd-analyze verify checks deploy/systemd/jpd.service",
    ),
    (
        "systemd-container",
        "test-only: systemd-nspawn boots a real systemd (PID 1 of a container) to run jpd.service",
    ),
    (
        "prometheus",
        "test-only: a real Prometheus scrapes jpd's /metrics; promtool checks the exposition",
    ),
    (
        "golang-go",
        "test-only: go tool pprof reads jpd's pprof profiles",
    ),
    (
        "python3-venv",
        "test-only: a venv for the grpcio client that calls every RPC",
    ),
    ("tmux", "test-only: drives jpctl top in a real terminal"),
    (
        "chromium",
        "test-only: the flame graph pages and jpd's live page, opened headless (DevTools protocol)",
    ),
    (
        "openssl",
        "test-only: fleet_pyroscope makes a test CA and certificate for its https receiver",
    ),
    (
        "libcap2-bin",
        "test-only: capsh, to run jpd with fewer capabilities",
    ),
];

pub const NIGHTLY: &str = "nightly";
const BPF_LINKER_VERSION: &str = "0.13.0";
pub const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
pub const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

pub fn run() -> Result<()> {
    install_debian_packages()?;
    check_nightly()?;
    install_bpf_linker()?;
    check_jdks();
    Ok(())
}

fn is_installed(pkg: &str) -> bool {
    probe(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .is_some_and(|s| s.contains("install ok installed"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn install_debian_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !is_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        let why: Vec<String> = PACKAGES
            .iter()
            .filter(|(p, _)| missing.contains(p))
            .map(|(p, w)| format!("  {p}: {w}"))
            .collect();
        bail!(
            "missing Debian packages, and not root to install them:\n{}\nrun as root, or: sudo apt-get install -y {}",
            why.join("\n"),
            missing.join(" ")
        );
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    cmd::run(Command::new("apt-get").args(["update", "-q"]))?;
    cmd::run(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn check_nightly() -> Result<()> {
    let toolchains = probe(Command::new("rustup").args(["toolchain", "list"])).unwrap_or_default();
    if !toolchains.lines().any(|l| l.starts_with(NIGHTLY)) {
        bail!(
            "the eBPF crate needs the Rust `{NIGHTLY}` toolchain with LLVM 22 (install \
             it with `rustup toolchain install {NIGHTLY} --component rust-src`); `rustup toolchain list` does not show it"
        );
    }
    let components = probe(Command::new("rustup").args([
        &format!("+{NIGHTLY}"),
        "component",
        "list",
        "--installed",
    ]))
    .unwrap_or_default();
    if !components.lines().any(|l| l.starts_with("rust-src")) {
        cmd::run(Command::new("rustup").args([
            &format!("+{NIGHTLY}"),
            "component",
            "add",
            "rust-src",
        ]))?;
    }
    Ok(())
}

fn install_bpf_linker() -> Result<()> {
    let have = probe(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if have.split_whitespace().nth(1) == Some(BPF_LINKER_VERSION) {
        return Ok(());
    }
    // LLVM_PREFIX: without it the build finds /usr/bin/llvm-config (LLVM 14) and fails to link.
    cmd::run(
        Command::new("cargo")
            .args([
                "+stable",
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
            ])
            .args(["--locked", "--no-default-features", "--features", "llvm-22"])
            .env("LLVM_PREFIX", "/usr/lib/llvm-22"),
    )
}

/// JDK 25 is part of the machine image, not a package any registry here has: say
/// loudly when it is absent (its tests then fail, they never pass quietly).
fn check_jdks() {
    for jdk in [JDK17, JDK25] {
        if !std::path::Path::new(jdk).join("bin/java").exists() {
            eprintln!("xtask: WARNING: {jdk} is missing: the JVM tests on that JDK will FAIL");
        }
    }
}
