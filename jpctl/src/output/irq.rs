//! `jpctl irq`: hard-IRQ handlers and softirqs, as a table or `--json`.

use std::fmt::Write as _;

use jp_proto::v1::IrqStats;
use serde::Serialize;

use super::duration_ns;
use super::text::printable;

// --- JSON shapes (stable: scripts and tests rely on them) -------------------------

#[derive(Serialize, Debug, PartialEq)]
pub struct IrqJson<'a> {
    pub irq: u32,
    pub handler: &'a str,
    pub function: &'a str,
    pub count: u64,
    pub time_ns: u64,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct SoftirqJson<'a> {
    pub name: &'a str,
    pub count: u64,
    pub time_ns: u64,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct IrqStatsJson<'a> {
    pub irqs: Vec<IrqJson<'a>>,
    pub softirqs: Vec<SoftirqJson<'a>>,
}

pub fn irq_json(s: &IrqStats) -> IrqStatsJson<'_> {
    IrqStatsJson {
        irqs: s
            .irqs
            .iter()
            .map(|i| IrqJson {
                irq: i.irq,
                handler: &i.handler,
                function: &i.function,
                count: i.count,
                time_ns: i.time_ns,
            })
            .collect(),
        softirqs: s
            .softirqs
            .iter()
            .map(|s| SoftirqJson {
                name: &s.name,
                count: s.count,
                time_ns: s.time_ns,
            })
            .collect(),
    }
}

/// `name`, `name [module]`, or `?` when jpd could not symbolize the handler.
pub fn irq_function(name: &str, module: Option<&str>) -> String {
    match (name, module) {
        ("", _) => "?".to_string(),
        (n, Some(m)) => format!("{n} [{m}]"),
        (n, None) => n.to_string(),
    }
}

pub fn irq_text(s: &IrqStats) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4}  {:<20} {:<28} {:>10} {:>10} {:>9}",
        "irq", "handler", "function", "count", "time", "avg"
    );
    for i in &s.irqs {
        let avg = i.time_ns.checked_div(i.count).unwrap_or(0);
        let _ = writeln!(
            out,
            "{:>4}  {:<20} {:<28} {:>10} {:>10} {:>9}",
            i.irq,
            printable(&i.handler),
            if i.function.is_empty() {
                "?".into()
            } else {
                printable(&i.function)
            },
            i.count,
            duration_ns(i.time_ns),
            duration_ns(avg)
        );
    }
    let _ = writeln!(
        out,
        "\n{:<10} {:>10} {:>10} {:>9}",
        "softirq", "count", "time", "avg"
    );
    for v in &s.softirqs {
        let avg = v.time_ns.checked_div(v.count).unwrap_or(0);
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>10} {:>9}",
            printable(&v.name),
            v.count,
            duration_ns(v.time_ns),
            duration_ns(avg)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_proto::v1::{IrqHandler, Softirq};

    #[test]
    fn irq_json_has_exactly_the_documented_shape() {
        let s = IrqStats {
            irqs: vec![IrqHandler {
                irq: 11,
                handler: "virtio1-req.0".into(),
                function: "vring_interrupt".into(),
                function_address: 0xffff_ffff_8160_0000,
                count: 42,
                time_ns: 123_456,
                function_module: Some("virtio_ring".into()),
                unhandled: 3,
            }],
            softirqs: vec![Softirq {
                name: "NET_RX".into(),
                vector: 3,
                count: 7,
                time_ns: 900,
            }],
        };
        let s = serde_json::to_string(&irq_json(&s)).unwrap();
        assert_eq!(
            s,
            r#"{"irqs":[{"irq":11,"handler":"virtio1-req.0","function":"vring_interrupt","count":42,"time_ns":123456}],"softirqs":[{"name":"NET_RX","count":7,"time_ns":900}]}"#
        );
    }
}
