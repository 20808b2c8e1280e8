//! What every test suite of jp shares (a dev-dependency of jp-daemon, jp-agent and
//! jpctl): one rule for finding the deliverables `cargo xtask build` puts in
//! `target/jp/`, so that no test builds jp itself and every suite finds the same files.
//!
//! The rule: the environment variable if set (`cargo xtask test` sets them all), else
//! the file in `target/jp/` of the workspace (of `$CARGO_TARGET_DIR` if set, as
//! `cargo xtask build` does); a missing file fails the test with a
//! message saying to run `cargo xtask build` (never a skip).
//!
//! Also the two JDKs the JVM tests run on ([`jdk`]) and one way to read a process's
//! resident memory ([`memory`]).
pub mod jdk;
pub mod memory;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// jpd (`$JPD`).
pub fn jpd() -> PathBuf {
    artifact("JPD", "jpd")
}

/// jpctl (`$JPCTL`).
pub fn jpctl() -> PathBuf {
    artifact("JPCTL", "jpctl")
}

/// The agent library (`$JP_AGENT_LIB`).
pub fn agent_lib() -> PathBuf {
    artifact("JP_AGENT_LIB", "libjpagent.so")
}

/// The agent's jar, for `-javaagent:` (`$JP_AGENT_JAR`).
pub fn agent_jar() -> PathBuf {
    artifact("JP_AGENT_JAR", "jp-agent.jar")
}

/// The deliverable `file`: `$var` if set, else `target/jp/<file>` of the workspace.
/// Panics, saying to run `cargo xtask build`, when the file is not there.
pub fn artifact(var: &str, file: &str) -> PathBuf {
    let path = locate(std::env::var_os(var).map(PathBuf::from), var, file)
        .unwrap_or_else(|message| panic!("\n\n*** {message} ***\n"));
    show_once(&path);
    path
}

/// Where `cargo xtask build` puts the deliverables: `jp/` of the target directory
/// (`$CARGO_TARGET_DIR`, else the workspace's `target/`), as xtask computes it.
pub fn deliverables_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("jp")
}

fn locate(from_env: Option<PathBuf>, var: &str, file: &str) -> Result<PathBuf, String> {
    let (path, origin) = match from_env {
        Some(p) => (p, format!("${var}")),
        None => (
            deliverables_dir().join(file),
            format!("${var} is not set and"),
        ),
    };
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{origin} {} does not exist: run `cargo xtask build` (or set ${var} to the file)",
            path.display()
        ))
    }
}

/// Once per file and test process, on stderr: which build the tests ran against.
fn show_once(path: &Path) {
    static SHOWN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut shown = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    if shown.iter().any(|p| p == path) {
        return;
    }
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map_or("?".to_string(), |d| format!("{}s", d.as_secs()));
    eprintln!("jp tests: using {} (built {age} ago)", path.display());
    shown.push(path.to_path_buf());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_when_set() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jpd");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(locate(Some(file.clone()), "JPD", "jpd"), Ok(file));
    }

    #[test]
    fn a_missing_file_says_to_run_the_build() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("jpd");
        let err = locate(Some(missing), "JPD", "jpd").unwrap_err();
        assert!(err.contains("run `cargo xtask build`"), "{err}");
        assert!(err.starts_with("$JPD "), "{err}");
        let err = locate(None, "JPD", "no-such-deliverable").unwrap_err();
        assert!(err.contains("$JPD is not set"), "{err}");
        assert!(err.contains("target/jp/no-such-deliverable"), "{err}");
    }

    #[test]
    fn without_the_variable_it_is_jp_in_the_target_directory() {
        let dir = deliverables_dir();
        assert!(dir.ends_with("jp"), "{}", dir.display());
        if std::env::var_os("CARGO_TARGET_DIR").is_none() {
            assert!(dir.join("../../Cargo.toml").exists(), "{}", dir.display());
        }
    }
}
