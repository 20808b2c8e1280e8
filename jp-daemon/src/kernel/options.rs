//! What the kernel collector takes from the configuration.
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
    /// The interrupted IP is sampled at 1 in this many hard-IRQ handler entries per CPU.
    /// Default 1 (every one).
    pub irq_ip_sample_every: u32,
    /// Time budget of the interrupted-IP stack walk (10–20 µs each): at most this many
    /// walks per second per CPU; 0 turns the interrupted-IP sample off; above 10^9, no
    /// time bound (tests). Default 100.
    pub irq_ip_samples_per_second: u32,
    /// Keep the kernel's BPF run-time statistics on while jpd runs (every BPF program on
    /// the host then pays two clock reads per run). Default off.
    pub bpf_stats: bool,
    /// Join samples to the JVMs' published contexts (CPU per exact context).
    /// Off, jpd never registers a JVM with the sampler: every non-idle sample then pays
    /// only the one lookup that misses. Default on.
    pub jvm_contexts: bool,
    /// Off-CPU time of the joined JVMs' threads, per context and reason, from the
    /// scheduler's switch (`jp_offcpu`). Default off: the program runs at every context
    /// switch of the host.
    pub offcpu: bool,
    /// Switch-outs of joined threads accounted per CPU per second at most; the excess is
    /// counted (`offcpu_over_cap`), not timed. Default 10000.
    pub offcpu_max_switches_per_cpu_per_second: u32,
}

impl KernelOptions {
    /// `ProbeConfig::irq_ip_min_interval_ns` for `irq_ip_samples_per_second`.
    pub fn irq_ip_min_interval_ns(&self) -> u64 {
        match self.irq_ip_samples_per_second {
            0 => u64::MAX,
            n => 1_000_000_000 / u64::from(n),
        }
    }

    /// Slots per CPU of the JVM samples' log (`ctx_log`): room for two read intervals
    /// of samples at the sampling frequency, a power of two, 2048–65536 (64 KiB–2 MiB
    /// per CPU). A frequency raised later without a restart may outrun it: the samples
    /// overwritten before a pass read them are counted as lost.
    pub fn ctx_log_slots(&self) -> u32 {
        let per_interval = self
            .frequency_hz
            .saturating_mul(u64::try_from(self.read_interval.as_millis()).unwrap_or(u64::MAX))
            / 1000;
        let wanted = per_interval.saturating_mul(2).clamp(2048, 1 << 16);
        u32::try_from(wanted.next_power_of_two()).unwrap_or(1 << 16)
    }
}

impl KernelOptions {
    /// Slots per CPU of the off-CPU log: two read intervals at the cap, a power of two,
    /// 1024–65536 (32 KiB–2 MiB per CPU); 0 with off-CPU off.
    pub fn offcpu_log_slots(&self) -> u32 {
        if !self.offcpu {
            return 0;
        }
        let per_interval = u64::from(self.offcpu_max_switches_per_cpu_per_second)
            .saturating_mul(u64::try_from(self.read_interval.as_millis()).unwrap_or(u64::MAX))
            / 1000;
        let wanted = per_interval.saturating_mul(2).clamp(1024, 1 << 16);
        u32::try_from(wanted.next_power_of_two()).unwrap_or(1 << 16)
    }
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            frequency_hz: 997,
            shift: 4,
            read_interval: Duration::from_secs(1),
            irq_ip_sample_every: 1,
            irq_ip_samples_per_second: 100,
            bpf_stats: false,
            jvm_contexts: true,
            offcpu: false,
            offcpu_max_switches_per_cpu_per_second: 10_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_samples_log_holds_two_read_intervals_as_a_power_of_two() {
        let at = |hz, ms| {
            KernelOptions {
                frequency_hz: hz,
                read_interval: Duration::from_millis(ms),
                ..KernelOptions::default()
            }
            .ctx_log_slots()
        };
        assert_eq!(KernelOptions::default().ctx_log_slots(), 2048);
        assert_eq!(at(4999, 1000), 16384);
        assert_eq!(at(1, 10), 2048, "at least 2048");
        assert_eq!(at(u64::MAX, 60_000), 1 << 16, "at most 65536");
    }

    #[test]
    fn the_offcpu_log_holds_two_read_intervals_at_the_cap() {
        let on = |cap, ms| {
            KernelOptions {
                offcpu: true,
                offcpu_max_switches_per_cpu_per_second: cap,
                read_interval: Duration::from_millis(ms),
                ..KernelOptions::default()
            }
            .offcpu_log_slots()
        };
        assert_eq!(
            KernelOptions::default().offcpu_log_slots(),
            0,
            "off: no log"
        );
        assert_eq!(on(10_000, 1000), 32768);
        assert_eq!(on(1, 100), 1024, "at least 1024");
        assert_eq!(on(u32::MAX, 60_000), 1 << 16, "at most 65536");
    }
}
