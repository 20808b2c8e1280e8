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
    (
        "junit5",
        "test-only: the README's CI recipe runs a JUnit 5 suite under the agent (console launcher)",
    ),
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
        "test-only: a venv for the grpcio client that calls every RPC and the OTLP receiver (pip: grpcio, grpcio-tools, opentelemetry-proto==1.45.2)",
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
    install_node()?;
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

/// The browser tests drive chromium from Node.js, with its built-in WebSocket client
/// (`--experimental-websocket` from 20.10 on, on by default from 22).
const NODE_MIN: (u32, u32) = (20, 10);
const NODE_INSTALL: &str = "install Node.js 20 LTS or later, e.g. NodeSource's nodejs \
    package (deb.nodesource.com) or a build from nodejs.org";

/// (major, minor) of `node --version` ("v20.20.2").
fn parse_node_version(v: &str) -> Option<(u32, u32)> {
    parse_major_minor(v.trim().strip_prefix('v')?)
}

/// (major, minor) of a Debian package version ("18.20.4+dfsg-1~deb12u3", "1:20.19.2-1").
fn parse_debian_version(v: &str) -> Option<(u32, u32)> {
    let upstream = v.trim().split_once(':').map_or(v.trim(), |(_, u)| u);
    parse_major_minor(upstream)
}

fn parse_major_minor(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The "Candidate:" line of `apt-cache policy PKG`; None when apt has none.
fn apt_candidate(policy: &str) -> Option<String> {
    policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:"))
        .map(|c| c.trim().to_string())
        .filter(|c| c != "(none)")
}

fn node_version() -> (Option<(u32, u32)>, String) {
    let have = probe(Command::new("node").arg("--version"));
    let version = have.as_deref().and_then(parse_node_version);
    let found = have.map_or_else(|| "none".to_string(), |v| v.trim().to_string());
    (version, found)
}

/// Node.js >= 20.10, or Debian's `nodejs` when that is new enough; when it is not (Debian
/// 12 has 18), say what to install: the browser tests then FAIL, saying what to install.
fn install_node() -> Result<()> {
    let (version, found) = node_version();
    if version.is_some_and(|v| v >= NODE_MIN) {
        return Ok(());
    }
    if is_root() {
        // The candidate below is only as fresh as the package lists.
        cmd::run(Command::new("apt-get").args(["update", "-q"]))?;
    }
    let policy = probe(Command::new("apt-cache").args(["policy", "nodejs"])).unwrap_or_default();
    let candidate = apt_candidate(&policy);
    let offered = match candidate.as_deref().and_then(parse_debian_version) {
        Some(v) if v >= NODE_MIN => {
            if !is_root() {
                bail!(
                    "the browser tests need Node.js >= 20.10 (found: {found}), and not root to \
                     install it: sudo apt-get install -y nodejs"
                );
            }
            cmd::run(
                Command::new("apt-get")
                    .args(["install", "-y", "-q", "--no-install-recommends", "nodejs"])
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            )?;
            let (version, found) = node_version();
            if version.is_some_and(|v| v >= NODE_MIN) {
                return Ok(());
            }
            format!(
                "nodejs {}, yet `node` on PATH is {found}",
                candidate.unwrap_or_default()
            )
        }
        Some(_) => format!("nodejs {}, too old", candidate.unwrap_or_default()),
        None => "no nodejs package".to_string(),
    };
    eprintln!(
        "xtask: WARNING: the browser tests need Node.js >= 20.10 (found: {found}); apt offers \
         {offered}: {NODE_INSTALL}. The browser tests will FAIL until then."
    );
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_debian_versions() {
        assert_eq!(parse_node_version("v20.20.2\n"), Some((20, 20)));
        assert_eq!(parse_node_version("v18.20.4"), Some((18, 20)));
        assert_eq!(parse_node_version("20.10.0"), None);
        assert_eq!(
            parse_debian_version("18.20.4+dfsg-1~deb12u3"),
            Some((18, 20))
        );
        assert_eq!(
            parse_debian_version("20.20.2-1nodesource1+repack1"),
            Some((20, 20))
        );
        assert_eq!(parse_debian_version("1:20.19.2-1"), Some((20, 19)));
        assert!(parse_debian_version("18.20.4+dfsg-1~deb12u3").is_some_and(|v| v < NODE_MIN));
        assert_eq!(NODE_MIN, (20, 10));
        assert!(parse_node_version("v20.9.0").is_some_and(|v| v < NODE_MIN));
    }

    #[test]
    fn the_candidate_of_apt_cache_policy() {
        let policy =
            "nodejs:\n  Installed: (none)\n  Candidate: 18.20.4+dfsg-1~deb12u3\n  Version table:\n";
        assert_eq!(
            apt_candidate(policy).as_deref(),
            Some("18.20.4+dfsg-1~deb12u3")
        );
        assert_eq!(
            apt_candidate("nodejs:\n  Installed: (none)\n  Candidate: (none)\n"),
            None
        );
        assert_eq!(apt_candidate(""), None);
    }
}
