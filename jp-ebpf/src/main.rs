//! jp's eBPF programs (`jp-probes`), one module per probe family:
//! - `sampler`: `cpu-clock` perf_event sampling of the kernel IP (readprofile buckets),
//! - `offcpu`: the joined JVM threads' time off CPU, from the scheduler's switch,
//! - `irq`: hard-IRQ handler hits and time, and the interrupted IP at handler entry,
//! - `softirq`: softirq count and time per vector,
//! - `usdt`: the `jp:record` USDT probe of the JVM agent, into a ring buffer.
//!
//! Every map but the core-text counters is per-CPU and every program only touches its
//! own CPU's slots, so there are no locks; the core-text counters are one array shared
//! by all CPUs (a per-CPU copy would take 256 × 4.8 MB on a 256-CPU host) and take
//! atomic adds. Hash maps are preallocated (no allocation on the hot path).
//! Kernel-specific numbers (text range, struct offsets) come from user space through
//! the `JP_CONFIG` global (see `jp_common::ProbeConfig`).
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// `atomic_xadd` on a u32: the BPF target has no `AtomicU32` (see `common::TextCounters`).
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

#[cfg(target_arch = "bpf")]
mod common;
#[cfg(target_arch = "bpf")]
mod irq;
#[cfg(target_arch = "bpf")]
mod offcpu;
#[cfg(target_arch = "bpf")]
mod sampler;
#[cfg(target_arch = "bpf")]
mod softirq;
#[cfg(target_arch = "bpf")]
mod usdt;

// Host builds (`cargo build --workspace`, clippy) get an empty binary; the real object
// is only built for the BPF target by jp-daemon's build script.
#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

// The kernel refuses GPL-only helpers (bpf_probe_read_kernel…) to non-GPL programs.
#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
