//! The seam between the USDT collector and the JVM store, declared once on the
//! store's side: what the collector delivers ([`RecordSink`]) and the status it
//! reports, in the store's own types. The JVM store is the sink in jpd; tests use
//! their own sinks.
use std::time::{Duration, SystemTime};

use jp_common::wire::EventHeader;

use super::{JvmStore, ProcessInfo, UsdtKernelCounters};

/// Where the collector delivers what it finds (implemented by the JVM store).
pub trait RecordSink: Send + 'static {
    /// A process with the agent library was found (before or after its first record).
    fn process_found(&mut self, tgid: u32, info: ProcessInfo, now: SystemTime);
    /// jpd wrote `generation` into that process's control block.
    fn generation_written(&mut self, tgid: u32, generation: u64);
    /// One ring-buffer event: the kernel-filled header and the bytes after it (empty
    /// unless `event.status` is `EVENT_OK`). Must not panic on any input.
    fn ingest(&mut self, event: &EventHeader, record: &[u8], now: SystemTime);
    /// The process exited (or vanished).
    fn process_gone(&mut self, tgid: u32, now: SystemTime);
    /// Processes whose records were lost: the collector writes them a new generation.
    fn take_resync_requests(&mut self) -> Vec<u32>;
    /// eBPF-side counters, summed over CPUs.
    fn set_kernel_counters(&mut self, counters: UsdtKernelCounters);
    /// The eBPF program dropped events of this process since the last call: over its
    /// rate (`rate_limited`) or to a full ring (`ring_full`).
    fn process_losses(&mut self, _tgid: u32, _rate_limited: u64, _ring_full: u64) {}
    /// Called after every scan: drop what is past its retention.
    fn expire(&mut self, _now: SystemTime) {}
    /// Processes the sink holds as running (records from a process no scan has found
    /// yet create one): the collector tells it when such a process is gone.
    fn running_tgids(&self) -> Vec<u32> {
        Vec::new()
    }
    /// The collector's own state, after every tick (for jpd's status API).
    fn collector_status(&mut self, _status: &UsdtStatus) {}
}

/// A snapshot of what the collector does, for status and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsdtStatus {
    pub files: Vec<FileStatus>,
    /// Processes using an attached file.
    pub processes: Vec<u32>,
    pub scans: u64,
    pub last_scan: Duration,
    /// Generations written (first contact and re-sends).
    pub generations_written: u64,
    /// Attach, scan and control-write failures, and the latest one in words.
    pub errors: u64,
    pub last_error: String,
    /// Library files that map the library name but cannot be attached, with why.
    pub refused: Vec<RefusedFile>,
    /// Ring items handed to the sink, and batches (sink locks).
    pub items: u64,
    pub batches: u64,
    /// Ring items too short to hold an event header.
    pub malformed_items: u64,
    /// BPF statistics of the program (when `kernel.bpf_stats_enabled` is on).
    pub run_count: u64,
    pub run_time_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStatus {
    /// The path the first process maps it under (in its mount namespace).
    pub path: String,
    pub dev: (u32, u32),
    pub inode: u64,
    /// Probe sites attached.
    pub sites: usize,
    pub users: Vec<u32>,
    /// No process uses it and it stays attached for the next one (see the module doc).
    pub idle: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedFile {
    pub path: String,
    pub reason: String,
}

impl RecordSink for JvmStore {
    fn process_found(&mut self, tgid: u32, info: ProcessInfo, now: SystemTime) {
        JvmStore::process_found(self, tgid, info, now);
    }

    fn generation_written(&mut self, tgid: u32, generation: u64) {
        JvmStore::generation_written(self, tgid, generation);
    }

    fn ingest(&mut self, event: &EventHeader, record: &[u8], now: SystemTime) {
        JvmStore::ingest(self, event, record, now);
    }

    fn process_gone(&mut self, tgid: u32, now: SystemTime) {
        JvmStore::process_gone(self, tgid, now);
    }

    fn take_resync_requests(&mut self) -> Vec<u32> {
        JvmStore::take_resync_requests(self)
    }

    fn set_kernel_counters(&mut self, counters: UsdtKernelCounters) {
        JvmStore::set_kernel_counters(self, counters);
    }

    fn process_losses(&mut self, tgid: u32, rate_limited: u64, ring_full: u64) {
        JvmStore::process_losses(self, tgid, rate_limited, ring_full);
    }

    fn expire(&mut self, now: SystemTime) {
        JvmStore::expire(self, now);
    }

    fn running_tgids(&self) -> Vec<u32> {
        JvmStore::running_tgids(self)
    }

    fn collector_status(&mut self, status: &UsdtStatus) {
        self.set_collector_status(status.clone());
    }
}
