//! Hard-IRQ handlers, counted where they run: timer sampling never lands inside a
//! hard-IRQ handler (interrupts are off there), so handler hits are counted directly,
//! and the interrupted IP is sampled at handler entry.
//!
//! Finding the interrupted IP: the raw tracepoint's own registers are those of the
//! tracepoint call site, not of the interrupted context. The kernel's stack unwinder
//! (what `bpf_get_stack` uses) walks from the handler through the IRQ stack and the
//! entry stub's `pt_regs` frame into the interrupted context: the frame right after
//! the return address inside `asm_common_interrupt` is `regs->ip`. When the interrupted
//! context was user mode the unwinder stops at that `pt_regs` frame, so the trace ends
//! right after the entry stub. (fentry on `__common_interrupt`, whose argument is the
//! `pt_regs`, would be cheaper, but BPF tracing programs are refused on this kernel.)
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_stack, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    macros::raw_tracepoint,
    maps::{Array, PerCpuArray, PerCpuHashMap},
    programs::RawTracePointContext,
    EbpfContext as _,
};
use aya_log_ebpf::warn;
use jp_common::{
    maps, mode, CpuModes, IrqKey, IrqLine, IrqStart, IrqStats, ProbeConfig, TextBlock, IRQ_LINES,
    IRQ_NAME_LEN, IRQ_STACK_DEPTH,
};

use crate::common::{
    config, count_mode, cpu_slot, in_idle_task, jp_map, now_ns, power_of_two, record_kernel_ip,
    row_slot, this_cpu, TextCounters, MMAPABLE,
};

jp_map!(
    /// Scratch space for the kernel stack at handler entry (too big for the BPF stack).
    JP_IRQ_TRACE: PerCpuArray<[u64; IRQ_STACK_DEPTH]> = maps::IRQ_TRACE, 0
);

jp_map!(
    /// Interrupted-IP samples by mode, plus the IRQ-side loss counters (`jp_common::mode`),
    /// one value per CPU; jpd sizes it at load.
    JP_IRQ_MODES: Array<CpuModes> = maps::IRQ_MODES, MMAPABLE
);

jp_map!(
    /// Interrupted kernel IP at hard-IRQ handler entry, in core text: as `JP_TEXT_COUNTS`.
    JP_IRQ_TEXT_COUNTS: Array<TextBlock> = maps::IRQ_TEXT_COUNTS, MMAPABLE
);

jp_map!(
    /// Dirty flag per page of `JP_IRQ_TEXT_COUNTS`.
    JP_IRQ_TEXT_DIRTY: Array<u64> = maps::IRQ_TEXT_DIRTY, MMAPABLE
);

static IRQ_TEXT: TextCounters = TextCounters {
    counts: &JP_IRQ_TEXT_COUNTS,
    dirty: &JP_IRQ_TEXT_DIRTY,
};

jp_map!(
    /// As `JP_OTHER_IPS`, for the interrupted IP.
    JP_IRQ_OTHERS: PerCpuHashMap<u64, u64> = maps::IRQ_OTHERS, 0
);

jp_map!(
    /// Handler entry time, one value per CPU; jpd sizes it at load.
    JP_IRQ_START: Array<IrqStart> = maps::IRQ_START, MMAPABLE
);

jp_map!(
    /// (CPU, IRQ number) → the first handler that exited on the line on that CPU and its
    /// hits, time, handler address and name (see `IrqLine` for the layout): an array
    /// lookup, where the hash map below costs a hash of the key and a bucket walk on every
    /// exit. jpd sizes it at load (`IRQ_LINES` per possible CPU) and maps it.
    JP_IRQ_LINES: Array<IrqLine> = maps::IRQ_LINES, MMAPABLE
);

jp_map!(
    /// (irq, irqaction) → as `JP_IRQ_LINES`, for lines from `IRQ_LINES` up and for the
    /// second and further handlers of a shared line.
    JP_IRQ_STATS: PerCpuHashMap<IrqKey, IrqStats> = maps::IRQ_STATS, 0
);

// TP_PROTO(int irq, struct irqaction *action)
#[raw_tracepoint(tracepoint = "irq_handler_entry")]
pub fn jp_irq_entry(ctx: RawTracePointContext) -> i32 {
    let action: u64 = ctx.arg(1);
    let Some(s) = cpu_slot(&JP_IRQ_START) else {
        return 0;
    };
    let cfg = config();
    let mut now = now_ns();
    // SAFETY: this CPU's slot; hard-IRQ handlers (and so these programs) do not nest on
    // one CPU.
    let start = unsafe { &mut *s };
    start.entries += 1;
    // The stack walk costs microseconds: it is bounded by a time budget per CPU (at
    // most one walk per `irq_ip_min_interval_ns`), and optionally thinned to the first
    // of every `irq_ip_every` entries. A skipped entry costs the comparisons only.
    let every = u64::from(cfg.irq_ip_every);
    if cfg.irq_ip_min_interval_ns != u64::MAX
        && now >= start.next_walk_ns
        && (every <= 1 || (start.entries - 1) % every == 0)
    {
        start.next_walk_ns = now.saturating_add(cfg.irq_ip_min_interval_ns);
        sample_interrupted_ip(&ctx, &cfg);
        // Timestamp after the walk, so that it is not counted as handler time.
        now = now_ns();
    }
    start.ts_ns = now;
    start.action = action;
    0
}

/// irqreturn_t: IRQ_NONE = 0, IRQ_HANDLED = 1, IRQ_WAKE_THREAD = 2.
const IRQ_HANDLED_OR_WAKE: i32 = 1 | 2;

// TP_PROTO(int irq, struct irqaction *action, int ret)
#[raw_tracepoint(tracepoint = "irq_handler_exit")]
pub fn jp_irq_exit(ctx: RawTracePointContext) -> i32 {
    let now = now_ns();
    let irq: u32 = ctx.arg(0);
    let action: u64 = ctx.arg(1);
    let ret: i32 = ctx.arg(2);
    let handled = ret & IRQ_HANDLED_OR_WAKE != 0;

    let mut elapsed = 0u64;
    let mut timed = false;
    let start = cpu_slot(&JP_IRQ_START);
    if let Some(s) = start {
        // SAFETY: this CPU's slot, see `jp_irq_entry`.
        unsafe {
            if (*s).action == action && (*s).ts_ns != 0 {
                elapsed = now.saturating_sub((*s).ts_ns);
                timed = true;
            }
            (*s).ts_ns = 0;
            (*s).action = 0;
        }
    }
    if !timed {
        count_mode(&JP_IRQ_MODES, mode::UNTIMED);
    }

    let mut in_hash = false;
    let v = line_stats(irq, action, start).or_else(|| {
        in_hash = true;
        shared_stats(irq, action)
    });
    let Some(v) = v else {
        let lost = count_mode(&JP_IRQ_MODES, mode::LOST_IRQ_STATS);
        if power_of_two(lost) {
            warn!(
                &ctx,
                "irq handler map full: {} invocations lost on this CPU", lost
            );
        }
        count_exit(start);
        return 0;
    };
    // SAFETY: this CPU's value slot of a preallocated entry that is never deleted.
    unsafe {
        if handled {
            (*v).handled += 1;
        } else {
            (*v).unhandled += 1;
        }
        (*v).time_ns += elapsed;
        if (*v).handler == 0 {
            fill_identity(&mut *v, action);
        }
    }
    if let (true, Some(s)) = (in_hash, start) {
        // SAFETY: this CPU's slot, see `jp_irq_entry`. After the statistics are written,
        // as `exits` below: jpd reads the hash map again only when this has moved.
        unsafe { (*s).shared += 1 };
    }
    count_exit(start);
    0
}

/// This CPU's slot of `irq` in `JP_IRQ_LINES` if it is free or `action`'s (claimed for
/// it then, and counted in `IrqStart::lines`); `None` for a high line or a second
/// handler of the line.
#[inline(always)]
fn line_stats(irq: u32, action: u64, start: Option<*mut IrqStart>) -> Option<*mut IrqStats> {
    if irq >= IRQ_LINES {
        return None;
    }
    let line = row_slot(&JP_IRQ_LINES, this_cpu(), IRQ_LINES, irq)?;
    // SAFETY: this CPU's slots (`line`, `start`), see `jp_irq_entry`.
    unsafe {
        if (*line).action == 0 {
            (*line).action = action;
            if let Some(s) = start {
                if (*s).lines <= u64::from(irq) {
                    (*s).lines = u64::from(irq) + 1;
                }
            }
        }
        if (*line).action != action {
            return None;
        }
        Some(core::ptr::addr_of_mut!((*line).stats))
    }
}

/// This CPU's value for (irq, action) in `JP_IRQ_STATS`, inserted on first use.
#[inline(always)]
fn shared_stats(irq: u32, action: u64) -> Option<*mut IrqStats> {
    let key = IrqKey {
        irq,
        _pad: 0,
        action,
    };
    if let Some(v) = JP_IRQ_STATS.get_ptr_mut(key) {
        return Some(v);
    }
    // Another CPU's insert (EEXIST) between lookup and insert is fine: the lookup below
    // then finds the key with this CPU's slot zeroed.
    let _ = JP_IRQ_STATS.insert(key, IrqStats::ZERO, u64::from(BPF_NOEXIST));
    JP_IRQ_STATS.get_ptr_mut(key)
}

/// Counts an exit after its statistics are written (see `IrqStart::exits`).
#[inline(always)]
fn count_exit(start: Option<*mut IrqStart>) {
    if let Some(s) = start {
        // SAFETY: this CPU's slot, see `jp_irq_entry`.
        unsafe { (*s).exits += 1 };
    }
}

/// Copies `action->handler` and `action->name` into this CPU's value, once.
#[inline(always)]
fn fill_identity(v: &mut IrqStats, action: u64) {
    let cfg = config();
    // SAFETY: bpf_probe_read_kernel copes with any address (it returns an error rather
    // than faulting); the offsets are from the running kernel's BTF.
    unsafe {
        if let Ok(h) =
            bpf_probe_read_kernel((action + u64::from(cfg.irqaction_handler_off)) as *const u64)
        {
            v.handler = h;
        }
        if let Ok(name) =
            bpf_probe_read_kernel((action + u64::from(cfg.irqaction_name_off)) as *const u64)
        {
            let mut buf = [0u8; IRQ_NAME_LEN];
            // Leave room for the terminating NUL the helper writes.
            if bpf_probe_read_kernel_str_bytes(name as *const u8, &mut buf[..IRQ_NAME_LEN]).is_ok()
            {
                v.name = buf;
            }
        }
    }
}

/// Records where the CPU was when the device interrupt arrived (see module docs).
#[inline(always)]
fn sample_interrupted_ip(ctx: &RawTracePointContext, cfg: &ProbeConfig) {
    let Some(trace) = JP_IRQ_TRACE.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: `trace` is this CPU's scratch slot, IRQ_STACK_DEPTH u64s long; the helper
    // writes at most the size we pass; hard-IRQ programs do not nest on one CPU.
    let trace = unsafe { &mut *trace };
    let size = (IRQ_STACK_DEPTH * 8) as u32;
    // SAFETY: as above; flags 0 = kernel stack, no frames skipped.
    let bytes = unsafe { bpf_get_stack(ctx.as_ptr(), trace.as_mut_ptr().cast(), size, 0) };
    if bytes <= 0 {
        count_mode(&JP_IRQ_MODES, mode::READ_FAILED);
        return;
    }
    let frames = (bytes as usize / 8).min(IRQ_STACK_DEPTH);
    let mut entry = None;
    for i in 0..IRQ_STACK_DEPTH {
        if i >= frames {
            break;
        }
        let a = trace.get(i).copied().unwrap_or(0);
        if a >= cfg.irq_entry_start && a < cfg.irq_entry_end {
            entry = Some(i);
            break;
        }
    }
    let Some(entry) = entry else {
        count_mode(&JP_IRQ_MODES, mode::READ_FAILED);
        return;
    };
    if entry + 1 >= frames {
        if frames == IRQ_STACK_DEPTH {
            // Cut at the maximum depth: we cannot tell user mode from a deep stack.
            count_mode(&JP_IRQ_MODES, mode::READ_FAILED);
        } else {
            count_mode(&JP_IRQ_MODES, mode::USER);
        }
        return;
    }
    let ip = trace.get(entry + 1).copied().unwrap_or(0);
    record_interrupted_kernel_ip(ctx, cfg, ip);
}

#[inline(always)]
fn record_interrupted_kernel_ip(ctx: &RawTracePointContext, cfg: &ProbeConfig, ip: u64) {
    if in_idle_task() {
        count_mode(&JP_IRQ_MODES, mode::IDLE);
        return;
    }
    let lost = record_kernel_ip(cfg, ip, &IRQ_TEXT, &JP_IRQ_OTHERS, &JP_IRQ_MODES);
    if power_of_two(lost) {
        warn!(
            ctx,
            "interrupted IP not recorded: {} samples lost on this CPU", lost
        );
    }
}
