//! Opens pages in a real headless Chromium through drive.mjs (the DevTools protocol over
//! Node's built-in WebSocket) and hands back what the page showed.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn chromium() -> PathBuf {
    let p = std::env::var_os("JP_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        p.exists(),
        "{} is missing: the browser tests need Debian's chromium (`cargo xtask setup` installs it, or apt-get install chromium)",
        p.display()
    );
    p
}

/// Where the screenshots are kept: target/screenshots in the workspace.
pub fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).expect("target/screenshots");
    dir
}

/// Runs `steps` (see drive.mjs) and returns its report, one entry per step.
pub fn drive(steps: serde_json::Value) -> Vec<serde_json::Value> {
    let spec = serde_json::json!({
        "chromium": chromium(),
        "screenshots": screenshots(),
        "steps": steps,
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let spec_file = dir.path().join("steps.json");
    std::fs::write(&spec_file, spec.to_string()).expect("steps.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/drive.mjs");
    let out = Command::new("node")
        .arg("--experimental-websocket")
        .arg(&script)
        .arg(&spec_file)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run node (Node.js >= 20.10 drives the browser tests): {e}")
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "drive.mjs failed (Node.js >= 20.10 with --experimental-websocket, and chromium, are needed):\n{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("drive.mjs printed no report ({e}): {stderr}"));
    assert_eq!(
        v["errors"],
        serde_json::json!([]),
        "script errors in the page"
    );
    v["report"].as_array().cloned().unwrap_or_default()
}

/// The labels of the drawn frames in a `frames` report entry.
pub fn labels(entry: &serde_json::Value) -> Vec<String> {
    entry["frames"]
        .as_array()
        .map(|fs| {
            fs.iter()
                .filter_map(|f| f["label"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Labels of the frames with `flag` ("match", "ancestor") set.
pub fn flagged(entry: &serde_json::Value, flag: &str) -> Vec<String> {
    entry["frames"]
        .as_array()
        .map(|fs| {
            fs.iter()
                .filter(|f| f[flag] == true)
                .filter_map(|f| f["label"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn width_of(entry: &serde_json::Value, label: &str) -> i64 {
    entry["frames"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["label"] == label))
        .and_then(|f| f["width"].as_i64())
        .unwrap_or(-1)
}
