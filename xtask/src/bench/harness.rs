//! What the benches share: jpd started and stopped as the unit runs it, jpctl's JSON,
//! a process's CPU and memory, sizes from the environment.
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::build::Deliverables;

/// jpd's default frequency.
pub const FREQUENCY_HZ: u64 = 997;

/// A size from the environment variable `name`, else `default`.
pub fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A jpd of the bench's own, on its own socket; stopped when dropped.
pub struct Jpd {
    child: Child,
    socket: std::path::PathBuf,
}

impl Jpd {
    pub fn start(out: &Deliverables, socket: &Path) -> Result<Jpd> {
        Jpd::start_with(out, socket, None)
    }

    /// With a configuration file (its socket and frequency are overridden).
    pub fn start_with(out: &Deliverables, socket: &Path, config: Option<&Path>) -> Result<Jpd> {
        Jpd::start_at(out, socket, config, FREQUENCY_HZ, Duration::from_secs(2))
    }

    /// At `hz`, measuring from `settle` after it listens.
    pub fn start_at(
        out: &Deliverables,
        socket: &Path,
        config: Option<&Path>,
        hz: u64,
        settle: Duration,
    ) -> Result<Jpd> {
        let mut cmd = Command::new(&out.jpd);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        // As the systemd unit runs it (Nice=-5): not starved by the workload it observes.
        use std::os::unix::process::CommandExt;
        // SAFETY: setpriority is async-signal-safe and touches only the child being exec'd.
        unsafe {
            cmd.pre_exec(|| {
                libc::setpriority(libc::PRIO_PROCESS, 0, -5);
                Ok(())
            });
        }
        let child = cmd
            .arg("--socket")
            .arg(socket)
            .args(["--frequency", &hz.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", out.jpd.display()))?;
        let jpd = Jpd {
            child,
            socket: socket.to_path_buf(),
        };
        let t0 = Instant::now();
        while !socket.exists() {
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("jpd did not listen on {} within 120 s", socket.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Let start-up work (loading, kallsyms) finish before measuring steady state.
        std::thread::sleep(settle);
        Ok(jpd)
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash would: nothing of jpd's own clean-up runs.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
    pub fn stop(&mut self) {
        // SAFETY: kill on our own child's pid, which we have not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A benchmark that fails half-way must not leave jpd sampling (its programs would
/// disturb every later measurement and test on the machine).
impl Drop for Jpd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// CPU time of all threads of `pid`, ns.
pub fn task_cpu_ns(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {dir}"))? {
        let path = entry?.path().join("schedstat");
        // A thread may end between readdir and read: it no longer counts.
        if let Ok(s) = std::fs::read_to_string(&path) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// A process's resident memory in KiB (0 once it has gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) of all children this process has waited for.
pub fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid `who`.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// `jpctl --socket SOCKET ARGS`: its stdout, or an error with its stderr.
pub fn jpctl(out: &Deliverables, socket: &Path, args: &[&str]) -> Result<String> {
    let o = Command::new(&out.jpctl)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .context("cannot run jpctl")?;
    if !o.status.success() {
        bail!(
            "jpctl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `jpctl --socket SOCKET ARGS` (a `--json` command), parsed.
pub fn jpctl_json(out: &Deliverables, socket: &Path, args: &[&str]) -> Result<Value> {
    serde_json::from_str(&jpctl(out, socket, args)?)
        .with_context(|| format!("jpctl {args:?}: not JSON"))
}
