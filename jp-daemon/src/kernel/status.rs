//! The collector's published status: what is attached where, each program's BPF
//! run-time statistics (read as few times as a pass can), and the errors counted
//! (and logged, at most once a minute) since start.
use std::time::{Instant, SystemTime};

use aya::Ebpf;

use super::attach::{Probes, SAMPLER};
use crate::store::kernel::{CollectorStatus, ProgramStats};

/// Whether the kernel's BPF run-time statistics are on (for anyone's reason).
const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// The status as last published, with what the next one needs.
#[derive(Default)]
pub(super) struct StatusKeeper {
    status: CollectorStatus,
    /// `kernel.bpf_stats_enabled`, kept open and re-read with `pread`.
    stats_sysctl: Option<std::fs::File>,
    /// Whether the kernel counts BPF statistics, as the sampler's own figures last said
    /// (`None` until a pass has seen the sampler run since a status with its figures).
    stats_counted: Option<bool>,
    /// Failed map reads and the like since start (counted in `events_lost`).
    errors: u64,
    last_error_log: Option<Instant>,
}

impl StatusKeeper {
    /// The status as last published.
    pub(super) fn current(&self) -> &CollectorStatus {
        &self.status
    }

    /// The status after a read that found `lost` events lost on the eBPF side;
    /// `sampler_ran`: whether the sampler counted samples since the read before.
    pub(super) fn next(
        &mut self,
        probes: &Probes,
        lost: u64,
        sampler_ran: bool,
    ) -> CollectorStatus {
        let programs = self.program_stats(probes, sampler_ran);
        // The sysctl shows only what was written to it, not a `BPF_ENABLE_STATS` fd such
        // as ours or another process's; the sampler's own figures show both, so the
        // sysctl is read only until they have said whether anything is counted.
        let stats_enabled = probes.holds_bpf_stats()
            || match self.stats_counted {
                Some(counted) => counted,
                None => self.bpf_stats_enabled(),
            };
        let opts = probes.options();
        self.status = CollectorStatus {
            programs,
            cpus: probes.cpus(),
            frequency_hz: opts.frequency_hz,
            shift: opts.shift,
            text_start: probes.config().text_start,
            text_end: probes.config().text_end,
            events_lost: lost + self.errors + probes.attach_failures(),
            last_read: Some(SystemTime::now()),
            bpf_stats_enabled: stats_enabled,
            irq_ip_samples_per_second: opts.irq_ip_samples_per_second,
        };
        self.status.clone()
    }

    /// Counts an error and logs it, at most one message a minute: a persistent failure
    /// must not flood the log.
    pub(super) fn failed(&mut self, e: &anyhow::Error) {
        self.errors += 1;
        if self
            .last_error_log
            .is_none_or(|t| t.elapsed().as_secs() >= 60)
        {
            log::error!("kernel collector: {e:#}");
            self.last_error_log = Some(Instant::now());
        }
    }

    /// Each program with what it is attached to and its BPF statistics. The statistics
    /// are asked for even when neither we nor the sysctl turned them on: another process
    /// may hold a `BPF_ENABLE_STATS` fd, which the sysctl does not show.
    fn program_stats(&mut self, probes: &Probes, sampler_ran: bool) -> Vec<ProgramStats> {
        let Some(ebpf) = probes.ebpf() else {
            return Vec::new();
        };
        let mut programs = self.program_list(probes);
        let last_sampler = programs
            .iter()
            .find(|p| p.name == SAMPLER)
            .map(|p| (p.run_count, p.run_time_ns));
        let sampler = run_stats(ebpf, SAMPLER);
        // The kernel counts every program's statistics or none, so when the sampler ran
        // since the last pass (its own counters moved), whether its statistics moved
        // says whether anybody's are being counted; when they are not, the other
        // programs' figures of the last pass still hold: one syscall per idle pass
        // instead of one per program. A sampler that merely did not run between two
        // close passes says nothing (the other programs may have run), and with our own
        // statistics fd they are known to be counted: then all are read.
        if sampler_ran {
            if let Some(last) = last_sampler.filter(|_| self.status.last_read.is_some()) {
                self.stats_counted = Some(last != sampler);
            }
        }
        let others_hold = !probes.holds_bpf_stats() && sampler_ran && last_sampler == Some(sampler);
        for p in &mut programs {
            let (run_count, run_time_ns) = if p.name == SAMPLER {
                sampler
            } else if others_hold {
                continue;
            } else {
                run_stats(ebpf, &p.name)
            };
            p.run_count = run_count;
            p.run_time_ns = run_time_ns;
        }
        programs
    }

    /// The last status's list of programs, unless what the sampler is attached to
    /// changed: its description is formatted only then, not in every pass.
    fn program_list(&mut self, probes: &Probes) -> Vec<ProgramStats> {
        let cpus = probes.cpus();
        let hz = probes.options().frequency_hz;
        let programs = std::mem::take(&mut self.status.programs);
        if !programs.is_empty() && self.status.cpus == cpus && self.status.frequency_hz == hz {
            return programs;
        }
        let sampler_target = format!("perf_event cpu-clock {hz} Hz on CPUs {}", cpu_list(&cpus));
        let last = |name: &str| programs.iter().find(|p| p.name == name);
        std::iter::once((SAMPLER, sampler_target))
            .chain(probes.attached().iter().map(|(n, t)| (*n, t.clone())))
            .map(|(name, attached_to)| ProgramStats {
                name: name.to_string(),
                attached_to,
                run_count: last(name).map_or(0, |p| p.run_count),
                run_time_ns: last(name).map_or(0, |p| p.run_time_ns),
            })
            .collect()
    }

    /// `kernel.bpf_stats_enabled` as written to the sysctl (another process holding a
    /// `BPF_ENABLE_STATS` fd does not show there).
    fn bpf_stats_enabled(&mut self) -> bool {
        use std::os::unix::fs::FileExt as _;
        if self.stats_sysctl.is_none() {
            self.stats_sysctl = std::fs::File::open(BPF_STATS_SYSCTL).ok();
        }
        let mut buf = [0u8; 8];
        match self.stats_sysctl.as_ref().map(|f| f.read_at(&mut buf, 0)) {
            Some(Ok(n)) => buf.get(..n).is_some_and(|b| b.trim_ascii() != b"0"),
            _ => false,
        }
    }
}

/// A program's BPF statistics: (runs, run time ns); zeros if they cannot be read.
fn run_stats(ebpf: &Ebpf, name: &str) -> (u64, u64) {
    let info = ebpf.program(name).and_then(|p| p.info().ok());
    let run_count = info.as_ref().map_or(0, |i| i.run_count());
    let run_time_ns = info.as_ref().map_or(0, |i| {
        u64::try_from(i.run_time().as_nanos()).unwrap_or(u64::MAX)
    });
    (run_count, run_time_ns)
}

/// `0-3,6` style, as in `/sys/devices/system/cpu/online`.
fn cpu_list(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_list_is_compact() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(cpu_list(&[]), "");
    }
}
