//! Kernel IP sampling on the `cpu-clock` software event (readprofile, seed 002).
use aya_ebpf::{
    macros::{map, perf_event},
    maps::{Array, PerCpuArray, PerCpuHashMap},
    programs::PerfEventContext,
};
use aya_log_ebpf::warn;
use jp_common::{mode, TextBlock};

use crate::common::{
    bump, config, in_idle_task, power_of_two, record_kernel_ip, user_mode, TextCounters, MMAPABLE,
};

/// Samples by mode (`jp_common::mode`).
#[map]
static JP_MODES: PerCpuArray<u64> = PerCpuArray::with_max_entries(mode::COUNT, 0);

/// readprofile's array: bucket `(ip - _stext) >> shift` → samples, all CPUs (see
/// `TextCounters`). jpd sets the sizes from the running kernel before loading.
#[map]
static JP_TEXT_COUNTS: Array<TextBlock> = Array::with_max_entries(1, MMAPABLE);

/// Dirty flag per page of `JP_TEXT_COUNTS`.
#[map]
static JP_TEXT_DIRTY: Array<u64> = Array::with_max_entries(1, MMAPABLE);

static TEXT: TextCounters = TextCounters {
    counts: &JP_TEXT_COUNTS,
    dirty: &JP_TEXT_DIRTY,
};

/// Kernel IPs outside `[_stext, _etext)` → samples, by exact address. A full map is
/// counted as lost, never silent.
#[map]
static JP_OTHER_IPS: PerCpuHashMap<u64, u64> = PerCpuHashMap::with_max_entries(1 << 13, 0);

#[perf_event]
pub fn jp_sample(ctx: PerfEventContext) -> u32 {
    // SAFETY: the context of a perf_event program is `bpf_perf_event_data`; the
    // verifier rewrites these fixed-offset reads of its `regs` (the interrupted context).
    let (ip, cs) = unsafe { ((*ctx.ctx).regs.rip, (*ctx.ctx).regs.cs) };
    if user_mode(cs) {
        bump(&JP_MODES, mode::USER);
        return 0;
    }
    if in_idle_task() {
        bump(&JP_MODES, mode::IDLE);
        return 0;
    }
    let cfg = config();
    let lost = record_kernel_ip(&cfg, ip, &TEXT, &JP_OTHER_IPS, &JP_MODES);
    if power_of_two(lost) {
        warn!(
            &ctx,
            "kernel sample not recorded: {} samples lost on this CPU", lost
        );
    }
    0
}
