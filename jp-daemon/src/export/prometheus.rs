//! The Prometheus text exposition format (version 0.0.4), as every part of `/metrics`
//! writes it: the kernel's metrics, the JVMs' and the Pyroscope pusher's.

use std::fmt::Write as _;

/// Writes one metric family: HELP, TYPE, then its samples.
pub(super) struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    pub(super) fn header<'o>(
        out: &'o mut String,
        name: &str,
        kind: &str,
        help: &str,
    ) -> Family<'o> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out }
    }

    pub(super) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }
}

/// `jp_refusals_total{subsystem, reason}`: what jpd refused to take, and why. The
/// labels come from the code's fixed set ([`crate::refusals`]), never from input.
pub(super) fn render_refusals(out: &mut String, counts: &[(crate::refusals::Refusal, u64)]) {
    let name = "jp_refusals_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "Inputs jpd refused to take (over a budget, a rate or a cap; not what they claim to be), by subsystem and reason.",
    );
    for (what, n) in counts {
        f.sample(
            name,
            &[("subsystem", what.subsystem), ("reason", what.reason)],
            *n as f64,
        );
    }
}

fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Integers print without a fraction (Prometheus parses both, people read these).
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_one_family_labelled_by_subsystem_and_reason() {
        let mut out = String::new();
        let what = crate::refusals::Refusal::new("usdt", "rate_limited");
        render_refusals(&mut out, &[(what, 7)]);
        assert_eq!(
            out.lines().nth(2),
            Some("jp_refusals_total{subsystem=\"usdt\",reason=\"rate_limited\"} 7")
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
