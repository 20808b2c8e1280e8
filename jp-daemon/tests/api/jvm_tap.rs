//! The JVM store against the real agent, without root or a collector: the agent's
//! `usdt_tap=FILE` option behaves as if a tracer were attached (generation 1) and appends
//! every record it fires to FILE (`u32` little-endian length, then the record). Fed to
//! the store in order, the records must give a finished, complete JVM whose `jp-mct/1`
//! JSON is byte for byte the file the agent wrote with `out=` in the same run.
//!
//! Needs JDK 17 and 25 (`JP_JDK17`, `JP_JDK25`, else their Debian/Temurin paths) and the
//! agent library (`JP_AGENT_LIB`, else `target/jp/libjpagent.so` from `cargo xtask build`:
//! `jp_testkit`'s rule).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use jp_common::wire::{EventHeader, EVENT_OK};
use jp_daemon::store::jvm::{JvmLimits, JvmStore};

const TGID: u32 = 31337;

const MAIN_JAVA: &str = r#"
public class Main {
    static int depth(int n) { return n == 0 ? 0 : 1 + depth(n - 1); }
    static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
    static long work(int k) {
        long s = 0;
        for (int i = 0; i < k; i++) { s += fib(12 + i % 5); s += depth(i % 40); }
        return s;
    }
    public static void main(String[] args) throws Exception {
        Thread[] ts = new Thread[4];
        final long[] out = new long[ts.length];
        for (int t = 0; t < ts.length; t++) {
            final int id = t;
            ts[t] = new Thread(() -> { out[id] = work(200 + 50 * id); }, "worker-" + t);
            ts[t].start();
        }
        long s = work(300);
        for (Thread t : ts) t.join();
        for (long x : out) s += x;
        System.out.println(s);
    }
}
"#;

fn jdk(var: &str, default: &str) -> PathBuf {
    let home = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        home.join("bin/javac").exists(),
        "no JDK at {} — install it (cargo xtask setup) or set {var}",
        home.display()
    );
    home
}

/// Runs Main with `out=` and `usdt_tap=`; returns (the agent's JSON bytes, the tap bytes).
fn run(home: &Path, dir: &Path, granularity: u64) -> (Vec<u8>, Vec<u8>) {
    std::fs::write(dir.join("Main.java"), MAIN_JAVA).unwrap();
    let javac = Command::new(home.join("bin/javac"))
        .arg("-d")
        .arg(dir)
        .arg(dir.join("Main.java"))
        .output()
        .unwrap();
    assert!(javac.status.success(), "javac: {javac:?}");
    let json = dir.join("out.json");
    let tap = dir.join("out.tap");
    let opts = format!(
        "bba=precise,format=json,out={},granularity={granularity},report_budget=100,usdt_tap={}",
        json.display(),
        tap.display()
    );
    let java = Command::new(home.join("bin/java"))
        .arg(format!(
            "-agentpath:{}={opts}",
            jp_testkit::agent_lib().display()
        ))
        .arg("-cp")
        .arg(dir)
        .arg("Main")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(java.status.success(), "java: {java:?}");
    (
        std::fs::read(&json).unwrap_or_else(|e| panic!("no profile: {e}: {java:?}")),
        std::fs::read(&tap).unwrap_or_else(|e| panic!("no tap: {e}: {java:?}")),
    )
}

/// Splits the tap capture into records.
fn records(tap: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = tap;
    while !rest.is_empty() {
        assert!(rest.len() >= 4, "tap cut in a length");
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        assert!(rest.len() >= 4 + len, "tap cut in a record");
        out.push(&rest[4..4 + len]);
        rest = &rest[4 + len..];
    }
    out
}

fn check(var: &str, default: &str) {
    let home = jdk(var, default);
    let dir = tempfile::tempdir().unwrap();
    // A small granularity: many delta records over the threads' lives (about 14 000;
    // `report_budget=100` sends at every report, so the count does not hang on timing).
    let (json, tap) = run(&home, dir.path(), 2000);
    let recs = records(&tap);
    assert!(recs.len() > 1000, "only {} records", recs.len());
    let mut store = JvmStore::new(JvmLimits::default());
    let now = SystemTime::now();
    store.generation_written(TGID, 1);
    let event = |tgid: u32, r: &[u8]| EventHeader {
        tgid,
        tid: tgid,
        ktime_ns: 0,
        len: r.len() as u32,
        status: EVENT_OK,
    };
    for (i, r) in recs.iter().enumerate() {
        store.ingest(&event(TGID, r), r, now);
        // Another process fires damaged copies of the same records in between.
        let mut bad = r.to_vec();
        let at = (i * 7919) % bad.len();
        bad[at] ^= 0x5a;
        store.ingest(&event(TGID + 1, &bad), &bad, now);
    }
    let sum = store.summary(TGID).unwrap();
    assert!(
        sum.finished && sum.complete,
        "{var}: finished {} complete {}: {}",
        sum.finished,
        sum.complete,
        sum.incomplete_reason
    );
    assert_eq!((sum.records_lost, sum.records_malformed), (0, 0));
    assert_eq!(sum.records as usize, recs.len());
    assert_eq!(sum.threads_live, 0);
    assert!(sum.threads_total >= 5, "{}", sum.threads_total);
    let mut ours = Vec::new();
    jp_mct::write_json(&store.mct(TGID).unwrap(), &mut ours).unwrap();
    assert!(store.summary(TGID + 1).is_some());
    assert!(
        ours == json,
        "{var}: jpd's JSON differs from the agent's out= file ({} vs {} bytes)",
        ours.len(),
        json.len()
    );
    // Recursion counted once: depth's inclusive equals its exclusive (it calls nothing).
    let top = store.top_methods(TGID).unwrap();
    let depth = top
        .iter()
        .find(|m| &*m.name == "Main.depth(I)I")
        .expect("depth in the profile");
    assert_eq!(depth.inclusive_bytecodes, depth.exclusive_bytecodes);
    assert!(depth.calls > 1000);
}

#[test]
fn store_rebuilds_the_agents_file_jdk17() {
    check("JP_JDK17", "/usr/lib/jvm/java-17-openjdk-amd64");
}

#[test]
fn store_rebuilds_the_agents_file_jdk25() {
    check("JP_JDK25", "/usr/lib/jvm/temurin-25-jdk-amd64");
}
