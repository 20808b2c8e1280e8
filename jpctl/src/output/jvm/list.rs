//! `jpctl jvm list`: one line per JVM jpd profiles, or `--json`.

use std::fmt::Write as _;

use jp_proto::v1::{JvmList, JvmSummary};
use serde::Serialize;

use super::summary::{cpu_split, incomplete, jvm_json, JvmJson};
use crate::output::text::printable;

#[derive(Serialize, Debug, PartialEq)]
pub struct JvmListJson<'a> {
    pub jvms: Vec<JvmJson<'a>>,
}

pub fn jvm_list_json(l: &JvmList) -> JvmListJson<'_> {
    JvmListJson {
        jvms: l.jvms.iter().map(jvm_json).collect(),
    }
}

/// A duration in its two largest units: 45s, 1m 5s, 3h 2m, 12d 5h.
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// "attached 1m 5s ago" (running; the JVM may have started earlier) or
/// "exited 3s ago".
fn state(j: &JvmSummary, now_ms: u64) -> String {
    if j.exited_unix_ms != 0 {
        format!(
            "exited {} ago",
            age(now_ms.saturating_sub(j.exited_unix_ms))
        )
    } else if j.attached_since_unix_ms == 0 {
        "running".to_string()
    } else {
        format!(
            "attached {} ago",
            age(now_ms.saturating_sub(j.attached_since_unix_ms))
        )
    }
}

/// `jpctl jvm list`: one line per JVM; incomplete ones marked `*` and explained
/// below the table.
pub fn jvm_list_text(l: &JvmList, now_ms: u64) -> String {
    if l.jvms.is_empty() {
        return "no JVMs: jpd has heard from no JVM running jp's agent with profiler=usdt\n"
            .to_string();
    }
    let mut out = String::new();
    // JDK versions can be long (17.0.15+6-Debian-1deb12u1): the column fits them.
    let jdk_width = l
        .jvms
        .iter()
        .map(|j| printable(&j.jdk_version).chars().count())
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        out,
        "{:>7}  {:<jdk_width$} {:<8} {:>7} {:>12} {:>15} {:>9}  {:<20} main",
        "pid", "jdk", "bba", "threads", "calls", "bytecodes", "nodes", "state"
    );
    let mut notes = String::new();
    for j in &l.jvms {
        let mark = if j.complete { "" } else { "*" };
        let main = match (j.main.as_str(), j.ns_pid) {
            ("", Some(n)) => format!("? [pid {n} in its namespace]"),
            ("", None) => "?".to_string(),
            (m, Some(n)) => format!("{} [pid {n} in its namespace]", printable(m)),
            (m, None) => printable(m).into_owned(),
        };
        let _ = writeln!(
            out,
            "{:>7}  {:<jdk_width$} {:<8} {:>7} {:>12} {:>15} {:>9}  {:<20} {}",
            format!("{}{mark}", j.pid),
            if j.jdk_version.is_empty() {
                "?".into()
            } else {
                printable(&j.jdk_version)
            },
            if j.bba.is_empty() {
                "?".into()
            } else {
                printable(&j.bba)
            },
            format!("{}/{}", j.threads_live, j.threads_total),
            j.calls,
            j.bytecodes,
            j.nodes,
            state(j, now_ms),
            main
        );
        if let Some(cpu) = cpu_split(j) {
            let _ = writeln!(out, "{:>7}  {cpu}", "");
        }
        if !j.complete {
            let _ = writeln!(notes, "* pid {}: {}", j.pid, incomplete(j));
        }
    }
    out.push_str(&notes);
    out
}

#[cfg(test)]
mod tests {
    use super::super::summary::fixtures::jvm;
    use super::*;

    #[test]
    fn list_fits_long_jdk_versions_and_says_when_empty() {
        let l = JvmList {
            jvms: vec![jvm(1, "17.0.15+6-Debian-1deb12u1"), jvm(22, "25")],
        };
        let t = jvm_list_text(&l, 4_000);
        assert_eq!(
            t,
            concat!(
                "    pid  jdk                       bba      threads        calls       bytecodes     nodes  state                main\n",
                "      1  17.0.15+6-Debian-1deb12u1 precise      1/1           10             100         3  attached 3s ago      Loop\n",
                "     22  25                        precise      1/1           10             100         3  attached 3s ago      Loop\n",
            )
        );
        assert_eq!(
            jvm_list_text(&JvmList::default(), 0),
            "no JVMs: jpd has heard from no JVM running jp's agent with profiler=usdt\n"
        );
    }

    #[test]
    fn ages_keep_two_units() {
        assert_eq!(age(999), "0s");
        assert_eq!(age(65_000), "1m 5s");
        assert_eq!(age(3 * 3_600_000 + 120_000 + 5_000), "3h 2m");
        assert_eq!(age(90_061_000), "1d 1h");
    }
}
