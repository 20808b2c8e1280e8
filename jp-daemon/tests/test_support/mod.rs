//! What the end-to-end (`e2e_common`) and fleet (`fleet_common`) scaffolding share: the
//! deliverables' paths, the root check and a kernel workload.
#![allow(dead_code)] // each test binary uses a different part

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A deliverable's path from the environment `cargo xtask test` sets (`JPD`, `JPCTL`,
/// `JP_AGENT_LIB`, …); a failure saying so without it.
pub fn binary(var: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "{var} is not set: run these tests through `cargo xtask test`, which builds jpd, \
             jpctl and the agent and passes their paths"
        ),
    }
}

/// Fails (never skips) unless root: jpd loads eBPF programs.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests start jpd, which loads eBPF programs: run them as root (sudo cargo xtask test)"
    );
}

/// Reads /dev/zero into /dev/null on every CPU for `d` (read_zero on top of the kernel).
pub fn read_dev_zero(d: Duration) {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let handles: Vec<_> = (0..cpus)
        .map(|_| {
            std::thread::spawn(move || {
                let mut zero = std::fs::File::open("/dev/zero").expect("open /dev/zero");
                let mut null = std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/null")
                    .expect("open /dev/null");
                let mut buf = vec![0u8; 64 * 1024];
                let t0 = Instant::now();
                while t0.elapsed() < d {
                    let n = zero.read(&mut buf).expect("read /dev/zero");
                    null.write_all(&buf[..n]).expect("write /dev/null");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("workload thread");
    }
}
