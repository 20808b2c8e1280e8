//! `cargo xtask test`: set-up, build, then every test of the workspace, for real;
//! `cargo xtask test --suite S`: set-up, the deliverables suite S runs, then only S.
//!
//! The eBPF tests need root and the JVM tests both JDKs: they fail (never skip) with
//! a message when either is missing. The built deliverables are handed to the tests
//! through the environment, so no test builds jp itself.
use std::process::Command;

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::build::{self, Deliverable};
use crate::cmd::{self, root};
use crate::setup;

/// One suite of tests: what `--suite` runs alone. Every test binary of the workspace
/// belongs to exactly one (a unit test below checks it).
#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Suite {
    /// Every crate's unit tests (libraries, binaries, examples) and doc tests.
    Unit,
    /// jp-daemon's `api`: the library's seams without root.
    Api,
    /// jp-daemon's `kernel`: the kernel collector on the real kernel, the daemon in-process (root).
    Kernel,
    /// jp-daemon's `usdt`: ELF notes, uprobes, the USDT collector (root).
    Usdt,
    /// jp-daemon's `e2e`: the delivered jpd and jpctl (root).
    E2e,
    /// jp-daemon's `fleet`: jpd with the real peers (root).
    Fleet,
    /// jp-daemon's `hostile`: well-formed hostile records beside a real JVM with the real
    /// agent, against the delivered jpd (root).
    Hostile,
    /// jp-agent's test binaries: exact counts against the oracle, the rewriter.
    Agent,
    /// jpctl's test binaries.
    Jpctl,
    /// xtask's `bench_windows`: the windows bench's quick run works (judges no timing).
    Bench,
}

/// The workspace as the tests build it: every host crate (jp-ebpf is built for the BPF
/// target by jp-daemon's build script).
const WORKSPACE: [&str; 3] = ["--workspace", "--exclude", "jp-ebpf"];

impl Suite {
    /// The deliverables its tests run (found in `target/jp/`).
    fn needs(self) -> &'static [Deliverable] {
        use Deliverable::*;
        match self {
            Suite::Unit => &[],
            Suite::Api | Suite::Usdt => &[AgentLib],
            Suite::Kernel => &[Jpctl],
            Suite::E2e | Suite::Hostile => &[Jpd, Jpctl, AgentLib],
            Suite::Fleet => &Deliverable::ALL,
            Suite::Agent => &[AgentLib, AgentJar],
            Suite::Jpctl => &[Jpctl, AgentLib],
            Suite::Bench => &[AgentLib, AgentJar],
        }
    }

    /// Its integration test binaries: (package, `--test` name or `*` for all of them).
    fn binaries(self) -> Option<(&'static str, &'static str)> {
        match self {
            Suite::Unit => None,
            Suite::Api => Some(("jp-daemon", "api")),
            Suite::Kernel => Some(("jp-daemon", "kernel")),
            Suite::Usdt => Some(("jp-daemon", "usdt")),
            Suite::E2e => Some(("jp-daemon", "e2e")),
            Suite::Fleet => Some(("jp-daemon", "fleet")),
            Suite::Hostile => Some(("jp-daemon", "hostile")),
            Suite::Agent => Some(("jp-agent", "*")),
            Suite::Jpctl => Some(("jpctl", "*")),
            Suite::Bench => Some(("xtask", "bench_windows")),
        }
    }

    /// The arguments of each `cargo test --release --no-fail-fast` it takes.
    fn cargo_test_args(self) -> Vec<Vec<&'static str>> {
        match self.binaries() {
            Some((package, binary)) => vec![vec!["-p", package, "--test", binary]],
            None => vec![
                [&WORKSPACE[..], &["--lib", "--bins", "--examples"]].concat(),
                [&WORKSPACE[..], &["--doc"]].concat(),
            ],
        }
    }
}

pub fn run(suite: Option<Suite>, extra: &[String]) -> Result<()> {
    // After the first filter every word goes to `cargo test`: a `--suite` there would
    // silently run everything.
    if extra
        .iter()
        .any(|a| a == "--suite" || a.starts_with("--suite="))
    {
        bail!("--suite goes before the filter: cargo xtask test --suite SUITE [FILTER]");
    }
    match suite {
        Some(s) => run_suite(s, extra),
        None => run_all(extra),
    }
}

/// Everything: formatting, the build, every test, the unit tests in debug, clippy.
fn run_all(extra: &[String]) -> Result<()> {
    setup::run()?;
    format_check()?;
    build::run()?;
    // Every failure at once: one CI run shows them all.
    cargo_test(&WORKSPACE, &Deliverable::ALL, extra)?;
    library_tests_in_debug()?;
    clippy()
}

/// One suite: only the deliverables it runs are built, only its binaries run.
fn run_suite(suite: Suite, extra: &[String]) -> Result<()> {
    setup::run()?;
    build::build(suite.needs())?;
    for args in suite.cargo_test_args() {
        cargo_test(&args, suite.needs(), extra)?;
    }
    Ok(())
}

/// `cargo test --release --no-fail-fast ARGS -- EXTRA`, with the paths of `deliverables`
/// and the JDKs in the environment.
fn cargo_test(args: &[&str], deliverables: &[Deliverable], extra: &[String]) -> Result<()> {
    let dir = build::target_dir().join("jp");
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .args(["test", "--release", "--no-fail-fast"])
        .args(args)
        .env("JP_JDK17", setup::JDK17)
        .env("JP_JDK25", setup::JDK25);
    for d in deliverables {
        c.env(d.var(), dir.join(d.file()));
    }
    if !extra.is_empty() {
        c.arg("--").args(extra);
    }
    cmd::run(&mut c)
}

/// The library unit tests once more in a debug build, so that overflow checks and
/// `debug_assert!` run; they are quick and need no deliverable. The heavy suites
/// (integration tests) stay in release.
fn library_tests_in_debug() -> Result<()> {
    cmd::run(
        Command::new("cargo")
            .current_dir(root())
            .args(["test", "--no-fail-fast"])
            .args(WORKSPACE)
            .arg("--lib"),
    )
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
    cmd::run(
        Command::new("cargo")
            .current_dir(root())
            .args(["clippy", "--release"])
            .args(WORKSPACE)
            .args(["--all-targets", "--", "-D", "warnings"]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (package, binary) of every integration test binary cargo finds: `tests/NAME.rs`
    /// and `tests/NAME/main.rs` of each workspace member.
    fn integration_binaries() -> Vec<(String, String)> {
        let mut found = Vec::new();
        for member in std::fs::read_dir(root()).unwrap().flatten() {
            let manifest = member.path().join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else {
                continue;
            };
            let package = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .unwrap()
                .to_string();
            let Ok(tests) = std::fs::read_dir(member.path().join("tests")) else {
                continue;
            };
            for t in tests.flatten() {
                let path = t.path();
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                let is_binary = if path.is_dir() {
                    path.join("main.rs").exists()
                } else {
                    path.extension().is_some_and(|e| e == "rs")
                };
                if is_binary {
                    found.push((package.clone(), name));
                }
            }
        }
        found
    }

    #[test]
    fn every_test_binary_belongs_to_exactly_one_suite() {
        let found = integration_binaries();
        assert!(
            found.contains(&("jp-daemon".into(), "kernel".into())),
            "{found:?}"
        );
        for (package, binary) in &found {
            let suites: Vec<Suite> = Suite::value_variants()
                .iter()
                .copied()
                .filter(|s| {
                    s.binaries()
                        .is_some_and(|(p, b)| p == package && (b == "*" || b == binary))
                })
                .collect();
            assert_eq!(
                suites.len(),
                1,
                "{package}'s test binary `{binary}` is in {suites:?}: give it one suite in xtask/src/test.rs"
            );
        }
    }

    #[test]
    fn a_suite_after_the_filter_is_refused_before_anything_runs() {
        let err = run(None, &["limits".into(), "--suite".into(), "api".into()]).unwrap_err();
        assert!(
            err.to_string().contains("--suite goes before the filter"),
            "{err}"
        );
    }

    #[test]
    fn a_daemon_suite_runs_its_one_binary_and_unit_every_unit_test() {
        assert_eq!(
            Suite::Kernel.cargo_test_args(),
            [["-p", "jp-daemon", "--test", "kernel"]]
        );
        assert_eq!(
            Suite::Agent.cargo_test_args(),
            [["-p", "jp-agent", "--test", "*"]]
        );
        let unit = Suite::Unit.cargo_test_args();
        assert_eq!(unit.len(), 2);
        assert!(unit.iter().all(|a| a.starts_with(&WORKSPACE)));
        assert!(Suite::Unit.needs().is_empty());
    }
}
