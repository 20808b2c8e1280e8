//! A virtual thread's time off its carriers, as its agent measured it (`KIND_UNMOUNTED`):
//! counted with the scheduler's periods, under the context the thread was in when it
//! left its carrier, with the reason `offcpu_reason::UNMOUNTED + why`.

use std::time::SystemTime;

use jp_common::wire::{RecordHeader, Unmounted};
use jp_common::{offcpu_reason, OffcpuRecord};

use super::super::Malformed;
use super::{Jvm, Outcome};

impl Jvm {
    /// Names nodes of the record's own stream, which sent their definitions before it:
    /// they resolve at once (or wait, and expire counted, as the scheduler's periods).
    pub(super) fn unmounted(
        &mut self,
        h: &RecordHeader,
        times: &[Unmounted],
        now: SystemTime,
        out: &mut Outcome,
    ) {
        if self.ended.contains_key(&h.stream) {
            self.malformed_record(Malformed::AfterEnd, out);
            return;
        }
        out.accepted = true;
        for u in times {
            let period = OffcpuRecord {
                tgid: 0,
                _pad: 0,
                stream: h.stream,
                id: u64::from(u.node),
                ns: u.ns,
                reason: offcpu_reason::UNMOUNTED + u64::from(u.why),
            };
            self.offcpu_periods(&period, u.periods, now);
        }
    }
}
