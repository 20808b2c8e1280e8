//! The kernel half of `/metrics` and jpd's own identity, written as Prometheus text
//! (`prometheus.rs`), named by Prometheus conventions — `jp_` prefix, `_total`
//! counters, seconds — with bounded labels only. IRQ handlers (`irq`, `handler`) and
//! softirq vectors are sets the hardware and kernel fix; functions, methods, threads
//! and pids are never labels (they are what the pprof endpoints are for).
//!
//! Counters come from the store's cumulative totals, so a `jpctl reset` never makes
//! them go backwards.

use std::time::{SystemTime, UNIX_EPOCH};

use jp_common::maps::{self, MapSpec};

use super::prometheus::Family;
use crate::store::kernel::softirq_name;
use crate::store::kernel::{
    CollectorStatus, IrqHandlerCounts, KernelCounts, KernelView, ModeCounts,
};

/// The eBPF hash maps' sizes, for the fill gauges.
/// (The core-text counters are arrays sized from the kernel's text: never full.)
pub const MAP_CAPACITY: [(&str, u64); 3] = [
    capacity(maps::OTHER_IPS),
    capacity(maps::IRQ_OTHERS),
    capacity(maps::IRQ_STATS),
];

const fn capacity(map: MapSpec) -> (&'static str, u64) {
    (map.name, map.max_entries as u64)
}

/// What is not in the store: the daemon's identity.
pub struct Process {
    pub version: &'static str,
    pub started: SystemTime,
}

fn seconds_since_epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The exposition for `totals` (the store's [`kernel_totals`](crate::store::kernel::KernelStore::kernel_totals)).
pub fn render(totals: &KernelView, process: &Process) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let c = &totals.counts;
    let s = &totals.status;
    process_metrics(&mut out, process);
    sampler_metrics(&mut out, &c.modes, s);
    irq_metrics(&mut out, c);
    softirq_metrics(&mut out, c);
    collector_health(&mut out, s);
    program_metrics(&mut out, s);
    map_fill(&mut out, c);
    out
}

/// jpd's version and start.
fn process_metrics(out: &mut String, process: &Process) {
    let name = "jp_build_info";
    Family::header(out, name, "gauge", "jpd's version; always 1.").sample(
        name,
        &[("version", process.version)],
        1.0,
    );
    let name = "jp_start_time_seconds";
    Family::header(
        out,
        name,
        "gauge",
        "When jpd started, seconds since the epoch.",
    )
    .sample(name, &[], seconds_since_epoch(process.started));
}

/// The cpu-clock samples by mode, and how the sampler runs.
fn sampler_metrics(out: &mut String, modes: &ModeCounts, s: &CollectorStatus) {
    let name = "jp_kernel_samples_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "cpu-clock samples by the mode the CPU was in (idle: the idle task).",
    );
    for (mode, n) in [
        ("kernel", modes.kernel),
        ("user", modes.user),
        ("idle", modes.idle),
    ] {
        f.sample(name, &[("mode", mode)], n as f64);
    }
    let name = "jp_kernel_sampling_frequency_hertz";
    Family::header(out, name, "gauge", "cpu-clock samples per second per CPU.").sample(
        name,
        &[],
        s.frequency_hz as f64,
    );
    let name = "jp_kernel_cpus";
    Family::header(out, name, "gauge", "CPUs the sampler is attached to.").sample(
        name,
        &[],
        s.cpus.len() as f64,
    );
}

/// Hard-IRQ handlers, by IRQ line and handler name.
fn irq_metrics(out: &mut String, c: &KernelCounts) {
    let mut irqs: Vec<_> = c.irqs.iter().collect();
    irqs.sort_by(|a, b| a.0.cmp(b.0));
    for (name, help, value) in [
        (
            "jp_irq_handled_total",
            "Hard-IRQ handler invocations that handled the interrupt.",
            (|h: &IrqHandlerCounts| h.count as f64) as fn(&_) -> f64,
        ),
        (
            "jp_irq_unhandled_total",
            "Hard-IRQ handler invocations that returned IRQ_NONE.",
            |h| h.unhandled as f64,
        ),
        (
            "jp_irq_handler_seconds_total",
            "Time spent in hard-IRQ handlers.",
            |h| ns_to_s(h.time_ns),
        ),
    ] {
        let mut f = Family::header(out, name, "counter", help);
        for ((irq, handler), h) in &irqs {
            f.sample(
                name,
                &[("irq", &irq.to_string()), ("handler", handler)],
                value(h),
            );
        }
    }
}

/// Softirqs, by vector.
fn softirq_metrics(out: &mut String, c: &KernelCounts) {
    let mut vectors: Vec<_> = c.softirqs.iter().collect();
    vectors.sort_by_key(|(v, _)| **v);
    let name = "jp_softirqs_total";
    let mut f = Family::header(out, name, "counter", "Softirqs run, by vector.");
    for (v, sc) in &vectors {
        f.sample(name, &[("vector", &softirq_name(**v))], sc.count as f64);
    }
    let name = "jp_softirq_seconds_total";
    let mut f = Family::header(out, name, "counter", "Time spent in softirqs, by vector.");
    for (v, sc) in &vectors {
        f.sample(name, &[("vector", &softirq_name(**v))], ns_to_s(sc.time_ns));
    }
}

/// Whether the collector keeps up: lost events, its last read, the kernel's switches.
fn collector_health(out: &mut String, s: &CollectorStatus) {
    let name = "jp_kernel_events_lost_total";
    Family::header(
        out,
        name,
        "counter",
        "Kernel events jp could not record (full maps, failed reads).",
    )
    .sample(name, &[], s.events_lost as f64);
    let name = "jp_kernel_last_read_timestamp_seconds";
    Family::header(
        out,
        name,
        "gauge",
        "When jpd last read the eBPF maps, seconds since the epoch.",
    )
    .sample(name, &[], s.last_read.map_or(0.0, seconds_since_epoch));

    let name = "jp_kernel_bpf_stats_enabled";
    Family::header(
        out,
        name,
        "gauge",
        "1 while the kernel's BPF run-time statistics are on (the run-time series move only then; every BPF program on the host pays for them).",
    )
    .sample(name, &[], f64::from(u8::from(s.bpf_stats_enabled)));
    let name = "jp_kernel_irq_ip_samples_per_second_max";
    Family::header(
        out,
        name,
        "gauge",
        "Bound on the interrupted-IP stack walks at hard-IRQ entry, per CPU (0: off).",
    )
    .sample(name, &[], f64::from(s.irq_ip_samples_per_second));
}

/// Runs and run time of jp's eBPF programs, by program.
fn program_metrics(out: &mut String, s: &CollectorStatus) {
    let name = "jp_bpf_program_runs_total";
    let mut f = Family::header(out, name, "counter", "Runs of jp's eBPF programs.");
    for p in &s.programs {
        f.sample(name, &[("program", &p.name)], p.run_count as f64);
    }
    let name = "jp_bpf_program_run_seconds_total";
    let mut f = Family::header(
        out,
        name,
        "counter",
        "Run time the kernel accounted to jp's eBPF programs.",
    );
    for p in &s.programs {
        f.sample(name, &[("program", &p.name)], ns_to_s(p.run_time_ns));
    }
}

/// How full jp's eBPF hash maps are, against [`MAP_CAPACITY`].
fn map_fill(out: &mut String, c: &KernelCounts) {
    let entries = [
        c.other_ips.len(),
        c.irq_other_ips.len(),
        // One map entry per (irq, handler) and CPU key; the store merges CPUs.
        c.irqs.len(),
    ];
    let name = "jp_kernel_map_entries";
    let mut f = Family::header(out, name, "gauge", "Keys in jp's eBPF hash maps.");
    for ((map, _), n) in MAP_CAPACITY.iter().zip(entries) {
        f.sample(name, &[("map", map)], n as f64);
    }
    let name = "jp_kernel_map_max_entries";
    let mut f = Family::header(out, name, "gauge", "Capacity of jp's eBPF hash maps.");
    for (map, cap) in MAP_CAPACITY {
        f.sample(name, &[("map", map)], cap as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kernel::{
        CollectorStatus, IrqHandlerCounts, KernelCounts, ModeCounts, ProgramStats, SoftirqCounts,
    };
    use std::time::Duration;

    #[test]
    fn exposition_is_exact() {
        let mut counts = KernelCounts {
            modes: ModeCounts {
                kernel: 10,
                user: 20,
                idle: 3,
            },
            ..KernelCounts::default()
        };
        counts.buckets.insert(1, 9);
        counts.other_ips.insert(0xffff_ffff_c000_0000, 1);
        counts.irqs.insert(
            (36, "virtio1-req.0".into()),
            IrqHandlerCounts {
                count: 685,
                unhandled: 2,
                time_ns: 4_390_000,
                function_addr: 1,
            },
        );
        counts.irqs.insert(
            (9, "acpi \"x\"".into()),
            IrqHandlerCounts {
                count: 1,
                unhandled: 0,
                time_ns: 1_500,
                function_addr: 0,
            },
        );
        counts.softirqs.insert(
            1,
            SoftirqCounts {
                count: 1102,
                time_ns: 8_030_000,
            },
        );
        let view = KernelView {
            counts,
            status: CollectorStatus {
                programs: vec![ProgramStats {
                    name: "jp_sample".into(),
                    attached_to: "x".into(),
                    run_count: 38655,
                    run_time_ns: 23_480_000,
                }],
                cpus: vec![0, 1],
                frequency_hz: 997,
                shift: 4,
                events_lost: 5,
                last_read: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_500)),
                bpf_stats_enabled: true,
                irq_ip_samples_per_second: 100,
                ..CollectorStatus::default()
            },
            symbols: None,
            reset_at: None,
        };
        let text = render(
            &view,
            &Process {
                version: "0.1.0",
                started: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            },
        );
        let expected = r#"# HELP jp_build_info jpd's version; always 1.
# TYPE jp_build_info gauge
jp_build_info{version="0.1.0"} 1
# HELP jp_start_time_seconds When jpd started, seconds since the epoch.
# TYPE jp_start_time_seconds gauge
jp_start_time_seconds 1700000000
# HELP jp_kernel_samples_total cpu-clock samples by the mode the CPU was in (idle: the idle task).
# TYPE jp_kernel_samples_total counter
jp_kernel_samples_total{mode="kernel"} 10
jp_kernel_samples_total{mode="user"} 20
jp_kernel_samples_total{mode="idle"} 3
# HELP jp_kernel_sampling_frequency_hertz cpu-clock samples per second per CPU.
# TYPE jp_kernel_sampling_frequency_hertz gauge
jp_kernel_sampling_frequency_hertz 997
# HELP jp_kernel_cpus CPUs the sampler is attached to.
# TYPE jp_kernel_cpus gauge
jp_kernel_cpus 2
# HELP jp_irq_handled_total Hard-IRQ handler invocations that handled the interrupt.
# TYPE jp_irq_handled_total counter
jp_irq_handled_total{irq="9",handler="acpi \"x\""} 1
jp_irq_handled_total{irq="36",handler="virtio1-req.0"} 685
# HELP jp_irq_unhandled_total Hard-IRQ handler invocations that returned IRQ_NONE.
# TYPE jp_irq_unhandled_total counter
jp_irq_unhandled_total{irq="9",handler="acpi \"x\""} 0
jp_irq_unhandled_total{irq="36",handler="virtio1-req.0"} 2
# HELP jp_irq_handler_seconds_total Time spent in hard-IRQ handlers.
# TYPE jp_irq_handler_seconds_total counter
jp_irq_handler_seconds_total{irq="9",handler="acpi \"x\""} 0.0000015
jp_irq_handler_seconds_total{irq="36",handler="virtio1-req.0"} 0.00439
# HELP jp_softirqs_total Softirqs run, by vector.
# TYPE jp_softirqs_total counter
jp_softirqs_total{vector="TIMER"} 1102
# HELP jp_softirq_seconds_total Time spent in softirqs, by vector.
# TYPE jp_softirq_seconds_total counter
jp_softirq_seconds_total{vector="TIMER"} 0.00803
# HELP jp_kernel_events_lost_total Kernel events jp could not record (full maps, failed reads).
# TYPE jp_kernel_events_lost_total counter
jp_kernel_events_lost_total 5
# HELP jp_kernel_last_read_timestamp_seconds When jpd last read the eBPF maps, seconds since the epoch.
# TYPE jp_kernel_last_read_timestamp_seconds gauge
jp_kernel_last_read_timestamp_seconds 1700000000.5
# HELP jp_kernel_bpf_stats_enabled 1 while the kernel's BPF run-time statistics are on (the run-time series move only then; every BPF program on the host pays for them).
# TYPE jp_kernel_bpf_stats_enabled gauge
jp_kernel_bpf_stats_enabled 1
# HELP jp_kernel_irq_ip_samples_per_second_max Bound on the interrupted-IP stack walks at hard-IRQ entry, per CPU (0: off).
# TYPE jp_kernel_irq_ip_samples_per_second_max gauge
jp_kernel_irq_ip_samples_per_second_max 100
# HELP jp_bpf_program_runs_total Runs of jp's eBPF programs.
# TYPE jp_bpf_program_runs_total counter
jp_bpf_program_runs_total{program="jp_sample"} 38655
# HELP jp_bpf_program_run_seconds_total Run time the kernel accounted to jp's eBPF programs.
# TYPE jp_bpf_program_run_seconds_total counter
jp_bpf_program_run_seconds_total{program="jp_sample"} 0.02348
# HELP jp_kernel_map_entries Keys in jp's eBPF hash maps.
# TYPE jp_kernel_map_entries gauge
jp_kernel_map_entries{map="JP_OTHER_IPS"} 1
jp_kernel_map_entries{map="JP_IRQ_OTHERS"} 0
jp_kernel_map_entries{map="JP_IRQ_STATS"} 2
# HELP jp_kernel_map_max_entries Capacity of jp's eBPF hash maps.
# TYPE jp_kernel_map_max_entries gauge
jp_kernel_map_max_entries{map="JP_OTHER_IPS"} 8192
jp_kernel_map_max_entries{map="JP_IRQ_OTHERS"} 2048
jp_kernel_map_max_entries{map="JP_IRQ_STATS"} 512
"#;
        assert_eq!(text, expected);
    }
}
