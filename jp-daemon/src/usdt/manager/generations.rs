//! The control generations: the first one written into each process once its
//! control block is mapped, a fresh one on each re-send request, and those another
//! tracer wrote adopted.
use super::Manager;
use crate::lock::lock;
use crate::store::jvm::sink::RecordSink;
use crate::usdt::control::{self, ControlError};

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
