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
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::cgroups::FleetGroups;
use super::kernel::{task_cpu_ns, Jpd};
use super::report::{median, write_section};
use crate::build::Deliverables;
use crate::cmd::root;
use crate::setup::JDK17;

const WINDOW: Duration = Duration::from_secs(10);
const EXPORT: &str = "127.0.0.1:9477";

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Window {
    at_s: f64,
    cpu_pct: f64,
    rss_mib: f64,
    scrape_ms: f64,
    top_ms: f64,
    nodes: u64,
}

pub fn run(out: &Deliverables) -> Result<()> {
    let jvms = env_num("JP_FLEET_JVMS", 20) as usize;
    let threads = env_num("JP_FLEET_THREADS", 50);
    let seconds = env_num("JP_FLEET_SECONDS", 180);
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
    let socket = dir.join("jpd.sock");
    let stop = dir.join("stop");
    let _ = std::fs::remove_file(&stop);

    let groups = FleetGroups::create()?;
    FleetGroups::enter(&groups.client, std::process::id())?;
    let mut jpd = Jpd::start_with(out, &socket, Some(&config))?;
    FleetGroups::enter(&groups.jpd, jpd.pid())?;
    eprintln!("xtask: bench fleet: {jvms} JVMs × {threads} threads for {seconds} s");
    let mut fleet = Fleet(Vec::new());
    let children = &mut fleet.0;
    for _ in 0..jvms {
        children.push(
            Command::new(Path::new(JDK17).join("bin/java"))
                .arg(format!(
                    "-agentpath:{}=granularity=100000",
                    out.agent_lib.display()
                ))
                .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
                .arg(&dir)
                .arg("FleetWork")
                .arg(threads.to_string())
                .arg(&stop)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .context("cannot start java")?,
        );
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    for pid in &pids {
        FleetGroups::enter(&groups.workload, *pid)?;
    }
    wait_all_listed(out, &socket, &pids, Duration::from_secs(120))?;

    let t0 = Instant::now();
    let mut windows = Vec::new();
    let mut restart = None;
    let mut cpu_prev = (task_cpu_ns(jpd.pid())?, Instant::now());
    while t0.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(WINDOW);
        if restart.is_none() && t0.elapsed() >= Duration::from_secs(seconds / 2) {
            eprintln!("xtask: bench fleet: kill -9 jpd, start it again");
            jpd.kill9();
            let r0 = Instant::now();
            jpd = Jpd::start_with(out, &socket, Some(&config))?;
            FleetGroups::enter(&groups.jpd, jpd.pid())?;
            wait_all_listed(out, &socket, &pids, Duration::from_secs(120))?;
            let mut alive = 0;
            for c in children.iter_mut() {
                if matches!(c.try_wait(), Ok(None)) {
                    alive += 1;
                }
            }
            restart = Some((r0.elapsed().as_secs_f64(), alive));
            cpu_prev = (task_cpu_ns(jpd.pid())?, Instant::now());
            continue;
        }
        let cpu_now = (task_cpu_ns(jpd.pid())?, Instant::now());
        let cpu_pct = (cpu_now.0 - cpu_prev.0) as f64
            / 1e9
            / cpu_now.1.duration_since(cpu_prev.1).as_secs_f64()
            * 100.0;
        cpu_prev = cpu_now;
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
            &socket,
            &[
                "jvm",
                "top",
                &pids[windows.len() % pids.len()].to_string(),
                "-n",
                "20",
            ],
        )?;
        let top_ms = q0.elapsed().as_secs_f64() * 1e3;
        let status = jpctl_json(out, &socket, &["status", "--json"])?;
        windows.push(Window {
            at_s: t0.elapsed().as_secs_f64(),
            cpu_pct,
            rss_mib: rss_kib(jpd.pid()) as f64 / 1024.0,
            scrape_ms,
            top_ms,
            nodes: status["jvm"]["nodes"].as_u64().unwrap_or(0),
        });
    }

    // Normal end: every thread's last record and the JVM's end go out.
    std::fs::write(&stop, b"")?;
    for c in children.iter_mut() {
        let _ = c.wait();
    }
    std::thread::sleep(Duration::from_secs(2));
    let list = jpctl_json(out, &socket, &["jvm", "list", "--json"])?;
    let status = jpctl_json(out, &socket, &["status", "--json"])?;
    jpd.stop();
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
    let reasons: Vec<String> = entries
        .iter()
        .filter_map(|j| j["incomplete_reason"].as_str().map(str::to_string))
        .collect();
    body(
        jvms,
        threads,
        seconds,
        &mut windows,
        restart,
        entries.len(),
        complete,
        lost_complete,
        &reasons,
        &status,
    )
}

#[allow(clippy::too_many_arguments)]
fn body(
    jvms: usize,
    threads: u64,
    seconds: u64,
    windows: &mut [Window],
    restart: Option<(f64, usize)>,
    held: usize,
    complete: usize,
    lost_complete: usize,
    reasons: &[String],
    status: &Value,
) -> Result<()> {
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
    let mut reasons: Vec<String> = reasons.to_vec();
    reasons.sort();
    reasons.dedup();
    let body = format!(
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
    );
    write_section("fleet", &body)
}

/// The JVMs: killed if the benchmark stops half-way (they would load the machine forever).
struct Fleet(Vec<Child>);

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

fn jpctl(out: &Deliverables, socket: &Path, args: &[&str]) -> Result<String> {
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
pub(super) fn jpctl_json(out: &Deliverables, socket: &Path, args: &[&str]) -> Result<Value> {
    serde_json::from_str(&jpctl(out, socket, args)?)
        .with_context(|| format!("jpctl {args:?}: not JSON"))
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

/// A process's resident memory in KiB (0 once it has gone).
pub(super) fn rss_kib(pid: u32) -> u64 {
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
