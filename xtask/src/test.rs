//! `cargo xtask test`: set-up, build, then every test of the workspace, for real.
//!
//! The eBPF tests need root and the JVM tests both JDKs: they fail (never skip) with
//! a message when either is missing. The built deliverables are handed to the tests
//! through the environment, so no test builds jp itself.
use std::process::Command;

use anyhow::Result;

use crate::build;
use crate::cmd::{self, root};
use crate::setup;

pub fn run(extra: &[String]) -> Result<()> {
    setup::run()?;
    format_check()?;
    let out = build::run()?;
    let mut c = Command::new("cargo");
    c.current_dir(root())
        // Every failure at once: one CI run shows them all.
        .args([
            "test",
            "--release",
            "--no-fail-fast",
            "--workspace",
            "--exclude",
            "jp-ebpf",
        ])
        .env("JPD", &out.jpd)
        .env("JPCTL", &out.jpctl)
        .env("JP_AGENT_LIB", &out.agent_lib)
        .env("JP_AGENT_JAR", &out.agent_jar)
        .env("JP_JDK17", setup::JDK17)
        .env("JP_JDK25", setup::JDK25);
    if !extra.is_empty() {
        c.arg("--").args(extra);
    }
    cmd::run(&mut c)?;
    library_tests_in_debug()?;
    clippy()
}

/// The library unit tests once more in a debug build, so that overflow checks and
/// `debug_assert!` run; they are quick and need no deliverable. The heavy suites
/// (integration tests) stay in release.
fn library_tests_in_debug() -> Result<()> {
    cmd::run(Command::new("cargo").current_dir(root()).args([
        "test",
        "--no-fail-fast",
        "--workspace",
        "--exclude",
        "jp-ebpf",
        "--lib",
    ]))
}

/// Formatting and clippy are part of the test: main stays clean. Formatting is
/// checked first (it costs a second), clippy last (it costs a build).
fn format_check() -> Result<()> {
    cmd::run(
        Command::new("cargo")
            .current_dir(root())
            .args(["fmt", "--all", "--", "--check"]),
    )
}

fn clippy() -> Result<()> {
    cmd::run(Command::new("cargo").current_dir(root()).args([
        "clippy",
        "--release",
        "--workspace",
        "--exclude",
        "jp-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
}
