//! Kernel IP sampling on the `cpu-clock` software event (readprofile-style buckets of core text).
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::perf_event,
    maps::{Array, HashMap, PerCpuHashMap},
    programs::PerfEventContext,
};
use aya_log_ebpf::warn;
use jp_common::{ctx_kind, maps, mode, CpuModes, CtxKey, JvmThread, ProbeConfig, TextBlock};

use crate::common::{
    config, count_mode, current_context, jp_map, power_of_two, record_kernel_ip, row_slot,
    this_cpu, user_mode, TextCounters, MMAPABLE,
};

jp_map!(
    /// Samples by mode (`jp_common::mode`), one value per CPU; jpd sizes it at load.
    JP_MODES: Array<CpuModes> = maps::MODES, MMAPABLE
);

jp_map!(
    /// readprofile's array: bucket `(ip - _stext) >> shift` → samples, all CPUs (see
    /// `TextCounters`). jpd sets the sizes from the running kernel before loading.
    JP_TEXT_COUNTS: Array<TextBlock> = maps::TEXT_COUNTS, MMAPABLE
);

jp_map!(
    /// Dirty flag per page of `JP_TEXT_COUNTS`.
    JP_TEXT_DIRTY: Array<u64> = maps::TEXT_DIRTY, MMAPABLE
);

static TEXT: TextCounters = TextCounters {
    counts: &JP_TEXT_COUNTS,
    dirty: &JP_TEXT_DIRTY,
};

jp_map!(
    /// Kernel IPs outside `[_stext, _etext)` → samples, by exact address. A full map is
    /// counted as lost, never silent.
    JP_OTHER_IPS: PerCpuHashMap<u64, u64> = maps::OTHER_IPS, 0
);

jp_map!(
    /// JVMs whose threads the sampler counts (tgid → 1), written by jpd: the one lookup that
    /// every non-idle sample pays for the join.
    pub(crate) JP_JVM_PIDS: HashMap<u32, u32> = maps::JVM_PIDS, 0
);

jp_map!(
    /// Threads with a context slot, by `pid_tgid`, written by jpd from the agents'
    /// `KIND_THREAD` records.
    pub(crate) JP_JVM_THREADS: HashMap<u64, JvmThread> = maps::JVM_THREADS, 0
);

jp_map!(
    /// Samples of registered JVMs by context (or by thread name), see `jp_common::ctx_kind`:
    /// a log per CPU, `ctx_log_mask + 1` slots each, CPU after CPU, that jpd maps and drains
    /// every pass. One slot written per sample, where a hash map of counts took a hash of the
    /// 32-byte key and a bucket walk over cold lines, and filled up for good with the
    /// contexts of a long-running JVM. jpd sizes it at load so that a pass never finds its
    /// slots overwritten, and counts those it would.
    JP_CTX_LOG: Array<CtxKey> = maps::CTX_LOG, MMAPABLE
);

#[perf_event]
pub fn jp_sample(ctx: PerfEventContext) -> u32 {
    // SAFETY: the context of a perf_event program is `bpf_perf_event_data`; the
    // verifier rewrites these fixed-offset reads of its `regs` (the interrupted context).
    let (ip, cs) = unsafe { ((*ctx.ctx).regs.rip, (*ctx.ctx).regs.cs) };
    let pid_tgid = bpf_get_current_pid_tgid();
    let user = user_mode(cs);
    let cfg = config();
    if user {
        count_mode(&JP_MODES, mode::USER);
    } else if pid_tgid as u32 == 0 {
        // The idle task (pid 0, one "swapper" per CPU).
        count_mode(&JP_MODES, mode::IDLE);
        return 0;
    } else {
        let lost = record_kernel_ip(&cfg, ip, &TEXT, &JP_OTHER_IPS, &JP_MODES);
        if power_of_two(lost) {
            warn!(
                &ctx,
                "kernel sample not recorded: {} samples lost on this CPU", lost
            );
        }
    }
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: a plain lookup; the value is only compared against None.
    if unsafe { JP_JVM_PIDS.get(&tgid) }.is_some() {
        join_context(&cfg, pid_tgid, user, ip);
    }
    0
}

/// Counts a sample of a registered JVM under the interrupted thread's current context
/// (read from its slot), or under the thread's name when it has no slot.
#[inline(always)]
fn join_context(cfg: &ProbeConfig, pid_tgid: u64, user: bool, ip: u64) {
    let tgid = (pid_tgid >> 32) as u32;
    let mut key = CtxKey {
        tgid,
        ..CtxKey::default()
    };
    // SAFETY: the value is copied out at once; jpd may replace it, never frees it under us.
    let thread = unsafe { JP_JVM_THREADS.get(&pid_tgid) }.copied();
    match thread.map(|t| (t, current_context(&t))) {
        // A thread in the kernel whose slot cannot be read is typically exiting: after
        // exit_mm it has no user memory left (32 threads ending at once showed such
        // failures). Its name counts it, like a thread without a slot. In user mode a
        // failed read is an anomaly, counted as such.
        Some((t, None)) if user => {
            key.stream = t.stream;
            key.kind = ctx_kind::READ_FAILED;
        }
        Some((t, Some(id))) => {
            key.stream = t.stream;
            key.id = id;
            if user {
                key.kind = ctx_kind::USER;
            } else {
                key.kind = ctx_kind::KERNEL;
                key.kip = kernel_bucket_ip(cfg, ip);
            }
        }
        _ => {
            key.kind = if user {
                ctx_kind::THREAD_USER
            } else {
                ctx_kind::THREAD_KERNEL
            };
            if let Ok(comm) = bpf_get_current_comm() {
                key.stream = u64::from_le_bytes([
                    comm[0], comm[1], comm[2], comm[3], comm[4], comm[5], comm[6], comm[7],
                ]);
                key.id = u64::from_le_bytes([
                    comm[8], comm[9], comm[10], comm[11], comm[12], comm[13], comm[14], comm[15],
                ]);
            }
        }
    }
    if !log_sample(cfg.ctx_log_mask, &key) {
        count_mode(&JP_MODES, mode::JVM_LOST);
    }
}

/// Writes `key` to this CPU's next slot of `JP_CTX_LOG` and then counts it in
/// `mode::JVM`, which is the write position; false if there is no such slot.
#[inline(always)]
fn log_sample(mask: u32, key: &CtxKey) -> bool {
    let cpu = this_cpu();
    let Some(modes) = JP_MODES.get_ptr_mut(cpu) else {
        return false;
    };
    // SAFETY: this CPU's value, see `count_mode`.
    let counter = unsafe { core::ptr::addr_of_mut!((*modes).counts[mode::JVM as usize]) };
    // SAFETY: as above.
    let n = unsafe { core::ptr::read_volatile(counter) };
    let Some(slot) = row_slot(&JP_CTX_LOG, cpu, mask.wrapping_add(1), n as u32 & mask) else {
        return false;
    };
    // SAFETY: a slot of this CPU's part of the log, written only here, on this CPU, by
    // programs that do not nest on one CPU. Volatile, so that the slot is written before
    // the count that publishes it (jpd reads the count first, then the slots below it).
    unsafe {
        core::ptr::write_volatile(slot, *key);
        core::ptr::write_volatile(counter, n.wrapping_add(1));
    }
    true
}

/// A core-text IP rounded down to its readprofile bucket (so that the join's map holds
/// one key per bucket, not per instruction); others exact.
#[inline(always)]
fn kernel_bucket_ip(cfg: &ProbeConfig, ip: u64) -> u64 {
    if ip >= cfg.text_start && ip < cfg.text_end {
        let shift = cfg.shift & 63;
        cfg.text_start + (((ip - cfg.text_start) >> shift) << shift)
    } else {
        ip
    }
}
