//! Kernel hotspots: the eBPF samplers' user-space half.
//!
//! `collector` loads and attaches the programs and copies their maps into the
//! [`Store`](crate::store::Store) every `read_interval`; `symbols` reads
//! `/proc/kallsyms`; `profile` turns buckets into readprofile-style per-function
//! counts and loads.
pub mod collector;
pub mod profile;
pub mod symbols;

use std::time::Duration;

/// What the kernel collector needs from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelOptions {
    /// `cpu-clock` sampling frequency per CPU (Hz). Default 997.
    pub frequency_hz: u64,
    /// readprofile bucket size is `2^shift` bytes. Default 4.
    pub shift: u32,
    /// How often the maps are copied into the store. Default 1 s.
    pub read_interval: Duration,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions { frequency_hz: 997, shift: 4, read_interval: Duration::from_secs(1) }
    }
}
