//! What the USDT collector and its manager need from the configuration: the
//! collector's own settings and the ones the manager's scans use.

use std::time::Duration;

use super::fair::RingShare;

/// What the collector needs from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtOptions {
    /// File name of the agent library in `/proc/PID/maps`.
    pub library: String,
    /// How often `/proc` is rescanned for new and exited processes.
    pub scan_interval: Duration,
    /// Size of the ring buffer (a power of two, 64 KiB to 1 GiB).
    pub ring_buffer_bytes: u32,
    /// Hold the kernel's BPF run-time statistics on while running (`kernel.bpf_stats`):
    /// they make every BPF program on the host pay two clock reads per run, so only
    /// when asked. Without them the program's run count and time read 0.
    pub bpf_stats: bool,
    /// Each process's share of the ring, and who may use it.
    pub share: RingShare,
}

impl Default for UsdtOptions {
    fn default() -> Self {
        UsdtOptions {
            library: jp_common::wire::AGENT_LIBRARY.to_owned(),
            scan_interval: Duration::from_secs(1),
            ring_buffer_bytes: 8 << 20,
            bpf_stats: false,
            share: RingShare::default(),
        }
    }
}
