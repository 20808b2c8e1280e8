//! Throughput beside each attack, against the same attack unseen by jpd. The question is
//! what jpd's handling of an attack costs the real JVM, not what the attacking process's
//! own CPU costs it (a process that spins slows its neighbours on a small host with or
//! without jp). So each attack is played twice per pair on one warm real JVM: **seen**,
//! by the fake agent whose library bears the agent's name, and **unseen**, by the same
//! program built against a library named [`UNSEEN_LIBRARY`], which jpd's discovery does
//! not match. The two arms run the same code, as the same user, with the same records
//! and the same files; what differs is only whether jpd attaches its probe to the
//! library and handles what it fires. The arms alternate (seen first in even pairs,
//! unseen first in odd ones) so that a drift of the machine's load falls on both.
//!
//! The real JVM runs `Phases` rounds back to back on its own thread; each round's wall
//! time and the JVM process's CPU time (every thread, those that ended included) are
//! noted, and an arm's figure is made of the rounds that began and ended inside its
//! window. With `JP_HOSTILE_MEASURE` set the rounds of every arm are appended to that
//! file as one JSON line per attack (`cargo xtask bench hostile` judges them); without
//! it, one short pair per attack checks what the comparison rests on: jpd listed the
//! seen attacker and never the unseen one.

mod attacks;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{append_measure, cpu_ticks, wait_listed, RealJvm, Scene};
use crate::support::usdt::fake_agent;
use attacks::{Attack, Programs};
use jp_testkit::jdk::Jdk;

/// The unseen arm's library: as long as the agent's name, but not it.
pub(crate) const UNSEEN_LIBRARY: &str = "libjpagenx.so";
/// Rounds the workload is started with: more than any run plays.
const WORKLOAD_ROUNDS: usize = 1_000_000;
/// After an arm's attackers are gone, before the next arm: jpd notes their exit.
const SETTLE: Duration = Duration::from_millis(500);

/// Pairs per attack and each arm's window: `JP_HOSTILE_PAIRS` and
/// `JP_HOSTILE_WINDOW_MS` when measured, else one short pair. `JP_HOSTILE_ONLY=KEY,…`
/// plays only those attacks (by [`Attack::key`]).
fn settings() -> (usize, Duration) {
    if std::env::var_os("JP_HOSTILE_MEASURE").is_none() {
        return (1, Duration::from_millis(1500));
    }
    let num = |key: &str, default: u64| {
        std::env::var(key)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        num("JP_HOSTILE_PAIRS", 6) as usize,
        Duration::from_millis(num("JP_HOSTILE_WINDOW_MS", 5000)),
    )
}

#[test]
fn each_attack_seen_and_unseen_beside_one_real_jvm() {
    let (pairs, window) = settings();
    let scene = Scene::start("");
    let unseen_dir = scene.path("unseen");
    std::fs::create_dir(&unseen_dir).expect("the unseen program's directory");
    let (_, unseen_prog) = fake_agent::build(&unseen_dir, UNSEEN_LIBRARY);
    let programs = Programs {
        unseen: unseen_prog,
    };
    let workload = Workload::start(&scene, Jdk::J17);
    let mut wrong = Vec::new();
    let only = std::env::var("JP_HOSTILE_ONLY").ok();
    let chosen = Attack::ALL.into_iter().filter(|a| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|k| k == a.key()))
    });
    for attack in chosen {
        let mut arms = Vec::new();
        for pair in 0..pairs {
            let order = if pair % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for seen in order {
                let arm = play(&scene, &programs, attack, seen, window, &workload);
                if arm.listed != seen {
                    wrong.push(format!(
                        "{}: the {} attacker was {}listed by jpd",
                        attack.key(),
                        if seen { "seen" } else { "unseen" },
                        if arm.listed { "" } else { "not " }
                    ));
                }
                arms.push(arm);
            }
        }
        record(attack, &arms);
        println!(
            "throughput {}: {} arms, {} rounds",
            attack.key(),
            arms.len(),
            arms.iter().map(|a| a.rounds.len()).sum::<usize>()
        );
    }
    drop(workload);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// One arm: the attack prepared (its processes started, its records written), played
/// for `window` while the real JVM's rounds are noted, then its processes ended.
fn play(
    scene: &Scene,
    programs: &Programs,
    attack: Attack,
    seen: bool,
    window: Duration,
    workload: &Workload,
) -> Arm {
    let prepared = attack.prepare(scene, programs, seen);
    // The attackers' own CPU in the window: the same in both arms, or the comparison
    // would carry it (those started inside the window count whole).
    let attackers_before: u64 = prepared.pids().into_iter().map(process_cpu_ns).sum();
    let jpd_ticks = cpu_ticks(scene.jpd.pid());
    let t0 = Instant::now();
    let until = t0 + window;
    let agents = prepared.run(until);
    if let Some(rest) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(rest);
    }
    let t1 = Instant::now();
    let jpd_ticks = cpu_ticks(scene.jpd.pid()) - jpd_ticks;
    let attackers: u64 = agents.pids().into_iter().map(process_cpu_ns).sum();
    let listed = attacks::any_listed(scene, &agents.pids());
    agents.end();
    std::thread::sleep(SETTLE);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Arm {
        seen,
        rounds: workload.rounds_within(t0, t1),
        window_s: (t1 - t0).as_secs_f64(),
        jpd_cpu_s: jpd_ticks as f64 / hz,
        attackers_cpu_s: attackers.saturating_sub(attackers_before) as f64 / 1e9,
        listed,
    }
}

/// What one arm measured.
struct Arm {
    seen: bool,
    /// (wall ms, JVM CPU ms) of each round inside the window.
    rounds: Vec<(f64, f64)>,
    window_s: f64,
    jpd_cpu_s: f64,
    /// The attack's processes' own CPU over the window.
    attackers_cpu_s: f64,
    /// Whether jpd listed one of the attack's processes at the end of the window.
    listed: bool,
}

/// Appends the attack's arms to the measure file (when measured).
fn record(attack: Attack, arms: &[Arm]) {
    let Some(file) = std::env::var_os("JP_HOSTILE_MEASURE") else {
        return;
    };
    let arms: Vec<Value> = arms
        .iter()
        .map(|a| {
            json!({
                "seen": a.seen,
                "rounds": a.rounds.iter().map(|r| [r.0, r.1]).collect::<Vec<_>>(),
                "window_s": a.window_s,
                "jpd_cpu_s": a.jpd_cpu_s,
                "attackers_cpu_s": a.attackers_cpu_s,
            })
        })
        .collect();
    let line = json!({ "throughput": attack.key(), "arms": arms });
    append_measure(&file, &line);
}

/// One round of the workload: when it ran and the JVM's CPU over it.
#[derive(Clone, Copy)]
struct Round {
    start: Instant,
    end: Instant,
    cpu_ns: u64,
}

/// The real JVM running its rounds back to back on a thread of its own.
/// Dropped (a test that fails too), it ends after the running round and kills the JVM.
struct Workload {
    stop: Arc<AtomicBool>,
    rounds: Arc<Mutex<Vec<Round>>>,
    thread: Option<JoinHandle<RealJvm>>,
}

impl Workload {
    fn start(scene: &Scene, jdk: Jdk) -> Workload {
        let mut jvm = RealJvm::start(scene.dir.path(), jdk, WORKLOAD_ROUNDS);
        jvm.wait_line("started");
        wait_listed(&scene.jpd, jvm.pid);
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(Mutex::new(Vec::new()));
        let (stop2, rounds2) = (stop.clone(), rounds.clone());
        let thread = std::thread::spawn(move || {
            let pid = jvm.pid;
            jvm.release();
            let (mut start, mut cpu) = (Instant::now(), process_cpu_ns(pid));
            while !stop2.load(Ordering::SeqCst) {
                jvm.next_round();
                let (end, cpu_end) = (Instant::now(), process_cpu_ns(pid));
                rounds2
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Round {
                        start,
                        end,
                        cpu_ns: cpu_end.saturating_sub(cpu),
                    });
                (start, cpu) = (end, cpu_end);
            }
            jvm
        });
        Workload {
            stop,
            rounds,
            thread: Some(thread),
        }
    }

    /// (wall ms, CPU ms) of the rounds that began and ended within `[t0, t1]`.
    fn rounds_within(&self, t0: Instant, t1: Instant) -> Vec<(f64, f64)> {
        self.rounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|r| r.start >= t0 && r.end <= t1)
            .map(|r| ((r.end - r.start).as_secs_f64() * 1e3, r.cpu_ns as f64 / 1e6))
            .collect()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The JVM is killed as its handle drops, whether the thread ended or failed.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// CPU time of every thread of `pid`, those that ended included, in ns.
fn process_cpu_ns(pid: u32) -> u64 {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes one clockid into the one we own.
    if unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) } != 0 {
        return 0;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the one we own.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
