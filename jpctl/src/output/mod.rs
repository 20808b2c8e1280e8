//! What jpctl's commands print: one module per command (`status`, `kernel`, `irq`, `jvm`,
//! `diff`), each pure functions from the API's messages (or a comparison) to strings, so
//! tests can compare them exactly. Where the strings go (stdout or `-o FILE`) is the
//! commands' business ([`crate::cmd::destination`]).

pub mod diff;
pub mod irq;
pub mod jvm;
pub mod kernel;
pub mod status;
pub mod text;

use jp_proto::v1::ModeSamples;
use serde::Serialize;

#[derive(Serialize, Debug, PartialEq)]
pub struct SamplesJson {
    pub total: u64,
    pub kernel: u64,
    pub user: u64,
    pub idle: u64,
}

pub(crate) fn samples_json(m: Option<&ModeSamples>) -> SamplesJson {
    let m = m.copied().unwrap_or_default();
    SamplesJson {
        total: m.total,
        kernel: m.kernel,
        user: m.user,
        idle: m.idle,
    }
}

/// A JSON number must be finite; a load is never negative.
pub(crate) fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

pub fn to_json<T: Serialize>(v: &T) -> String {
    // Serializing plain structs of strings and numbers cannot fail.
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

pub(crate) fn modes_line(m: &ModeSamples) -> String {
    format!(
        "{} (kernel {:.1}%, user {:.1}%, idle {:.1}%)",
        m.total,
        percent(m.kernel, m.total),
        percent(m.user, m.total),
        percent(m.idle, m.total)
    )
}

/// Nanoseconds as a short human duration: 950 ns, 12.3 us, 4.56 ms, 7.89 s.
pub fn duration_ns(ns: u64) -> String {
    let x = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", x / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", x / 1e6)
    } else {
        format!("{:.2} s", x / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_ns(950), "950 ns");
        assert_eq!(duration_ns(12_345), "12.3 us");
        assert_eq!(duration_ns(4_560_000), "4.56 ms");
        assert_eq!(duration_ns(7_890_000_000), "7.89 s");
    }
}
