//! jp's eBPF object (`jp-probes`, built from jp-ebpf by `build.rs`), embedded once, and
//! the one way a collector loads an instance of it: [`load`] with the [`Instance`] the
//! collector is.
//!
//! Each collector loads an instance of its own (`docs/architecture.md` says why not one
//! for both). That costs no verifier time twice: [`EbpfLoader::load`] parses the object
//! and creates its maps, but verifies no program; each collector then loads only the
//! programs it runs (`Program::load`), so every program meets the verifier once. What
//! an instance holds for the other collector is only maps, and those are shrunk here to
//! their smallest valid size.
use aya::{Ebpf, EbpfLoader};
use jp_common::{ProbeConfig, CONFIG_GLOBAL};

/// The object, aligned as aya needs it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/jp-probes"));

/// readprofile's arrays for core text and their dirty-page flags (the kernel
/// collector's `text_counts`), sized at load for the running kernel's text.
pub const TEXT_COUNTS: &str = "JP_TEXT_COUNTS";
pub const TEXT_DIRTY: &str = "JP_TEXT_DIRTY";
pub const IRQ_TEXT_COUNTS: &str = "JP_IRQ_TEXT_COUNTS";
pub const IRQ_TEXT_DIRTY: &str = "JP_IRQ_TEXT_DIRTY";
/// Arrays with one value per CPU (`jp_common::CpuModes`), sized at load to the
/// possible CPUs and mapped by the kernel collector.
pub const MODES: &str = "JP_MODES";
pub const IRQ_MODES: &str = "JP_IRQ_MODES";
pub const IRQ_START: &str = "JP_IRQ_START";
pub const SIRQ_STATS: &str = "JP_SIRQ_STATS";
/// The IRQ lines' slots, `jp_common::IRQ_LINES` per possible CPU (`jp_common::IrqLine`),
/// mapped by the kernel collector.
pub const IRQ_LINES: &str = "JP_IRQ_LINES";
/// The JVM samples' log, `ProbeConfig::ctx_log_mask + 1` slots per possible CPU, mapped
/// by the kernel collector (`kernel::ctx_log`).
pub const CTX_LOG: &str = "JP_CTX_LOG";
/// The USDT ring buffer, sized at load from `[usdt] ring_buffer_kib`.
pub const USDT_EVENTS: &str = "JP_USDT_EVENTS";

/// Maps only the kernel collector uses, with the smallest size the kernel accepts: the
/// USDT instance creates them too, and never reads them.
const KERNEL_ONLY_MAPS: [(&str, u32); 7] = [
    (TEXT_COUNTS, 1),
    ("JP_OTHER_IPS", 1),
    (IRQ_TEXT_COUNTS, 1),
    ("JP_IRQ_OTHERS", 1),
    ("JP_IRQ_STATS", 1),
    (IRQ_LINES, 1),
    ("AYA_LOGS", 4096),
];

/// Which collector an instance is for, with what it sets at load.
#[derive(Clone, Copy, Debug)]
pub enum Instance<'a> {
    /// The kernel samplers: their configuration (a global, frozen at load), the
    /// sizes of the core-text arrays (`TextLayout`'s blocks and pages) and the number
    /// of values of the per-CPU arrays (the highest possible CPU number + 1).
    Kernel {
        config: &'a ProbeConfig,
        text_blocks: u32,
        text_pages: u32,
        cpu_slots: u32,
    },
    /// The USDT record program, with a ring buffer of `ring_bytes`.
    Usdt { ring_bytes: u32 },
}

/// Creates the maps of one instance of the object; its programs are still to be loaded
/// (verified) one by one by the collector.
pub fn load(instance: Instance<'_>) -> anyhow::Result<Ebpf> {
    let mut loader = EbpfLoader::new();
    let what = match instance {
        Instance::Kernel {
            config,
            text_blocks,
            text_pages,
            cpu_slots,
        } => {
            loader
                .override_global(CONFIG_GLOBAL, config, true)
                .map_max_entries(TEXT_COUNTS, text_blocks)
                .map_max_entries(TEXT_DIRTY, text_pages)
                .map_max_entries(IRQ_TEXT_COUNTS, text_blocks)
                .map_max_entries(IRQ_TEXT_DIRTY, text_pages);
            for name in [MODES, IRQ_MODES, IRQ_START, SIRQ_STATS] {
                loader.map_max_entries(name, cpu_slots);
            }
            loader.map_max_entries(IRQ_LINES, cpu_slots.saturating_mul(jp_common::IRQ_LINES));
            loader.map_max_entries(
                CTX_LOG,
                cpu_slots.saturating_mul(config.ctx_log_mask.saturating_add(1)),
            );
            ""
        }
        Instance::Usdt { ring_bytes } => {
            loader.map_max_entries(USDT_EVENTS, ring_bytes);
            for (name, size) in KERNEL_ONLY_MAPS {
                loader.map_max_entries(name, size);
            }
            " for USDT"
        }
    };
    loader
        .load(OBJECT)
        .map_err(|e| anyhow::anyhow!("cannot load jp's eBPF object{what}: {e}"))
}
