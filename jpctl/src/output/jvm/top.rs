//! `jpctl jvm top`: a JVM's methods in the order asked for, as a table or `--json`.

use std::fmt::Write as _;

use jp_proto::v1::{JvmTop, JvmTopOrder};
use serde::Serialize;

use super::summary::{cpu_split, incomplete, joined, jvm_json, jvm_name, JvmJson};
use crate::output::percent;
use crate::output::text::printable;

#[derive(Serialize, Debug, PartialEq)]
pub struct MethodTotalsJson<'a> {
    pub method: &'a str,
    pub file: Option<&'a str>,
    pub calls: u64,
    pub bytecodes: u64,
    pub inclusive_bytecodes: u64,
    /// Absent when jpd's sampler is not joined to the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inclusive_cpu_ns: Option<u64>,
    /// Time off CPU and wall time in the method's own contexts; absent when jpd does
    /// not measure off-CPU time for the JVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offcpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ns: Option<u64>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct JvmTopJson<'a> {
    pub jvm: Option<JvmJson<'a>>,
    /// "bytecodes", "calls" or "inclusive".
    pub order: &'static str,
    pub total_methods: u32,
    pub methods: Vec<MethodTotalsJson<'a>>,
    /// Off-CPU time of idle threads left out (absent without off-CPU time; `--all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offcpu_idle_hidden_ns: Option<u64>,
}

pub fn order_label(order: i32) -> &'static str {
    match JvmTopOrder::try_from(order) {
        Ok(JvmTopOrder::Calls) => "calls",
        Ok(JvmTopOrder::Inclusive) => "inclusive",
        Ok(JvmTopOrder::Cpu) => "cpu",
        Ok(JvmTopOrder::Offcpu) => "offcpu",
        Ok(JvmTopOrder::Wall) => "wall",
        _ => "bytecodes",
    }
}

/// Whether jpd measured time off CPU for any method of `t` (or left some out as idle).
fn has_offcpu(t: &JvmTop) -> bool {
    t.offcpu_idle_hidden_ns > 0 || t.methods.iter().any(|m| m.offcpu_ns > 0)
}

/// The line that says how much idle threads' off-CPU time a view left out.
pub fn idle_note(hidden_ns: u64) -> String {
    let ns = hidden_ns as f64;
    let time = if ns >= 1e9 {
        format!("{:.1} s", ns / 1e9)
    } else {
        format!("{:.1} ms", ns / 1e6)
    };
    format!("idle: {time} off CPU hidden (threads waiting for work; --all shows it)")
}

pub fn jvm_top_json(t: &JvmTop) -> JvmTopJson<'_> {
    let offcpu = has_offcpu(t);
    JvmTopJson {
        jvm: t.jvm.as_ref().map(jvm_json),
        order: order_label(t.order),
        total_methods: t.total_methods,
        methods: t
            .methods
            .iter()
            .map(|m| MethodTotalsJson {
                method: &m.name,
                file: m.file.as_deref(),
                calls: m.calls,
                bytecodes: m.bytecodes,
                inclusive_bytecodes: m.inclusive_bytecodes,
                cpu_ns: joined(t.jvm.as_ref()).then_some(m.cpu_ns),
                inclusive_cpu_ns: joined(t.jvm.as_ref()).then_some(m.inclusive_cpu_ns),
                offcpu_ns: offcpu.then_some(m.offcpu_ns),
                wall_ns: offcpu.then_some(m.wall_ns),
            })
            .collect(),
        offcpu_idle_hidden_ns: offcpu.then_some(t.offcpu_idle_hidden_ns),
    }
}

/// `jpctl jvm top`: methods by the requested order, with their share of the
/// JVM's bytecodes.
pub fn jvm_top_text(t: &JvmTop) -> String {
    let j = t.jvm.clone().unwrap_or_default();
    let mut out = format!(
        "{} ({}, bba {}): {} calls, {} bytecodes\n",
        jvm_name(&j),
        if j.jdk_version.is_empty() {
            "jdk ?".to_string()
        } else {
            format!("jdk {}", printable(&j.jdk_version))
        },
        if j.bba.is_empty() {
            "?".into()
        } else {
            printable(&j.bba)
        },
        j.calls,
        j.bytecodes
    );
    let note = incomplete(&j);
    if !note.is_empty() {
        let _ = writeln!(out, "{note}");
    }
    let cpu = cpu_split(&j);
    if let Some(c) = &cpu {
        let _ = writeln!(out, "{c}");
    }
    let by = match JvmTopOrder::try_from(t.order) {
        Ok(JvmTopOrder::Calls) => "calls",
        Ok(JvmTopOrder::Inclusive) => "inclusive bytecodes",
        Ok(JvmTopOrder::Cpu) => "CPU time",
        Ok(JvmTopOrder::Offcpu) => "time off CPU",
        Ok(JvmTopOrder::Wall) => "wall time",
        _ => "exclusive bytecodes",
    };
    let _ = writeln!(
        out,
        "{} of {} methods by {by}",
        t.methods.len(),
        t.total_methods
    );
    if t.offcpu_idle_hidden_ns > 0 {
        let _ = writeln!(out, "{}", idle_note(t.offcpu_idle_hidden_ns));
    }
    let mut cpu_head = if cpu.is_some() {
        format!("{:>10} {:>10} ", "cpu ms", "incl ms")
    } else {
        String::new()
    };
    let offcpu = has_offcpu(t);
    if offcpu {
        let _ = write!(cpu_head, "{:>10} {:>10} ", "offcpu ms", "wall ms");
    }
    let _ = writeln!(
        out,
        "{cpu_head}{:>15} {:>6} {:>12} {:>15} {:>6}  method",
        "bytecodes", "share", "calls", "inclusive", "incl%"
    );
    for m in &t.methods {
        let mut cpu_cols = if cpu.is_some() {
            format!(
                "{:>10.1} {:>10.1} ",
                m.cpu_ns as f64 / 1e6,
                m.inclusive_cpu_ns as f64 / 1e6
            )
        } else {
            String::new()
        };
        if offcpu {
            let _ = write!(
                cpu_cols,
                "{:>10.1} {:>10.1} ",
                m.offcpu_ns as f64 / 1e6,
                m.wall_ns as f64 / 1e6
            );
        }
        let _ = writeln!(
            out,
            "{cpu_cols}{:>15} {:>5.1}% {:>12} {:>15} {:>5.1}%  {}",
            m.bytecodes,
            percent(m.bytecodes, j.bytecodes),
            m.calls,
            m.inclusive_bytecodes,
            percent(m.inclusive_bytecodes, j.bytecodes),
            printable(&m.name)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_proto::v1::JvmMethodTotals;

    /// A top whose idle threads' time was left out still has its off-CPU columns, and
    /// says how much was left out, in the table and in the JSON.
    #[test]
    fn the_time_left_out_as_idle_is_said() {
        let t = JvmTop {
            order: JvmTopOrder::Offcpu as i32,
            methods: vec![JvmMethodTotals {
                name: "A.run()V".into(),
                ..Default::default()
            }],
            total_methods: 1,
            offcpu_idle_hidden_ns: 12_345_000_000,
            ..Default::default()
        };
        let text = jvm_top_text(&t);
        assert!(
            text.contains(
                "idle: 12.3 s off CPU hidden (threads waiting for work; --all shows it)\n"
            ),
            "{text}"
        );
        assert!(text.contains("offcpu ms"), "{text}");
        let json = jvm_top_json(&t);
        assert_eq!(json.offcpu_idle_hidden_ns, Some(12_345_000_000));
        assert_eq!(json.methods[0].offcpu_ns, Some(0));
        assert_eq!(
            idle_note(450_000_000),
            "idle: 450.0 ms off CPU hidden (threads waiting for work; --all shows it)"
        );
    }
}
