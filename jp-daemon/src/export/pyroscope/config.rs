//! `[pyroscope]`: push profiles to a Pyroscope server (or Grafana Cloud Profiles) on an
//! interval. Off by default. Each key is checked when the file is parsed (so
//! `--check-config` and SIGHUP name the key); the secret files are read when the pusher
//! starts, and by `--check-config`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config_range::check;
use serde::{Deserialize, Deserializer};

pub const INTERVAL_S_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;
pub const TIMEOUT_S_RANGE: std::ops::RangeInclusive<u64> = 1..=300;
pub const MAX_BACKLOG_RANGE: std::ops::RangeInclusive<usize> = 1..=100_000;
pub const MAX_BACKLOG_MB_RANGE: std::ops::RangeInclusive<u64> = 1..=4096;
/// Static labels beside the ones jpd sets; Pyroscope's default limit is 30 names per
/// series, and it adds its own (`__profile_type__`, …).
pub const MAX_STATIC_LABELS: usize = 16;
/// Pyroscope's default `max_label_value_length`.
pub const MAX_LABEL_VALUE_BYTES: usize = 2048;
/// Labels jpd sets itself; `host` may be overridden by a static label.
pub const RESERVED_LABELS: [&str; 2] = ["service_name", "__name__"];

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PyroscopeConfig {
    pub enabled: bool,
    /// Base URL of the server, `http://` or `https://`, optionally with a path prefix.
    #[serde(deserialize_with = "url")]
    pub url: String,
    #[serde(deserialize_with = "interval_s")]
    pub interval_s: u64,
    /// Longest wait for one push (connect, send, answer).
    #[serde(deserialize_with = "timeout_s")]
    pub timeout_s: u64,
    /// Added to every series (e.g. `env`, `cluster`).
    #[serde(deserialize_with = "labels")]
    pub labels: BTreeMap<String, String>,
    pub basic_auth_user: String,
    pub basic_auth_password_file: PathBuf,
    pub bearer_token_file: PathBuf,
    /// PEM file of the CA certificates to trust for https instead of the Mozilla roots
    /// (a server with a private CA).
    pub tls_ca_file: PathBuf,
    /// Sent as `X-Scope-OrgID` (multi-tenant Pyroscope).
    pub tenant_id: String,
    /// Pushes kept while the server cannot take them; beyond, the oldest is dropped.
    #[serde(deserialize_with = "max_backlog")]
    pub max_backlog: usize,
    /// The same bound in MiB of request bodies.
    #[serde(deserialize_with = "max_backlog_mb")]
    pub max_backlog_mb: u64,
    /// What to push: the kernel profile, the JVMs' Method Call Trees.
    pub kernel: bool,
    pub jvms: bool,
}

impl Default for PyroscopeConfig {
    fn default() -> Self {
        PyroscopeConfig {
            enabled: false,
            url: String::new(),
            interval_s: 15,
            timeout_s: 10,
            labels: BTreeMap::new(),
            basic_auth_user: String::new(),
            basic_auth_password_file: PathBuf::new(),
            bearer_token_file: PathBuf::new(),
            tls_ca_file: PathBuf::new(),
            tenant_id: String::new(),
            max_backlog: 240,
            max_backlog_mb: 64,
            kernel: true,
            jvms: true,
        }
    }
}

impl PyroscopeConfig {
    /// Rules that involve more than one key: `(key, message)` of the first broken one.
    pub fn check_combinations(&self) -> Result<(), (&'static str, String)> {
        if self.enabled && self.url.is_empty() {
            return Err((
                "enabled",
                "enabled = true needs url (e.g. \"http://pyroscope:4040\")".into(),
            ));
        }
        let user = !self.basic_auth_user.is_empty();
        let password = !self.basic_auth_password_file.as_os_str().is_empty();
        let bearer = !self.bearer_token_file.as_os_str().is_empty();
        if user && !password {
            return Err((
                "basic_auth_user",
                "basic_auth_user needs basic_auth_password_file".into(),
            ));
        }
        if password && !user {
            return Err((
                "basic_auth_password_file",
                "basic_auth_password_file needs basic_auth_user".into(),
            ));
        }
        if bearer && user {
            return Err((
                "bearer_token_file",
                "bearer_token_file and basic_auth_user are exclusive: use one".into(),
            ));
        }
        if self.basic_auth_user.contains(':') {
            return Err((
                "basic_auth_user",
                "basic_auth_user must not contain ':' (HTTP basic authentication)".into(),
            ));
        }
        if !self.tls_ca_file.as_os_str().is_empty() && !self.url.starts_with("https://") {
            return Err((
                "tls_ca_file",
                "tls_ca_file is set but url is not https://".into(),
            ));
        }
        if !header_safe(&self.tenant_id) {
            return Err((
                "tenant_id",
                format!(
                    "tenant_id = {:?} is not a valid header value",
                    self.tenant_id
                ),
            ));
        }
        if self.enabled && !self.kernel && !self.jvms {
            return Err((
                "enabled",
                "kernel = false and jvms = false: nothing to push".into(),
            ));
        }
        Ok(())
    }

    /// The push endpoint (Connect protocol, unary): `<url>/push.v1.PusherService/Push`.
    pub fn endpoint(&self) -> String {
        format!(
            "{}/push.v1.PusherService/Push",
            self.url.trim_end_matches('/')
        )
    }
}

/// Visible ASCII and spaces: what an HTTP header value may safely hold.
pub(crate) fn header_safe(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

pub(crate) fn interval_s<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    check("interval_s", u64::deserialize(d)?, &INTERVAL_S_RANGE).map_err(serde::de::Error::custom)
}

pub(crate) fn timeout_s<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    check("timeout_s", u64::deserialize(d)?, &TIMEOUT_S_RANGE).map_err(serde::de::Error::custom)
}

pub(crate) fn max_backlog<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    check("max_backlog", usize::deserialize(d)?, &MAX_BACKLOG_RANGE)
        .map_err(serde::de::Error::custom)
}

pub(crate) fn max_backlog_mb<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    check(
        "max_backlog_mb",
        u64::deserialize(d)?,
        &MAX_BACKLOG_MB_RANGE,
    )
    .map_err(serde::de::Error::custom)
}

/// Checks an `http://` or `https://` URL with a host and no query or fragment.
pub fn check_url(s: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("url = {s:?} {why}"));
    let Some(rest) = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
    else {
        return bad("must start with http:// or https://");
    };
    if s.contains(['?', '#']) || s.contains(char::is_whitespace) {
        return bad("must not have a query, a fragment or spaces");
    }
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || authority.starts_with(':') {
        return bad("has no host");
    }
    if authority.contains('@') {
        return bad("must not hold credentials: use basic_auth_user and basic_auth_password_file");
    }
    match s.parse::<axum::http::Uri>() {
        Ok(u) if u.host().is_some() => Ok(()),
        _ => bad("is not a valid URL"),
    }
}

fn url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Ok(s);
    }
    check_url(&s).map(|()| s).map_err(serde::de::Error::custom)
}

/// A Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`), which Pyroscope accepts.
pub fn label_name_ok(n: &str) -> bool {
    let mut b = n.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

pub fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    if labels.len() > MAX_STATIC_LABELS {
        return Err(format!(
            "labels: {} labels, at most {MAX_STATIC_LABELS}",
            labels.len()
        ));
    }
    for (k, v) in labels {
        if !label_name_ok(k) {
            return Err(format!(
                "labels: {k:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"
            ));
        }
        if k.starts_with("__") || RESERVED_LABELS.contains(&k.as_str()) {
            return Err(format!("labels: {k:?} is reserved (jpd sets it)"));
        }
        if v.is_empty() || v.len() > MAX_LABEL_VALUE_BYTES {
            return Err(format!(
                "labels: the value of {k:?} must have 1 to {MAX_LABEL_VALUE_BYTES} bytes"
            ));
        }
    }
    Ok(())
}

fn labels<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let m = BTreeMap::<String, String>::deserialize(d)?;
    check_labels(&m)
        .map(|()| m)
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(check_url("http://pyroscope:4040"), Ok(()));
        assert_eq!(check_url("https://profiles.example.net/prefix/"), Ok(()));
        assert_eq!(check_url("http://[::1]:4040"), Ok(()));
        for (bad, why) in [
            ("pyroscope:4040", "must start with http:// or https://"),
            ("ftp://x", "must start with http:// or https://"),
            ("http://", "has no host"),
            ("http://:80", "has no host"),
            (
                "http://x/?a=1",
                "must not have a query, a fragment or spaces",
            ),
            (
                "https://u:p@x",
                "must not hold credentials: use basic_auth_user and basic_auth_password_file",
            ),
        ] {
            assert_eq!(check_url(bad), Err(format!("url = {bad:?} {why}")));
        }
    }

    #[test]
    fn label_names() {
        for ok in ["env", "_x", "cluster_1"] {
            assert!(label_name_ok(ok), "{ok}");
        }
        for bad in ["", "1a", "a-b", "a.b", "é"] {
            assert!(!label_name_ok(bad), "{bad}");
        }
        let m = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert_eq!(check_labels(&m("env", "prod")), Ok(()));
        assert_eq!(check_labels(&m("host", "h1")), Ok(()));
        assert_eq!(
            check_labels(&m("service_name", "x")),
            Err("labels: \"service_name\" is reserved (jpd sets it)".into())
        );
        assert_eq!(
            check_labels(&m("__delta__", "x")),
            Err("labels: \"__delta__\" is reserved (jpd sets it)".into())
        );
        assert_eq!(
            check_labels(&m("env", "")),
            Err("labels: the value of \"env\" must have 1 to 2048 bytes".into())
        );
    }

    #[test]
    fn endpoint_joins_the_path() {
        let c = PyroscopeConfig {
            url: "https://p.example/base/".into(),
            ..PyroscopeConfig::default()
        };
        assert_eq!(
            c.endpoint(),
            "https://p.example/base/push.v1.PusherService/Push"
        );
    }
}
