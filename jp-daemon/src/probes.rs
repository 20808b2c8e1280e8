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
use jp_common::{maps, ProbeConfig, CONFIG_GLOBAL};

/// The object, aligned as aya needs it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/jp-probes"));

/// aya-log's ring buffer, declared by aya-log-ebpf: only the kernel collector reads it.
const AYA_LOGS: &str = "AYA_LOGS";

/// Maps only the kernel collector uses, with the smallest size the kernel accepts: the
/// USDT instance creates them too, and never reads them.
const KERNEL_ONLY_MAPS: [(&str, u32); 9] = [
    (maps::TEXT_COUNTS.name, 1),
    (maps::OTHER_IPS.name, 1),
    (maps::IRQ_TEXT_COUNTS.name, 1),
    (maps::IRQ_OTHERS.name, 1),
    (maps::IRQ_STATS.name, 1),
    (maps::IRQ_LINES.name, 1),
    (maps::JVM_PID_BITS.name, 1),
    (maps::OFFCPU_LOG.name, 1),
    (AYA_LOGS, 4096),
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
    // aya creates a task storage map (`JP_OFFCPU_TASKS`) but has no type for it in user
    // space: jpd never touches it there.
    loader.allow_unsupported_maps();
    let what = match instance {
        Instance::Kernel {
            config,
            text_blocks,
            text_pages,
            cpu_slots,
        } => {
            loader
                .override_global(CONFIG_GLOBAL, config, true)
                .map_max_entries(maps::TEXT_COUNTS.name, text_blocks)
                .map_max_entries(maps::TEXT_DIRTY.name, text_pages)
                .map_max_entries(maps::IRQ_TEXT_COUNTS.name, text_blocks)
                .map_max_entries(maps::IRQ_TEXT_DIRTY.name, text_pages);
            // The arrays with one value per CPU number (`jp_common::CpuModes` says why).
            for map in [
                maps::MODES,
                maps::IRQ_MODES,
                maps::IRQ_START,
                maps::SIRQ_STATS,
                maps::OFFCPU_CPUS,
            ] {
                loader.map_max_entries(map.name, cpu_slots);
            }
            loader.map_max_entries(
                maps::IRQ_LINES.name,
                cpu_slots.saturating_mul(jp_common::IRQ_LINES),
            );
            loader.map_max_entries(
                maps::CTX_LOG.name,
                cpu_slots.saturating_mul(config.ctx_log_mask.saturating_add(1)),
            );
            loader.map_max_entries(
                maps::OFFCPU_LOG.name,
                cpu_slots.saturating_mul(config.offcpu_log_mask.saturating_add(1)),
            );
            ""
        }
        Instance::Usdt { ring_bytes } => {
            loader.map_max_entries(maps::USDT_EVENTS.name, ring_bytes);
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
