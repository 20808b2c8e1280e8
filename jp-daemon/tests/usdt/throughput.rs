//! Measures the USDT path with the fake agent: the eBPF program's cost per record
//! (BPF run-time statistics) and how many records per second the ring-buffer reader
//! hands to a counting sink. The reader is held while the ring fills, then released
//! and timed until it has drained everything, so the producer's speed does not enter
//! the rate. Every record must arrive (exact counts). Needs root, gcc and
//! systemtap-sdt-dev; run with `--nocapture` to see the numbers.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::support::require_root;
use crate::support::usdt::fake_agent::{build, Agent};
use jp_common::wire::{EventHeader, EVENT_OK};
use jp_daemon::store::jvm::sink::RecordSink;
use jp_daemon::store::jvm::{ProcessInfo, UsdtKernelCounters};
use jp_daemon::usdt::collector::{UsdtCollector, UsdtOptions};

/// Counts what it is handed; blocks the reader (inside `ingest`) while `hold` is set.
struct Counting {
    pid: u32,
    hold: Arc<AtomicBool>,
    records: u64,
    bytes: u64,
    not_ok: u64,
    generations: u64,
    counters: UsdtKernelCounters,
}

impl RecordSink for Counting {
    fn process_found(&mut self, _: u32, _: ProcessInfo, _: SystemTime) {}
    fn generation_written(&mut self, tgid: u32, _: u64) {
        if tgid == self.pid {
            self.generations += 1;
        }
    }
    fn ingest(&mut self, event: &EventHeader, record: &[u8], _: SystemTime) {
        while self.hold.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        if event.tgid == self.pid {
            self.records += 1;
            self.bytes += record.len() as u64;
            if event.status != EVENT_OK {
                self.not_ok += 1;
            }
        }
    }
    fn process_gone(&mut self, _: u32, _: SystemTime) {}
    fn take_resync_requests(&mut self) -> Vec<u32> {
        Vec::new()
    }
    fn set_kernel_counters(&mut self, counters: UsdtKernelCounters) {
        self.counters = counters;
    }
}

fn wait(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn ebpf_cost_per_record_and_reader_rate() {
    // A collector of its own: the suite\'s other collectors take turns with it.
    let _turn = crate::support::exclusive();
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // A name of its own: this collector's program then runs for this process only.
    let (_lib, prog) = build(dir.path(), "libjpbench.so");
    let rt = crate::collector::runtime();
    let _enter = rt.enter();
    // The agent is started first so that the sink knows its pid.
    let mut agent = Agent::spawn(Command::new(&prog));
    let hold = Arc::new(AtomicBool::new(false));
    let sink = Arc::new(Mutex::new(Counting {
        pid: agent.pid,
        hold: Arc::clone(&hold),
        records: 0,
        bytes: 0,
        not_ok: 0,
        generations: 0,
        counters: UsdtKernelCounters::default(),
    }));
    let options = UsdtOptions {
        library: "libjpbench.so".into(),
        scan_interval: Duration::from_millis(100),
        ring_buffer_bytes: 256 << 20,
        // The eBPF cost per record comes from the run-time statistics.
        bpf_stats: true,
        // The ring and the reader themselves are measured: no process's share applies.
        share: jp_daemon::usdt::fair::RingShare::unlimited(),
    };
    let collector = UsdtCollector::start(options, sink.clone()).unwrap();
    assert!(agent.ask("wait").starts_with("ready"));

    let mut fired_total = 0u64;
    for (n, size) in [(200_000u64, 256u64), (50_000, 4096), (10_000, 16384)] {
        let before = collector.status();
        let base = sink.lock().unwrap().records;
        // Hold the reader, fire, release, time the drain.
        hold.store(true, Ordering::Release);
        let fire_start = Instant::now();
        assert_eq!(agent.fire(&format!("flood {n} {size}")).0, n);
        let fire_time = fire_start.elapsed();
        let release = Instant::now();
        hold.store(false, Ordering::Release);
        wait("the drain", || sink.lock().unwrap().records == base + n);
        let drain = release.elapsed();
        fired_total += n;
        // Counters and BPF statistics reach the status at the next tick.
        wait("the counters", || {
            sink.lock().unwrap().counters.fired == fired_total
                && collector.status().run_count >= before.run_count + n
        });
        let after = collector.status();
        let s = sink.lock().unwrap();
        assert_eq!(s.counters.ring_full, 0, "ring too small for the measure");
        assert_eq!(s.counters.sent, fired_total);
        assert_eq!(s.not_ok, 0);
        let runs = after.run_count - before.run_count;
        let ns = after.run_time_ns - before.run_time_ns;
        assert_eq!(runs, n, "the program ran once per record");
        println!(
            "{n} records of {size} B: eBPF {:.0} ns/record (run_time_ns/run_cnt); fired in {:?} \
             ({:.0}/s incl. uprobe trap); reader drained them in {:?}: {:.2} M records/s, {:.0} MB/s into a counting sink",
            ns as f64 / runs as f64,
            fire_time,
            n as f64 / fire_time.as_secs_f64(),
            drain,
            n as f64 / drain.as_secs_f64() / 1e6,
            (n * size) as f64 / drain.as_secs_f64() / 1e6,
        );
    }
    assert_eq!(sink.lock().unwrap().generations, 1);
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        })
        .count();
    // The rescan's cost: every process's maps read (nothing known, first scan), with
    // the agent known (its maps skipped), and a later scan, in which the processes
    // without the agent are not due yet. Minimum of 20: the machine is shared.
    let me = agent.pid;
    let me_start = jp_daemon::usdt::discovery::start_time(me).unwrap();
    let mut later = jp_daemon::usdt::discovery::Rechecks::new(Duration::from_secs(60));
    for (what, known) in [
        ("nothing known", None),
        ("agent known", Some(me)),
        ("agent known, later scan", Some(me)),
    ] {
        let mut best = Duration::MAX;
        for _ in 0..20 {
            let mut first = jp_daemon::usdt::discovery::Rechecks::new(Duration::from_secs(60));
            let rechecks = if what.contains("later") {
                &mut later
            } else {
                &mut first
            };
            let t = Instant::now();
            let scan = jp_daemon::usdt::discovery::scan(
                "libjpbench.so",
                |pid| (Some(pid) == known).then_some(me_start),
                rechecks,
            )
            .unwrap();
            best = best.min(t.elapsed());
            assert_eq!(
                (scan.found.len(), scan.alive.len()),
                if known.is_some() { (0, 1) } else { (1, 0) }
            );
        }
        println!("discovery scan of /proc ({processes} processes, {what}): {best:?}");
    }
    agent.exit();
    collector.shutdown();
}
