//! The one way a collector turns on the kernel's BPF run-time statistics.

use std::os::fd::OwnedFd;

/// When `wanted`, turns `kernel.bpf_stats_enabled` on for as long as the returned fd lives
/// (the statistics cost every program run a clock read, so they are off unless asked).
/// A kernel that refuses is logged and the collector runs without them.
pub fn enable_run_time(wanted: bool) -> Option<OwnedFd> {
    if !wanted {
        return None;
    }
    match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
        Ok(fd) => Some(fd),
        Err(e) => {
            log::warn!("cannot enable BPF run-time statistics: {e}");
            None
        }
    }
}
