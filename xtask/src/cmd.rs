//! Running commands with their command line echoed, failing with a message that
//! names the command.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

pub fn describe(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `c` with inherited stdio; an error if it cannot start or exits non-zero.
pub fn run(c: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {}", describe(c));
    let status = c
        .status()
        .with_context(|| format!("cannot start `{}`", describe(c)))?;
    if !status.success() {
        bail!("`{}` failed: {status}", describe(c));
    }
    Ok(())
}

/// Runs `c` quietly and returns its stdout if it succeeded, None otherwise
/// (used for probes such as "is this installed?").
pub fn probe(c: &mut Command) -> Option<String> {
    let out = c.stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Replaces this process by `program args` (so signals go straight to it).
pub fn exec_replace(program: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.args(args);
    eprintln!("xtask: exec {}", describe(&c));
    let err = c.exec();
    Err(err).with_context(|| format!("cannot exec {}", program.display()))
}
