//! `[windows]` of jpd.toml: exact windows opened on demand in HotSpot JVMs (the agent's
//! dormant mode, or an agent loaded by dynamic attach). Every key reloads: the service
//! reads its settings at each window. A `[windows.rotation]` table belongs to the
//! rotation (`windows::rotation`), which adds its own field here.
use std::path::{Path, PathBuf};

use crate::config_range::deserialize as ranged;
use serde::{Deserialize, Deserializer};

/// What the agent accepts (`seconds=1..=3600`).
pub const MAX_SECONDS_RANGE: std::ops::RangeInclusive<u32> = 1..=3600;
/// Windows open at once on the host: each retransforms a JVM's classes twice.
pub const MAX_OPEN_RANGE: std::ops::RangeInclusive<u32> = 1..=64;
pub const KEEP_RANGE: std::ops::RangeInclusive<u32> = 1..=1000;

/// The agent library's file name, beside jpd or in `../lib/jp/`.
pub const AGENT_LIBRARY_NAME: &str = "libjpagent.so";

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowsConfig {
    /// The agent library jpd loads into JVMs; empty: `libjpagent.so` beside jpd, else
    /// `../lib/jp/libjpagent.so` from jpd's directory.
    pub agent_library: PathBuf,
    /// Longest window a request may ask for, in seconds.
    #[serde(deserialize_with = "max_seconds")]
    pub max_seconds: u32,
    /// Windows open at once on the host (one per JVM at most).
    #[serde(deserialize_with = "max_open")]
    pub max_open: u32,
    /// Windows kept per JVM, the newest ones.
    #[serde(deserialize_with = "keep")]
    pub keep: u32,
    /// `[windows.rotation]`: the fleet rotation.
    pub rotation: super::rotation::RotationConfig,
}

impl Default for WindowsConfig {
    fn default() -> Self {
        WindowsConfig {
            agent_library: PathBuf::new(),
            max_seconds: 300,
            max_open: 2,
            keep: 8,
            rotation: super::rotation::RotationConfig::default(),
        }
    }
}

impl WindowsConfig {
    /// The library to stage into JVMs: `agent_library`, else the one installed with
    /// `jpd` (`exe`: jpd's own path).
    pub fn library(&self, exe: &Path) -> PathBuf {
        if !self.agent_library.as_os_str().is_empty() {
            return self.agent_library.clone();
        }
        let dir = exe.parent().unwrap_or(Path::new("/"));
        let beside = dir.join(AGENT_LIBRARY_NAME);
        if beside.exists() {
            return beside;
        }
        dir.join("../lib/jp").join(AGENT_LIBRARY_NAME)
    }
}

fn max_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d, "max_seconds", MAX_SECONDS_RANGE)
}

fn max_open<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d, "max_open", MAX_OPEN_RANGE)
}

fn keep<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d, "keep", KEEP_RANGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_the_key_else_beside_jpd_else_lib_jp() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bin/jpd");
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        let c = WindowsConfig::default();
        assert_eq!(
            c.library(&exe),
            dir.path().join("bin/../lib/jp/libjpagent.so")
        );
        std::fs::write(dir.path().join("bin/libjpagent.so"), b"").unwrap();
        assert_eq!(c.library(&exe), dir.path().join("bin/libjpagent.so"));
        let set = WindowsConfig {
            agent_library: "/opt/jp/libjpagent.so".into(),
            ..c
        };
        assert_eq!(set.library(&exe), PathBuf::from("/opt/jp/libjpagent.so"));
    }
}
