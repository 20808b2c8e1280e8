//! The USDT collector with the real agent: a JVM started with `libjpagent.so`
//! (`profiler=usdt`, the default without `out=`) is found, gets a generation, and its
//! records arrive complete — a hello answering that generation, contiguous sequence
//! numbers per stream, every thread ended before JVM_END — and a re-send request
//! mid-run is answered with a new hello. Needs root, JDK 17 and the agent library:
//! `JP_AGENT_LIB=/path/libjpagent.so`, else `target/jp/libjpagent.so` of the workspace
//! (`cargo xtask build`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::require_root;
use crate::support::usdt::fake_agent::{wait_for, Recording};
use jp_common::wire::{
    self, split_record, EVENT_OK, FLAG_END, FLAG_RESYNC, KIND_HELLO, KIND_JVM_END, KIND_TREE,
};
use jp_daemon::store::jvm::{JvmLimits, JvmStore};
use jp_daemon::usdt::collector::{UsdtCollector, UsdtOptions};
use jp_daemon::usdt::fair::RingShare;

/// The smallest burst a token bucket of `per_second` needs to let every event at
/// `times` (ns, ascending) through: the most the events ever run ahead of the rate.
fn burst_needed(times: &[u64], per_second: u32) -> u64 {
    let cost = 1_000_000_000 / u64::from(per_second);
    let mut next = 0u64;
    let mut most = 0u64;
    for &t in times {
        next = next.max(t) + cost;
        most = most.max((next - t).div_ceil(cost));
    }
    most
}

/// The most events in any one-second window.
fn peak_per_second(times: &[u64]) -> usize {
    let mut start = 0;
    let mut most = 0;
    for (i, &t) in times.iter().enumerate() {
        while t - times[start] >= 1_000_000_000 {
            start += 1;
        }
        most = most.max(i + 1 - start);
    }
    most
}

const JDK: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

const MAIN_JAVA: &str = r#"
public class Main {
    static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
    public static void main(String[] args) throws Exception {
        long until = System.currentTimeMillis() + Long.parseLong(args[0]);
        // Runs as long as main: alive when the collector attaches, whatever the timing.
        Thread t = new Thread(() -> {
            long s = 0;
            while (System.currentTimeMillis() < until) { s += fib(18); try { Thread.sleep(20); } catch (InterruptedException e) { } }
            System.out.println(s);
        }, "worker");
        t.start();
        long sum = 0;
        while (System.currentTimeMillis() < until) {
            sum += fib(20);
            Thread.sleep(20);
        }
        t.join();
        System.out.println(sum);
    }
}
"#;

/// A copy of the agent library under a name of its own in `dir` (one per test): each
/// collector here watches for its name only, so that it writes no generation into JVMs of other tests
/// (or a jpd) running on the host, which would make them re-send.
fn agent_library(dir: &std::path::Path, name: &str) -> PathBuf {
    let copy = dir.join(name);
    std::fs::copy(jp_testkit::agent_lib(), &copy).unwrap();
    copy
}

/// Compiles `Main` into `dir`.
fn compile_main(dir: &std::path::Path) {
    std::fs::write(dir.join("Main.java"), MAIN_JAVA).unwrap();
    let javac = Command::new(format!("{JDK}/bin/javac"))
        .arg("-d")
        .arg(dir)
        .arg(dir.join("Main.java"))
        .status()
        .unwrap_or_else(|e| panic!("cannot run javac ({e}): install openjdk-17-jdk-headless"));
    assert!(javac.success());
}

#[test]
fn real_agent_records_arrive_complete_and_answer_resync() {
    // A collector of its own: the suite\'s other collectors take turns with it.
    let _turn = crate::support::exclusive();
    require_root();
    let _ = env_logger::builder().is_test(true).try_init();
    let dir = tempfile::tempdir().unwrap();
    let lib = agent_library(dir.path(), "libjptest-agent-resync.so");
    compile_main(dir.path());

    let rt = crate::collector::runtime();
    let _enter = rt.enter();
    let sink = Arc::new(Mutex::new(Recording::default()));
    let options = UsdtOptions {
        library: "libjptest-agent-resync.so".into(),
        scan_interval: Duration::from_millis(100),
        ..UsdtOptions::default()
    };
    let collector = UsdtCollector::start(options, sink.clone()).unwrap();
    let mut java = Command::new(format!("{JDK}/bin/java"))
        .arg(format!("-agentpath:{}", lib.display()))
        .arg("-cp")
        .arg(dir.path())
        .arg("Main")
        .arg("4000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = java.id();
    let timeout = Duration::from_secs(30);
    wait_for(&sink, timeout, "the JVM's first generation", |r| {
        !r.generations_of(pid).is_empty()
    });
    let first = sink.lock().unwrap().generations_of(pid)[0];
    let hellos = |r: &Recording| -> Vec<u64> {
        r.events_of(pid)
            .iter()
            .filter_map(|(_, b)| split_record(b).ok())
            .filter(|rec| rec.header.kind == KIND_HELLO)
            .map(|rec| rec.header.generation)
            .collect()
    };
    wait_for(&sink, timeout, "a hello", |r| !hellos(r).is_empty());
    assert_eq!(hellos(&sink.lock().unwrap()), [first]);
    let started = Instant::now();
    sink.lock().unwrap().resync.push(pid);
    wait_for(&sink, timeout, "a second generation", |r| {
        r.generations_of(pid).len() == 2
    });
    let second = sink.lock().unwrap().generations_of(pid)[1];
    assert!(second > first);
    wait_for(&sink, timeout, "the re-sent hello", |r| {
        hellos(r).len() == 2
    });
    println!("re-send answered in {:?}", started.elapsed());
    assert!(java.wait().unwrap().success());
    wait_for(&sink, timeout, "the exit", |r| r.gone.contains(&pid));

    let r = sink.lock().unwrap();
    let events = r.events_of(pid);
    // What the default share must allow a real JVM: its rate and burst, measured on
    // its events' kernel times (start-up, steady reports, a re-send, the end).
    // Taken on several CPUs before each event was reserved: not quite in ring order.
    let mut times: Vec<u64> = events.iter().map(|(h, _)| h.ktime_ns).collect();
    times.sort_unstable();
    let share = RingShare::default();
    let burst = burst_needed(&times, share.records_per_second);
    let peak = peak_per_second(&times);
    println!(
        "real JVM: {} events in {:.2} s, peak {peak} in one second, burst needed at {}/s: {burst}",
        times.len(),
        (times.last().unwrap_or(&0) - times.first().unwrap_or(&0)) as f64 / 1e9,
        share.records_per_second
    );
    assert!(
        burst <= u64::from(share.burst_records),
        "the default share would drop this JVM's records: burst {burst}"
    );
    assert_eq!(r.counters.rate_limited, 0, "{:?}", r.counters);
    let mut next_seq: BTreeMap<u64, u32> = BTreeMap::new();
    let mut ended: Vec<u64> = Vec::new();
    let (mut trees, mut bytes) = (0, 0);
    for (i, (h, b)) in events.iter().enumerate() {
        assert_eq!(h.status, EVENT_OK, "event {i}");
        let rec = split_record(b).unwrap_or_else(|e| panic!("record {i}: {e}"));
        let hd = rec.header;
        if hd.kind == jp_common::wire::KIND_THREAD {
            // A thread's context slot: outside the stream's numbering (seq 0, no flags).
            assert_eq!((hd.seq, hd.flags), (0, 0), "thread record {i}");
            continue;
        }
        let expected = if hd.flags & FLAG_RESYNC != 0 {
            0
        } else {
            *next_seq
                .get(&hd.stream)
                .unwrap_or_else(|| panic!("stream {} starts without a resync", hd.stream))
        };
        assert_eq!(hd.seq, expected, "stream {} record {i}", hd.stream);
        next_seq.insert(hd.stream, hd.seq + 1);
        if hd.kind == KIND_TREE {
            trees += 1;
            if hd.flags & FLAG_END != 0 {
                ended.push(hd.stream);
            }
        }
        if hd.kind == KIND_JVM_END {
            assert_eq!(i, events.len() - 1, "JVM_END is the last record");
        }
        bytes += b.len();
    }
    let last = split_record(&events.last().unwrap().1).unwrap().header;
    assert_eq!(last.kind, KIND_JVM_END);
    // STREAM_ENDED is the agent's snapshot of ended threads, not a thread.
    let threads: Vec<u64> = next_seq
        .keys()
        .copied()
        .filter(|&s| s != 0 && s != wire::STREAM_ENDED)
        .collect();
    for t in &threads {
        assert!(ended.contains(t), "thread stream {t} never ended");
    }
    assert!(
        trees > 0 && threads.len() >= 2,
        "{trees} trees, threads {threads:?}"
    );
    println!(
        "{} records ({bytes} bytes, {trees} trees) from {} threads; kernel counters {:?}",
        events.len(),
        threads.len(),
        r.counters
    );
    drop(r);
    collector.shutdown();
}

#[test]
fn real_agent_into_the_jvm_store() {
    // A collector of its own: the suite\'s other collectors take turns with it.
    let _turn = crate::support::exclusive();
    require_root();
    let _ = env_logger::builder().is_test(true).try_init();
    let dir = tempfile::tempdir().unwrap();
    let lib = agent_library(dir.path(), "libjptest-agent-store.so");
    compile_main(dir.path());
    let rt = crate::collector::runtime();
    let _enter = rt.enter();
    let store = Arc::new(Mutex::new(JvmStore::new(JvmLimits::default())));
    let options = UsdtOptions {
        library: "libjptest-agent-store.so".into(),
        scan_interval: Duration::from_millis(100),
        ..UsdtOptions::default()
    };
    let collector = UsdtCollector::start(options, store.clone()).unwrap();
    let mut java = Command::new(format!("{JDK}/bin/java"))
        .arg(format!("-agentpath:{}", lib.display()))
        .arg("-cp")
        .arg(dir.path())
        .arg("Main")
        .arg("1500")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = java.id();
    assert!(java.wait().unwrap().success());
    let start = Instant::now();
    let summary = loop {
        let s = store.lock().unwrap().summary(pid);
        if let Some(s) = s.filter(|s| s.exited_at.is_some()) {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "JVM {pid} never reported exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    collector.shutdown();
    println!("{summary:?}");
    assert!(summary.finished, "{summary:?}");
    assert!(summary.complete, "{summary:?}");
    assert_eq!((summary.records_lost, summary.records_malformed), (0, 0));
    // The default share holds this JVM back not once.
    assert_eq!((summary.ring_rate_limited, summary.ring_full), (0, 0));
    assert!(
        summary.threads_total >= 2 && summary.threads_live == 0,
        "{summary:?}"
    );
    assert!(summary.calls > 0 && summary.nodes > 0, "{summary:?}");
    assert!(summary.jdk_version.starts_with("17"), "{summary:?}");
    assert_eq!(summary.main, "Main");
}
