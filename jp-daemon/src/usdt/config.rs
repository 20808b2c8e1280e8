//! The `[usdt]` section of `jpd.toml`: the JVM agent's record probe collector.
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::collector::UsdtOptions;
use super::fair::RingShare;
use super::program::{MAX_RING_BYTES, MIN_RING_BYTES};
use crate::restart::{self, RestartNeeded};
use crate::store::jvm::JvmLimits;

pub const SCAN_INTERVAL_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=60_000;
pub const RING_BUFFER_KIB_RANGE: std::ops::RangeInclusive<u32> =
    (MIN_RING_BYTES >> 10)..=(MAX_RING_BYTES >> 10);

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsdtConfig {
    /// Collect JVM profiles from agents' USDT probes.
    pub enabled: bool,
    #[serde(deserialize_with = "scan_interval")]
    pub scan_interval_ms: u64,
    #[serde(deserialize_with = "ring_buffer_kib")]
    pub ring_buffer_kib: u32,
    #[serde(deserialize_with = "library")]
    pub library: String,
    /// How long an exited JVM's profile is kept, in seconds.
    #[serde(deserialize_with = "retention")]
    pub retention_s: u64,
    /// JVMs kept (running and exited).
    #[serde(deserialize_with = "positive")]
    pub max_jvms: usize,
    /// Nodes of one JVM's merged tree.
    #[serde(deserialize_with = "positive")]
    pub max_nodes_per_jvm: usize,
    /// MiB the JVM store may hold, all JVMs together (trees, threads' maps, methods,
    /// names). Past it, records only update what is stored: new nodes, threads and
    /// methods are dropped and counted (`store/over_budget`), the JVM incomplete.
    #[serde(deserialize_with = "store_mib")]
    pub max_store_mib: usize,
    /// Running JVMs tracked per uid: a process over its uid's quota is not tracked
    /// (counted `store/uid_quota`), so one user cannot fill the JVM table.
    #[serde(deserialize_with = "positive")]
    pub max_jvms_per_uid: usize,
    /// Records one process may put in the shared ring per second, on average (a token
    /// bucket per process in the eBPF program; records over it are dropped there and
    /// charged to that process, which alone is asked to re-send). 0: no limit, which
    /// lets one process fill the ring for every other. Default 20000: a busy JVM sends
    /// a few hundred a second.
    #[serde(deserialize_with = "records_per_second")]
    pub records_per_second_per_process: u32,
    /// Records one process may send at once above its rate (the bucket's size).
    /// Default 4096: a JVM's start-up (its HELLO, method tables and first trees) and a
    /// re-send of a large tree fit in it.
    #[serde(deserialize_with = "burst_records")]
    pub burst_records: u32,
    /// Only processes with one of these real uids are listened to; empty: every uid.
    #[serde(deserialize_with = "allow_uids")]
    pub allow_uids: Vec<u32>,
    /// Only processes in one of these cgroup v2 paths (relative to /sys/fs/cgroup, such
    /// as "/system.slice/app.service"), or below one, are listened to; empty: every
    /// cgroup. Resolved when jpd starts: a cgroup created later is not matched.
    #[serde(deserialize_with = "allow_cgroups")]
    pub allow_cgroups: Vec<String>,
}

impl Default for UsdtConfig {
    fn default() -> Self {
        let o = UsdtOptions::default();
        UsdtConfig {
            enabled: true,
            scan_interval_ms: u64::try_from(o.scan_interval.as_millis()).unwrap_or(1000),
            ring_buffer_kib: o.ring_buffer_bytes >> 10,
            library: o.library,
            retention_s: JvmLimits::default().retention.as_secs(),
            max_jvms: JvmLimits::default().max_jvms,
            max_nodes_per_jvm: JvmLimits::default().max_nodes_per_jvm,
            max_store_mib: JvmLimits::default().max_store_bytes >> 20,
            max_jvms_per_uid: JvmLimits::default().max_jvms_per_uid,
            records_per_second_per_process: o.share.records_per_second,
            burst_records: o.share.burst_records,
            allow_uids: o.share.allow_uids,
            allow_cgroups: o.share.allow_cgroups,
        }
    }
}

impl UsdtConfig {
    /// The JVM store's limits: the configured ones, the rest at their defaults.
    pub fn limits(&self) -> JvmLimits {
        JvmLimits {
            retention: Duration::from_secs(self.retention_s),
            max_jvms: self.max_jvms,
            max_nodes_per_jvm: self.max_nodes_per_jvm,
            max_store_bytes: self.max_store_mib << 20,
            max_jvms_per_uid: self.max_jvms_per_uid,
            ..JvmLimits::default()
        }
    }

    /// The keys a reload cannot apply: all of the section (the collector, its ring
    /// buffer and the JVM store's limits are set up once, at start), reported as one.
    pub fn restart_needed(&self, new: &Self) -> Vec<RestartNeeded> {
        restart::changed([("usdt", format!("{self:?}"), format!("{new:?}"))])
    }

    pub fn options(&self) -> UsdtOptions {
        UsdtOptions {
            library: self.library.clone(),
            scan_interval: Duration::from_millis(self.scan_interval_ms),
            ring_buffer_bytes: self.ring_buffer_kib.saturating_mul(1024),
            // `kernel.bpf_stats` decides, in start_from_config.
            bpf_stats: false,
            share: RingShare {
                records_per_second: self.records_per_second_per_process,
                burst_records: self.burst_records,
                allow_uids: self.allow_uids.clone(),
                allow_cgroups: self.allow_cgroups.clone(),
            },
        }
    }
}

fn scan_interval<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if SCAN_INTERVAL_MS_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "scan_interval_ms = {v} is out of range {}..={}",
            SCAN_INTERVAL_MS_RANGE.start(),
            SCAN_INTERVAL_MS_RANGE.end()
        )))
    }
}

fn ring_buffer_kib<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if RING_BUFFER_KIB_RANGE.contains(&v) && v.is_power_of_two() {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "ring_buffer_kib = {v} is not a power of two in {}..={}",
            RING_BUFFER_KIB_RANGE.start(),
            RING_BUFFER_KIB_RANGE.end()
        )))
    }
}

pub const RETENTION_S_RANGE: std::ops::RangeInclusive<u64> = 0..=30 * 86_400;

fn retention<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if RETENTION_S_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "retention_s = {v} is out of range {}..={} (30 days)",
            RETENTION_S_RANGE.start(),
            RETENTION_S_RANGE.end()
        )))
    }
}

pub const MAX_STORE_MIB_RANGE: std::ops::RangeInclusive<usize> = 16..=1 << 20;

fn store_mib<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let v = usize::deserialize(d)?;
    if MAX_STORE_MIB_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "max_store_mib = {v} is out of range {}..={}",
            MAX_STORE_MIB_RANGE.start(),
            MAX_STORE_MIB_RANGE.end()
        )))
    }
}

fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let v = usize::deserialize(d)?;
    if v > 0 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom("must be at least 1"))
    }
}

pub const RECORDS_PER_SECOND_RANGE: std::ops::RangeInclusive<u32> = 100..=10_000_000;
pub const BURST_RECORDS_RANGE: std::ops::RangeInclusive<u32> = 16..=1 << 20;
/// Most entries of an allow-list: the program's maps hold this many.
pub const MAX_ALLOWED: usize = jp_common::maps::USDT_ALLOW_UIDS.max_entries as usize;

fn records_per_second<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v == 0 || RECORDS_PER_SECOND_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "records_per_second_per_process = {v} is out of range {}..={} (0: no limit)",
            RECORDS_PER_SECOND_RANGE.start(),
            RECORDS_PER_SECOND_RANGE.end()
        )))
    }
}

fn burst_records<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if BURST_RECORDS_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "burst_records = {v} is out of range {}..={}",
            BURST_RECORDS_RANGE.start(),
            BURST_RECORDS_RANGE.end()
        )))
    }
}

fn allow_uids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    let v = Vec::<u32>::deserialize(d)?;
    if v.len() > MAX_ALLOWED {
        return Err(serde::de::Error::custom(format!(
            "allow_uids has {} entries, at most {MAX_ALLOWED}",
            v.len()
        )));
    }
    Ok(v)
}

fn allow_cgroups<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    if v.len() > MAX_ALLOWED {
        return Err(serde::de::Error::custom(format!(
            "allow_cgroups has {} entries, at most {MAX_ALLOWED}",
            v.len()
        )));
    }
    if let Some(bad) = v.iter().find(|p| {
        !p.starts_with('/') || p.split('/').any(|c| c == ".." || c == ".") || p.contains('\n')
    }) {
        return Err(serde::de::Error::custom(format!(
            "allow_cgroups: {bad:?} must be a cgroup path from the cgroup2 root, such as \"/system.slice/app.service\""
        )));
    }
    Ok(v)
}

fn library<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    if v.is_empty() || v.contains('/') || v.contains('\n') {
        Err(serde::de::Error::custom(format!(
            "library = {v:?} must be a file name (no '/'), such as \"libjpagent.so\""
        )))
    } else {
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<UsdtConfig, String> {
        toml::from_str::<UsdtConfig>(text).map_err(|e| e.message().trim_end().to_owned())
    }

    #[test]
    fn defaults() {
        let c = UsdtConfig::default();
        assert!(c.enabled);
        assert_eq!(c.options(), UsdtOptions::default());
        assert_eq!(c.ring_buffer_kib, 8192);
        assert_eq!(c.scan_interval_ms, 1000);
        assert_eq!(c.library, "libjpagent.so");
        assert_eq!(parse("").unwrap(), c);
    }

    #[test]
    fn values_and_errors() {
        let c = parse("enabled = false\nscan_interval_ms = 250\nring_buffer_kib = 64\nlibrary = \"libx.so\"\n")
            .unwrap();
        assert_eq!(
            c.options(),
            UsdtOptions {
                library: "libx.so".into(),
                scan_interval: Duration::from_millis(250),
                ring_buffer_bytes: 64 << 10,
                bpf_stats: false,
                share: RingShare::default(),
            }
        );
        assert!(!c.enabled);
        assert_eq!(
            parse("ring_buffer_kib = 100").unwrap_err(),
            "ring_buffer_kib = 100 is not a power of two in 64..=1048576"
        );
        assert_eq!(
            parse("ring_buffer_kib = 32").unwrap_err(),
            "ring_buffer_kib = 32 is not a power of two in 64..=1048576"
        );
        assert_eq!(
            parse("scan_interval_ms = 10").unwrap_err(),
            "scan_interval_ms = 10 is out of range 100..=60000"
        );
        assert_eq!(
            parse("library = \"/opt/libjpagent.so\"").unwrap_err(),
            "library = \"/opt/libjpagent.so\" must be a file name (no '/'), such as \"libjpagent.so\""
        );
        assert!(parse("library = \"\"").is_err());
        let l = parse("retention_s = 60\nmax_jvms = 3\nmax_nodes_per_jvm = 1000\n")
            .unwrap()
            .limits();
        assert_eq!(
            (l.retention, l.max_jvms, l.max_nodes_per_jvm),
            (Duration::from_secs(60), 3, 1000)
        );
        assert_eq!(
            l.max_threads_per_jvm,
            JvmLimits::default().max_threads_per_jvm
        );
        assert_eq!(
            parse("retention_s = 9999999").unwrap_err(),
            "retention_s = 9999999 is out of range 0..=2592000 (30 days)"
        );
        assert_eq!(parse("max_jvms = 0").unwrap_err(), "must be at least 1");
        let l = parse("max_store_mib = 64\nmax_jvms_per_uid = 4\n")
            .unwrap()
            .limits();
        assert_eq!((l.max_store_bytes, l.max_jvms_per_uid), (64 << 20, 4));
        let d = UsdtConfig::default();
        assert_eq!((d.max_store_mib, d.max_jvms_per_uid), (512, 32));
        assert_eq!(
            parse("max_store_mib = 8").unwrap_err(),
            "max_store_mib = 8 is out of range 16..=1048576"
        );
        assert_eq!(
            parse("max_jvms_per_uid = 0").unwrap_err(),
            "must be at least 1"
        );
        assert!(parse("enabled = 1").is_err());
        assert!(parse("scan = 1")
            .unwrap_err()
            .starts_with("unknown field `scan`"));
    }

    #[test]
    fn ring_share_keys() {
        let c = UsdtConfig::default();
        assert_eq!(
            (c.records_per_second_per_process, c.burst_records),
            (20_000, 4096)
        );
        assert!(c.allow_uids.is_empty() && c.allow_cgroups.is_empty());
        let c = parse(
            "records_per_second_per_process = 0\nburst_records = 64\nallow_uids = [0, 1000]\nallow_cgroups = [\"/system.slice/app.service\"]\n",
        )
        .unwrap();
        let share = c.options().share;
        assert_eq!(
            share,
            RingShare {
                records_per_second: 0,
                burst_records: 64,
                allow_uids: vec![0, 1000],
                allow_cgroups: vec!["/system.slice/app.service".into()],
            }
        );
        assert_eq!(
            parse("records_per_second_per_process = 5").unwrap_err(),
            "records_per_second_per_process = 5 is out of range 100..=10000000 (0: no limit)"
        );
        assert_eq!(
            parse("burst_records = 0").unwrap_err(),
            "burst_records = 0 is out of range 16..=1048576"
        );
        assert_eq!(
            parse("allow_cgroups = [\"system.slice\"]").unwrap_err(),
            "allow_cgroups: \"system.slice\" must be a cgroup path from the cgroup2 root, such as \"/system.slice/app.service\""
        );
        assert!(parse("allow_cgroups = [\"/a/../b\"]").is_err());
        let many: Vec<String> = (0..=MAX_ALLOWED).map(|u| u.to_string()).collect();
        assert_eq!(
            parse(&format!("allow_uids = [{}]", many.join(","))).unwrap_err(),
            "allow_uids has 257 entries, at most 256"
        );
    }

    #[test]
    fn jpd_toml_documents_the_section() {
        let text = crate::config::DEFAULT_CONFIG_TOML;
        let section = text
            .split("\n[usdt]\n")
            .nth(1)
            .expect("jpd.toml has a [usdt] section");
        let section = section.split("\n[").next().unwrap_or(section);
        for key in [
            "enabled =",
            "scan_interval_ms =",
            "ring_buffer_kib =",
            "library =",
        ] {
            assert!(
                section.lines().any(|l| l.starts_with(key)),
                "jpd.toml's [usdt] does not set {key}"
            );
        }
        let parsed: UsdtConfig = toml::from_str(section).unwrap();
        assert_eq!(parsed, UsdtConfig::default());
    }
}
