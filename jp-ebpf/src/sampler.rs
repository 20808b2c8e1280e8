//! Kernel IP sampling on the `cpu-clock` software event (readprofile, seed 002).
use aya_ebpf::{
    macros::{map, perf_event},
    maps::{PerCpuArray, PerCpuHashMap},
    programs::PerfEventContext,
};
use aya_log_ebpf::warn;
use jp_common::mode;

use crate::common::{bump, config, in_idle_task, power_of_two, record_kernel_ip, user_mode};

/// Samples by mode (`jp_common::mode`).
#[map]
static JP_MODES: PerCpuArray<u64> = PerCpuArray::with_max_entries(mode::COUNT, 0);

/// readprofile histogram: `(ip - _stext) >> shift` → samples. 64 Ki distinct buckets
/// (1 MiB of hot kernel text at shift 4); reading walks every hash bucket, so bigger
/// costs jpd CPU on every read. A full map is counted as lost, never silent.
#[map]
static JP_BUCKETS: PerCpuHashMap<u32, u64> = PerCpuHashMap::with_max_entries(1 << 16, 0);

/// Kernel IPs outside `[_stext, _etext)` → samples, by exact address.
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
    bump(&JP_MODES, mode::KERNEL);
    let cfg = config();
    if !record_kernel_ip(&cfg, ip, &JP_BUCKETS, &JP_OTHER_IPS) {
        let lost = bump(&JP_MODES, mode::LOST);
        if power_of_two(lost) {
            warn!(
                &ctx,
                "kernel sample histogram full: {} samples lost on this CPU", lost
            );
        }
    }
    0
}
