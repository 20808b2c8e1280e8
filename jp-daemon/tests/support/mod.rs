//! The one support module of jpd's test suites (`api`, `kernel`, `usdt`, `e2e`, `hostile`,
//! `fleet`): the root check, the lock that makes heavy tests
//! take turns and a kernel workload here; each family's scaffolding in its submodule.
#![allow(dead_code)] // each suite uses a different part

pub mod fleet;
pub mod jpd;
pub mod kernel;
pub mod systemd_container;
pub mod tls;
pub mod tmux;
pub mod tree;
pub mod usdt;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Fails (never skips) unless root: these tests load eBPF programs (themselves or
/// through jpd), attach uprobes and read other processes' memory.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests load eBPF programs: run them as root (sudo cargo xtask test; it also \
         installs bpf-linker and the nightly toolchain, see `cargo xtask setup`)"
    );
}

/// Tests of a suite run in parallel threads. Those that attach kernel probes or start
/// jpd take turns: two collectors would count each other's work, and attaching probes
/// on a tracepoint while another collector counts on it was measured to lose events.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This test's turn (held until the guard drops); a test that panicked holding it
/// does not stop the others.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
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

/// The host PID of a JVM started as `pid` or under it through wrappers (`unshare
/// --fork` puts the JVM one level down, once it has forked): the innermost process,
/// once it runs `bin/java`. Waits 10 s at most.
pub fn java_under(pid: u32) -> u32 {
    let started = pid;
    let mut pid = pid;
    let t0 = std::time::Instant::now();
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        match children
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
        {
            Some(c) => pid = c,
            None => {
                let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
                if exe.ends_with("bin/java") {
                    return pid;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "no java process under pid {started} (innermost {pid} runs {})",
                    exe.display()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
