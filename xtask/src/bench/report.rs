//! BENCHMARKS.md holds one section per benchmark, between markers, so that each
//! `cargo xtask bench X` rewrites only its own section.
use anyhow::{Context, Result};

use crate::cmd::root;

pub fn write_section(name: &str, body: &str) -> Result<()> {
    write_section_after(name, None, body)
}

/// Replaces section `name`; a new one goes right after section `after` if that exists (so
/// that a benchmark's subsections stay together), else at the end.
pub fn write_section_after(name: &str, after: Option<&str>, body: &str) -> Result<()> {
    let path = root().join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        "# jp benchmarks\n\nWritten by `cargo xtask bench <name>`; each section is replaced by its benchmark's \
         latest run. Ratios measured side by side in one run are what to compare; absolute times \
         on these shared 2-core machines are noise.\n"
            .to_string()
    });
    let new = replace_section(&old, name, after, body);
    std::fs::write(&path, new).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("xtask: wrote the `{name}` section of {}", path.display());
    Ok(())
}

/// `old` with section `name` replaced by `body` (or inserted, see [`write_section_after`]).
fn replace_section(old: &str, name: &str, after: Option<&str>, body: &str) -> String {
    let begin = format!("<!-- bench:{name} -->");
    let end = format!("<!-- /bench:{name} -->");
    let section = format!("{begin}\n{}\n{end}", body.trim_end());
    match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if e > b => format!("{}{}{}", &old[..b], section, &old[e + end.len()..]),
        _ => match after.and_then(|a| last_end_of(old, a)) {
            Some(at) => format!("{}\n{}{}", &old[..at], section, &old[at..]),
            None => format!("{}\n{}\n", old.trim_end(), section),
        },
    }
}

/// Where the end marker of `prefix` or of any `prefix-…` subsection placed after it ends.
fn last_end_of(text: &str, prefix: &str) -> Option<usize> {
    let own = format!("<!-- /bench:{prefix} -->");
    let sub = format!("<!-- /bench:{prefix}-");
    let first = text.find(&own)? + own.len();
    let mut at = first;
    while let Some(i) = text[at..].find(&sub) {
        let start = at + i;
        at = start + text[start..].find("-->")? + 3;
    }
    Some(at)
}

pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// A figure over repeated measurements (JVMs, windows): the median and the range.
#[derive(Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Spread {
        Spread {
            median: median(&mut v.to_vec()),
            min: v.iter().cloned().fold(f64::INFINITY, f64::min),
            max: v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_replaced_in_place_and_subsections_follow_their_parent() {
        let old = "# t\n<!-- bench:jvm -->\nold\n<!-- /bench:jvm -->\n<!-- bench:usdt -->\nu\n<!-- /bench:usdt -->\n";
        let a = replace_section(old, "jvm", None, "new");
        assert_eq!(a, old.replace("old", "new"));
        let b = replace_section(&a, "jvm-steady", Some("jvm"), "s");
        let c = replace_section(&b, "jvm-cost", Some("jvm"), "c");
        let order: Vec<usize> = [
            "bench:jvm -->",
            "bench:jvm-steady",
            "bench:jvm-cost",
            "bench:usdt",
        ]
        .iter()
        .map(|m| c.find(m).unwrap())
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{c}");
        let d = replace_section(&c, "jvm-steady", Some("jvm"), "s2");
        assert_eq!(d, c.replace("\ns\n", "\ns2\n"));
        let e = replace_section(&d, "fleet", None, "f");
        assert!(
            e.ends_with("<!-- bench:fleet -->\nf\n<!-- /bench:fleet -->\n"),
            "{e}"
        );
    }

    /// Text written by hand outside the markers (a bench's judgements of its run) stays
    /// when the sections around it are rewritten or a new subsection is added.
    #[test]
    fn text_outside_the_markers_survives_every_rewrite() {
        let old = "# t\n<!-- bench:w -->\nintro\n<!-- /bench:w -->\nGOALS by hand\n<!-- bench:w-a -->\na\n<!-- /bench:w-a -->\nNOTE by hand\n";
        let a = replace_section(old, "w", None, "intro again");
        let b = replace_section(&a, "w-a", Some("w"), "a2");
        let c = replace_section(&b, "w-b", Some("w"), "b");
        assert_eq!(
            c,
            "# t\n<!-- bench:w -->\nintro again\n<!-- /bench:w -->\nGOALS by hand\n<!-- bench:w-a -->\na2\n<!-- /bench:w-a -->\n<!-- bench:w-b -->\nb\n<!-- /bench:w-b -->\nNOTE by hand\n"
        );
    }
}
