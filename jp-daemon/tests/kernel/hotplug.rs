//! CPU hotplug: the sampler follows the online mask. Takes the highest CPU offline for
//! about a second (and always back online, even if the test fails). Root required;
//! fails (never skips) without it or without a hot-pluggable CPU.

use std::time::Duration;

use crate::support::kernel::*;

/// Puts the CPU back online when dropped.
struct Offline(u32);

fn set_online(cpu: u32, online: bool) -> std::io::Result<()> {
    std::fs::write(
        format!("/sys/devices/system/cpu/cpu{cpu}/online"),
        if online { "1" } else { "0" },
    )
}

impl Offline {
    fn take(cpu: u32) -> Offline {
        set_online(cpu, false).unwrap_or_else(|e| panic!("cannot take CPU {cpu} offline: {e}"));
        Offline(cpu)
    }
}

impl Drop for Offline {
    fn drop(&mut self) {
        if let Err(e) = set_online(self.0, true) {
            eprintln!("CPU {} could not be put back online: {e}", self.0);
        }
    }
}

#[test]
fn sampler_is_detached_from_offline_cpus_and_reattached_when_they_return() {
    let (c, _store) = start();
    let cpus = c.status().cpus;
    assert!(
        cpus.len() >= 2,
        "needs at least two online CPUs, have {cpus:?}"
    );
    let victim = *cpus.last().expect("a CPU");
    let path = format!("/sys/devices/system/cpu/cpu{victim}/online");
    assert!(
        std::path::Path::new(&path).exists(),
        "CPU {victim} is not hot-pluggable ({path})"
    );

    {
        let _off = Offline::take(victim);
        c.refresh();
        let during = c.status().cpus;
        assert!(
            !during.contains(&victim),
            "still attached to offline CPU {victim}: {during:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The CPU is back; the next read attaches to it again.
    std::thread::sleep(Duration::from_millis(200));
    c.refresh();
    assert_eq!(c.status().cpus, cpus, "not re-attached to CPU {victim}");

    // And it samples there again: keep the returned CPU busy and watch its own count.
    let before = c.samples_per_cpu().expect("per-CPU samples")[victim as usize];
    {
        let _dd = Dd::start(Some(victim));
        std::thread::sleep(Duration::from_millis(700));
    }
    let after = c.samples_per_cpu().expect("per-CPU samples")[victim as usize];
    // 0.7 s at 997 Hz is ~700 samples; half of that leaves room for dd's start-up.
    assert!(
        after > before + 350,
        "CPU {victim}: only {} samples in 0.7 s busy",
        after - before
    );
    drop(c);
    // Interrupts that moved away from the CPU move back lazily, on their next
    // occurrence: let that happen now rather than inside another test's measurement
    // (right after a hotplug, /proc/interrupts was seen one ahead of the handler runs).
    disk_io(2);
    std::thread::sleep(Duration::from_secs(1));
}
