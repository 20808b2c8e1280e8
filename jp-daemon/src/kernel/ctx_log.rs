//! `JP_CTX_LOG`: the samples `jp_sample` took on threads of registered JVMs, one slot
//! per sample in a log per CPU that jpd maps and drains every pass. Each CPU's
//! `mode::JVM` count in `JP_MODES` is its write position: the sample numbered `n` is in
//! slot `n % slots`, written before the count moves past it.
//!
//! A log rather than a hash map of counts: the sampler writes one slot (a line it
//! touched one sample ago, half the time) instead of hashing a 32-byte key and walking a
//! bucket over cold lines, and nothing accumulates: a map of counts kept every context
//! a long-running JVM had ever been sampled in, until it was full and every new one was
//! lost.
use std::collections::HashMap;
use std::os::fd::BorrowedFd;

use jp_common::{maps, mode, CpuModes, CtxKey};

use super::mapping::CpuSlots;

pub(super) struct CtxLog {
    slots: CpuSlots<CtxKey>,
    /// Slots per CPU (a power of two).
    per_cpu: u64,
    /// Per CPU, the position up to which the log was drained.
    drained: Vec<u64>,
    /// Samples overwritten before a pass read them, since start.
    pub(super) lost: u64,
}

impl CtxLog {
    /// Maps the log of `cpus` CPUs, `per_cpu` slots each (as sized at load).
    pub(super) fn map(fd: BorrowedFd<'_>, cpus: usize, per_cpu: u32) -> anyhow::Result<CtxLog> {
        Ok(CtxLog {
            slots: CpuSlots::map_rows(fd, cpus, per_cpu as usize, maps::CTX_LOG.name)?,
            per_cpu: u64::from(per_cpu),
            drained: vec![0; cpus],
            lost: 0,
        })
    }

    /// Slots per CPU.
    pub(super) fn slots_per_cpu(&self) -> u64 {
        self.per_cpu
    }

    /// The samples logged since the last drain, counted by key. `modes` is `JP_MODES`,
    /// read here before the slots (which the eBPF side writes before the count) and
    /// again after them: a slot that the eBPF side may have reused while it was being
    /// read is not counted but lost, as are slots overwritten before this drain.
    pub(super) fn drain(&mut self, modes: &CpuSlots<CpuModes>) -> Vec<(CtxKey, u64)> {
        let written = |modes: &CpuSlots<CpuModes>| -> Vec<u64> {
            modes
                .read()
                .iter()
                .map(|m| m.counts.get(mode::JVM as usize).copied().unwrap_or(0))
                .collect()
        };
        let before = written(modes);
        let mut read: Vec<(usize, u64, Vec<CtxKey>)> = Vec::with_capacity(before.len());
        for (cpu, &end) in before.iter().enumerate() {
            let Some(drained) = self.drained.get_mut(cpu) else {
                continue;
            };
            // The count never goes back; if it seems to, start over from it.
            let start = (*drained).min(end).max(end.saturating_sub(self.per_cpu));
            self.lost += start.saturating_sub(*drained);
            let keys = (start..end)
                .filter_map(|n| self.slots.value(cpu, (n % self.per_cpu) as usize))
                .collect();
            read.push((cpu, start, keys));
            *drained = end;
        }
        // The slots above are read before the counts below.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let after = written(modes);
        let mut counts: HashMap<CtxKey, u64> = HashMap::new();
        for (cpu, start, keys) in read {
            // Positions below `now - per_cpu` may have been written again meanwhile.
            let now = after.get(cpu).copied().unwrap_or(0);
            let unsure = now.saturating_sub(self.per_cpu).saturating_sub(start);
            let unsure = usize::try_from(unsure)
                .unwrap_or(usize::MAX)
                .min(keys.len());
            self.lost += unsure as u64;
            for key in keys.into_iter().skip(unsure) {
                *counts.entry(key).or_insert(0) += 1;
            }
        }
        counts.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd as _, FromRawFd as _, OwnedFd};

    /// Anonymous shared memory standing in for a mapped BPF array.
    fn memory(bytes: usize) -> OwnedFd {
        // SAFETY: a valid NUL-terminated name and no flags; the fd is checked below.
        let fd = unsafe { libc::memfd_create(c"jp-test".as_ptr(), 0) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let file = std::fs::File::from(fd.try_clone().expect("dup"));
        file.set_len(bytes as u64).expect("set_len");
        fd
    }

    struct Fake {
        modes_fd: OwnedFd,
        log_fd: OwnedFd,
        per_cpu: u32,
    }

    impl Fake {
        fn new(cpus: usize, per_cpu: u32) -> Fake {
            Fake {
                modes_fd: memory(cpus * std::mem::size_of::<CpuModes>()),
                log_fd: memory(cpus * per_cpu as usize * std::mem::size_of::<CtxKey>()),
                per_cpu,
            }
        }

        /// What the eBPF side does for one sample of `id` on `cpu`: the slot at the
        /// CPU's count, then the count.
        fn log(&self, cpu: usize, id: u64) {
            use std::os::unix::fs::FileExt as _;
            let file = |fd: &OwnedFd| std::fs::File::from(fd.try_clone().expect("dup"));
            let (modes, log) = (file(&self.modes_fd), file(&self.log_fd));
            let count_at = (cpu * std::mem::size_of::<CpuModes>() + mode::JVM as usize * 8) as u64;
            let mut n = [0u8; 8];
            modes.read_exact_at(&mut n, count_at).expect("read");
            let n = u64::from_ne_bytes(n);
            let key = CtxKey {
                tgid: 7,
                kind: 0,
                stream: 1,
                id,
                kip: 0,
            };
            let slot = cpu as u64 * u64::from(self.per_cpu) + n % u64::from(self.per_cpu);
            // SAFETY: CtxKey is repr(C), integers only, without padding.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    (&key as *const CtxKey).cast::<u8>(),
                    std::mem::size_of::<CtxKey>(),
                )
            };
            log.write_all_at(bytes, slot * std::mem::size_of::<CtxKey>() as u64)
                .expect("write");
            modes
                .write_all_at(&(n + 1).to_ne_bytes(), count_at)
                .expect("write");
        }
    }

    fn by_id(samples: Vec<(CtxKey, u64)>) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = samples.into_iter().map(|(k, n)| (k.id, n)).collect();
        v.sort();
        v
    }

    #[test]
    fn drains_what_each_cpu_logged_since_the_last_drain_and_counts_overwrites() {
        let fake = Fake::new(2, 4);
        let modes = CpuSlots::<CpuModes>::map(fake.modes_fd.as_fd(), 2, "modes").unwrap();
        let mut log = CtxLog::map(fake.log_fd.as_fd(), 2, 4).unwrap();
        assert!(log.drain(&modes).is_empty());

        for id in [1, 1, 2] {
            fake.log(0, id);
        }
        fake.log(1, 2);
        assert_eq!(by_id(log.drain(&modes)), [(1, 2), (2, 2)]);
        assert_eq!(log.lost, 0);
        assert!(log.drain(&modes).is_empty(), "nothing twice");

        // Six samples on a CPU with four slots: the first two are gone, and counted.
        for id in [3, 4, 5, 6, 7, 8] {
            fake.log(1, id);
        }
        assert_eq!(by_id(log.drain(&modes)), [(5, 1), (6, 1), (7, 1), (8, 1)]);
        assert_eq!(log.lost, 2);

        // The log wraps: positions go on past the end of the slots.
        for id in [9, 9, 9] {
            fake.log(1, id);
        }
        assert_eq!(by_id(log.drain(&modes)), [(9, 3)]);
        assert_eq!(log.lost, 2);
    }
}
