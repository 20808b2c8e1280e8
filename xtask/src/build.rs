//! `cargo xtask build`: one release build of the workspace, deliverables copied to
//! `target/jp/`. `cargo xtask test --suite` builds only the deliverables its suite runs.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd::{self, root};

pub struct Deliverables {
    pub dir: PathBuf,
    pub jpd: PathBuf,
    pub jpctl: PathBuf,
    pub agent_lib: PathBuf,
    pub agent_jar: PathBuf,
}

/// One file of `target/jp/`: the package whose release build makes it, its name, and the
/// environment variable that hands its path to the tests.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Deliverable {
    Jpd,
    Jpctl,
    AgentLib,
    AgentJar,
}

impl Deliverable {
    pub const ALL: [Deliverable; 4] = [
        Deliverable::Jpd,
        Deliverable::Jpctl,
        Deliverable::AgentLib,
        Deliverable::AgentJar,
    ];

    fn package(self) -> &'static str {
        match self {
            Deliverable::Jpd => "jp-daemon",
            Deliverable::Jpctl => "jpctl",
            Deliverable::AgentLib | Deliverable::AgentJar => "jp-agent",
        }
    }

    pub fn file(self) -> &'static str {
        match self {
            Deliverable::Jpd => "jpd",
            Deliverable::Jpctl => "jpctl",
            Deliverable::AgentLib => "libjpagent.so",
            Deliverable::AgentJar => "jp-agent.jar",
        }
    }

    /// The variable the tests read (`jp-testkit`), else they look in `target/jp/`.
    pub fn var(self) -> &'static str {
        match self {
            Deliverable::Jpd => "JPD",
            Deliverable::Jpctl => "JPCTL",
            Deliverable::AgentLib => "JP_AGENT_LIB",
            Deliverable::AgentJar => "JP_AGENT_JAR",
        }
    }
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Every deliverable, from one build of the whole workspace.
pub fn run() -> Result<Deliverables> {
    // In the order of `Deliverable::ALL`.
    let [jpd, jpctl, agent_lib, agent_jar]: [PathBuf; 4] = build(&Deliverable::ALL)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("not every deliverable was built"))?;
    let out = Deliverables {
        jpd,
        jpctl,
        agent_lib,
        agent_jar,
        dir: target_dir().join("jp"),
    };
    eprintln!("xtask: deliverables in {}", out.dir.display());
    Ok(out)
}

/// Builds the packages that make `wanted` (the whole workspace when that is everything)
/// and copies each into `target/jp/`; their paths there, in the order asked. Nothing to
/// build when `wanted` is empty.
pub fn build(wanted: &[Deliverable]) -> Result<Vec<PathBuf>> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    cmd::run(
        Command::new("cargo")
            .current_dir(root())
            .args(["build", "--release"])
            .args(package_args(wanted)),
    )?;
    let release = target_dir().join("release");
    let dir = target_dir().join("jp");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    wanted
        .iter()
        .map(|d| {
            let from = release.join(d.file());
            if *d == Deliverable::AgentJar && !from.exists() {
                // jp-agent's build script leaves the jar next to the library it builds.
                anyhow::bail!("jp-agent's build did not produce {}", from.display());
            }
            copy(&from, &dir)
        })
        .collect()
}

/// `--workspace` (but the BPF crate) for every deliverable, else `-p` each package once.
fn package_args(wanted: &[Deliverable]) -> Vec<&'static str> {
    if Deliverable::ALL.iter().all(|d| wanted.contains(d)) {
        return vec!["--workspace", "--exclude", "jp-ebpf"];
    }
    let mut args = Vec::new();
    for d in wanted {
        if !args.contains(&d.package()) {
            args.extend(["-p", d.package()]);
        }
    }
    args
}

fn copy(from: &Path, dir: &Path) -> Result<PathBuf> {
    let name = from
        .file_name()
        .context("deliverable without a file name")?;
    let to = dir.join(name);
    // Copy to a temporary name and rename: a running jpd keeps its (old) inode.
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    std::fs::copy(from, &tmp)
        .with_context(|| format!("cannot copy {} (was it built?)", from.display()))?;
    std::fs::rename(&tmp, &to).with_context(|| format!("cannot rename to {}", to.display()))?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_is_one_workspace_build_and_a_part_names_its_packages_once() {
        assert_eq!(
            package_args(&Deliverable::ALL),
            ["--workspace", "--exclude", "jp-ebpf"]
        );
        assert_eq!(
            package_args(&[Deliverable::AgentLib, Deliverable::AgentJar]),
            ["-p", "jp-agent"]
        );
        assert_eq!(
            package_args(&[Deliverable::Jpctl, Deliverable::AgentLib]),
            ["-p", "jpctl", "-p", "jp-agent"]
        );
    }
}
