//! HotSpot's dynamic attach, as `jcmd` speaks it, from the bench's own process: a `jcmd`
//! run is a JVM start-up of its own (~0.5 s of CPU on this 2-core machine), which would
//! land in the very measurements it triggers (the JVM's JIT CPU after a switch, its rounds).
//! `jcmd PID JVMTI.agent_load LIB OPTIONS` sends the same `load` request.
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// What a `load` answered: the agent's `Agent_OnAttach` return code, and the wall time from
/// the request to the answer.
pub struct Loaded {
    pub code: i32,
    pub wall: Duration,
}

fn socket_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root/tmp/.java_pid{pid}"))
}

/// Connects to the JVM's attach listener, starting it first if needed (an `.attach_pid`
/// file in its working directory, then SIGQUIT: the JVM looks for that file on SIGQUIT).
fn connect(pid: u32) -> Result<UnixStream> {
    let socket = socket_path(pid);
    if let Ok(s) = UnixStream::connect(&socket) {
        return Ok(s);
    }
    let trigger = PathBuf::from(format!("/proc/{pid}/cwd/.attach_pid{pid}"));
    std::fs::write(&trigger, b"")
        .with_context(|| format!("cannot create {}", trigger.display()))?;
    // SAFETY: kill sends a signal to a JVM this bench started; no memory is involved.
    unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
    let t0 = Instant::now();
    let result = loop {
        if let Ok(s) = UnixStream::connect(&socket) {
            break Ok(s);
        }
        if t0.elapsed() > Duration::from_secs(10) {
            break Err(anyhow::anyhow!(
                "JVM {pid}: no attach listener at {} after 10 s",
                socket.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = std::fs::remove_file(&trigger);
    result
}

/// One attach request (protocol 1: the command and three arguments, each NUL-terminated);
/// the JVM's answer: its status line, then the command's output.
pub fn request(pid: u32, command: &str, args: [&str; 3]) -> Result<(i32, String)> {
    let mut s = connect(pid)?;
    s.set_read_timeout(Some(Duration::from_secs(600)))?;
    let mut msg = Vec::new();
    for part in ["1", command, args[0], args[1], args[2]] {
        msg.extend_from_slice(part.as_bytes());
        msg.push(0);
    }
    s.write_all(&msg)
        .with_context(|| format!("JVM {pid}: cannot send {command}"))?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .with_context(|| format!("JVM {pid}: no answer to {command}"))?;
    let (status, rest) = reply.split_once('\n').unwrap_or((reply.as_str(), ""));
    let status = status
        .trim()
        .parse::<i32>()
        .with_context(|| format!("JVM {pid}: {command} answered {reply:?}"))?;
    Ok((status, rest.to_string()))
}

/// `jcmd PID JVMTI.agent_load LIB OPTIONS`: loads the agent (once per JVM: HotSpot keeps a
/// library it loaded and calls its `Agent_OnAttach` again) and hands it `options`.
pub fn load_agent(pid: u32, lib: &str, options: &str) -> Result<Loaded> {
    let t0 = Instant::now();
    let (status, out) = request(pid, "load", [lib, "true", options])?;
    let wall = t0.elapsed();
    if status != 0 {
        bail!(
            "JVM {pid}: load {lib} {options:?} failed ({status}): {}",
            out.trim()
        );
    }
    Ok(Loaded {
        code: agent_code(&out).with_context(|| format!("JVM {pid}: load answered {out:?}"))?,
        wall,
    })
}

/// `Agent_OnAttach`'s return code in a `load` answer: HotSpot prints `return code: N`.
fn agent_code(out: &str) -> Option<i32> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("return code:"))
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| out.trim().parse().ok())
}

/// A diagnostic command (`jcmd PID CMD`), its output.
pub fn jcmd(pid: u32, command: &str) -> Result<String> {
    let (status, out) = request(pid, "jcmd", [command, "", ""])?;
    if status != 0 {
        bail!(
            "JVM {pid}: jcmd {command} failed ({status}): {}",
            out.trim()
        );
    }
    Ok(out)
}

/// Metaspace in use, KiB, from `VM.metaspace` (like `jcmd PID VM.metaspace`) after a full
/// GC: its total
/// line, `Both:  420 chunks, 11.84 MB capacity, 9.28 MB ( 78%) committed, 9.19 MB ( 78%)
/// used, …` (JDK 25's `GC.heap_info` no longer prints metaspace). A full GC first (`GC.run`): it unloads what can go, the old versions of retransformed
/// methods included, which otherwise stay until some later GC.
pub fn metaspace_used_kib(pid: u32) -> Result<f64> {
    jcmd(pid, "GC.run")?;
    let out = jcmd(pid, "VM.metaspace")?;
    parse_metaspace_used(&out).with_context(|| format!("no `Both:` total in {out:.400}"))
}

fn parse_metaspace_used(out: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.trim_start().starts_with("Both:"))?;
    let used = line
        .split(',')
        .find(|part| part.trim_end().ends_with("used"))?;
    let mut words = used.split_whitespace();
    let value: f64 = words.next()?.parse().ok()?;
    let kib = match words.next()? {
        "bytes" => value / 1024.0,
        "KB" => value,
        "MB" => value * 1024.0,
        "GB" => value * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(kib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_answer_and_the_metaspace_line_are_read() {
        assert_eq!(agent_code("return code: 2\n"), Some(2));
        assert_eq!(agent_code("0\n"), Some(0));
        assert_eq!(agent_code("Agent_OnAttach failed\n"), None);
        let meta = "Total Usage - 41 loaders, 2856 classes (1194 shared):\n      Class:  115 chunks,      1.29 MB capacity,    1.16 MB ( 90%) committed,     1.12 MB ( 87%) used,    38.31 KB (  3%) free\n       Both:  420 chunks,     11.84 MB capacity,    9.28 MB ( 78%) committed,     9.19 MB ( 78%) used,    92.79 KB ( <1%) free,     0 bytes (  0%) waste\n";
        assert_eq!(parse_metaspace_used(meta), Some(9.19 * 1024.0));
    }
}
