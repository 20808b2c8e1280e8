//! `cargo xtask bench fleet`: jpd under a fleet host's load. JVMS JVMs with THREADS threads
//! each report at a high rate (granularity 100 000 bytecodes) while the kernel is sampled at
//! 997 Hz, for a few minutes. Every window: jpd's CPU and resident memory, one Prometheus
//! scrape of /metrics and one `jpctl jvm top`, timed. Half-way jpd is killed with SIGKILL and
//! started again (what systemd's Restart= does): the JVMs must keep running and their
//! profiles resume. At the end the JVMs stop normally and jpd must hold each one, saying
//! whether it is complete — never complete with records it lost and did not get back.
//!
//! jpd, the JVMs and the clients (this process, jpctl, the scrape) run in three sibling CPU
//! cgroups of equal weight, as systemd places a service, the workload's services and a
//! login session (see `cgroups`).
//!
//! Sizes from the environment: `JP_FLEET_JVMS` (20), `JP_FLEET_THREADS` (50),
//! `JP_FLEET_SECONDS` (180).
//!
//! The `rotation` part ([`rotation`]) runs the same fleet with the agent dormant and jpd's
//! fleet rotation on and off in turns.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::cgroups::FleetGroups;
use super::harness::{env_num, jpctl, jpctl_json, rss_kib, task_cpu_ns, Jpd};
use super::report::{median, write_section};
use crate::build::Deliverables;
use crate::cmd::root;
use crate::setup::JDK17;

mod rotation;

const WINDOW: Duration = Duration::from_secs(10);
const EXPORT: &str = "127.0.0.1:9477";

/// The fleet's size, from the environment.
struct Sizes {
    jvms: usize,
    threads: u64,
    seconds: u64,
}

impl Sizes {
    fn from_env() -> Sizes {
        Sizes {
            jvms: env_num("JP_FLEET_JVMS", 20) as usize,
            threads: env_num("JP_FLEET_THREADS", 50),
            seconds: env_num("JP_FLEET_SECONDS", 180),
        }
    }
}

/// The scratch directory's files: FleetWork's classes, jpd's configuration and socket,
/// and the file whose creation tells every JVM to stop.
struct Files {
    dir: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    stop: PathBuf,
}

impl Files {
    fn prepare() -> Result<Files> {
        let dir = std::env::temp_dir().join(format!("jp-bench-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let javac = Path::new(JDK17).join("bin/javac");
        crate::cmd::run(
            Command::new(javac)
                .arg("-d")
                .arg(&dir)
                .arg(root().join("xtask/bench-inputs/fleet/FleetWork.java")),
        )?;
        let config = dir.join("jpd.toml");
        std::fs::write(
            &config,
            format!(
                "[export]\nenabled = true\nlisten = \"{EXPORT}\"\n[usdt]\nscan_interval_ms = 500\n"
            ),
        )?;
        let stop = dir.join("stop");
        let _ = std::fs::remove_file(&stop);
        Ok(Files {
            socket: dir.join("jpd.sock"),
            config,
            stop,
            dir,
        })
    }
}

struct Window {
    at_s: f64,
    cpu_pct: f64,
    rss_mib: f64,
    scrape_ms: f64,
    top_ms: f64,
    nodes: u64,
}

/// jpd's restart half-way: seconds until it held every JVM again, JVMs alive after it.
type Restart = Option<(f64, usize)>;

/// What jpd holds once every JVM has ended normally.
struct End {
    held: usize,
    complete: usize,
    /// Complete after losing records that a re-send recovered.
    lost_complete: usize,
    reasons: Vec<String>,
    status: Value,
}

/// The fleet bench's parts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// jpd under load: JVMs reporting, kill -9 and restart.
    Load,
    /// The fleet rotation's cost: dormant JVMs with the rotation on and off in turns.
    Rotation,
}

pub fn run(out: &Deliverables, parts: &[Part]) -> Result<()> {
    let all = parts.is_empty();
    if all || parts.contains(&Part::Load) {
        run_load(out)?;
    }
    if all || parts.contains(&Part::Rotation) {
        rotation::run(out)?;
    }
    Ok(())
}

fn run_load(out: &Deliverables) -> Result<()> {
    let sizes = Sizes::from_env();
    let files = Files::prepare()?;
    let groups = FleetGroups::create()?;
    FleetGroups::enter(&groups.client, std::process::id())?;
    let mut jpd = start_jpd(out, &files, &groups)?;
    eprintln!(
        "xtask: bench fleet: {} JVMs × {} threads for {} s",
        sizes.jvms, sizes.threads, sizes.seconds
    );
    let jvms = FleetJvms {
        count: sizes.jvms,
        threads: sizes.threads,
        agent_options: "granularity=100000",
        pause_ms: 1,
    };
    let mut fleet = Fleet::start(out, &files, &jvms, &groups)?;
    let pids = fleet.pids();
    wait_all_listed(out, &files.socket, &pids, Duration::from_secs(120))?;
    let (windows, restart) = measure(out, &files, &groups, &mut jpd, &mut fleet, &sizes)?;
    let end = finish(out, &files, &mut jpd, &mut fleet)?;
    write_section("fleet", &render(&sizes, &windows, restart, &end))
}

/// jpd with the fleet's configuration, in its cgroup.
fn start_jpd(out: &Deliverables, files: &Files, groups: &FleetGroups) -> Result<Jpd> {
    let jpd = Jpd::start_with(out, &files.socket, Some(&files.config))?;
    FleetGroups::enter(&groups.jpd, jpd.pid())?;
    Ok(jpd)
}

/// A window every WINDOW for the run's length; half-way, jpd killed and started again.
fn measure(
    out: &Deliverables,
    files: &Files,
    groups: &FleetGroups,
    jpd: &mut Jpd,
    fleet: &mut Fleet,
    sizes: &Sizes,
) -> Result<(Vec<Window>, Restart)> {
    let pids = fleet.pids();
    let t0 = Instant::now();
    let mut windows = Vec::new();
    let mut restart = None;
    let mut cpu_prev = (task_cpu_ns(jpd.pid())?, Instant::now());
    while t0.elapsed() < Duration::from_secs(sizes.seconds) {
        std::thread::sleep(WINDOW);
        if restart.is_none() && t0.elapsed() >= Duration::from_secs(sizes.seconds / 2) {
            eprintln!("xtask: bench fleet: kill -9 jpd, start it again");
            jpd.kill9();
            let r0 = Instant::now();
            *jpd = start_jpd(out, files, groups)?;
            wait_all_listed(out, &files.socket, &pids, Duration::from_secs(120))?;
            restart = Some((r0.elapsed().as_secs_f64(), fleet.alive()));
            cpu_prev = (task_cpu_ns(jpd.pid())?, Instant::now());
            continue;
        }
        let cpu_now = (task_cpu_ns(jpd.pid())?, Instant::now());
        let cpu_pct = (cpu_now.0 - cpu_prev.0) as f64
            / 1e9
            / cpu_now.1.duration_since(cpu_prev.1).as_secs_f64()
            * 100.0;
        cpu_prev = cpu_now;
        let top_pid = pids[windows.len() % pids.len()];
        let mut w = probe(out, &files.socket, top_pid)?;
        w.at_s = t0.elapsed().as_secs_f64();
        w.cpu_pct = cpu_pct;
        w.rss_mib = rss_kib(jpd.pid()) as f64 / 1024.0;
        windows.push(w);
    }
    Ok((windows, restart))
}

/// One window's clients: a scrape and a `jpctl jvm top` of `top_pid`, timed, and the
/// nodes jpd holds (jpd's own figures are the caller's).
fn probe(out: &Deliverables, socket: &Path, top_pid: u32) -> Result<Window> {
    // A slow answer is a result, not an error: timed (up to a minute) and shown.
    let s0 = Instant::now();
    let metrics = scrape()?;
    let scrape_ms = s0.elapsed().as_secs_f64() * 1e3;
    if !metrics.contains("jp_jvm_bytecodes_total") {
        bail!("the scrape has no jp_jvm_bytecodes_total");
    }
    let q0 = Instant::now();
    jpctl(
        out,
        socket,
        &["jvm", "top", &top_pid.to_string(), "-n", "20"],
    )?;
    let top_ms = q0.elapsed().as_secs_f64() * 1e3;
    let status = jpctl_json(out, socket, &["status", "--json"])?;
    Ok(Window {
        at_s: 0.0,
        cpu_pct: 0.0,
        rss_mib: 0.0,
        scrape_ms,
        top_ms,
        nodes: status["jvm"]["nodes"].as_u64().unwrap_or(0),
    })
}

/// Normal end: every thread's last record and the JVM's end go out; then what jpd holds.
fn finish(out: &Deliverables, files: &Files, jpd: &mut Jpd, fleet: &mut Fleet) -> Result<End> {
    std::fs::write(&files.stop, b"")?;
    fleet.wait();
    std::thread::sleep(Duration::from_secs(2));
    let list = jpctl_json(out, &files.socket, &["jvm", "list", "--json"])?;
    let status = jpctl_json(out, &files.socket, &["status", "--json"])?;
    jpd.stop();
    let pids = fleet.pids();
    let entries: Vec<&Value> = list["jvms"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|j| pids.contains(&(j["pid"].as_u64().unwrap_or(0) as u32)))
                .collect()
        })
        .unwrap_or_default();
    let complete = entries.iter().filter(|j| j["complete"] == true).count();
    let lost_complete = entries
        .iter()
        .filter(|j| j["complete"] == true && j["records_lost"].as_u64().unwrap_or(0) > 0)
        .count();
    let mut reasons: Vec<String> = entries
        .iter()
        .filter_map(|j| j["incomplete_reason"].as_str().map(str::to_string))
        .collect();
    reasons.sort();
    reasons.dedup();
    Ok(End {
        held: entries.len(),
        complete,
        lost_complete,
        reasons,
        status,
    })
}

/// The `fleet` section of BENCHMARKS.md.
fn render(sizes: &Sizes, windows: &[Window], restart: Restart, end: &End) -> String {
    let Sizes {
        jvms,
        threads,
        seconds,
    } = *sizes;
    let End {
        held,
        complete,
        lost_complete,
        ref reasons,
        ref status,
    } = *end;
    let mut rows = String::new();
    for w in windows.iter() {
        rows.push_str(&format!(
            "| {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
            w.at_s, w.cpu_pct, w.rss_mib, w.scrape_ms, w.top_ms, w.nodes
        ));
    }
    let mut scrape: Vec<f64> = windows.iter().map(|w| w.scrape_ms).collect();
    let mut top: Vec<f64> = windows.iter().map(|w| w.top_ms).collect();
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let (restart_s, alive) = restart.unwrap_or((f64::NAN, 0));
    let j = &status["jvm"];
    format!(
        "## A fleet host under load: `cargo xtask bench fleet`\n\n\
         {jvms} JVMs (JDK 17, C1 only) × {threads} threads calling small methods, reporting \
         every 100 000 bytecodes, kernel sampling at 997 Hz, {seconds} s; jpd SIGKILLed and \
         started again half-way. jpd, the JVMs and the clients in three sibling CPU cgroups of \
         equal weight, as systemd places jpd.service, the workload's services and a login \
         session. Per {}-second window: jpd's CPU (% of one core), resident \
         memory, a Prometheus scrape of /metrics and a `jpctl jvm top` (process start \
         included), and the MCT nodes jpd holds.\n\n\
         | s | jpd CPU % | RSS MiB | scrape ms | jvm top ms | nodes |\n|---:|---:|---:|---:|---:|---:|\n{rows}\n\
         Scrape: median {:.1} ms, max {:.1} ms; `jpctl jvm top`: median {:.1} ms, max {:.1} ms \
         (goal: both under 100 ms). Restart: jpd was back and held all {jvms} JVMs again after \
         {restart_s:.1} s; JVMs alive after the kill: {alive} of {jvms}.\n\n\
         At the end (normal exit of every JVM): jpd held {held} of {jvms}, {complete} complete; \
         complete after losing records that a re-send recovered (every stream that lost \
         records sent its whole state again): {lost_complete}. Records {}, lost (sequence \
         gaps) {}, ring buffer full {}, malformed {}. Reasons given for incomplete JVMs: {}.\n",
        WINDOW.as_secs(),
        median(&mut scrape),
        max(&scrape),
        median(&mut top),
        max(&top),
        j["records"],
        j["lost"],
        j["ring_full"],
        j["malformed"],
        if reasons.is_empty() {
            "none".to_string()
        } else {
            reasons.join("; ")
        }
    )
}

/// The fleet's JVMs: how many, their threads, the agent's options.
struct FleetJvms {
    count: usize,
    threads: u64,
    agent_options: &'static str,
    /// Each thread's pause between rounds of calls (ms).
    pause_ms: u64,
}

/// The JVMs: killed if the benchmark stops half-way (they would load the machine forever).
struct Fleet(Vec<Child>);

impl Fleet {
    /// The JVMs with the agent and its options, in their cgroup.
    fn start(
        out: &Deliverables,
        files: &Files,
        jvms: &FleetJvms,
        groups: &FleetGroups,
    ) -> Result<Fleet> {
        let mut fleet = Fleet(Vec::new());
        for _ in 0..jvms.count {
            let child = Command::new(Path::new(JDK17).join("bin/java"))
                .arg(format!(
                    "-agentpath:{}={}",
                    out.agent_lib.display(),
                    jvms.agent_options
                ))
                .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
                .arg(&files.dir)
                .arg("FleetWork")
                .arg(jvms.threads.to_string())
                .arg(&files.stop)
                .arg(jvms.pause_ms.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .context("cannot start java")?;
            fleet.0.push(child);
        }
        for pid in fleet.pids() {
            FleetGroups::enter(&groups.workload, pid)?;
        }
        Ok(fleet)
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }

    /// JVMs still running.
    fn alive(&mut self) -> usize {
        self.0
            .iter_mut()
            .filter_map(|c| matches!(c.try_wait(), Ok(None)).then_some(()))
            .count()
    }

    /// Waits for every JVM to end.
    fn wait(&mut self) {
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn scrape() -> Result<String> {
    let mut s = TcpStream::connect(EXPORT).context("connect to the exporter")?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    if !text.starts_with("HTTP/1.0 200") && !text.starts_with("HTTP/1.1 200") {
        bail!("scrape failed: {}", text.lines().next().unwrap_or(""));
    }
    Ok(text)
}

fn wait_all_listed(out: &Deliverables, socket: &Path, pids: &[u32], limit: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let list = jpctl_json(out, socket, &["jvm", "list", "--json"]).unwrap_or_default();
        let listed = list["jvms"]
            .as_array()
            .map(|a| {
                pids.iter()
                    .filter(|p| a.iter().any(|j| j["pid"].as_u64() == Some(u64::from(**p))))
                    .count()
            })
            .unwrap_or(0);
        if listed == pids.len() {
            return Ok(());
        }
        if t0.elapsed() > limit {
            bail!("jpd lists {listed} of {} JVMs after {limit:?}", pids.len());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
