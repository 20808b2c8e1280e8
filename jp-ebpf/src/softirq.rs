//! Softirq count and time per vector (`softirq_entry`/`softirq_exit` raw tracepoints).
use aya_ebpf::{macros::raw_tracepoint, maps::Array, programs::RawTracePointContext};
use jp_common::{maps, CpuSoftirqs, SoftirqStats, NR_SOFTIRQS, SOFTIRQ_SLOTS};

use crate::common::{cpu_slot, jp_map, now_ns, MMAPABLE};

jp_map!(
    /// Per CPU, per vector, with the entry time of the run in progress; slot `NR_SOFTIRQS`
    /// counts vector numbers out of range. Entry and exit touch one vector's slot only (one
    /// map lookup each). One value per CPU; jpd sizes it at load.
    JP_SIRQ_STATS: Array<CpuSoftirqs> = maps::SIRQ_STATS, MMAPABLE
);

/// This CPU's slot of vector `slot` (`slot <= NR_SOFTIRQS`).
#[inline(always)]
fn vector(slot: u32) -> Option<*mut SoftirqStats> {
    let cpu = cpu_slot(&JP_SIRQ_STATS)?;
    // SAFETY: this CPU's value, valid for the program's run; softirq programs do not
    // nest on one CPU.
    unsafe { &mut (*cpu).vectors }
        .get_mut((slot & (SOFTIRQ_SLOTS - 1)) as usize)
        .map(|v| v as *mut SoftirqStats)
}

// TP_PROTO(unsigned int vec_nr)
#[raw_tracepoint(tracepoint = "softirq_entry")]
pub fn jp_sirq_entry(ctx: RawTracePointContext) -> i32 {
    let vec: u32 = ctx.arg(0);
    let slot = if vec < NR_SOFTIRQS { vec } else { NR_SOFTIRQS };
    if let Some(s) = vector(slot) {
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
    let Some(s) = vector(vec) else {
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
