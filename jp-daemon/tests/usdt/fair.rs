//! Fair sharing of the ring: a fake agent flooding the ring beside a well-behaved one.
//! The flooder is held to its rate in the kernel and its drops are charged to it; the
//! other loses nothing and is never asked to re-send. Needs root, gcc and
//! systemtap-sdt-dev.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::require_root;
use crate::support::usdt::fake_agent::{build, write_records, Agent};
use jp_daemon::refusals;
use jp_daemon::store::jvm::{JvmLimits, JvmStore};
use jp_daemon::usdt::collector::{UsdtCollector, UsdtOptions};
use jp_daemon::usdt::fair::{self, RingShare};

const WAIT: Duration = Duration::from_secs(20);

/// `wait` → the generation the agent has seen.
fn generation(agent: &mut Agent) -> u64 {
    let answer = agent.ask("wait");
    let f: Vec<&str> = answer.split_whitespace().collect();
    assert!(f.len() == 7 && f[0] == "ready", "{answer:?}");
    f[4].parse().unwrap()
}

fn wait_store(store: &Mutex<JvmStore>, what: &str, done: impl Fn(&JvmStore) -> bool) {
    let start = Instant::now();
    loop {
        {
            let s = store.lock().unwrap();
            if done(&s) {
                return;
            }
            assert!(
                start.elapsed() < WAIT,
                "timed out waiting for {what}: {:?}, {:?}",
                s.stats().kernel,
                s.list()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_flooding_process_is_held_to_its_rate_and_alone_pays_for_it() {
    let _turn = crate::support::exclusive();
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // A name of its own: this collector's counters count these two processes only.
    let (_lib, prog) = build(dir.path(), "libjpfair.so");
    let rt = crate::collector::runtime();
    let _enter = rt.enter();
    let store = Arc::new(Mutex::new(JvmStore::new(JvmLimits::default())));
    // A small ring, so that an unbounded flood overflows it for sure; a share whose
    // burst fits in it many times over.
    let share = RingShare {
        records_per_second: 2000,
        burst_records: 64,
        ..RingShare::default()
    };
    let options = UsdtOptions {
        library: "libjpfair.so".into(),
        scan_interval: Duration::from_millis(100),
        ring_buffer_bytes: 1 << 20,
        bpf_stats: false,
        share,
    };
    let collector = UsdtCollector::start(options, store.clone()).unwrap();
    let mut quiet = Agent::spawn(Command::new(&prog));
    let mut flooder = Agent::spawn(Command::new(&prog));
    let (quiet_pid, flooder_pid) = (quiet.pid, flooder.pid);
    let quiet_generation = generation(&mut quiet);
    generation(&mut flooder);
    let refused_before = refusals::get(fair::RATE_LIMITED);

    // 200 000 records of 4 KiB (800 MiB) as fast as the flooder can fire them, while
    // the other fires 3 small records every 10 ms.
    let n = 200_000u64;
    let flood_start = Instant::now();
    let flood = std::thread::spawn(move || {
        assert_eq!(flooder.fire(&format!("flood {n} 4096")).0, n);
        flooder
    });
    let path = dir.path().join("quiet.bin");
    write_records(&path, &[vec![1u8; 100], vec![2u8; 200], vec![3u8; 300]]);
    let mut quiet_fired = 0u64;
    while !flood.is_finished() || quiet_fired < 30 {
        quiet_fired += quiet.fire(&format!("fire {}", path.display())).0;
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut flooder = flood.join().unwrap();

    // Every event is accounted for, per process: the flooder's arrived (each is
    // malformed: not a record), were over its rate, or found the ring full.
    let accounted = |s: &JvmStore, pid: u32, fired: u64| {
        s.summary(pid)
            .is_some_and(|j| j.records_malformed + j.ring_rate_limited + j.ring_full == fired)
    };
    wait_store(&store, "every event accounted for", |s| {
        s.stats().kernel.fired == n + quiet_fired
            && accounted(s, flooder_pid, n)
            && accounted(s, quiet_pid, quiet_fired)
    });
    let s = store.lock().unwrap();
    let k = s.stats().kernel;
    let flooder_summary = s.summary(flooder_pid).unwrap();
    let quiet_summary = s.summary(quiet_pid).unwrap();
    println!(
        "flood of {n} records of 4 KiB beside {quiet_fired} small ones: flooder {} delivered, {} over its rate, {} ring-full; kernel {k:?}",
        flooder_summary.records_malformed,
        flooder_summary.ring_rate_limited,
        flooder_summary.ring_full
    );
    // The well-behaved process lost nothing and was charged nothing.
    assert_eq!(
        (
            quiet_summary.records_malformed,
            quiet_summary.ring_rate_limited,
            quiet_summary.ring_full
        ),
        (quiet_fired, 0, 0)
    );
    // The flooder was held to its rate (it fires far faster than 2000 records a
    // second); the ring, drained faster than that, never overflowed.
    assert_eq!(flooder_summary.ring_full, 0);
    assert_eq!(k.ring_full, 0);
    assert_eq!(k.rate_limited, flooder_summary.ring_rate_limited);
    assert_eq!(
        flooder_summary.records_malformed + flooder_summary.ring_rate_limited,
        n
    );
    assert_eq!(k.sent, flooder_summary.records_malformed + quiet_fired);
    assert_eq!(
        refusals::get(fair::RATE_LIMITED) - refused_before,
        flooder_summary.ring_rate_limited
    );
    drop(s);

    // The flooder is asked to re-send (its records were dropped), the other never.
    let quiet_now = generation(&mut quiet);
    assert_eq!(
        quiet_now, quiet_generation,
        "the well-behaved process was asked to re-send"
    );
    generation(&mut flooder);
    // Two first contacts, then the flooder's re-sends, spaced 1, 2, 4… s apart: at
    // most 1 + log2(t + 1) of them in t seconds, however often it loses records.
    let resends = collector.status().generations_written - 2;
    let t = flood_start.elapsed().as_secs_f64();
    let bound = 1 + (t + 1.0).log2().floor() as u64;
    assert!(
        (1..=bound).contains(&resends),
        "{resends} re-sends of the flooder in {t:.1} s (at most {bound})"
    );
    quiet.exit();
    flooder.exit();
    collector.shutdown();
}

/// A cgroup v2 of this test's own, removed on drop (its processes must have exited).
struct TestCgroup {
    dir: std::path::PathBuf,
    /// Relative to the cgroup2 mount, as `[usdt] allow_cgroups` takes it.
    path: String,
}

impl TestCgroup {
    fn new(name: &str) -> TestCgroup {
        let path = format!("/{name}-{}", std::process::id());
        let dir = std::path::PathBuf::from(format!("{}{path}", fair::cgroup2_root()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot create cgroup {}: {e}", dir.display()));
        TestCgroup { dir, path }
    }

    fn enter(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

#[test]
fn processes_outside_the_allowed_cgroups_are_not_listened_to() {
    let _turn = crate::support::exclusive();
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (_lib, prog) = build(dir.path(), "libjpallow.so");
    let rt = crate::collector::runtime();
    let _enter = rt.enter();
    let cgroup = TestCgroup::new("jp-allow-test");
    // Both processes map the same library file: its uprobes fire in both, so only the
    // program's own check keeps the outsider's events out of the ring.
    let mut inside = Agent::spawn(Command::new(&prog));
    cgroup.enter(inside.pid);
    let mut outside = Agent::spawn(Command::new(&prog));
    let store = Arc::new(Mutex::new(JvmStore::new(JvmLimits::default())));
    let options = UsdtOptions {
        library: "libjpallow.so".into(),
        scan_interval: Duration::from_millis(100),
        share: RingShare {
            allow_cgroups: vec![cgroup.path.clone()],
            ..RingShare::default()
        },
        ..UsdtOptions::default()
    };
    let refused_before = refusals::get(fair::NOT_ALLOWED);
    let processes_before = refusals::get(fair::PROCESS_NOT_ALLOWED);
    let collector = UsdtCollector::start(options, store.clone()).unwrap();
    generation(&mut inside);
    // The outsider's semaphore is raised (the file is attached for the other), but the
    // scan never writes it a generation.
    assert_eq!(outside.ask("sema"), "sema 1");
    assert_eq!(outside.fire("flood 100 64").0, 100);
    assert_eq!(inside.fire("flood 10 64").0, 10);
    wait_store(&store, "both floods counted", |s| {
        let k = s.stats().kernel;
        k.fired == 110
            && k.sent == 10
            && s.summary(inside.pid)
                .is_some_and(|j| j.records_malformed == 10)
    });
    let s = store.lock().unwrap();
    assert_eq!(s.stats().kernel.not_allowed, 100);
    assert!(s.summary(outside.pid).is_none(), "{:?}", s.list());
    drop(s);
    assert_eq!(refusals::get(fair::NOT_ALLOWED) - refused_before, 100);
    assert_eq!(
        refusals::get(fair::PROCESS_NOT_ALLOWED) - processes_before,
        1
    );
    assert_eq!(collector.status().processes, vec![inside.pid]);
    collector.shutdown();
    inside.exit();
    outside.exit();
}
