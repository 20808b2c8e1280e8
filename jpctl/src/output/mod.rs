//! What `jpctl status|kernel|irq|jvm` print: plain text, JSON, readprofile. Pure
//! functions from the API's messages to strings, so tests can compare them exactly.

pub mod jvm;

use std::fmt::Write as _;

use jp_proto::v1::{IrqStats, KernelFunction, KernelProfile, ModeSamples, Status};
use serde::Serialize;

// --- JSON shapes (stable: scripts and tests rely on them) -------------------------

#[derive(Serialize, Debug, PartialEq)]
pub struct SamplesJson {
    pub total: u64,
    pub kernel: u64,
    pub user: u64,
    pub idle: u64,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct FunctionJson<'a> {
    pub name: &'a str,
    pub module: Option<&'a str>,
    pub samples: u64,
    pub load: f64,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct KernelJson<'a> {
    pub samples: SamplesJson,
    pub shift: u32,
    pub functions: Vec<FunctionJson<'a>>,
}

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

fn samples_json(m: Option<&ModeSamples>) -> SamplesJson {
    let m = m.copied().unwrap_or_default();
    SamplesJson {
        total: m.total,
        kernel: m.kernel,
        user: m.user,
        idle: m.idle,
    }
}

/// A JSON number must be finite; a load is never negative.
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// Functions sorted by samples (descending, then name), as `jpctl kernel --json`
/// promises regardless of the order jpd sent them in.
pub fn kernel_json(p: &KernelProfile) -> KernelJson<'_> {
    let mut functions: Vec<&KernelFunction> = p.functions.iter().collect();
    functions.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
    KernelJson {
        samples: samples_json(p.samples.as_ref()),
        shift: p.shift,
        functions: functions
            .into_iter()
            .map(|f| FunctionJson {
                name: &f.name,
                module: f.module.as_deref(),
                samples: f.samples,
                load: finite(f.load),
            })
            .collect(),
    }
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

pub fn to_json<T: Serialize>(v: &T) -> String {
    // Serializing plain structs of strings and numbers cannot fail.
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// `jpctl status --json`: the Status message, field for field.
pub fn status_json(s: &Status) -> serde_json::Value {
    let k = s.kernel.clone().unwrap_or_default();
    serde_json::json!({
        "version": s.version,
        "uptime_ms": s.uptime_ms,
        "kernel": {
            "attached": k.attached,
            "cpus": k.cpus,
            "frequency_hz": k.frequency_hz,
            "shift": k.shift,
            "text_start": k.text_start,
            "text_end": k.text_end,
            "samples": samples_json(k.samples.as_ref()),
            "events_lost": k.events_lost,
            "last_read_unix_ms": k.last_read_unix_ms,
            "reset_unix_ms": k.reset_unix_ms,
            "bpf_stats_enabled": k.bpf_stats_enabled,
            "irq_ip_samples_per_second": k.irq_ip_samples_per_second,
            "programs": k.programs.iter().map(|p| serde_json::json!({
                "name": p.name,
                "attached_to": p.attached_to,
                "run_count": p.run_count,
                "run_time_ns": p.run_time_ns,
            })).collect::<Vec<_>>(),
        },
        "jvm": jvm::status_jvm_json(s),
    })
}

// --- readprofile ------------------------------------------------------------------

/// What util-linux `readprofile` prints: one `ticks function load` line per
/// function with samples, in address order (`%6u %-40s %8.4f`), then a
/// `*unknown*` line and a `total` line whose load is total / text size.
///
/// Differences, because jp knows more: module functions are listed as
/// `name [module]` (readprofile counted them in `*unknown*`), and `*unknown*` is
/// what no symbol covers. As in readprofile, `total` sums the listed functions.
pub fn readprofile(p: &KernelProfile) -> String {
    let mut functions: Vec<&KernelFunction> =
        p.functions.iter().filter(|f| f.samples > 0).collect();
    functions.sort_by_key(|f| f.address);
    let mut out = String::new();
    let mut total = 0u64;
    for f in functions {
        total += f.samples;
        let name = match &f.module {
            Some(m) => format!("{} [{m}]", f.name),
            None => f.name.clone(),
        };
        let _ = writeln!(out, "{:>6} {:<40} {:>8.4}", f.samples, name, finite(f.load));
    }
    let _ = writeln!(out, "{:>6} *unknown*", p.unknown_samples);
    let text = p.text_end.saturating_sub(p.text_start);
    let load = if text == 0 {
        0.0
    } else {
        total as f64 / text as f64
    };
    let _ = writeln!(out, "{:>6} {:<40} {:>8.4}", total, "total", load);
    out
}

// --- plain text -------------------------------------------------------------------

pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn modes_line(m: &ModeSamples) -> String {
    format!(
        "{} (kernel {:.1}%, user {:.1}%, idle {:.1}%)",
        m.total,
        percent(m.kernel, m.total),
        percent(m.user, m.total),
        percent(m.idle, m.total)
    )
}

/// Functions by samples, with their share of non-idle samples and load.
pub fn kernel_text(p: &KernelProfile) -> String {
    let m = p.samples.unwrap_or_default();
    let busy = m.kernel + m.user;
    let mut out = format!("samples {}, shift {}\n", modes_line(&m), p.shift);
    let _ = writeln!(
        out,
        "{:>9} {:>6} {:>9}  function",
        "samples", "share", "load"
    );
    for f in kernel_json(p).functions {
        let name = match f.module {
            Some(m) => format!("{} [{m}]", f.name),
            None => f.name.to_string(),
        };
        let _ = writeln!(
            out,
            "{:>9} {:>5.1}% {:>9.4}  {}",
            f.samples,
            percent(f.samples, busy),
            f.load,
            name
        );
    }
    if p.unknown_samples > 0 {
        let _ = writeln!(
            out,
            "{:>9} {:>5.1}% {:>9}  *unknown*",
            p.unknown_samples,
            percent(p.unknown_samples, busy),
            "-"
        );
    }
    out
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
            i.handler,
            if i.function.is_empty() {
                "?"
            } else {
                &i.function
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
            v.name,
            v.count,
            duration_ns(v.time_ns),
            duration_ns(avg)
        );
    }
    out
}

pub fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h {m}m {s}s")
    } else if h > 0 {
        format!("{h}h {m}m {s}s")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// CPU list as ranges: [0,1,2,5] → "0-2,5".
pub fn cpu_list(cpus: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

pub fn status_text(s: &Status) -> String {
    let k = s.kernel.clone().unwrap_or_default();
    let mut out = format!("jpd {}, up {}\n", s.version, uptime(s.uptime_ms));
    if !k.attached {
        out.push_str("kernel: not attached (the collector has not read its maps yet)\n");
    } else {
        let _ = writeln!(
            out,
            "kernel: {} CPUs ({}), cpu-clock at {} Hz, shift {} ({}-byte buckets)",
            k.cpus.len(),
            cpu_list(&k.cpus),
            k.frequency_hz,
            k.shift,
            1u64 << k.shift.min(63)
        );
    }
    let _ = writeln!(out, "  text     {:#x}-{:#x}", k.text_start, k.text_end);
    let since = if k.reset_unix_ms == 0 {
        "start"
    } else {
        "last reset"
    };
    let _ = writeln!(
        out,
        "  samples  {} since {since}",
        modes_line(&k.samples.unwrap_or_default())
    );
    let _ = writeln!(out, "  lost     {} events", k.events_lost);
    let walks = match k.irq_ip_samples_per_second {
        0 => "off".to_string(),
        n => format!("at most {n} stack walks/s per CPU"),
    };
    let _ = writeln!(out, "  irq ip   {walks}");
    let stats = if k.bpf_stats_enabled {
        "on (run times below move; every BPF program on the host pays for them)"
    } else {
        "off (run times below do not move; kernel.bpf_stats turns them on)"
    };
    let _ = writeln!(out, "  bpf stats {stats}");
    if !k.programs.is_empty() {
        // What each eBPF program attaches to can be long: it goes last.
        let _ = writeln!(
            out,
            "  {:<16} {:>10} {:>10} {:>9}  attached to",
            "program", "runs", "run time", "per run"
        );
        for p in &k.programs {
            let per = p.run_time_ns.checked_div(p.run_count).unwrap_or(0);
            let _ = writeln!(
                out,
                "  {:<16} {:>10} {:>10} {:>9}  {}",
                p.name,
                p.run_count,
                duration_ns(p.run_time_ns),
                duration_ns(per),
                p.attached_to
            );
        }
    }
    out.push_str(&jvm::status_jvm_text(s));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_proto::v1::{IrqHandler, Softirq};

    fn profile() -> KernelProfile {
        KernelProfile {
            samples: Some(ModeSamples {
                total: 1000,
                kernel: 300,
                user: 100,
                idle: 600,
            }),
            shift: 4,
            text_start: 0xffff_ffff_8100_0000,
            text_end: 0xffff_ffff_8100_0000 + 0x10_0000,
            functions: vec![
                KernelFunction {
                    name: "clear_user_rep_good".into(),
                    module: None,
                    address: 0xffff_ffff_8100_2000,
                    size: 64,
                    samples: 200,
                    load: 200.0 / 64.0,
                },
                KernelFunction {
                    name: "read_iter_zero".into(),
                    module: None,
                    address: 0xffff_ffff_8100_1000,
                    size: 256,
                    samples: 80,
                    load: 80.0 / 256.0,
                },
                KernelFunction {
                    name: "vring_interrupt".into(),
                    module: Some("virtio_ring".into()),
                    address: 0xffff_ffff_c000_1000,
                    size: 512,
                    samples: 15,
                    load: 15.0 / 512.0,
                },
            ],
            unknown_samples: 5,
            ..Default::default()
        }
    }

    #[test]
    fn kernel_json_has_exactly_the_documented_shape() {
        let v: serde_json::Value =
            serde_json::from_str(&to_json(&kernel_json(&profile()))).unwrap();
        let expected = serde_json::json!({
            "samples": {"total": 1000, "kernel": 300, "user": 100, "idle": 600},
            "shift": 4,
            "functions": [
                {"name": "clear_user_rep_good", "module": null, "samples": 200, "load": 3.125},
                {"name": "read_iter_zero", "module": null, "samples": 80, "load": 0.3125},
                {"name": "vring_interrupt", "module": "virtio_ring", "samples": 15, "load": 0.029296875},
            ],
        });
        assert_eq!(v, expected);
        // Key order as documented, too.
        let s = serde_json::to_string(&kernel_json(&profile())).unwrap();
        assert!(s.starts_with(r#"{"samples":{"total":1000,"kernel":300,"user":100,"idle":600},"shift":4,"functions":[{"name":"clear_user_rep_good","module":null,"samples":200,"load":3.125}"#), "{s}");
    }

    #[test]
    fn kernel_json_sorts_by_samples_whatever_the_input_order() {
        let mut p = profile();
        p.functions.reverse();
        let names: Vec<_> = kernel_json(&p).functions.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            ["clear_user_rep_good", "read_iter_zero", "vring_interrupt"]
        );
    }

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

    #[test]
    fn readprofile_format_is_exact() {
        let expected = concat!(
            "    80 read_iter_zero                             0.3125\n",
            "   200 clear_user_rep_good                        3.1250\n",
            "    15 vring_interrupt [virtio_ring]              0.0293\n",
            "     5 *unknown*\n",
            "   295 total                                      0.0003\n",
        );
        assert_eq!(readprofile(&profile()), expected);
    }

    #[test]
    fn readprofile_of_nothing_is_just_the_trailer() {
        let p = KernelProfile::default();
        assert_eq!(
            readprofile(&p),
            "     0 *unknown*\n     0 total                                      0.0000\n"
        );
    }

    #[test]
    fn kernel_text_shows_share_of_non_idle_samples() {
        let t = kernel_text(&profile());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "samples 1000 (kernel 30.0%, user 10.0%, idle 60.0%), shift 4"
        );
        assert_eq!(lines[1], "  samples  share      load  function");
        assert_eq!(lines[2], "      200  50.0%    3.1250  clear_user_rep_good");
        assert_eq!(
            lines[4],
            "       15   3.8%    0.0293  vring_interrupt [virtio_ring]"
        );
        assert_eq!(lines[5], "        5   1.2%         -  *unknown*");
    }

    #[test]
    fn status_text_is_exact() {
        use jp_proto::v1::{KernelStatus, ProgramStats};
        let s = Status {
            version: "0.1.0".into(),
            uptime_ms: 65_000,
            kernel: Some(KernelStatus {
                attached: true,
                programs: vec![ProgramStats {
                    name: "jp_sample".into(),
                    attached_to: "perf_event cpu-clock 997 Hz on CPUs 0-1".into(),
                    run_count: 11_581,
                    run_time_ns: 7_570_000,
                }],
                cpus: vec![0, 1],
                frequency_hz: 997,
                shift: 4,
                text_start: 0xffff_ffff_8100_0000,
                text_end: 0xffff_ffff_8220_bb08,
                samples: Some(ModeSamples {
                    total: 200,
                    kernel: 100,
                    user: 50,
                    idle: 50,
                }),
                events_lost: 0,
                last_read_unix_ms: 1,
                reset_unix_ms: 0,
                bpf_stats_enabled: false,
                irq_ip_samples_per_second: 100,
            }),
            jvm: None,
        };
        let expected = concat!(
            "jpd 0.1.0, up 1m 5s\n",
            "kernel: 2 CPUs (0-1), cpu-clock at 997 Hz, shift 4 (16-byte buckets)\n",
            "  text     0xffffffff81000000-0xffffffff8220bb08\n",
            "  samples  200 (kernel 50.0%, user 25.0%, idle 25.0%) since start\n",
            "  lost     0 events\n",
            "  irq ip   at most 100 stack walks/s per CPU\n",
            "  bpf stats off (run times below do not move; kernel.bpf_stats turns them on)\n",
            "  program                runs   run time   per run  attached to\n",
            "  jp_sample             11581    7.57 ms    653 ns  perf_event cpu-clock 997 Hz on CPUs 0-1\n",
        );
        assert_eq!(status_text(&s), expected);
        let v = status_json(&s);
        assert_eq!(v["kernel"]["programs"][0]["run_time_ns"], 7_570_000);
        assert_eq!(v["kernel"]["bpf_stats_enabled"], false);
        assert_eq!(v["kernel"]["irq_ip_samples_per_second"], 100);
        assert_eq!(v["kernel"]["samples"]["idle"], 50);
    }

    #[test]
    fn helpers() {
        assert_eq!(cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(uptime(3_723_000), "1h 2m 3s");
        assert_eq!(uptime(59_999), "59s");
        assert_eq!(duration_ns(950), "950 ns");
        assert_eq!(duration_ns(12_345), "12.3 us");
        assert_eq!(duration_ns(4_560_000), "4.56 ms");
        assert_eq!(duration_ns(7_890_000_000), "7.89 s");
    }
}
