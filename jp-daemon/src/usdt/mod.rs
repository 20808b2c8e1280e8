//! USDT (SystemTap SDT) probes, which aya does not support: find the probe sites of a
//! file ([`notes`]), decode their argument specs for the eBPF side ([`spec`]), and open
//! uprobe events whose USDT semaphore the kernel manages, with a BPF program and an
//! attach cookie ([`attach`]), and find the processes mapping a library and a path to
//! it from jpd's mount namespace ([`maps`]).
//!
//! On top of these, the JVM agent's record probe: [`program`] loads the eBPF program
//! and its maps, [`discovery`] finds the processes mapping `libjpagent.so`, [`control`]
//! writes their control generation, [`ring`] reads the ring buffer and [`collector`]
//! runs it all (its manager thread's jobs in `manager/`: the scan, the attached files,
//! the generations) and hands the records to a [`crate::store::jvm::sink::RecordSink`]
//! (the JVM store, [`crate::store::jvm::JvmStore`], in jpd).
pub mod attach;
pub mod collector;
pub mod config;
pub mod control;
pub mod discovery;
pub mod elf;
pub mod fair;
mod manager;
pub mod maps;
pub mod notes;
pub mod options;
pub mod program;
pub mod ring;
pub mod spec;

use std::sync::{Arc, Mutex};

use anyhow::Context as _;

/// Starts the collector as `[usdt]` says (inside a tokio runtime), with BPF run-time
/// statistics when `bpf_stats` (`kernel.bpf_stats`, one switch for all of jpd's
/// programs); `None` when disabled.
pub fn start_from_config<S: crate::store::jvm::sink::RecordSink>(
    config: &config::UsdtConfig,
    bpf_stats: bool,
    sink: Arc<Mutex<S>>,
) -> anyhow::Result<Option<collector::UsdtCollector>> {
    if !config.enabled {
        log::info!("USDT collector disabled ([usdt] enabled = false): no JVM profiles");
        return Ok(None);
    }
    let options = collector::UsdtOptions {
        bpf_stats,
        ..config.options()
    };
    let c = collector::UsdtCollector::start(options, sink).context(
        "cannot start the USDT collector (set [usdt] enabled = false to run without JVM profiles)",
    )?;
    let status = c.status();
    log::info!(
        "USDT collector: {} JVM(s) with {} found, rescanning every {} ms, {} KiB ring buffer",
        status.processes.len(),
        config.library,
        config.scan_interval_ms,
        config.ring_buffer_kib
    );
    Ok(Some(c))
}
