//! `[windows.rotation]`: the fleet rotation's settings. The whole section reloads: the
//! running rotation takes the new settings at its next tick.
use std::fmt;

use crate::config_range::check;
use serde::{Deserialize, Deserializer};

pub const BUDGET_PERCENT_RANGE: std::ops::RangeInclusive<f64> = 0.001..=50.0;
/// The agent's own bounds on a window's length.
pub const SECONDS_RANGE: std::ops::RangeInclusive<u32> = 1..=3600;
pub const MAX_OPEN_RANGE: std::ops::RangeInclusive<u32> = 1..=64;

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RotationConfig {
    pub enabled: bool,
    /// The average extra CPU a JVM may pay for its windows, in % of its own CPU.
    pub budget_percent: Percent,
    /// A window's length.
    #[serde(deserialize_with = "seconds")]
    pub seconds: u32,
    /// Rotation windows open at once on the host (requested windows come on top).
    #[serde(deserialize_with = "max_open")]
    pub max_open: u32,
    /// Main classes (or jars) to rotate over: `*` any run of characters, `?` one.
    #[serde(deserialize_with = "main_class")]
    pub main_class: Vec<String>,
    pub uids: Vec<u32>,
    /// cgroup path prefixes (v2 paths, as in /proc/PID/cgroup), whole components.
    #[serde(deserialize_with = "cgroups")]
    pub cgroups: Vec<String>,
    /// Also attach the agent to JVMs started without it, when a filter names them.
    pub attach_without_agent: bool,
}

impl Default for RotationConfig {
    fn default() -> Self {
        RotationConfig {
            enabled: true,
            budget_percent: Percent(1.0),
            seconds: 10,
            max_open: 1,
            main_class: Vec::new(),
            uids: Vec::new(),
            cgroups: Vec::new(),
            attach_without_agent: false,
        }
    }
}

impl RotationConfig {
    /// Some filter is set: the configuration names JVMs (what attaching a JVM started
    /// without the agent needs).
    pub fn names_jvms(&self) -> bool {
        !self.main_class.is_empty() || !self.uids.is_empty() || !self.cgroups.is_empty()
    }
}

impl RotationConfig {
    /// The rules against `[windows]`: a rotation window is a window like any other, within
    /// `max_seconds`, and its slots are among the host's `max_open`. The error names the
    /// key to fix.
    pub fn check_within(
        &self,
        max_seconds: u32,
        max_open: u32,
    ) -> Result<(), (&'static str, String)> {
        if self.seconds > max_seconds {
            return Err((
                "seconds",
                format!(
                    "seconds = {} is longer than [windows] max_seconds = {max_seconds}",
                    self.seconds
                ),
            ));
        }
        if self.max_open > max_open {
            return Err((
                "max_open",
                format!(
                    "max_open = {} is more than [windows] max_open = {max_open}, the host's windows at once",
                    self.max_open
                ),
            ));
        }
        Ok(())
    }
}

/// A percentage, finite and within [`BUDGET_PERCENT_RANGE`] (so equality is total).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percent(f64);

impl Eq for Percent {}

impl Percent {
    pub fn get(self) -> f64 {
        self.0
    }

    pub fn new(v: f64) -> Result<Percent, String> {
        check("budget_percent", v, &BUDGET_PERCENT_RANGE).map(Percent)
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // An integer (`budget_percent = 2`) is a percentage too.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Number {
            Float(f64),
            Int(i64),
        }
        let v = match Number::deserialize(d)
            .map_err(|_| serde::de::Error::custom("budget_percent must be a number"))?
        {
            Number::Float(f) => f,
            Number::Int(i) => i as f64,
        };
        Percent::new(v).map_err(serde::de::Error::custom)
    }
}

fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    check("seconds", u32::deserialize(d)?, &SECONDS_RANGE).map_err(serde::de::Error::custom)
}

fn max_open<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    check("max_open", u32::deserialize(d)?, &MAX_OPEN_RANGE).map_err(serde::de::Error::custom)
}

fn main_class<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    if v.iter().any(|p| p.trim().is_empty()) {
        return Err(serde::de::Error::custom(
            "main_class: an empty pattern (use \"*\" for every main class)",
        ));
    }
    Ok(v)
}

fn cgroups<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    if let Some(bad) = v.iter().find(|p| !p.starts_with('/')) {
        return Err(serde::de::Error::custom(format!(
            "cgroups: {bad:?} is not a cgroup path (it starts with /, as in /proc/PID/cgroup)"
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        rotation: RotationConfig,
    }

    fn parse(text: &str) -> Result<RotationConfig, String> {
        toml::from_str::<Holder>(&format!("[rotation]\n{text}"))
            .map(|h| h.rotation)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn defaults_and_every_key() {
        assert_eq!(parse("").unwrap(), RotationConfig::default());
        let c = parse(
            "enabled = false\nbudget_percent = 2\nseconds = 5\nmax_open = 3\n\
             main_class = [\"com.acme.*\"]\nuids = [1000]\ncgroups = [\"/system.slice\"]\n\
             attach_without_agent = true\n",
        )
        .unwrap();
        assert_eq!(
            c,
            RotationConfig {
                enabled: false,
                budget_percent: Percent(2.0),
                seconds: 5,
                max_open: 3,
                main_class: vec!["com.acme.*".into()],
                uids: vec![1000],
                cgroups: vec!["/system.slice".into()],
                attach_without_agent: true,
            }
        );
        assert_eq!(
            parse("budget_percent = 0.5").unwrap().budget_percent.get(),
            0.5
        );
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("budget_percent = 0.0", "budget_percent = 0 is out of range"),
            ("budget_percent = 80", "budget_percent = 80 is out of range"),
            ("budget_percent = \"1\"", "budget_percent must be a number"),
            ("seconds = 0", "seconds = 0 is out of range 1..=3600"),
            ("max_open = 0", "max_open = 0 is out of range 1..=64"),
            ("main_class = [\"\"]", "main_class: an empty pattern"),
            (
                "cgroups = [\"system.slice\"]",
                "cgroups: \"system.slice\" is not",
            ),
            ("every = 1", "unknown field `every`"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err();
            assert!(e.starts_with(want), "{text}: {e}");
        }
    }
}
