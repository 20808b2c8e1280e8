//! `jpctl status`: what jpd has attached, for the kernel and for JVMs, as text or `--json`.

use std::fmt::Write as _;

use jp_proto::v1::{Status, UsdtCollector};

use super::text::printable;
use super::{duration_ns, modes_line, samples_json};

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
        "jvm": status_jvm_json(s),
        "refusals": s.refusals.iter().map(|r| serde_json::json!({
            "subsystem": r.subsystem,
            "reason": r.reason,
            "count": r.count,
        })).collect::<Vec<_>>(),
        "subsystems": s.subsystems.iter().map(|h| serde_json::json!({
            "name": h.name,
            "idle_ms": h.idle_ms,
            "stuck": h.stuck,
            "detail": h.detail,
        })).collect::<Vec<_>>(),
    })
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
    out.push_str(&status_jvm_text(s));
    out.push_str(&refusals_text(s));
    out.push_str(&subsystems_text(s));
    out
}

/// jpd's long-running parts, one line each: making progress, or stuck and why (the
/// watchdog stops feeding systemd then, which restarts jpd). Nothing from a jpd
/// that does not report them.
fn subsystems_text(s: &Status) -> String {
    let mut out = String::new();
    if s.subsystems.is_empty() {
        return out;
    }
    out.push_str("subsystems:\n");
    for h in &s.subsystems {
        let idle = format!("idle {:.1} s", h.idle_ms as f64 / 1000.0);
        let _ = if h.stuck {
            writeln!(
                out,
                "  {:<14} STUCK {idle}: {}",
                printable(&h.name),
                printable(&h.detail)
            )
        } else {
            writeln!(out, "  {:<14} ok    {idle}", printable(&h.name))
        };
    }
    out
}

/// What jpd refused and why, one line a kind; nothing when it refused nothing.
fn refusals_text(s: &Status) -> String {
    let mut out = String::new();
    if s.refusals.is_empty() {
        return out;
    }
    out.push_str("refused:\n");
    for r in &s.refusals {
        let _ = writeln!(
            out,
            "  {:<10} {:<28} {}",
            printable(&r.subsystem),
            printable(&r.reason),
            r.count
        );
    }
    out
}

/// The JVM lines of `jpctl status`; empty when jpd has no JVM status.
pub fn status_jvm_text(s: &Status) -> String {
    let Some(v) = &s.jvm else {
        return String::new();
    };
    let mut out = format!(
        "jvm: {} attached, {} exited and kept\n",
        v.jvms_attached, v.jvms_exited
    );
    let _ = writeln!(
        out,
        "  records  {} ({} bytes), {} lost (sequence gaps), {} malformed",
        v.records, v.bytes, v.lost, v.malformed
    );
    for m in &v.malformed_by_reason {
        let _ = writeln!(out, "    malformed: {} {}", m.records, printable(&m.reason));
    }
    let _ = writeln!(
        out,
        "  probes   {} fired, {} ring buffer full, {} faults, {} too long",
        v.fired, v.ring_full, v.faults, v.too_long
    );
    let _ = writeln!(
        out,
        "  nodes    {} ({} bytes of memory)",
        v.nodes, v.memory_bytes
    );
    if let Some(d) = &v.offcpu_dropped {
        let _ = writeln!(
            out,
            "  offcpu   periods not timed: {} over cap, {} orphans, {} stale, {} unreadable slot, {} lost",
            d.over_cap, d.orphans, d.stale, d.read_failed, d.lost
        );
    }
    match &v.collector {
        None => out.push_str("  usdt     no collector (usdt.enabled = false)\n"),
        Some(c) => collector_text(&mut out, c),
    }
    out
}

/// Why a JVM is or is not seen: the files the probe is attached to, those refused and why.
fn collector_text(out: &mut String, c: &UsdtCollector) {
    let _ = writeln!(
        out,
        "  usdt     {} library file(s), {} process(es), {} scans (last {} us), {} generations written, {} errors",
        c.files.len(),
        c.processes,
        c.scans,
        c.last_scan_us,
        c.generations_written,
        c.errors
    );
    for f in &c.files {
        let users = if f.idle {
            "idle, kept attached".to_string()
        } else {
            format!("{} process(es)", f.processes)
        };
        let _ = writeln!(out, "    attached {} ({users})", printable(&f.path));
    }
    for r in &c.refused {
        let _ = writeln!(
            out,
            "    refused  {}: {}",
            printable(&r.path),
            printable(&r.reason)
        );
    }
    if !c.last_error.is_empty() {
        let _ = writeln!(out, "    last error: {}", printable(&c.last_error));
    }
}

pub fn status_jvm_json(s: &Status) -> serde_json::Value {
    let v = s.jvm.clone().unwrap_or_default();
    serde_json::json!({
        "jvms_attached": v.jvms_attached,
        "jvms_exited": v.jvms_exited,
        "records": v.records,
        "bytes": v.bytes,
        "lost": v.lost,
        "malformed": v.malformed,
        "malformed_by_reason": v.malformed_by_reason.iter().map(|m| serde_json::json!({
            "reason": m.reason,
            "records": m.records,
        })).collect::<Vec<_>>(),
        "fired": v.fired,
        "ring_full": v.ring_full,
        "faults": v.faults,
        "too_long": v.too_long,
        "nodes": v.nodes,
        "memory_bytes": v.memory_bytes,
        "offcpu_dropped": v.offcpu_dropped.as_ref().map(|d| serde_json::json!({
            "over_cap": d.over_cap,
            "orphans": d.orphans,
            "stale": d.stale,
            "read_failed": d.read_failed,
            "lost": d.lost,
        })),
        "collector": v.collector.as_ref().map(|c| serde_json::json!({
            "files": c.files.iter().map(|f| serde_json::json!({
                "path": f.path,
                "probe_sites": f.probe_sites,
                "processes": f.processes,
                "idle": f.idle,
            })).collect::<Vec<_>>(),
            "refused": c.refused.iter().map(|r| serde_json::json!({
                "path": r.path,
                "reason": r.reason,
            })).collect::<Vec<_>>(),
            "processes": c.processes,
            "scans": c.scans,
            "last_scan_us": c.last_scan_us,
            "generations_written": c.generations_written,
            "errors": c.errors,
            "last_error": c.last_error,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_proto::v1::ModeSamples;

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
            refusals: vec![jp_proto::v1::Refusal {
                subsystem: "usdt".into(),
                reason: "rate_limited".into(),
                count: 12,
            }],
            subsystems: vec![
                jp_proto::v1::SubsystemHealth {
                    name: "kernel_reader".into(),
                    idle_ms: 420,
                    stuck: false,
                    detail: String::new(),
                },
                jp_proto::v1::SubsystemHealth {
                    name: "usdt_manager".into(),
                    idle_ms: 7_040,
                    stuck: true,
                    detail: "no progress for 7.0 s (allowed 5.0 s)".into(),
                },
            ],
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
            "refused:\n",
            "  usdt       rate_limited                 12\n",
            "subsystems:\n",
            "  kernel_reader  ok    idle 0.4 s\n",
            "  usdt_manager   STUCK idle 7.0 s: no progress for 7.0 s (allowed 5.0 s)\n",
        );
        assert_eq!(status_text(&s), expected);
        let v = status_json(&s);
        assert_eq!(v["kernel"]["programs"][0]["run_time_ns"], 7_570_000);
        assert_eq!(v["kernel"]["bpf_stats_enabled"], false);
        assert_eq!(v["kernel"]["irq_ip_samples_per_second"], 100);
        assert_eq!(v["kernel"]["samples"]["idle"], 50);
        assert_eq!(v["refusals"][0]["reason"], "rate_limited");
        assert_eq!(v["refusals"][0]["count"], 12);
        assert_eq!(v["subsystems"][1]["name"], "usdt_manager");
        assert_eq!(v["subsystems"][1]["stuck"], true);
        assert_eq!(v["subsystems"][1]["idle_ms"], 7_040);
        assert_eq!(v["subsystems"][0]["detail"], "");
    }

    /// The off-CPU dropped periods: a line and a JSON object when jpd measures time off
    /// CPU, nothing when it does not.
    #[test]
    fn status_shows_off_cpu_periods_not_timed_only_when_measured() {
        let mut s = Status {
            jvm: Some(jp_proto::v1::JvmStatus::default()),
            ..Default::default()
        };
        assert!(!status_jvm_text(&s).contains("offcpu"));
        assert_eq!(
            status_jvm_json(&s)["offcpu_dropped"],
            serde_json::Value::Null
        );
        if let Some(v) = s.jvm.as_mut() {
            v.offcpu_dropped = Some(jp_proto::v1::OffcpuDropped {
                over_cap: 1,
                orphans: 2,
                stale: 3,
                read_failed: 4,
                lost: 5,
            });
        }
        let text = status_jvm_text(&s);
        assert_eq!(
            text.lines().find(|l| l.contains("offcpu")),
            Some("  offcpu   periods not timed: 1 over cap, 2 orphans, 3 stale, 4 unreadable slot, 5 lost")
        );
        assert_eq!(
            status_jvm_json(&s)["offcpu_dropped"],
            serde_json::json!({"over_cap": 1, "orphans": 2, "stale": 3, "read_failed": 4, "lost": 5})
        );
    }

    #[test]
    fn cpu_lists_and_uptimes() {
        assert_eq!(cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(uptime(3_723_000), "1h 2m 3s");
        assert_eq!(uptime(59_999), "59s");
    }

    #[test]
    fn status_names_attached_idle_and_refused_library_files() {
        let s = Status {
            jvm: Some(jp_proto::v1::JvmStatus {
                collector: Some(UsdtCollector {
                    files: vec![
                        jp_proto::v1::UsdtFile {
                            path: "/opt/jp/lib/jp/libjpagent.so".into(),
                            probe_sites: 1,
                            processes: 2,
                            idle: false,
                        },
                        jp_proto::v1::UsdtFile {
                            path: "/old/libjpagent.so".into(),
                            probe_sites: 1,
                            processes: 0,
                            idle: true,
                        },
                    ],
                    refused: vec![jp_proto::v1::UsdtRefusedFile {
                        path: "/tmp/libjpagent.so".into(),
                        reason: "no USDT probe jp:record".into(),
                    }],
                    processes: 2,
                    scans: 9,
                    last_scan_us: 812,
                    generations_written: 3,
                    errors: 0,
                    last_error: String::new(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = status_jvm_text(&s);
        let usdt: Vec<&str> = text.lines().skip(4).collect();
        assert_eq!(
            usdt,
            [
                "  usdt     2 library file(s), 2 process(es), 9 scans (last 812 us), 3 generations written, 0 errors",
                "    attached /opt/jp/lib/jp/libjpagent.so (2 process(es))",
                "    attached /old/libjpagent.so (idle, kept attached)",
                "    refused  /tmp/libjpagent.so: no USDT probe jp:record",
            ]
        );
        let json = status_jvm_json(&s);
        assert_eq!(json["collector"]["files"][1]["idle"], true);
        assert_eq!(
            json["collector"]["refused"][0]["reason"],
            "no USDT probe jp:record"
        );
    }
}
