//! The scene every attack plays in: the delivered jpd with its default configuration,
//! a real JVM with the real agent running the `Phases` workload beside the attack, a
//! sampler that watches jpd from outside, and the checks of the goals at the end.
//!
//! The sampler reads jpd's `VmRSS`/`VmHWM` and asks `jpctl status --json` every
//! [`TICK`], noting each answer that took longer than [`STATUS_WITHIN`]; it also reads
//! the real JVM's control generation, so that every re-send jpd asks of that JVM is
//! seen, whoever caused it. Above [`SAFETY_CEILING`] it kills jpd: an attack that
//! succeeds must not take the shared host down with it.
//!
//! With `JP_HOSTILE_MEASURE=FILE` (set by `cargo xtask bench hostile`) the scene also
//! measures jpd's CPU over the attack and the share of the real JVM's CPU under its
//! contexts, and appends them to FILE as one JSON line; the tests themselves judge no
//! timing. The real JVM's throughput is the `throughput` test's.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::jpd::{metric, Jpd};
use crate::support::tree::{assert_same_tree, read_json, strip_cpu};
use crate::support::usdt::fake_agent::{self, Agent};
use jp_common::wire::AGENT_LIBRARY;
use jp_daemon::usdt::control;
use jp_testkit::jdk::Jdk;

/// How often the sampler looks.
pub const TICK: Duration = Duration::from_millis(200);
/// `jpctl status` must answer within this, throughout.
pub const STATUS_WITHIN: Duration = Duration::from_secs(1);
/// The global JVM store budget of jpd's default configuration (`[usdt] max_store_mib`):
/// no attack may grow jpd's resident memory by more than this.
pub const STORE_BUDGET_BYTES: u64 = 512 << 20;
/// Re-sends jpd may ask of the real JVM during one attack it did not take part in (a
/// second tracer on the host, or a loss the JVM caused itself, may cost one or two).
pub const MAX_RESENDS: u64 = 2;
/// jpd is killed above this: the attack has made its point.
const SAFETY_CEILING: u64 = 3 << 30;
/// Rounds of the real JVM's workload; [`before_rounds`] of them run before the attack.
const ROUNDS: usize = 40;
/// The first rounds run the JIT's compilations: no measure of the steady workload.
const WARM_UP: usize = 2;
/// Calls of `Phases.work` per round: a round takes a few hundred milliseconds.
const ROUND_SIZE: u32 = 8000;

/// Fast discovery (the only key the scene adds to jpd's defaults): JVMs and fake agents
/// are found within a tenth of a second.
const CONFIG: &str = "[usdt]\nscan_interval_ms = 100\n";

/// What the sampler saw.
#[derive(Default, Debug)]
pub struct Watch {
    pub peak_hwm: u64,
    pub peak_rss: u64,
    pub statuses: u64,
    /// `jpctl status` calls that took longer than [`STATUS_WITHIN`] (or failed).
    pub slow_statuses: Vec<String>,
    /// Control generations seen in the real JVM (each change is a re-send asked).
    pub jvm_generations: Vec<u64>,
    pub killed_at: Option<u64>,
    pub last_status: Option<Value>,
}

pub struct Scene {
    pub jpd: Jpd,
    pub dir: tempfile::TempDir,
    /// The fake agent: a `libjpagent.so` of its own and the program that loads it.
    pub fake_prog: PathBuf,
    jvm: Option<RealJvm>,
    watch: Arc<Mutex<Watch>>,
    stop: Arc<AtomicBool>,
    sampler: Option<std::thread::JoinHandle<()>>,
    baseline_rss: u64,
    attack: Option<(Instant, u64)>,
    attack_window: Option<(Instant, Instant, u64)>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Scene {
    /// jpd with its defaults (and fast discovery plus `extra`), the fake agent built.
    pub fn start(extra: &str) -> Scene {
        let turn = crate::support::exclusive();
        let dir = tempfile::tempdir().expect("temp dir");
        // Fake agents may run as another user: they must reach their program.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the scene's directory");
        // The default library name: jpd's default configuration watches for it.
        let (_, fake_prog) = fake_agent::build(dir.path(), AGENT_LIBRARY);
        let jpd = Jpd::start(&format!("{CONFIG}{extra}"));
        let watch = Arc::new(Mutex::new(Watch::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut scene = Scene {
            jpd,
            dir,
            fake_prog,
            jvm: None,
            watch,
            stop,
            sampler: None,
            baseline_rss: 0,
            attack: None,
            attack_window: None,
            _turn: turn,
        };
        scene.start_sampler(None);
        scene
    }

    fn start_sampler(&mut self, jvm_control: Option<(u32, u64)>) {
        if let Some(s) = self.sampler.take() {
            self.stop.store(true, Ordering::SeqCst);
            let _ = s.join();
            self.stop.store(false, Ordering::SeqCst);
        }
        let sampler = Sampler {
            pid: self.jpd.pid(),
            jpctl: jp_testkit::jpctl(),
            socket: self.jpd.socket.clone(),
            jvm_control,
            watch: self.watch.clone(),
            stop: self.stop.clone(),
        };
        self.sampler = Some(std::thread::spawn(move || sampler.run()));
    }

    /// Starts the real JVM, waits until jpd lists it and runs the rounds before the
    /// attack; its jpd RSS then is the baseline the budget is measured from.
    pub fn start_jvm(&mut self, jdk: Jdk) {
        let mut jvm = RealJvm::start(self.dir.path(), jdk, ROUNDS);
        let pid = jvm.pid;
        jvm.wait_line("started");
        wait_listed(&self.jpd, pid);
        let control = jvm_control_address(pid);
        self.start_sampler(Some((pid, control)));
        jvm.release();
        for _ in 0..before_rounds() {
            jvm.next_round();
        }
        self.jvm = Some(jvm);
        self.baseline_rss = self.baseline_rss.max(rss(self.jpd.pid()).0);
    }

    /// The fake agent's command. Without cargo's library path, which holds the real
    /// `libjpagent.so` of the build: the fake one is found next to the program.
    pub fn fake_command(&self) -> Command {
        let mut c = Command::new(&self.fake_prog);
        c.env_remove("LD_LIBRARY_PATH");
        c
    }

    /// A fake agent, started, seen by jpd and given a generation: (agent, tid, generation).
    pub fn fake_agent(&self) -> (Agent, u32, u64) {
        let mut agent = Agent::spawn(self.fake_command());
        agent.ask("wait");
        // jpd may write a second generation right after the first (a re-send asked at
        // discovery): the hello must answer the latest.
        std::thread::sleep(Duration::from_millis(500));
        let answer = agent.ask("wait");
        let f: Vec<&str> = answer.split_whitespace().collect();
        assert!(f.len() == 7 && f[0] == "ready", "{answer:?}");
        (
            agent,
            f[2].parse().expect("tid"),
            f[4].parse().expect("gen"),
        )
    }

    /// A file in the scene's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The attack starts now: what jpd holds now is the baseline of the budget.
    pub fn attack_begins(&mut self) {
        if self.baseline_rss == 0 {
            self.baseline_rss = rss(self.jpd.pid()).0;
        }
        self.attack = Some((Instant::now(), cpu_ticks(self.jpd.pid())));
    }

    /// The attack is over (its effects may go on: the checks come at [`Scene::finish`]).
    pub fn attack_ends(&mut self) {
        if let Some((t0, c0)) = self.attack.take() {
            self.attack_window = Some((t0, Instant::now(), cpu_ticks(self.jpd.pid()) - c0));
        }
    }

    /// The real JVM runs its remaining rounds while the attack's effects settle (the
    /// attack itself keeps going in `during`, e.g. sleeping fake JVMs).
    pub fn run_jvm_while(&mut self, mut during: impl FnMut(&mut Scene) -> bool) {
        let Some(mut jvm) = self.jvm.take() else {
            return;
        };
        while jvm.rounds_done < ROUNDS {
            jvm.next_round();
            if !during(self) {
                break;
            }
        }
        self.jvm = Some(jvm);
    }

    /// The goals: the real JVM's tree complete (node by node against its agent's own
    /// `out=`), its re-sends bounded, jpd's peak memory within the budget over the
    /// baseline, every `jpctl status` answered within a second, and the refusals listed.
    pub fn finish(mut self, attack: &str) -> Outcome {
        self.attack_ends();
        let jvm_report = self.jvm.take().map(|jvm| self.finish_jvm(jvm, attack));
        self.stop.store(true, Ordering::SeqCst);
        if let Some(s) = self.sampler.take() {
            let _ = s.join();
        }
        let watch = std::mem::take(&mut *self.watch.lock().unwrap_or_else(|p| p.into_inner()));
        let refusals = watch.last_status.as_ref().map(refusals).unwrap_or_default();
        let (_, metrics) = self.jpd.get("/metrics");
        let resync_total = metric(
            &String::from_utf8_lossy(&metrics),
            "jp_jvm_resync_requests_total",
        );
        let outcome = Outcome {
            attack: attack.to_string(),
            baseline_rss: self.baseline_rss,
            resends: watch.jvm_generations.len().saturating_sub(1) as u64,
            resync_total: resync_total.unwrap_or(0),
            refusals,
            jvm: jvm_report,
            watch,
        };
        outcome.print();
        if let Some((t0, t1, cpu)) = self.attack_window {
            outcome.measure(t0, t1, cpu);
        }
        outcome
    }

    fn finish_jvm(&self, mut jvm: RealJvm, attack: &str) -> JvmReport {
        while jvm.rounds_done < ROUNDS {
            jvm.next_round();
        }
        let pid = jvm.pid;
        let agent_tree = jvm.finish();
        if rss(self.jpd.pid()).0 == 0 {
            return JvmReport {
                pid,
                complete: false,
                entry: Value::String("jpd is gone".into()),
                same_tree: Some("jpd is gone: no tree to compare".into()),
            };
        }
        let entry = wait_exited(&self.jpd, pid);
        let file = self.path("jpd-tree.json");
        self.jpd.export_to(pid, "json", &file);
        let mut jpd_tree = read_json(&file);
        strip_cpu(&mut jpd_tree);
        JvmReport {
            pid,
            complete: entry["complete"] == Value::Bool(true),
            entry,
            same_tree: (agent_tree != jpd_tree)
                .then(|| {
                    std::panic::catch_unwind(|| assert_same_tree(attack, &agent_tree, &jpd_tree))
                        .err()
                        .map(|e| {
                            let text = e
                                .downcast_ref::<String>()
                                .cloned()
                                .unwrap_or_else(|| "trees differ".into());
                            text.lines().take(4).collect::<Vec<_>>().join("\n")
                        })
                })
                .flatten(),
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The real JVM's end.
#[derive(Debug)]
pub struct JvmReport {
    pub pid: u32,
    pub complete: bool,
    pub entry: Value,
    /// `None` when jpd's tree equals the agent's node for node; else the differences.
    pub same_tree: Option<String>,
}

/// Everything measured, and the checks of the goals.
#[derive(Debug)]
pub struct Outcome {
    pub attack: String,
    pub baseline_rss: u64,
    /// Re-sends jpd asked of the real JVM (control generations after its first).
    pub resends: u64,
    /// jpd's `jp_jvm_resync_requests_total`: re-sends asked of every process.
    pub resync_total: u64,
    /// (subsystem, reason) → count, from the last `jpctl status --json`.
    pub refusals: Vec<(String, String, u64)>,
    pub jvm: Option<JvmReport>,
    pub watch: Watch,
}

impl Outcome {
    fn print(&self) {
        println!(
            "{}: jpd RSS {} MiB before, peak {} MiB (HWM {} MiB); {} status calls, {} slow; \
             real JVM re-sent {} times (all processes {}); refusals {:?}; killed at {:?}",
            self.attack,
            self.baseline_rss >> 20,
            self.watch.peak_rss >> 20,
            self.watch.peak_hwm >> 20,
            self.watch.statuses,
            self.watch.slow_statuses.len(),
            self.resends,
            self.resync_total,
            self.refusals,
            self.watch.killed_at
        );
        if let Some(j) = &self.jvm {
            let e = &j.entry;
            println!(
                "{}: real JVM {} complete {} ({}), {} records lost, {} nodes, {} ns of its CPU \
                 under contexts of {} ns; tree {}",
                self.attack,
                j.pid,
                e["complete"],
                e["incomplete_reason"],
                e["records_lost"],
                e["nodes"],
                e["cpu"]["contexts_ns"],
                e["cpu"]["total_ns"],
                if j.same_tree.is_none() {
                    "exact"
                } else {
                    "differs"
                }
            );
        }
    }

    /// How much of `(subsystem, reason)` jpd refused.
    pub fn refused(&self, subsystem: &str, reason: &str) -> u64 {
        self.refusals
            .iter()
            .filter(|(s, r, _)| s == subsystem && r == reason)
            .map(|(_, _, n)| n)
            .sum()
    }

    /// Every goal of the issue that does not depend on the attack: memory, status,
    /// the real JVM complete and exact, its re-sends bounded. All that fail are told.
    pub fn assert_goals(&self) {
        let mut failed = self.memory_and_status_failures();
        match self.jvm.as_ref() {
            None => failed.push("no real JVM ran beside the attack".into()),
            Some(jvm) => {
                if !jvm.complete {
                    failed.push(format!(
                        "the real JVM {} is not complete in jpd: {}",
                        jvm.pid, jvm.entry
                    ));
                }
                if let Some(diff) = &jvm.same_tree {
                    failed.push(diff.clone());
                }
            }
        }
        if self.resends > MAX_RESENDS {
            failed.push(format!(
                "jpd asked the real JVM to re-send its whole state {} times (at most \
                 {MAX_RESENDS}); generations {:?}",
                self.resends, self.watch.jvm_generations
            ));
        }
        assert!(
            failed.is_empty(),
            "{}:\n- {}",
            self.attack,
            failed.join("\n- ")
        );
    }

    /// jpd's memory within the budget and `jpctl status` answering throughout.
    fn memory_and_status_failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        if let Some(rss) = self.watch.killed_at {
            failed.push(format!(
                "jpd grew past the safety ceiling ({} MiB) and was killed",
                rss >> 20
            ));
        }
        let grown = self.watch.peak_hwm.saturating_sub(self.baseline_rss);
        if grown > STORE_BUDGET_BYTES {
            failed.push(format!(
                "jpd's resident memory grew by {} MiB (from {} MiB to a peak of {} MiB), over \
                 the store budget of {} MiB",
                grown >> 20,
                self.baseline_rss >> 20,
                self.watch.peak_hwm >> 20,
                STORE_BUDGET_BYTES >> 20
            ));
        }
        if self.watch.statuses == 0 || !self.watch.slow_statuses.is_empty() {
            failed.push(format!(
                "jpctl status did not answer within {STATUS_WITHIN:?} {} times of {}: {:?}",
                self.watch.slow_statuses.len(),
                self.watch.statuses,
                self.watch.slow_statuses
            ));
        }
        failed
    }

    /// The refusal `(subsystem, reason)` was counted `want` times.
    pub fn assert_refused(&self, subsystem: &str, reason: &str, want: impl Fn(u64) -> bool) {
        let n = self.refused(subsystem, reason);
        assert!(
            want(n),
            "{}: jpd refused {subsystem}/{reason} {n} times; all refusals: {:?}",
            self.attack,
            self.refusals
        );
    }

    /// For the bench: one JSON line with jpd's CPU over the attack and its memory, and
    /// the share of the real JVM's application CPU that jpd put under its contexts.
    fn measure(&self, t0: Instant, t1: Instant, cpu_ticks: u64) {
        let Some(file) = std::env::var_os("JP_HOSTILE_MEASURE") else {
            return;
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let entry = self.jvm.as_ref().map(|j| &j.entry);
        let contexts_share = entry.and_then(|e| {
            let app = app_cpu_ns(e);
            (app > 0).then(|| e["cpu"]["contexts_ns"].as_u64().unwrap_or(0) as f64 / app as f64)
        });
        let line = serde_json::json!({
            "attack": self.attack,
            "contexts_share": contexts_share,
            "attack_s": (t1 - t0).as_secs_f64(),
            "jpd_cpu_s": cpu_ticks as f64 / hz,
            "baseline_rss": self.baseline_rss,
            "peak_hwm": self.watch.peak_hwm,
            "slow_statuses": self.watch.slow_statuses.len(),
            "statuses": self.watch.statuses,
            "resends": self.resends,
            "refusals": self.refusals.iter().map(|(s, r, n)| format!("{s}/{r} {n}")).collect::<Vec<_>>(),
        });
        append_measure(&file, &line);
    }
}

/// Appends one JSON line to the bench's measure file.
pub fn append_measure(file: &std::ffi::OsStr, line: &Value) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .expect("open the measure file");
    writeln!(f, "{line}").expect("write the measure file");
}

/// The real JVM's application CPU (user and kernel) from its `jvm list` entry, in ns.
pub fn app_cpu_ns(entry: &Value) -> u64 {
    entry["cpu"]["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|k| k["kind"] == "app")
        .map(|k| k["user_ns"].as_u64().unwrap_or(0) + k["kernel_ns"].as_u64().unwrap_or(0))
        .sum()
}

/// Rounds before the attack: the warm-up and one more (the workload at steady state
/// when the attack begins). Its throughput is measured by the `throughput` test.
fn before_rounds() -> usize {
    WARM_UP + 1
}

/// The sampler thread's state.
struct Sampler {
    pid: i32,
    jpctl: PathBuf,
    socket: PathBuf,
    jvm_control: Option<(u32, u64)>,
    watch: Arc<Mutex<Watch>>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    fn run(self) {
        while !self.stop.load(Ordering::SeqCst) {
            let tick = Instant::now();
            let (vm_rss, vm_hwm) = rss(self.pid);
            let status = self.status();
            let generation = self
                .jvm_control
                .and_then(|(pid, addr)| control::read_generation(pid, addr).ok());
            {
                let mut w = self.watch.lock().unwrap_or_else(|p| p.into_inner());
                w.peak_rss = w.peak_rss.max(vm_rss);
                w.peak_hwm = w.peak_hwm.max(vm_hwm).max(vm_rss);
                w.statuses += 1;
                match status {
                    Ok(s) => w.last_status = Some(s),
                    Err(e) => w.slow_statuses.push(e),
                }
                if let Some(g) = generation.filter(|&g| g != 0) {
                    if w.jvm_generations.last() != Some(&g) {
                        w.jvm_generations.push(g);
                    }
                }
                if vm_rss > SAFETY_CEILING && w.killed_at.is_none() {
                    w.killed_at = Some(vm_rss);
                    // SAFETY: kill on the pid of jpd, our own child, not yet reaped.
                    unsafe { libc::kill(self.pid, libc::SIGKILL) };
                }
            }
            std::thread::sleep(TICK.saturating_sub(tick.elapsed()));
        }
    }

    /// `jpctl status --json`, killed when it takes longer than [`STATUS_WITHIN`].
    fn status(&self) -> Result<Value, String> {
        let t0 = Instant::now();
        let mut child = Command::new(&self.jpctl)
            .arg("--socket")
            .arg(&self.socket)
            .args(["status", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run jpctl: {e}"))?;
        loop {
            if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                let mut out = String::new();
                if let Some(mut o) = child.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                if !st.success() {
                    return Err(format!(
                        "jpctl status failed ({st}) after {:?}",
                        t0.elapsed()
                    ));
                }
                return serde_json::from_str(&out).map_err(|e| format!("no JSON: {e}"));
            }
            if t0.elapsed() > STATUS_WITHIN {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {STATUS_WITHIN:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// (VmRSS, VmHWM) of `pid` in bytes (0 once it is gone).
pub fn rss(pid: i32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// utime + stime of `pid` in clock ticks.
pub(crate) fn cpu_ticks(pid: i32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of stat; `after` starts at field 3.
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// Every refusal of a `jpctl status --json`: (subsystem, reason, count).
fn refusals(status: &Value) -> Vec<(String, String, u64)> {
    status["refusals"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["subsystem"].as_str().unwrap_or("").to_string(),
                        r["reason"].as_str().unwrap_or("").to_string(),
                        r["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The control block of the real agent in `pid`: where jpd writes its generations.
fn jvm_control_address(pid: u32) -> u64 {
    let lib = jp_testkit::agent_lib();
    let data = std::fs::read(&lib).expect("read the agent library");
    let symbol = control::control_symbol(&data).expect("the agent's control symbol");
    let meta = std::fs::metadata(&lib).expect("stat the agent library");
    use std::os::unix::fs::MetadataExt;
    let dev = (libc::major(meta.dev()), libc::minor(meta.dev()));
    control::address_in(pid, dev, meta.ino(), &symbol).expect("the agent's control block mapped")
}

/// `jpctl jvm list --json`'s entry for `pid` (`None` too when jpd does not answer).
pub fn listed(d: &Jpd, pid: u32) -> Option<Value> {
    list(d)
        .into_iter()
        .find(|j| j["pid"].as_u64() == Some(u64::from(pid)))
}

/// Every entry of `jpctl jvm list --json` (none when jpd does not answer).
pub fn list(d: &Jpd) -> Vec<Value> {
    let Some(out) = d.jpctl().args(["jvm", "list", "--json"]).output().ok() else {
        return Vec::new();
    };
    let list: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    list.get("jvms")
        .and_then(Value::as_array)
        .or_else(|| list.as_array())
        .cloned()
        .unwrap_or_default()
}

pub(crate) fn wait_listed(d: &Jpd, pid: u32) -> Value {
    wait_entry(d, pid, "listed", |_| true)
}

fn wait_exited(d: &Jpd, pid: u32) -> Value {
    wait_entry(d, pid, "exited", |j| {
        j.get("exited_unix_ms").is_some_and(|v| !v.is_null())
    })
}

fn wait_entry(d: &Jpd, pid: u32, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let entry = listed(d, pid);
        if let Some(j) = entry.as_ref().filter(|j| pred(j)) {
            return j.clone();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the real JVM {pid} was not {what} in jpd within 30 s: {entry:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The real JVM: `Phases ROUNDS ROUND_SIZE` with the real agent, which also writes its
/// own tree (`out=`) for the node-by-node comparison.
pub(crate) struct RealJvm {
    child: Child,
    pub(crate) pid: u32,
    /// Rounds the workload was started with.
    phases: usize,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    out: PathBuf,
    rounds_done: usize,
}

impl RealJvm {
    /// `Phases PHASES ROUND_SIZE`, compiled into `dir`.
    pub(crate) fn start(dir: &Path, jdk: Jdk, phases: usize) -> RealJvm {
        let jdk = jdk.home();
        let classes = dir.join("classes");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jvm/Phases.java");
        let javac = Command::new(jdk.join("bin/javac"))
            .arg("-d")
            .arg(&classes)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run javac of {} ({e})", jdk.display()));
        assert!(javac.success(), "javac {} failed", src.display());
        let out = dir.join("agent-tree.json");
        let mut child = Command::new(jdk.join("bin/java"))
            .arg(format!(
                "-agentpath:{}=out={}",
                jp_testkit::agent_lib().display(),
                out.display()
            ))
            .arg("-XX:-UsePerfData")
            .arg("-cp")
            .arg(&classes)
            .arg("Phases")
            .arg(phases.to_string())
            .arg(ROUND_SIZE.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start java");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        RealJvm {
            pid: child.id(),
            child,
            stdin,
            stdout,
            out,
            phases,
            rounds_done: 0,
        }
    }

    pub(crate) fn wait_line(&mut self, want: &str) {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read JVM stdout");
        assert!(
            n > 0 && line.starts_with(want),
            "the real JVM printed {line:?}, not {want:?}"
        );
    }

    pub(crate) fn release(&mut self) {
        self.stdin.write_all(b"\n").expect("write JVM stdin");
        self.stdin.flush().expect("flush JVM stdin");
    }

    /// Waits for the running round and starts the next one (if any).
    pub(crate) fn next_round(&mut self) {
        self.wait_line(&format!("phase {} done", self.rounds_done));
        self.rounds_done += 1;
        if self.rounds_done < self.phases {
            self.release();
        }
    }

    fn finish(mut self) -> Value {
        let status = self.child.wait().expect("wait java");
        assert!(status.success(), "the real JVM failed: {status}");
        read_json(&self.out)
    }
}

impl Drop for RealJvm {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
