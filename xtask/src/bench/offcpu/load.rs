//! The tracked load: `Switches.java` under the agent (a JVM jpd joins), and the load
//! threads' own context switches, from /proc.
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::setup::JDK17;

/// Spinning threads of the preempted load: more than the 2 CPUs.
const SPINNING: u32 = 4;

/// A Switches JVM; killed when dropped.
pub(super) struct SwitchJvm(Child);

impl SwitchJvm {
    /// `Switches`: one pair of threads at `round_trips` per second; their contexts in
    /// native slots if `slot` (`publish=slot`), else on the heap (the default).
    pub(super) fn pingpong(
        agent: &Path,
        dir: &Path,
        round_trips: u64,
        slot: bool,
    ) -> Result<SwitchJvm> {
        let options = if slot {
            "profiler=usdt,publish=slot"
        } else {
            "profiler=usdt"
        };
        let args = ["Switches", "1", &round_trips.to_string()];
        SwitchJvm::start(agent, options, dir, &args)
    }

    /// The cpu bench's `CpuLoad`: SPINNING threads (`load-N`) calling small methods, never
    /// blocking.
    pub(super) fn spinning(agent: &Path, dir: &Path) -> Result<SwitchJvm> {
        SwitchJvm::start(
            agent,
            "profiler=usdt",
            dir,
            &["CpuLoad", &SPINNING.to_string(), "0", "1000"],
        )
    }

    /// `main_and_args` under the agent with `options` (`profiler=usdt`: jpd joins it);
    /// it prints `ready` once its threads run.
    fn start(agent: &Path, options: &str, dir: &Path, main_and_args: &[&str]) -> Result<SwitchJvm> {
        let mut child = Command::new(Path::new(JDK17).join("bin/java"))
            .arg(format!("-agentpath:{}={options}", agent.display()))
            .args(["-Xmx64m", "-cp"])
            .arg(dir)
            .args(main_and_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start java")?;
        let stdout = child.stdout.take().context("the load JVM's stdout")?;
        let jvm = SwitchJvm(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("{main_and_args:?} did not start (printed {line:?})");
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
/// `ping…`, `pong…` or `load-…`.
pub(super) fn thread_switches(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {dir}"))? {
        let path = entry?.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !["ping", "pong", "load-"]
            .iter()
            .any(|p| comm.starts_with(p))
        {
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
