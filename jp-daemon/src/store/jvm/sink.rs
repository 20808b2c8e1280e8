//! The JVM store is the collector's sink in jpd.
use std::time::SystemTime;

use jp_common::wire::EventHeader;

use super::collector::{KernelCounters, ProcessInfo, RecordSink, UsdtStatus};
use crate::jvm::{self, JvmStore};

impl RecordSink for JvmStore {
    fn process_found(&mut self, tgid: u32, info: ProcessInfo, now: SystemTime) {
        let info = jvm::ProcessInfo {
            start_time_ticks: info.start_time_ticks,
            ns_pid: info.ns_pid,
            cmdline: info.cmdline,
            exe: info.exe,
        };
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

    fn set_kernel_counters(&mut self, c: KernelCounters) {
        JvmStore::set_kernel_counters(
            self,
            jvm::UsdtKernelCounters {
                fired: c.fired,
                sent: c.sent,
                ring_full: c.ring_full,
                fault: c.fault,
                too_long: c.too_long,
            },
        );
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
