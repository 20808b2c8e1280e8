//! jpd's configuration: a TOML file, embedded defaults, and command-line overrides.
//!
//! `jpd.toml` at the crate root is both the embedded default configuration and
//! the reference documentation of every key; a test keeps it equal to
//! [`Config::default`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::config_range::check as check_range;
use crate::export::config::ExportConfig;
use crate::export::otlp::config::OtlpConfig;
use crate::export::pyroscope::config::PyroscopeConfig;
use crate::kernel::KernelOptions;
use crate::restart::{self, RestartNeeded};
use crate::server::config::ServerConfig;
use crate::usdt::config::UsdtConfig;
use crate::windows::config::WindowsConfig;

/// The default configuration file, with a comment on every key.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../jpd.toml");

/// Where jpd looks for a configuration when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/jp/jpd.toml";

pub const FREQUENCY_RANGE: std::ops::RangeInclusive<u64> = 1..=100_000;
pub const SHIFT_RANGE: std::ops::RangeInclusive<u32> = 0..=16;
pub const IRQ_IP_SAMPLE_EVERY_RANGE: std::ops::RangeInclusive<u32> = 1..=1_000_000;
/// At 10–20 µs a walk, 1000 walks per second cost at most 2 % of each CPU.
pub const IRQ_IP_SAMPLES_PER_SECOND_RANGE: std::ops::RangeInclusive<u32> = 0..=1000;
/// Switch-outs accounted per CPU per second: the off-CPU log is sized from it.
pub const OFFCPU_MAX_SWITCHES_RANGE: std::ops::RangeInclusive<u32> = 1..=1_000_000;
pub const READ_INTERVAL_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=60_000;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub kernel: KernelConfig,
    pub usdt: UsdtConfig,
    pub log: LogConfig,
    pub export: ExportConfig,
    pub pyroscope: PyroscopeConfig,
    pub otlp: OtlpConfig,
    pub windows: WindowsConfig,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KernelConfig {
    #[serde(deserialize_with = "frequency")]
    pub frequency_hz: u64,
    #[serde(deserialize_with = "shift")]
    pub shift: u32,
    #[serde(deserialize_with = "read_interval")]
    pub read_interval_ms: u64,
    #[serde(deserialize_with = "irq_ip_sample_every")]
    pub irq_ip_sample_every: u32,
    #[serde(deserialize_with = "irq_ip_samples_per_second")]
    pub irq_ip_samples_per_second: u32,
    pub bpf_stats: bool,
    pub jvm_contexts: bool,
    /// Off-CPU and wall time per JVM context, from the scheduler's switch (needs
    /// `jvm_contexts`). Default off: the program runs at every context switch of the host.
    pub offcpu: bool,
    /// Switch-outs of joined threads accounted per CPU per second at most (1–1000000);
    /// the excess is counted, not timed. Default 10000.
    #[serde(deserialize_with = "offcpu_max_switches")]
    pub offcpu_max_switches_per_cpu_per_second: u32,
    /// Methods where threads wait for work, beside the defaults (`store::jvm::idle`):
    /// `Class.method`, a prefix ending in `*`, or `<root>`; at most 64. Time off CPU in
    /// and under them is idle, left out of the off-CPU views unless asked (`--all`).
    /// Default empty (the defaults only). Applies on SIGHUP.
    #[serde(deserialize_with = "offcpu_idle")]
    pub offcpu_idle: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    #[serde(deserialize_with = "log_level")]
    pub level: String,
}

impl Default for KernelConfig {
    fn default() -> Self {
        let k = KernelOptions::default();
        KernelConfig {
            frequency_hz: k.frequency_hz,
            shift: k.shift,
            read_interval_ms: u64::try_from(k.read_interval.as_millis()).unwrap_or(1000),
            irq_ip_sample_every: k.irq_ip_sample_every,
            irq_ip_samples_per_second: k.irq_ip_samples_per_second,
            bpf_stats: k.bpf_stats,
            jvm_contexts: k.jvm_contexts,
            offcpu: k.offcpu,
            offcpu_max_switches_per_cpu_per_second: k.offcpu_max_switches_per_cpu_per_second,
            offcpu_idle: Vec::new(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
        }
    }
}

impl KernelConfig {
    pub fn options(&self) -> KernelOptions {
        KernelOptions {
            frequency_hz: self.frequency_hz,
            shift: self.shift,
            read_interval: Duration::from_millis(self.read_interval_ms),
            irq_ip_sample_every: self.irq_ip_sample_every,
            irq_ip_samples_per_second: self.irq_ip_samples_per_second,
            bpf_stats: self.bpf_stats,
            jvm_contexts: self.jvm_contexts,
            offcpu: self.offcpu,
            offcpu_max_switches_per_cpu_per_second: self.offcpu_max_switches_per_cpu_per_second,
        }
    }
}

impl KernelConfig {
    /// The keys a reload cannot apply: the programs are loaded and attached with them,
    /// once. Only `frequency_hz` reloads (the sampler's period is set on the running
    /// perf events).
    pub fn restart_needed(&self, new: &Self) -> Vec<RestartNeeded> {
        restart::changed([
            (
                "kernel.shift",
                self.shift.to_string(),
                new.shift.to_string(),
            ),
            (
                "kernel.irq_ip_sample_every",
                self.irq_ip_sample_every.to_string(),
                new.irq_ip_sample_every.to_string(),
            ),
            (
                "kernel.irq_ip_samples_per_second",
                self.irq_ip_samples_per_second.to_string(),
                new.irq_ip_samples_per_second.to_string(),
            ),
            (
                "kernel.bpf_stats",
                self.bpf_stats.to_string(),
                new.bpf_stats.to_string(),
            ),
            (
                "kernel.read_interval_ms",
                self.read_interval_ms.to_string(),
                new.read_interval_ms.to_string(),
            ),
            (
                "kernel.jvm_contexts",
                self.jvm_contexts.to_string(),
                new.jvm_contexts.to_string(),
            ),
            (
                "kernel.offcpu",
                self.offcpu.to_string(),
                new.offcpu.to_string(),
            ),
            (
                "kernel.offcpu_max_switches_per_cpu_per_second",
                self.offcpu_max_switches_per_cpu_per_second.to_string(),
                new.offcpu_max_switches_per_cpu_per_second.to_string(),
            ),
        ])
    }
}

impl LogConfig {
    /// The logger is set up once, at start.
    pub fn restart_needed(&self, new: &Self) -> Vec<RestartNeeded> {
        restart::changed([("log.level", self.level.clone(), new.level.clone())])
    }
}

/// Where the configuration came from, for the startup log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Embedded,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Embedded => f.write_str("embedded defaults"),
        }
    }
}

/// A configuration that could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `line` and `column` are 1-based; `message` names the offending key.
    #[error("invalid config {path}, line {line}, column {column}: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("invalid config {path}: {message}")]
    Invalid { path: String, message: String },
    #[error("{0}")]
    Flag(String),
}

impl Config {
    /// Parses `text`; `origin` names the file in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let c = toml::from_str::<Config>(text).map_err(|e| {
            let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
            ConfigError::Parse {
                path: origin.to_string(),
                line,
                column,
                message: e.message().trim_end().to_string(),
            }
        })?;
        if let Err((section, key, message)) = c.check_combinations() {
            let (line, column) = key_position(text, section, key);
            return Err(ConfigError::Parse {
                path: origin.to_string(),
                line,
                column,
                message,
            });
        }
        Ok(c)
    }

    /// Rules that involve more than one key; the error names the key to fix.
    fn check_combinations(&self) -> Result<(), (&'static str, &'static str, String)> {
        self.pyroscope
            .check_combinations()
            .map_err(|(key, message)| ("pyroscope", key, message))?;
        self.otlp
            .check_combinations()
            .map_err(|(key, message)| ("otlp", key, message))?;
        let w = &self.windows;
        w.rotation
            .check_within(w.max_seconds, w.max_open)
            .map_err(|(key, message)| ("windows.rotation", key, message))?;
        let s = &self.server;
        if s.tcp.is_empty() {
            check_no_tls(s)?;
        } else {
            check_tcp(s)?;
        }
        if s.group.contains(|c: char| c == ':' || c.is_whitespace()) {
            return Err((
                "server",
                "group",
                format!("group = {:?} is not a group name", s.group),
            ));
        }
        Ok(())
    }

    /// What `new` changes that a reload cannot apply, as each section declares it;
    /// `[export]` and `[pyroscope]` reload whole (the exporters and the pusher restart),
    /// `[windows]` applies to the next window.
    pub fn restart_needed(&self, new: &Config) -> Vec<RestartNeeded> {
        let mut keys = self.server.restart_needed(&new.server);
        keys.extend(self.kernel.restart_needed(&new.kernel));
        keys.extend(self.log.restart_needed(&new.log));
        keys.extend(self.usdt.restart_needed(&new.usdt));
        keys
    }

    /// `--config PATH` when given (it must exist), else [`DEFAULT_CONFIG_PATH`]
    /// when it exists, else the embedded defaults.
    pub fn load(explicit: Option<&Path>) -> Result<(Config, Source), ConfigError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None if Path::new(DEFAULT_CONFIG_PATH).exists() => PathBuf::from(DEFAULT_CONFIG_PATH),
            None => {
                let c = Config::parse(DEFAULT_CONFIG_TOML, "<embedded jpd.toml>")?;
                return Ok((c, Source::Embedded));
            }
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let c = Config::parse(&text, &path.display().to_string())?;
        Ok((c, Source::File(path)))
    }

    /// Applies command-line flags, which win over the file; checked like the file.
    pub fn override_with(
        &mut self,
        socket: Option<PathBuf>,
        frequency_hz: Option<u64>,
        shift: Option<u32>,
    ) -> Result<(), ConfigError> {
        if let Some(s) = socket {
            self.server.socket = s;
        }
        if let Some(f) = frequency_hz {
            check_range("--frequency", f, &FREQUENCY_RANGE).map_err(ConfigError::Flag)?;
            self.kernel.frequency_hz = f;
        }
        if let Some(s) = shift {
            check_range("--shift", s, &SHIFT_RANGE).map_err(ConfigError::Flag)?;
            self.kernel.shift = s;
        }
        if self.server.socket.as_os_str().is_empty() {
            return Err(ConfigError::Flag("the socket path is empty".into()));
        }
        Ok(())
    }
}

/// The rules of `[server]` when `tcp` is set: an address, TLS, client names only
/// with a client CA, and no CA only when anonymous reads are asked for.
fn check_tcp(s: &ServerConfig) -> Result<(), (&'static str, &'static str, String)> {
    if s.tcp.parse::<std::net::SocketAddr>().is_err() {
        return Err((
            "server",
            "tcp",
            format!("tcp = {:?} is not an IP address and port", s.tcp),
        ));
    }
    if s.tls_cert.as_os_str().is_empty() || s.tls_key.as_os_str().is_empty() {
        return Err((
            "server",
            "tcp",
            "tcp needs TLS: set tls_cert and tls_key (gRPC over TCP is never plain text)".into(),
        ));
    }
    if !s.tls_client_names.is_empty() && s.tls_client_ca.as_os_str().is_empty() {
        return Err((
            "server",
            "tls_client_names",
            "tls_client_names needs tls_client_ca: names are only trusted on client certificates jpd verified".into(),
        ));
    }
    if s.tls_client_ca.as_os_str().is_empty() && !s.tcp_anonymous_reads {
        return Err((
            "server",
            "tcp",
            "tcp without tls_client_ca lets anyone who reaches the port read the API: set tls_client_ca, or tcp_anonymous_reads = true to allow anonymous reads (command lines are then cut to the program's name)".into(),
        ));
    }
    if let Some(bad) = s
        .tls_client_names
        .iter()
        .find(|n| n.trim().is_empty() || n.trim() != n.as_str())
    {
        return Err((
            "server",
            "tls_client_names",
            format!(
                "tls_client_names: {bad:?} is not a certificate name (empty, or spaces around it)"
            ),
        ));
    }
    Ok(())
}

/// Without `tcp`, no TLS key may be set: TLS is only used over TCP.
fn check_no_tls(s: &ServerConfig) -> Result<(), (&'static str, &'static str, String)> {
    for (key, v) in [
        ("tls_cert", &s.tls_cert),
        ("tls_key", &s.tls_key),
        ("tls_client_ca", &s.tls_client_ca),
    ] {
        if !v.as_os_str().is_empty() {
            return Err((
                "server",
                key,
                format!("{key} is set but tcp is empty: TLS is only used over TCP"),
            ));
        }
    }
    if !s.tls_client_names.is_empty() {
        return Err((
            "server",
            "tls_client_names",
            "tls_client_names is set but tcp is empty: TLS is only used over TCP".into(),
        ));
    }
    Ok(())
}

/// Where `key` of `[section]` is set in `text` (1-based line and column), for errors
/// found after parsing; (1, 1) when the key is not there.
fn key_position(text: &str, section: &str, key: &str) -> (usize, usize) {
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            current = rest.split(']').next().unwrap_or("").trim().to_string();
            continue;
        }
        let name = t.split('=').next().unwrap_or("").trim();
        if current == section && name == key && t.contains('=') {
            return (i + 1, line.len() - t.len() + 1);
        }
    }
    (1, 1)
}

/// 1-based line and column (in characters) of byte offset `at` in `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

fn frequency<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    check_range("frequency_hz", u64::deserialize(d)?, &FREQUENCY_RANGE)
        .map_err(serde::de::Error::custom)
}

fn irq_ip_sample_every<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    check_range(
        "irq_ip_sample_every",
        u32::deserialize(d)?,
        &IRQ_IP_SAMPLE_EVERY_RANGE,
    )
    .map_err(serde::de::Error::custom)
}

fn irq_ip_samples_per_second<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    check_range(
        "irq_ip_samples_per_second",
        u32::deserialize(d)?,
        &IRQ_IP_SAMPLES_PER_SECOND_RANGE,
    )
    .map_err(serde::de::Error::custom)
}

fn offcpu_max_switches<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    check_range(
        "offcpu_max_switches_per_cpu_per_second",
        u32::deserialize(d)?,
        &OFFCPU_MAX_SWITCHES_RANGE,
    )
    .map_err(serde::de::Error::custom)
}

fn offcpu_idle<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let patterns = Vec::<String>::deserialize(d)?;
    crate::store::jvm::idle::check_patterns(&patterns)
        .map_err(|e| serde::de::Error::custom(format!("offcpu_idle: {e}")))?;
    Ok(patterns)
}

fn shift<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    check_range("shift", u32::deserialize(d)?, &SHIFT_RANGE).map_err(serde::de::Error::custom)
}

fn read_interval<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    check_range(
        "read_interval_ms",
        u64::deserialize(d)?,
        &READ_INTERVAL_MS_RANGE,
    )
    .map_err(serde::de::Error::custom)
}

const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

fn log_level<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if LOG_LEVELS.contains(&s.as_str()) {
        Ok(s)
    } else {
        Err(serde::de::Error::custom(format!(
            "level = {s:?} is not one of {}",
            LOG_LEVELS.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests;
