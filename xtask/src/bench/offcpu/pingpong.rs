//! The untracked load: two threads of this process handing a byte back and forth over two
//! pipes at a set rate of round trips, paced in 1 ms ticks as the JVM load (`Switches.java`)
//! is. Every hand-over blocks one thread in `pipe_read` and wakes the other: context
//! switches of a process jpd does not track.
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::FromRawFd as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The load; stopped when dropped.
pub(super) struct PingPong {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl PingPong {
    pub(super) fn start(round_trips_per_s: u64) -> Result<PingPong> {
        let (to_pong_r, mut to_pong_w) = pipe()?;
        let (mut to_ping_r, mut to_ping_w) = pipe()?;
        let stop = Arc::new(AtomicBool::new(false));
        let pong = std::thread::Builder::new()
            .name("pong".into())
            .spawn(move || {
                let mut b = [0u8; 1];
                // Ends when the ping side closes its end (read gives 0 or an error).
                let mut from_ping = to_pong_r;
                while matches!(from_ping.read(&mut b), Ok(1)) {
                    if to_ping_w.write_all(&b).is_err() {
                        break;
                    }
                }
            })
            .context("cannot start the pong thread")?;
        let stopping = stop.clone();
        let ping = std::thread::Builder::new()
            .name("ping".into())
            .spawn(move || {
                let t0 = Instant::now();
                let mut done = 0u64;
                let mut b = [0u8; 1];
                for tick in 1u64.. {
                    if stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    let due = round_trips_per_s * tick / 1000;
                    while done < due {
                        let ok =
                            to_pong_w.write_all(&b).is_ok() && to_ping_r.read_exact(&mut b).is_ok();
                        if !ok {
                            return;
                        }
                        done += 1;
                    }
                    let next = t0 + Duration::from_millis(tick);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            })
            .context("cannot start the ping thread")?;
        Ok(PingPong {
            stop,
            threads: vec![ping, pong],
        })
    }
}

/// A pipe: (read end, write end).
fn pipe() -> Result<(File, File)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two fds into the array we own.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        anyhow::bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned these fds to us; each is owned once.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
