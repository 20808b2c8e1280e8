//! Opens pages in a real headless Chromium through drive.mjs (the DevTools protocol over
//! Node's built-in WebSocket) and hands back what the page showed.
//!
//! One driver for every crate's browser tests: it lives with the page it drives (jp-mct
//! writes the flame graph's HTML and flame.js, whose element ids drive.mjs reads), and
//! jpctl's and jp-daemon's tests include it with `#[path = "../../jp-mct/tests/browser/mod.rs"]`.
//! jp-mct itself does not compile it. Missing or too old tools FAIL the test with what to
//! install, never skip it.
#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;

/// The driver, carried in the test binary: the including crate's directory does not matter.
const DRIVE_MJS: &str = include_str!("drive.mjs");

/// Node.js has a WebSocket client (behind --experimental-websocket) from 20.10 on.
const NODE_MIN: (u32, u32) = (20, 10);
/// From 22 on it is there without the flag.
const NODE_WEBSOCKET_BY_DEFAULT: u32 = 22;

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

/// "v20.20.2" → (20, 20).
pub fn parse_node_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.trim().strip_prefix('v')?.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// `node`'s major version, failing with what to install when it is missing or too old.
pub fn node_major() -> u32 {
    let install = "the browser tests need Node.js >= 20.10 (its built-in WebSocket drives \
                   chromium): `cargo xtask setup` installs Debian's nodejs when that is new \
                   enough; Debian 12's (18.x) is not, install Node.js 20 LTS or later from \
                   NodeSource (deb.nodesource.com) or nodejs.org";
    let out = Command::new("node")
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): {install}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let version = parse_node_version(&text)
        .unwrap_or_else(|| panic!("`node --version` printed {text:?}: {install}"));
    assert!(version >= NODE_MIN, "node is {}: {install}", text.trim());
    version.0
}

/// Where the screenshots are kept: target/screenshots in the workspace.
pub fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).expect("target/screenshots");
    dir
}

/// Runs `steps` (see drive.mjs) and returns its report, one entry per step.
pub fn drive(steps: serde_json::Value) -> Vec<serde_json::Value> {
    let node = node_major();
    let spec = serde_json::json!({
        "chromium": chromium(),
        "screenshots": screenshots(),
        "steps": steps,
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let spec_file = dir.path().join("steps.json");
    std::fs::write(&spec_file, spec.to_string()).expect("steps.json");
    let script = dir.path().join("drive.mjs");
    std::fs::write(&script, DRIVE_MJS).expect("drive.mjs");
    let mut c = Command::new("node");
    if node < NODE_WEBSOCKET_BY_DEFAULT {
        c.arg("--experimental-websocket");
    }
    let out = c
        .arg(&script)
        .arg(&spec_file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "drive.mjs failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("drive.mjs printed no report ({e}): {stderr}"));
    assert_eq!(
        v["errors"],
        serde_json::json!([]),
        "script errors in the page"
    );
    v["report"].as_array().cloned().unwrap_or_default()
}

/// Opens `html` (a page written to a temporary file) and runs `steps` on it; the report's
/// first entry is that `goto`.
pub fn drive_page(html: &str, steps: serde_json::Value) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("page.html");
    std::fs::write(&file, html).expect("the page");
    let mut all = vec![serde_json::json!({"do": "goto", "url": file_url(&file)})];
    all.extend(steps.as_array().cloned().unwrap_or_default());
    drive(serde_json::Value::Array(all))
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

/// The text of a `hover` report entry's tooltip ("" when none showed).
pub fn tooltip(entry: &serde_json::Value) -> &str {
    entry["tooltip"].as_str().unwrap_or_default()
}

/// A `file://` URL of a local file.
pub fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}
