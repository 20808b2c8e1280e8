//! `[otlp]`: export profiles to an OpenTelemetry Collector (or any OTLP profiles
//! receiver) on an interval. Off by default. Each key is checked when the file is parsed,
//! so `--check-config` and SIGHUP name the key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use crate::export::pyroscope::config::{
    check_url, header_safe, interval_s, max_backlog, max_backlog_mb, timeout_s,
};

/// Resource attributes beside the ones jpd sets.
pub const MAX_RESOURCE_ATTRIBUTES: usize = 32;
/// Headers sent with every export.
pub const MAX_HEADERS: usize = 16;
/// Attributes jpd sets itself on every resource.
pub const RESERVED_ATTRIBUTES: [&str; 4] = [
    "service.name",
    "process.pid",
    "process.runtime.name",
    "process.runtime.version",
];
/// The HTTP/protobuf path of profiles, after the endpoint (opentelemetry-proto v1.10.0).
pub const HTTP_PATH: &str = "/v1development/profiles";

/// How exports travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum Protocol {
    /// OTLP/gRPC: `ProfilesService/Export` (the Collector's port 4317).
    #[default]
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP/HTTP with a protobuf body: POST `<endpoint>/v1development/profiles` (4318).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpConfig {
    /// Off by default.
    pub enabled: bool,
    /// The receiver, `http://host:4317` (gRPC) or `http://host:4318` (HTTP); `https://`
    /// for TLS. Empty by default; required when enabled.
    #[serde(deserialize_with = "endpoint")]
    pub endpoint: String,
    /// `grpc` (default) or `http/protobuf`.
    pub protocol: Protocol,
    /// Seconds between exports (1..=3600, default 15).
    #[serde(deserialize_with = "interval_s")]
    pub interval_s: u64,
    /// Longest wait for one export (1..=300 s, default 10): a slower receiver counts
    /// as failed and the export is retried later.
    #[serde(deserialize_with = "timeout_s")]
    pub timeout_s: u64,
    /// Sent with every export (e.g. `authorization`); names lower-case
    /// `[a-z0-9-]`, values visible ASCII; at most 16. Default: none.
    #[serde(deserialize_with = "headers")]
    pub headers: BTreeMap<String, String>,
    /// https only: a PEM file of the CA certificates to trust instead of Mozilla's roots
    /// (both protocols; read and checked at start and on SIGHUP). Default: none.
    pub tls_ca_file: PathBuf,
    /// Added to every resource (e.g. `deployment.environment.name`); at most 32, never
    /// one jpd sets (`service.name`, `process.pid`, `process.runtime.*`). Default: none.
    #[serde(deserialize_with = "resource_attributes")]
    pub resource_attributes: BTreeMap<String, String>,
    /// Exports kept while the receiver cannot take them (1..=100000, default 240);
    /// beyond, the oldest is dropped and counted.
    #[serde(deserialize_with = "max_backlog")]
    pub max_backlog: usize,
    /// The same bound in MiB of encoded exports (1..=4096, default 64).
    #[serde(deserialize_with = "max_backlog_mb")]
    pub max_backlog_mb: u64,
    /// What to export: the kernel profile, the JVMs' Method Call Trees (both by default).
    pub kernel: bool,
    pub jvms: bool,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            enabled: false,
            endpoint: String::new(),
            protocol: Protocol::Grpc,
            interval_s: 15,
            timeout_s: 10,
            headers: BTreeMap::new(),
            tls_ca_file: PathBuf::new(),
            resource_attributes: BTreeMap::new(),
            max_backlog: 240,
            max_backlog_mb: 64,
            kernel: true,
            jvms: true,
        }
    }
}

impl OtlpConfig {
    /// Rules that involve more than one key: `(key, message)` of the first broken one.
    pub fn check_combinations(&self) -> Result<(), (&'static str, String)> {
        if self.enabled && self.endpoint.is_empty() {
            return Err((
                "enabled",
                "enabled = true needs endpoint (e.g. \"http://localhost:4317\")".into(),
            ));
        }
        if !self.tls_ca_file.as_os_str().is_empty() && !self.endpoint.starts_with("https://") {
            return Err((
                "tls_ca_file",
                "tls_ca_file is set but endpoint is not https://".into(),
            ));
        }
        if self.enabled && !self.kernel && !self.jvms {
            return Err((
                "enabled",
                "kernel = false and jvms = false: nothing to export".into(),
            ));
        }
        Ok(())
    }

    /// Where an HTTP/protobuf export is POSTed.
    pub fn http_url(&self) -> String {
        format!("{}{HTTP_PATH}", self.endpoint.trim_end_matches('/'))
    }
}

fn endpoint<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Ok(s);
    }
    check_url(&s)
        .map(|()| s)
        .map_err(|e| serde::de::Error::custom(e.replacen("url", "endpoint", 1)))
}

pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), String> {
    if headers.len() > MAX_HEADERS {
        return Err(format!(
            "headers: {} headers, at most {MAX_HEADERS}",
            headers.len()
        ));
    }
    for (k, v) in headers {
        let name_ok = !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok {
            return Err(format!(
                "headers: {k:?} is not a lower-case header name ([a-z0-9-])"
            ));
        }
        if !header_safe(v) {
            return Err(format!(
                "headers: the value of {k:?} is not a valid header value"
            ));
        }
    }
    Ok(())
}

fn headers<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let m = BTreeMap::<String, String>::deserialize(d)?;
    check_headers(&m)
        .map(|()| m)
        .map_err(serde::de::Error::custom)
}

pub fn check_resource_attributes(a: &BTreeMap<String, String>) -> Result<(), String> {
    if a.len() > MAX_RESOURCE_ATTRIBUTES {
        return Err(format!(
            "resource_attributes: {} attributes, at most {MAX_RESOURCE_ATTRIBUTES}",
            a.len()
        ));
    }
    for k in a.keys() {
        if k.is_empty() || k.len() > 255 || !k.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(format!(
                "resource_attributes: {k:?} is not an attribute name (1 to 255 visible ASCII characters)"
            ));
        }
        if RESERVED_ATTRIBUTES.contains(&k.as_str()) {
            return Err(format!(
                "resource_attributes: {k:?} is reserved (jpd sets it)"
            ));
        }
    }
    Ok(())
}

fn resource_attributes<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let m = BTreeMap::<String, String>::deserialize(d)?;
    check_resource_attributes(&m)
        .map(|()| m)
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<OtlpConfig, String> {
        toml::from_str::<OtlpConfig>(text).map_err(|e| e.message().to_string())
    }

    #[test]
    fn defaults_are_off_and_safe() {
        let c = parse("").unwrap();
        assert_eq!(c, OtlpConfig::default());
        assert!(!c.enabled);
        assert_eq!(c.check_combinations(), Ok(()));
    }

    #[test]
    fn keys_are_checked_with_one_line_errors() {
        let c = parse("endpoint = \"http://c:4318/\"\nprotocol = \"http/protobuf\"").unwrap();
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.http_url(), "http://c:4318/v1development/profiles");
        assert_eq!(
            parse("endpoint = \"c:4317\"").unwrap_err(),
            "endpoint = \"c:4317\" must start with http:// or https://"
        );
        assert!(parse("protocol = \"udp\"")
            .unwrap_err()
            .contains("unknown variant"));
        assert_eq!(
            parse("interval_s = 0").unwrap_err(),
            "interval_s = 0 is out of range 1..=3600"
        );
        assert_eq!(
            parse("headers = { Authorization = \"x\" }").unwrap_err(),
            "headers: \"Authorization\" is not a lower-case header name ([a-z0-9-])"
        );
        assert_eq!(
            parse("headers = { authorization = \"a\\nb\" }").unwrap_err(),
            "headers: the value of \"authorization\" is not a valid header value"
        );
        assert_eq!(
            parse("resource_attributes = { \"service.name\" = \"x\" }").unwrap_err(),
            "resource_attributes: \"service.name\" is reserved (jpd sets it)"
        );
        let c = parse("resource_attributes = { \"deployment.environment.name\" = \"prod\" }");
        assert_eq!(c.unwrap().resource_attributes.len(), 1);
        let c = parse("enabled = true").unwrap();
        assert_eq!(c.check_combinations().unwrap_err().0, "enabled");
        let c = parse("endpoint = \"http://c:4317\"\ntls_ca_file = \"/ca.pem\"").unwrap();
        assert_eq!(c.check_combinations().unwrap_err().0, "tls_ca_file");
    }
}
