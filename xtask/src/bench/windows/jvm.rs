//! A SteadyBench JVM kept running (rounds without end) while windows open and close on it:
//! each round as the bench received it (its CPU time and when it ended), its JIT
//! compilers' CPU, its windows (open through attach, the agent's `.done` read back).
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use super::attach;
use crate::bench::jvm::{harness_cp, rounds, Program};
use crate::bench::report::median;

/// How long a JVM may take to its warm-up's end (SteadyBench stops waiting for a quiet JIT
/// after 60 s; a JVM starved by other work on the machine takes longer still).
pub const WARM_LIMIT: Duration = Duration::from_secs(600);

/// Rounds a kept-running JVM is asked for: more than any bench waits for.
const ENDLESS: &str = "100000000";

/// A round: its working thread's CPU, ns, and when the bench read its line.
#[derive(Clone, Copy)]
pub struct Round {
    pub cpu_ns: f64,
    pub at: Instant,
}

#[derive(Default)]
struct Seen {
    rounds: Vec<Round>,
    /// When the warm-up ended (the `warmed up` line), and whether the JIT was quiet then.
    warmed: Option<(Instant, bool)>,
    ended: bool,
}

/// How to start one: the program, the agent's start option (None: no agent), extra JVM
/// options.
pub struct Spec<'a> {
    pub java: &'a Path,
    pub dir: &'a Path,
    pub program: &'a Program,
    pub agent: Option<String>,
    pub jvm_args: Vec<String>,
}

pub struct LiveJvm {
    child: Child,
    seen: Arc<Mutex<Seen>>,
    pub started: Instant,
    pub key: &'static str,
    stderr: PathBuf,
}

impl LiveJvm {
    pub fn start(spec: &Spec) -> Result<LiveJvm> {
        let mut c = Command::new(spec.java);
        c.current_dir(spec.dir)
            .args(&spec.jvm_args)
            .arg(format!("-Drounds.jitQuiet={}", rounds::JIT_QUIET_ROUNDS));
        if let Some(a) = &spec.agent {
            c.arg(a);
        }
        c.args(["-cp", &format!(".:{}", harness_cp()?), "SteadyBench"])
            .args([spec.program.key, &spec.program.steady_reps.to_string()])
            .args([
                rounds::WARMUP_ROUNDS.to_string(),
                rounds::WARMUP_MS.to_string(),
                ENDLESS.to_string(),
            ])
            .args(&spec.program.steady_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        // What the JVM says on stderr (the agent's messages, a crash) is kept for the error.
        let stderr = spec
            .dir
            .join(format!("{}-{}.stderr", spec.program.key, unix_ms() as u64));
        c.stderr(
            std::fs::File::create(&stderr)
                .with_context(|| format!("cannot create {}", stderr.display()))?,
        );
        let mut child = c.spawn().context("cannot start java")?;
        let stdout = child.stdout.take().context("the JVM's stdout")?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let at = Instant::now();
                let w: Vec<&str> = line.split_whitespace().collect();
                let Ok(mut s) = sink.lock() else { break };
                match w.as_slice() {
                    ["round", _, "cpu_ns", cpu, ..] => {
                        if let Ok(cpu_ns) = cpu.parse() {
                            s.rounds.push(Round { cpu_ns, at });
                        }
                    }
                    ["warmed", "up", _, "jit_quiet", q] => s.warmed = Some((at, *q == "true")),
                    _ => {}
                }
            }
            if let Ok(mut s) = sink.lock() {
                s.ended = true;
            }
        });
        Ok(LiveJvm {
            child,
            seen,
            started: Instant::now(),
            key: spec.program.key,
            stderr,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn with<T>(&self, f: impl FnOnce(&Seen) -> T) -> Result<T> {
        let s = self
            .seen
            .lock()
            .map_err(|_| anyhow::anyhow!("reader panicked"))?;
        Ok(f(&s))
    }

    /// Waits for the end of its warm-up (at most `limit`); whether the JIT was quiet then.
    pub fn warmed(&mut self, limit: Duration) -> Result<bool> {
        loop {
            if let Some((_, quiet)) = self.with(|s| s.warmed)? {
                return Ok(quiet);
            }
            self.check_alive()?;
            if self.started.elapsed() > limit {
                bail!("{}: not warmed up after {limit:?}", self.key);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Fails if the JVM has exited (a crash during a switch).
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let said = std::fs::read_to_string(&self.stderr).unwrap_or_default();
            let tail: Vec<&str> = said.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "the {} JVM exited: {status}; its stderr ({}) ends with:\n{}",
                self.key,
                self.stderr.display(),
                tail.join("\n")
            );
        }
        Ok(())
    }

    /// Rounds that ended in [from, to).
    pub fn rounds_between(&self, from: Instant, to: Instant) -> Result<Vec<Round>> {
        self.with(|s| {
            s.rounds
                .iter()
                .filter(|r| r.at >= from && r.at < to)
                .copied()
                .collect()
        })
    }

    /// Median CPU per round (ns) of the rounds that ended in [from, to), and their count;
    /// waits until one round ended at or after `to` so that none is missing.
    pub fn median_between(&mut self, from: Instant, to: Instant) -> Result<(f64, usize)> {
        while Instant::now() < to || self.with(|s| s.rounds.last().is_none_or(|r| r.at < to))? {
            self.check_alive()?;
            if Instant::now() > to + Duration::from_secs(120) {
                bail!("{}: no round ended in the 120 s after {to:?}", self.key);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut v: Vec<f64> = self
            .rounds_between(from, to)?
            .iter()
            .map(|r| r.cpu_ns)
            .collect();
        Ok((median(&mut v), v.len()))
    }

    /// CPU time of its JIT compiler threads (`C1 CompilerThre…`, `C2 CompilerThre…`), ns.
    pub fn jit_cpu_ns(&self) -> f64 {
        compiler_threads_cpu_ns(self.pid())
    }

    /// CPU of the JVM's VM thread, which does the work of a safepoint's operation (the
    /// `RedefineClasses` of a switch) while every Java thread waits.
    pub fn vm_thread_cpu_ns(&self) -> f64 {
        threads_cpu_ns(self.pid(), |comm| comm.starts_with("VM Thread"))
    }
}

impl Drop for LiveJvm {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU of a process's JIT compiler threads, from each thread's `comm` and `schedstat`.
pub fn compiler_threads_cpu_ns(pid: u32) -> f64 {
    threads_cpu_ns(pid, |comm| {
        comm.starts_with("C1 Compiler") || comm.starts_with("C2 Compiler")
    })
}

/// CPU of the threads of a process whose `comm` `wanted` accepts (their `schedstat`).
fn threads_cpu_ns(pid: u32, wanted: impl Fn(&str) -> bool) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let mut total = 0.0;
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !wanted(&comm) {
            continue;
        }
        // A thread may end between readdir and read: it no longer counts.
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    total
}

pub fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(f64::NAN)
}

/// A window's result as the agent wrote it: the `.done` lines.
pub type Done = BTreeMap<String, String>;

/// A figure of a `.done` (NaN if it is missing).
pub fn num(done: &Done, key: &str) -> f64 {
    done.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// An open window: what the request cost, and where its result will be.
pub struct Opened {
    pub id: u64,
    pub requested_unix_ms: f64,
    pub answered_unix_ms: f64,
    pub answered: Instant,
    pub wall: Duration,
    done: PathBuf,
}

/// `window=open,id=ID,seconds=S,dir=DIR[,SCOPE]` on JVM `pid`; fails unless accepted.
pub fn open_window(
    pid: u32,
    lib: &str,
    dir: &Path,
    id: u64,
    seconds: u32,
    scope: &str,
) -> Result<Opened> {
    let command = format!(
        "window=open,id={id},seconds={seconds},dir={}{scope}",
        dir.display()
    );
    let requested_unix_ms = unix_ms();
    let loaded = attach::load_agent(pid, lib, &command)?;
    let answered = Instant::now();
    if loaded.code != 0 {
        let error =
            std::fs::read_to_string(dir.join(format!("window-{id}.error"))).unwrap_or_default();
        bail!(
            "JVM {pid}: window {id} refused ({}): {}",
            loaded.code,
            error.trim()
        );
    }
    Ok(Opened {
        id,
        requested_unix_ms,
        answered_unix_ms: unix_ms(),
        answered,
        wall: loaded.wall,
        done: dir.join(format!("window-{id}.done")),
    })
}

/// `window=close,id=ID`: the agent closes the window at once.
pub fn close_window(pid: u32, lib: &str, id: u64) -> Result<()> {
    let loaded = attach::load_agent(pid, lib, &format!("window=close,id={id}"))?;
    if loaded.code != 0 {
        bail!("JVM {pid}: closing window {id} refused ({})", loaded.code);
    }
    Ok(())
}

impl Opened {
    /// Waits for its `.done` (at most `limit`): the agent's figures of the window.
    pub fn done(&self, jvm: &mut LiveJvm, limit: Duration) -> Result<Done> {
        let t0 = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&self.done) {
                return Ok(parse_done(&text));
            }
            jvm.check_alive()?;
            if t0.elapsed() > limit {
                bail!(
                    "window {}: no {} after {limit:?}",
                    self.id,
                    self.done.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn parse_done(text: &str) -> Done {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// A directory for window results, created fresh.
pub fn window_dir(dir: &Path, name: &str) -> Result<PathBuf> {
    let d = dir.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}
