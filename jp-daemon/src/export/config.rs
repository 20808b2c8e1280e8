//! `[export]` of jpd.toml: the HTTP exporters' address and limits.
use crate::config_range::deserialize as in_range;
use serde::{Deserialize, Deserializer};

/// Loopback only: exposing profiles beyond the host is the operator's decision.
pub const DEFAULT_EXPORT_LISTEN: &str = "127.0.0.1:9464";
pub const MAX_PROFILE_SECONDS_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;
pub const MAX_CONNECTIONS_RANGE: std::ops::RangeInclusive<u64> = 1..=4096;
pub const MAX_INFLIGHT_RANGE: std::ops::RangeInclusive<u64> = 1..=1024;
pub const HEADER_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=300;
pub const IDLE_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;

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
    /// Connections open at once (1..=4096, default 64). At the cap a new client takes
    /// the place of the connection idle the longest; when every connection is in a
    /// request, the new one is closed at once. Both count `http/too_many_connections`.
    #[serde(deserialize_with = "max_connections")]
    pub max_connections: u64,
    /// Profile and flame-graph requests served at once (1..=1024, default 8); more
    /// are answered 503 and count `http/too_many_requests`. `/metrics` is not one of
    /// them: a scrape is cheap and must not wait behind profiles.
    #[serde(deserialize_with = "max_inflight")]
    pub max_inflight: u64,
    /// Seconds a client has to send a request's headers, from the connection's start
    /// or its previous answer (1..=300, default 10): a silent kept-alive connection
    /// is closed after this too.
    #[serde(deserialize_with = "header_timeout_seconds")]
    pub header_timeout_seconds: u64,
    /// Seconds a connection may stay without a request in progress, whatever it
    /// does meanwhile (trickling bytes, not reading its answer), before jpd closes it
    /// (1..=3600, default 60); counted `http/idle_timeout`.
    #[serde(deserialize_with = "idle_timeout_seconds")]
    pub idle_timeout_seconds: u64,
    /// Host names requests may name in their `Host` header besides `localhost` and
    /// this machine's host name; IP addresses are always accepted (a browser only
    /// sends a name it resolved, which is how DNS rebinding reaches a loopback
    /// listener). `"*"` accepts any. Others get 421, counted `http/host_not_allowed`.
    #[serde(deserialize_with = "allowed_hosts")]
    pub allowed_hosts: Vec<String>,
    /// The kernel pprof carries real kernel addresses. Off: offsets from `_stext`,
    /// since HTTP carries no credentials and real addresses defeat KASLR for anyone
    /// who can reach the port.
    pub real_kernel_addresses: bool,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            enabled: false,
            listen: DEFAULT_EXPORT_LISTEN.into(),
            max_profile_seconds: 300,
            open_windows: false,
            max_connections: 64,
            max_inflight: 8,
            header_timeout_seconds: 10,
            idle_timeout_seconds: 60,
            allowed_hosts: Vec::new(),
            real_kernel_addresses: false,
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
    in_range(d, "max_profile_seconds", MAX_PROFILE_SECONDS_RANGE)
}

fn max_connections<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range(d, "max_connections", MAX_CONNECTIONS_RANGE)
}

fn max_inflight<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range(d, "max_inflight", MAX_INFLIGHT_RANGE)
}

fn header_timeout_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range(d, "header_timeout_seconds", HEADER_TIMEOUT_RANGE)
}

fn idle_timeout_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range(d, "idle_timeout_seconds", IDLE_TIMEOUT_RANGE)
}

fn allowed_hosts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let hosts = Vec::<String>::deserialize(d)?;
    let bad = |h: &String| {
        h.is_empty()
            || h.len() > 253
            || !h
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*'))
            || (h.contains('*') && h != "*")
    };
    match hosts.iter().find(|h| bad(h)) {
        Some(h) => Err(serde::de::Error::custom(format!(
            "allowed_hosts: {h:?} is not a host name (letters, digits, '.', '-', '_'; or \"*\" alone), without a port"
        ))),
        None => Ok(hosts),
    }
}
