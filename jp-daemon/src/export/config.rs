//! `[export]` of jpd.toml: the HTTP exporters' address and limits.
use serde::{Deserialize, Deserializer};

/// Loopback only: exposing profiles beyond the host is the operator's decision.
pub const DEFAULT_EXPORT_LISTEN: &str = "127.0.0.1:9464";
pub const MAX_PROFILE_SECONDS_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;

/// The HTTP exporters: Prometheus `/metrics` and pprof profiles.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "socket_addr")]
    pub listen: String,
    /// Longest `seconds=` a profile request may ask for.
    #[serde(deserialize_with = "max_profile_seconds")]
    pub max_profile_seconds: u64,
    /// `/debug/pprof/jvm` may open an exact window in a JVM whose agent is dormant (or
    /// that runs none). Off: HTTP carries no credentials, and a window changes the JVM.
    pub open_windows: bool,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            enabled: false,
            listen: DEFAULT_EXPORT_LISTEN.into(),
            max_profile_seconds: 300,
            open_windows: false,
        }
    }
}

fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    s.parse::<std::net::SocketAddr>()
        .map(|_| s.clone())
        .map_err(|_| {
            serde::de::Error::custom(format!(
                "listen = {s:?} is not an IP address and port (e.g. \"127.0.0.1:9464\")"
            ))
        })
}

fn max_profile_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if MAX_PROFILE_SECONDS_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "max_profile_seconds = {v} is out of range {}..={}",
            MAX_PROFILE_SECONDS_RANGE.start(),
            MAX_PROFILE_SECONDS_RANGE.end()
        )))
    }
}
