//! Off-CPU time across PID reuse and threads that end while off CPU, for real (JDK 17
//! and 25, jpd's scheduler program on): a JVM jpd joined exits while three of its threads
//! sleep in d(); a new JVM with the agent then starts at the same PID. jpd keeps the old
//! JVM's times as they were (its threads' last sleeps counted, nothing negative or huge)
//! until the new one replaces it, and the new JVM's view holds only its own contexts and
//! times: a() off CPU as long as it measured itself sleeping, no d(), and no more time
//! off CPU than its threads lived.
//!
//! The PID is forced through `/proc/sys/kernel/ns_last_pid` (the host's PID namespace,
//! where jpd and its eBPF programs see processes): P − 1 is written right before the
//! fork, again when another process of this busy host took P first. A fresh PID
//! namespace (`unshare --pid`) would make the PIDs predictable inside it, but the
//! kernel's view — the host PIDs jpd keys JVMs and threads by — would not be reused at
//! all, which is what this test is about.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cpu::{compile, jdks, wait_listed, Jvm};
use crate::flame_offcpu::{export_all, offcpu_total};
use crate::offcpu::{
    done_line, dropped, export_json, measured, nodes, of, offcpu_ns, settled, CONFIG,
};
use crate::support::jpd::Jpd;
use crate::support::require_root;

/// Attempts to get the PID before the test gives up (another process may fork between
/// the write and the fork each time).
const PID_ATTEMPTS: u32 = 50;

/// `OffcpuWaits ARGS` from `dir` started at `pid` (see the module's note).
fn launch_at_pid(pid: u32, home: &Path, dir: &Path, args: &[String]) -> Jvm {
    for _ in 0..PID_ATTEMPTS {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("write /proc/sys/kernel/ns_last_pid (root)");
        let jvm = Jvm::launch(&[], home, dir, "OffcpuWaits", args);
        if jvm.child.id() == pid {
            return jvm;
        }
        drop(jvm);
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("pid {pid} was taken by another process {PID_ATTEMPTS} times in a row");
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why periods off CPU were not timed, as /metrics counts them host-wide.
const DROPPED: [&str; 5] = ["orphan", "stale", "over_cap", "lost", "read_failed"];

/// jpd's periods not timed so far, by [`DROPPED`] reason.
fn dropped_now(d: &Jpd) -> Vec<u64> {
    DROPPED.iter().map(|r| dropped(d, r).unwrap_or(0)).collect()
}

/// Lets the JVM's threads start their work once jpd joined `threads` of them, the JVM
/// listed being the one attached at or after `since_ms` (not an older one at its PID).
fn go_after(d: &Jpd, jvm: &mut Jvm, threads: u64, since_ms: u64) -> Instant {
    use std::io::Write as _;
    let joined = |j: &serde_json::Value| {
        j["attached_since_unix_ms"].as_u64() >= Some(since_ms)
            && j["exited_unix_ms"].is_null()
            && j["cpu"]["publishing_threads"].as_u64() >= Some(threads)
    };
    let t0 = Instant::now();
    loop {
        let list = d.jpctl_json(&["jvm", "list", "--json"]);
        let entry = list["jvms"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|j| j["pid"].as_u64() == Some(u64::from(jvm.pid())))
            })
            .cloned();
        if entry.as_ref().is_some_and(joined) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let log = d.log_text();
            let tail = &log[log.len().saturating_sub(4000)..];
            panic!(
                "JVM {} was not joined within 30 s: {entry:?}\njpd's log:\n{tail}",
                jvm.pid()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(300));
    jvm.stdin.write_all(b"go\n").expect("write to the JVM");
    jvm.stdin.flush().expect("flush");
    Instant::now()
}

#[test]
fn a_reused_pid_gets_none_of_the_old_jvms_contexts_or_time_off_cpu() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = compile("OffcpuWaits", &format!("{tag}-reuse"), &home);
        // The old JVM: three threads sleep 4 s at a time in d() (50 ms on CPU between);
        // it exits 6 s after they started, each in its second sleep.
        let started_ms = unix_ms();
        let args = ["blocked".to_string(), "0".to_string(), "3".to_string()];
        let mut old = Jvm::launch(&[], &home, &dir, "OffcpuWaits", &args);
        old.expect_line("started");
        old.expect_line("done");
        let pid = old.pid();
        let went = go_after(&d, &mut old, 3, started_ms);
        std::thread::sleep(Duration::from_millis(6000));
        let ending = went.elapsed().as_nanos() as u64;
        old.finish();
        let lived = went.elapsed().as_nanos() as u64;
        settled(&d, pid);
        let old_doc = export_json(&d, pid, &format!("{tag}-old"));
        let old_all = nodes(&old_doc);
        let off_d = offcpu_ns(&of(&old_all, "OffcpuWaits.d("));
        let what = format!(
            "{tag}: pid {pid}: the old JVM's d() off CPU {off_d} ns, its threads slept from \
             {ending} to {lived} ns after go"
        );
        // Each thread slept 4 s, ran 50 ms, and slept until the JVM ended: its last
        // sleep is counted too (the thread ran once more, to exit). Less the 50 ms, the
        // 300 ms spin before go, and a few ms of scheduling each.
        assert!(off_d <= 3 * lived, "{what}");
        assert!(off_d + 3 * 500_000_000 >= 3 * ending, "{what}");
        let old_total = offcpu_total(&export_all(&d, pid, &format!("reuse-{tag}-old")));

        // The new JVM, at the same PID once the old one was reaped.
        let gone_ms = unix_ms();
        let dropped_before = dropped_now(&d);
        let args = ["waits".to_string(), "2".to_string(), "1".to_string()];
        let t_new = Instant::now();
        let mut new = launch_at_pid(pid, &home, &dir, &args);
        new.expect_line("started");
        go_after(&d, &mut new, 1, gone_ms);
        let line = done_line(&mut new);
        let (slept, spun) = match measured(&line)[..] {
            [s, p] => (s, p),
            _ => panic!("{tag}: {line}"),
        };
        new.finish();
        let new_lived = t_new.elapsed().as_nanos() as u64;
        settled(&d, pid);
        // Exited, every thread's last report in: the new JVM's entry, whole.
        let listed = wait_listed(&d, pid, "exited", |j| !j["exited_unix_ms"].is_null());
        let doc = export_all(&d, pid, &format!("reuse-{tag}-new"));
        let all = nodes(&doc);
        let off_a = offcpu_ns(&of(&all, "OffcpuWaits.a("));
        let total = offcpu_total(&doc);
        let threads = listed["threads"]["total"].as_u64().unwrap_or(0);
        let since: Vec<(&str, u64)> = DROPPED
            .iter()
            .zip(dropped_now(&d).iter().zip(&dropped_before))
            .map(|(r, (now, before))| (*r, now - before))
            .collect();
        let what = format!(
            "{tag}: pid {pid} reused: a() off CPU {off_a} ns, measured sleep {slept} spin \
             {spun}; off CPU in all {total} ns over {threads} threads living at most \
             {new_lived} ns (the old JVM's: {old_total}); periods not timed meanwhile \
             {since:?}; {listed}"
        );
        // Only the new JVM's contexts: no d(), and a() and b() there.
        assert!(of(&all, "OffcpuWaits.d(").is_empty(), "{what}");
        assert_eq!(of(&all, "OffcpuWaits.b(").len(), 1, "{what}");
        assert_eq!(listed["complete"], true, "{what}");
        assert_eq!(listed["main"], "OffcpuWaits", "{what}");
        // a()'s sleeps, no more (the clocks are the same; see offcpu.rs): nothing of the
        // old JVM's time. All of them unless this busy host made jpd drop periods over
        // the operator's cap or overwritten before read (counted host-wide, for every
        // JVM joined): a sleep timed from an old thread's switch-out would be dropped as
        // stale, and one whose switch-out was lost counted as an orphan — missing time
        // then is a fault of the reuse.
        assert!(off_a <= slept, "{what}");
        let iterations = slept / 200_000_000;
        let host_dropped = since[2].1 + since[3].1 > 0;
        assert!(
            off_a + iterations * 2_000_000 >= slept || host_dropped,
            "{what}"
        );
        if host_dropped {
            eprintln!("offcpu_pid_reuse: {what}");
        }
        // No thread off CPU longer than the new JVM lived: none of the old JVM's time.
        assert!(threads > 0 && total <= threads * new_lived, "{what}");
    }
    d.stop();
}
