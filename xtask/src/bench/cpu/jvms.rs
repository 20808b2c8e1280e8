//! The CpuLoad JVMs the parts run, jpd's configuration for them, and what jpd says of
//! them (`jpctl jvm list`, `jpctl jvm top --by cpu`).
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::java;
use crate::bench::harness::jpctl_json;
use crate::build::Deliverables;

/// A CpuLoad JVM; killed when dropped (a bench that stops half-way must not leave load).
pub(super) struct Load(Child);

impl Load {
    /// `agent`: the agent's options, if it runs with the agent.
    pub(super) fn start(
        out: &Deliverables,
        dir: &Path,
        agent: Option<&str>,
        jvm_args: &[&str],
        threads: u32,
        sleep_ms: u32,
        work: u32,
    ) -> Result<Load> {
        let mut cmd = Command::new(java());
        if let Some(options) = agent {
            cmd.arg(format!("-agentpath:{}={options}", out.agent_lib.display()));
        }
        let child = cmd
            .args(jvm_args)
            .arg("-cp")
            .arg(dir)
            .arg("CpuLoad")
            .args([threads, sleep_ms, work].map(|v| v.to_string()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start java")?;
        Ok(Load(child))
    }

    /// Waits for its `ready` line (every thread started).
    pub(super) fn ready(&mut self) -> Result<()> {
        let stdout = self.0.stdout.take().context("CpuLoad's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("CpuLoad did not start (printed {line:?})");
        }
        Ok(())
    }

    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// What a bench's jpd runs with: the join, and off-CPU time (`kernel.offcpu`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::bench) struct JpdSetting {
    pub join: bool,
    pub offcpu: bool,
}

/// A jpd configuration: the join on or off; JVMs found within half a second.
pub(super) fn jpd_config(dir: &Path, join: bool) -> Result<PathBuf> {
    jpd_config_with(
        dir,
        JpdSetting {
            join,
            offcpu: false,
        },
    )
}

/// A jpd configuration of `setting`; JVMs found within half a second.
pub(in crate::bench) fn jpd_config_with(dir: &Path, setting: JpdSetting) -> Result<PathBuf> {
    let JpdSetting { join, offcpu } = setting;
    let path = dir.join(format!("jpd-join-{join}-offcpu-{offcpu}.toml"));
    let mut body = String::new();
    if !join {
        body.push_str("[kernel]\njvm_contexts = false\n\n");
    } else if offcpu {
        body.push_str("[kernel]\noffcpu = true\n\n");
    }
    body.push_str("[usdt]\nscan_interval_ms = 500\n");
    std::fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The running JVMs jpd lists: (pid, joined, main), joined = the `cpu` field is there.
pub(in crate::bench) fn jvm_list(
    out: &Deliverables,
    socket: &Path,
) -> Result<Vec<(u32, bool, String)>> {
    let v = jpctl_json(out, socket, &["jvm", "list", "--json"])?;
    Ok(v["jvms"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            (
                j["pid"].as_u64().unwrap_or(0) as u32,
                j.get("cpu").is_some(),
                j["main"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect())
}

/// CPU jpd counted under the JVM's resolved contexts (`jpctl jvm top --by cpu`): more than
/// 0 only if the sampler read its threads' slots, not just counted its threads by name.
pub(in crate::bench) fn context_cpu_ns(out: &Deliverables, socket: &Path, pid: u32) -> Result<u64> {
    let v = jpctl_json(
        out,
        socket,
        &[
            "jvm",
            "top",
            &pid.to_string(),
            "--by",
            "cpu",
            "-n",
            "20",
            "--json",
        ],
    )?;
    Ok(v["methods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["cpu_ns"].as_u64())
        .sum())
}

/// Polls `ready` every 500 ms until it says yes; fails after `limit` naming `what`.
pub(in crate::bench) fn wait_for(
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if ready().unwrap_or(false) {
            return Ok(());
        }
        if t0.elapsed() > limit {
            bail!("{what}: not after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The pid of a JVM of main class `main` that jpd joined (listed, exited or not, with a
/// `cpu` field), if any.
pub(super) fn joined_pid(out: &Deliverables, socket: &Path, main: &str) -> Result<Option<u32>> {
    Ok(jvm_list(out, socket)?
        .into_iter()
        .find(|(_, j, m)| *j && m.contains(main))
        .map(|(pid, _, _)| pid))
}
