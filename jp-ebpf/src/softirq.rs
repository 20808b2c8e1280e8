//! Softirq count and time per vector (`softirq_entry`/`softirq_exit` raw tracepoints).
use aya_ebpf::{
    macros::{map, raw_tracepoint},
    maps::PerCpuArray,
    programs::RawTracePointContext,
};
use jp_common::{SoftirqStats, NR_SOFTIRQS};

use crate::common::now_ns;

/// Per vector, with the entry time of the run in progress; slot `NR_SOFTIRQS` counts
/// vector numbers out of range. Entry and exit touch this one slot only (one map
/// lookup each; the entry times used to be a second map).
#[map]
static JP_SIRQ_STATS: PerCpuArray<SoftirqStats> = PerCpuArray::with_max_entries(NR_SOFTIRQS + 1, 0);

// TP_PROTO(unsigned int vec_nr)
#[raw_tracepoint(tracepoint = "softirq_entry")]
pub fn jp_sirq_entry(ctx: RawTracePointContext) -> i32 {
    let vec: u32 = ctx.arg(0);
    let slot = if vec < NR_SOFTIRQS { vec } else { NR_SOFTIRQS };
    if let Some(s) = JP_SIRQ_STATS.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot; softirq programs do not nest on one CPU.
        unsafe {
            (*s).count += 1;
            (*s).start_ns = now_ns();
        }
    }
    0
}

#[raw_tracepoint(tracepoint = "softirq_exit")]
pub fn jp_sirq_exit(ctx: RawTracePointContext) -> i32 {
    let vec: u32 = ctx.arg(0);
    if vec >= NR_SOFTIRQS {
        return 0;
    }
    let Some(s) = JP_SIRQ_STATS.get_ptr_mut(vec) else {
        return 0;
    };
    // SAFETY: this CPU's slot; softirq programs do not nest on one CPU.
    unsafe {
        let start = (*s).start_ns;
        if start == 0 {
            // Started before we attached: counted at entry time or not at all, never timed.
            return 0;
        }
        (*s).start_ns = 0;
        (*s).time_ns += now_ns().saturating_sub(start);
    }
    0
}
