//! The tracked load: `Switches.java` under the agent (a JVM jpd joins), and the load
//! threads' own context switches, from /proc.
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::build::Deliverables;
use crate::setup::JDK17;

/// A Switches JVM; killed when dropped.
pub(super) struct SwitchJvm(Child);

impl SwitchJvm {
    /// One pair of threads at `round_trips` per second, the agent publishing their
    /// contexts (`profiler=usdt`: jpd joins it).
    pub(super) fn start(out: &Deliverables, dir: &Path, round_trips: u64) -> Result<SwitchJvm> {
        let mut child = Command::new(Path::new(JDK17).join("bin/java"))
            .arg(format!("-agentpath:{}=profiler=usdt", out.agent_lib.display()))
            .args(["-Xmx64m", "-cp"])
            .arg(dir)
            .arg("Switches")
            .args(["1".to_string(), round_trips.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start java")?;
        let stdout = child.stdout.take().context("Switches' stdout")?;
        let jvm = SwitchJvm(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("Switches did not start (printed {line:?})");
        }
        Ok(jvm)
    }

    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for SwitchJvm {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Context switches (voluntary and not) of `pid`'s load threads so far: those named
/// `ping…` or `pong…`.
pub(super) fn thread_switches(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {dir}"))? {
        let path = entry?.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !(comm.starts_with("ping") || comm.starts_with("pong")) {
            continue;
        }
        // A thread may end between readdir and read: it no longer counts.
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        total += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    Ok(total)
}
