//! The control generations: the first one written into each process once its
//! control block is mapped, a fresh one on each re-send request (spaced per JVM, see
//! [`crate::usdt::fair::ResendBackoff`]), and those another tracer wrote adopted; and
//! the ring's losses, charged to the processes that lost the records.
use std::time::Instant;

use super::Manager;
use crate::lock::lock;
use crate::refusals;
use crate::store::jvm::sink::RecordSink;
use crate::store::jvm::UsdtKernelCounters;
use crate::usdt::control::{self, ControlError};
use crate::usdt::discovery::Found;
use crate::usdt::fair;

impl<S: RecordSink> Manager<S> {
    /// Writes the first generation into a process once its control block is mapped: a
    /// scan can find a library whose data segment the loader has not mapped yet, so a
    /// process without a generation is tried again at every tick.
    pub(super) fn first_contact(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if p.generation.is_some() {
            return;
        }
        let Some(symbol) = p.control else {
            return;
        };
        if p.control_addr.is_none() {
            match control::address_in(pid, p.key.0, p.key.1, &symbol) {
                Ok(addr) => p.control_addr = Some(addr),
                // Not mapped yet, or exiting: the next scan tries again, or sees the exit.
                Err(ControlError::NotMapped) | Err(ControlError::Gone) => return,
                Err(e) => {
                    self.error(format!("process {pid}: control block not found: {e}"));
                    return;
                }
            }
        }
        self.write_generation(pid);
    }

    /// Writes a fresh generation into the process's control block (the uprobes of its
    /// file are attached, so the agent's semaphore is already set).
    pub(super) fn write_generation(&mut self, pid: u32) {
        let Some((addr, start_time)) = self
            .procs
            .get(&pid)
            .and_then(|p| Some((p.control_addr?, p.start_time)))
        else {
            return;
        };
        let generation = self.clock.next_generation();
        match control::write_generation(pid, start_time, addr, generation) {
            Ok(()) => {
                self.generations += 1;
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.generation = Some(generation);
                }
                lock(&self.sink).generation_written(pid, generation);
            }
            // The next scan reports the exit.
            Err(ControlError::Gone) => {}
            // Before the first generation: the address may have been found while the
            // loader was still mapping the library; look it up again at the next scan.
            Err(ControlError::BadMagic(magic))
                if self.procs.get(&pid).is_some_and(|p| p.generation.is_none()) =>
            {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.control_addr = None;
                }
                log::debug!("USDT: process {pid}: control block magic {magic:#x}, trying again");
            }
            Err(e) => self.error(format!("process {pid}: cannot write the generation: {e}")),
        }
    }

    /// Of the JVMs the store asks to re-send, those whose spacing allows it now, and
    /// those held back earlier whose time has come. Each request held back is counted.
    pub(super) fn space_resends(&mut self, requested: Vec<u32>, now: Instant) -> Vec<u32> {
        let mut now_due = Vec::new();
        let mut deferred = 0;
        for pid in requested {
            if self.backoff.request(pid, now) {
                now_due.push(pid);
            } else {
                deferred += 1;
            }
        }
        refusals::count(fair::RESEND_DEFERRED, deferred);
        now_due.extend(self.backoff.due(now));
        now_due
    }

    /// Charges the program's drops to the processes they happened to: when the ring
    /// was full or a process went over its rate since the last look, the processes jpd
    /// knows are looked up in the program's per-process map, and only those that lost
    /// something are told (and so asked to re-send). A process that exited or was never
    /// found is charged nothing: its records are nobody else's loss.
    pub(super) fn charge_losses(&mut self, now: &UsdtKernelCounters) {
        let before = std::mem::replace(&mut self.kernel, *now);
        let grew = |a: u64, b: u64| a.saturating_sub(b);
        refusals::count(
            fair::RATE_LIMITED,
            grew(now.rate_limited, before.rate_limited),
        );
        refusals::count(fair::RING_FULL, grew(now.ring_full, before.ring_full));
        refusals::count(fair::NOT_ALLOWED, grew(now.not_allowed, before.not_allowed));
        if now.ring_full == before.ring_full && now.rate_limited == before.rate_limited {
            return;
        }
        let mut tgids: Vec<u32> = lock(&self.sink).running_tgids();
        tgids.extend(self.procs.keys().copied());
        tgids.sort_unstable();
        tgids.dedup();
        let mut charged = Vec::new();
        for tgid in tgids {
            let Some(entry) = self.program.process_ring(tgid) else {
                continue;
            };
            let losses = self.ledger.update(tgid, entry);
            if losses.any() {
                charged.push((tgid, losses));
            }
        }
        if charged.is_empty() {
            return;
        }
        let mut sink = lock(&self.sink);
        for (tgid, l) in charged {
            sink.process_losses(tgid, l.rate_limited, l.ring_full);
        }
    }

    /// Whether a process found by the scan is inside the allow-lists; one outside is
    /// remembered (and not looked at again while it lives) and counted once.
    pub(super) fn allowed(&mut self, found: &Found) -> bool {
        let share = &self.share;
        if share.allow_uids.is_empty() && share.allow_cgroups.is_empty() {
            return true;
        }
        let inside = fair::process_identity(found.pid)
            .is_some_and(|(uid, cgroup)| fair::process_allowed(share, uid, &cgroup));
        if !inside {
            self.outside.insert(found.pid, found.start_time);
            refusals::count(fair::PROCESS_NOT_ALLOWED, 1);
            log::debug!(
                "USDT: process {} is outside [usdt] allow_uids/allow_cgroups",
                found.pid
            );
        }
        inside
    }

    /// Another tracer on the host (a second jpd, a test) writes its own generations
    /// into the same control blocks, and the agents answer the latest one: records
    /// then carry a generation this jpd did not write, and its store would wait for a
    /// re-send of its own forever. So a generation found in the block that this jpd did
    /// not write is adopted as if written here: every tracer then accepts the re-send
    /// that all of them receive.
    pub(super) fn adopt_generations(&mut self) {
        let mut adopted = Vec::new();
        for (&pid, p) in &mut self.procs {
            let (Some(addr), Some(ours)) = (p.control_addr, p.generation) else {
                continue;
            };
            let Ok(current) = control::read_generation(pid, addr) else {
                continue;
            };
            if current != ours && current != 0 {
                if !p.shared {
                    log::info!(
                        "USDT: process {pid}: another tracer wrote generation {current} (a second jpd?); following it"
                    );
                    p.shared = true;
                }
                p.generation = Some(current);
                adopted.push((pid, current));
            }
        }
        if !adopted.is_empty() {
            let mut sink = lock(&self.sink);
            for (pid, generation) in adopted {
                sink.generation_written(pid, generation);
            }
        }
    }
}
