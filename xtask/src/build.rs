//! `cargo xtask build`: one release build of the workspace, deliverables copied to
//! `target/jp/`.
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

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

pub fn run() -> Result<Deliverables> {
    cmd::run(Command::new("cargo").current_dir(root()).args([
        "build",
        "--release",
        "--workspace",
        "--exclude",
        "jp-ebpf",
    ]))?;
    let release = target_dir().join("release");
    let dir = target_dir().join("jp");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let out = Deliverables {
        jpd: copy(&release.join("jpd"), &dir)?,
        jpctl: copy(&release.join("jpctl"), &dir)?,
        agent_lib: copy(&release.join("libjpagent.so"), &dir)?,
        agent_jar: copy(&agent_jar(&release)?, &dir)?,
        dir,
    };
    eprintln!("xtask: deliverables in {}", out.dir.display());
    Ok(out)
}

/// jp-agent's build script leaves the jar next to the library it builds.
fn agent_jar(release: &Path) -> Result<PathBuf> {
    let jar = release.join("jp-agent.jar");
    if jar.exists() {
        Ok(jar)
    } else {
        anyhow::bail!("jp-agent's build did not produce {}", jar.display())
    }
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
