//! A process's resident memory, as the tests that bound jpd's growth read it.
use std::time::{Duration, Instant};

/// `VmRSS` of `pid` in KiB. Panics when the process is gone.
pub fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// `VmRSS` of `pid` in KiB once its start-up is over: two reads half a second apart
/// that differ by less than 256 KiB. jpd's first reads of the kernel's counter arrays
/// (two of 4.7 MiB per CPU on a 2-CPU guest) come some 300 ms after it answers, and
/// a bound measured from before them charges them to whatever the test does first.
pub fn settled_resident_kib(pid: u32) -> u64 {
    let t0 = Instant::now();
    let mut last = resident_kib(pid);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = resident_kib(pid);
        if now.abs_diff(last) < 256 {
            return now;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the memory of {pid} never settled ({last} KiB, then {now} KiB)"
        );
        last = now;
    }
}
