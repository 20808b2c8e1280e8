//! From the store's view to the API's messages. Pure functions: the service and
//! the Watch stream call them, tests compare their output exactly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jp_proto::v1 as pb;

use crate::store::kernel::profile::{self, Profile};
use crate::store::kernel::symbols::Symbols;
use crate::store::kernel::{softirq_name, CollectorStatus, KernelView, ModeCounts};

pub fn unix_ms(t: Option<SystemTime>) -> u64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub fn modes(m: &ModeCounts) -> pb::ModeSamples {
    pb::ModeSamples {
        total: m.total(),
        kernel: m.kernel,
        user: m.user,
        idle: m.idle,
    }
}

pub fn status(view: &KernelView, version: &str, uptime: Duration) -> pb::Status {
    let s: &CollectorStatus = &view.status;
    pb::Status {
        version: version.to_string(),
        uptime_ms: u64::try_from(uptime.as_millis()).unwrap_or(u64::MAX),
        kernel: Some(pb::KernelStatus {
            attached: s.last_read.is_some(),
            programs: s
                .programs
                .iter()
                .map(|p| pb::ProgramStats {
                    name: p.name.clone(),
                    attached_to: p.attached_to.clone(),
                    run_count: p.run_count,
                    run_time_ns: p.run_time_ns,
                })
                .collect(),
            cpus: s.cpus.clone(),
            frequency_hz: s.frequency_hz,
            shift: s.shift,
            text_start: s.text_start,
            text_end: s.text_end,
            samples: Some(modes(&view.counts.modes)),
            events_lost: s.events_lost,
            last_read_unix_ms: unix_ms(s.last_read),
            reset_unix_ms: unix_ms(view.reset_at),
            bpf_stats_enabled: s.bpf_stats_enabled,
            irq_ip_samples_per_second: s.irq_ip_samples_per_second,
        }),
        // Filled by the service: from the JVM store, the refusal counts and the
        // watchdog's view of jpd's subsystems.
        jvm: None,
        refusals: Vec::new(),
        subsystems: Vec::new(),
    }
}

/// The symbolized histogram of `source`; without symbols (the collector has not
/// loaded them yet) every sample is unknown.
pub fn profile_of(view: &KernelView, source: pb::ProfileSource) -> Profile {
    let c = &view.counts;
    let (buckets, others) = match source {
        pb::ProfileSource::Timer => (&c.buckets, &c.other_ips),
        pb::ProfileSource::IrqEntry => (&c.irq_buckets, &c.irq_other_ips),
    };
    match &view.symbols {
        Some(symbols) => profile::aggregate(buckets, others, symbols, view.status.shift),
        None => Profile {
            unknown: buckets.values().chain(others.values()).sum(),
            ..Profile::default()
        },
    }
}

fn sorted_pairs(m: &std::collections::HashMap<u64, u64>) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = m.iter().map(|(&k, &n)| (k, n)).collect();
    v.sort_unstable();
    v
}

pub fn kernel_profile_message(
    view: &KernelView,
    req: &pb::GetKernelProfileRequest,
) -> pb::KernelProfile {
    let source = pb::ProfileSource::try_from(req.source).unwrap_or(pb::ProfileSource::Timer);
    let p = profile_of(view, source);
    let top = if req.top_n == 0 {
        p.functions.len()
    } else {
        req.top_n as usize
    };
    let c = &view.counts;
    let mode_counts = match source {
        pb::ProfileSource::Timer => &c.modes,
        pb::ProfileSource::IrqEntry => &c.irq_modes,
    };
    let (buckets, others) = match (req.include_buckets, source) {
        (false, _) => (Vec::new(), Vec::new()),
        (true, pb::ProfileSource::Timer) => (sorted_pairs(&c.buckets), sorted_pairs(&c.other_ips)),
        (true, pb::ProfileSource::IrqEntry) => {
            (sorted_pairs(&c.irq_buckets), sorted_pairs(&c.irq_other_ips))
        }
    };
    let (text_start, text_end) = text_range(view);
    pb::KernelProfile {
        source: source as i32,
        samples: Some(modes(mode_counts)),
        shift: view.status.shift,
        text_start,
        text_end,
        functions: p
            .top(top)
            .iter()
            .map(|f| pb::KernelFunction {
                name: f.name.clone(),
                module: f.module.clone(),
                address: f.addr,
                size: f.len,
                samples: f.samples,
                load: f.load,
            })
            .collect(),
        unknown_samples: p.unknown,
        buckets: buckets
            .into_iter()
            .map(|(index, samples)| pb::Bucket { index, samples })
            .collect(),
        other_ips: others
            .into_iter()
            .map(|(address, samples)| pb::AddressSamples { address, samples })
            .collect(),
        otlp: Vec::new(),
    }
}

/// `_stext`/`_etext`: from the collector's status, else from the symbols.
pub fn text_range(view: &KernelView) -> (u64, u64) {
    let s = &view.status;
    if s.text_end > s.text_start {
        (s.text_start, s.text_end)
    } else {
        view.symbols
            .as_ref()
            .map_or((0, 0), |y| (y.text_start, y.text_end))
    }
}

/// The handler function's name and module; empty name if unknown.
pub fn handler_function(symbols: Option<&Symbols>, addr: u64) -> (String, Option<String>) {
    match symbols.filter(|_| addr != 0).and_then(|s| s.lookup(addr)) {
        Some(sym) => (sym.name.clone(), sym.module.clone()),
        None => (String::new(), None),
    }
}

pub fn irq_stats(view: &KernelView) -> pb::IrqStats {
    let symbols = view.symbols.as_deref();
    let mut irqs: Vec<pb::IrqHandler> = view
        .counts
        .irqs
        .iter()
        .map(|((irq, handler), c)| {
            let (function, function_module) = handler_function(symbols, c.function_addr);
            pb::IrqHandler {
                irq: *irq,
                handler: handler.clone(),
                function,
                function_address: c.function_addr,
                count: c.count,
                time_ns: c.time_ns,
                function_module,
                unhandled: c.unhandled,
            }
        })
        .collect();
    irqs.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.irq.cmp(&b.irq))
            .then_with(|| a.handler.cmp(&b.handler))
    });
    let mut softirqs: Vec<pb::Softirq> = view
        .counts
        .softirqs
        .iter()
        .map(|(&vector, c)| pb::Softirq {
            name: softirq_name(vector),
            vector,
            count: c.count,
            time_ns: c.time_ns,
        })
        .collect();
    softirqs.sort_by_key(|s| s.vector);
    pb::IrqStats { irqs, softirqs }
}
