//! The USDT collector against a fake agent (a C `libjpagent.so` with the `jp:record`
//! probe, its semaphore and the control block): discovery, control generations,
//! records delivered byte for byte with the right tgid/tid, too-long and faulting
//! records, re-send requests, a process in another mount namespace, exits, and a ring
//! buffer forced to overflow. Needs root, gcc, systemtap-sdt-dev and unshare.
//!
//! Each test gives its library a name of its own and watches for that name only: a
//! collector writes generations into every process mapping the library it watches,
//! and must not disturb JVMs of other tests (or a jpd) running on the host.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::require_root;
use crate::support::usdt::fake_agent::{build, wait_for, write_records, Agent, Recording};
use jp_common::wire::{
    self, header, MethodDef, TreeEntry, Writer, EVENT_FAULT, EVENT_OK, EVENT_TOO_LONG,
    FLAG_ABSOLUTE, FLAG_RESYNC, KIND_HELLO, KIND_METHODS, KIND_TREE, MAX_RECORD,
};
use jp_daemon::usdt::collector::{UsdtCollector, UsdtOptions};
use jp_daemon::usdt::control;
use jp_daemon::usdt::fair::RingShare;

pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Tests share two cores: one collector at a time keeps timings sane.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn options(library: &str, ring_buffer_bytes: u32) -> UsdtOptions {
    UsdtOptions {
        library: library.to_owned(),
        scan_interval: Duration::from_millis(100),
        ring_buffer_bytes,
        bpf_stats: false,
        share: RingShare::default(),
    }
}

/// xorshift64: deterministic random bytes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Valid records of each kind, written with the shared encoder, and odd sizes.
fn sample_records(pid: u32, generation: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_RECORD];
    let h = header(
        KIND_HELLO,
        pid,
        generation,
        0,
        0,
        FLAG_RESYNC | FLAG_ABSOLUTE,
    );
    let mut w = Writer::new(&mut buf, &h).unwrap();
    for v in [1_700_000_000_000u64, 1, 0, 2] {
        w.varint(v).unwrap();
    }
    for s in [&b"17.0.9"[..], b"Main", b"0.1.0"] {
        w.string(s).unwrap();
    }
    out.push(w.finish().to_vec());
    let mut w = Writer::new(&mut buf, &header(KIND_METHODS, pid, generation, 0, 1, 0)).unwrap();
    w.begin_entries().unwrap();
    w.method(&MethodDef {
        mid: 1,
        class: b"a.B",
        name: b"run",
        descriptor: b"()V",
        source_file: b"a/B.java",
    })
    .unwrap();
    out.push(w.finish().to_vec());
    let h = header(
        KIND_TREE,
        pid,
        generation,
        1,
        0,
        FLAG_RESYNC | FLAG_ABSOLUTE,
    );
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.string(b"main").unwrap();
    w.begin_entries().unwrap();
    // As many entries as fit: a record of nearly MAX_RECORD bytes.
    let mut node = 1;
    while w
        .tree_entry(&TreeEntry {
            node,
            definition: Some((node - 1, 1)),
            calls: u64::from(node),
            bytecodes: 1000 * u64::from(node),
        })
        .is_ok()
    {
        node += 1;
    }
    out.push(w.finish().to_vec());
    let mut rng = Rng(0x1234_5678_9abc_def1);
    out.push(Vec::new());
    out.push(rng.bytes(1));
    out.push(rng.bytes(wire::HEADER_LEN));
    out.push(rng.bytes(MAX_RECORD));
    out
}

fn ready(agent: &mut Agent) -> (u32, u64) {
    let answer = agent.ask("wait");
    let f: Vec<&str> = answer.split_whitespace().collect();
    assert!(f.len() == 7 && f[0] == "ready", "{answer:?}");
    assert_ne!(f[6], "0", "semaphore");
    (f[2].parse().unwrap(), f[4].parse().unwrap())
}

fn semaphore(agent: &mut Agent) -> u32 {
    let answer = agent.ask("sema");
    answer.strip_prefix("sema ").unwrap().parse().unwrap()
}

/// Waits until the collector's published status satisfies `pred`.
pub(crate) fn wait_status(
    collector: &UsdtCollector,
    what: &str,
    pred: impl Fn(&jp_daemon::store::jvm::sink::UsdtStatus) -> bool,
) {
    let start = std::time::Instant::now();
    loop {
        let status = collector.status();
        if pred(&status) {
            return;
        }
        assert!(start.elapsed() < WAIT, "waiting for {what}: {status:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn same_file(a: &Path, dev: (u32, u32), inode: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(a).unwrap();
    (libc::major(m.dev()), libc::minor(m.dev())) == dev && m.ino() == inode
}

#[test]
fn records_generations_faults_and_exit() {
    // A collector of its own: the suite\'s other collectors take turns with it.
    let _turn = crate::support::exclusive();
    require_root();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // On disk, not in a /tmp that may be a tmpfs: the file must stay attached when idle.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (lib, prog) = build(dir.path(), "libjptest-records.so");
    let rt = runtime();
    let _enter = rt.enter();
    let sink = Arc::new(Mutex::new(Recording::default()));
    let collector =
        UsdtCollector::start(options("libjptest-records.so", 1 << 20), sink.clone()).unwrap();

    let mut agent = Agent::spawn(Command::new(&prog));
    let pid = agent.pid;
    // The program waits for the semaphore and a generation: jpd found it, attached,
    // and wrote into its control block.
    let (tid, generation) = ready(&mut agent);
    assert_eq!(tid, pid, "single-threaded program: tid is the pid");
    {
        let r = sink.lock().unwrap();
        assert_eq!(r.generations_of(pid), [generation]);
        let (_, info) = r.found.iter().find(|(p, _)| *p == pid).unwrap();
        assert_eq!(Path::new(&info.exe), prog.canonicalize().unwrap());
        assert_eq!(info.cmdline, prog.display().to_string());
        assert_eq!(info.ns_pid, None);
        assert!(info.start_time_ticks > 0);
    }
    // The status is a snapshot published at the end of the manager's tick, a moment
    // after the generation the program already saw was written.
    wait_status(&collector, "the library listed", |s| {
        s.files.iter().any(|f| same_file(&lib, f.dev, f.inode))
    });
    let status = collector.status();
    let file = status
        .files
        .iter()
        .find(|f| same_file(&lib, f.dev, f.inode))
        .unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(file.path, lib.display().to_string());
    let (dev, inode) = (file.dev, file.inode);
    assert_eq!(file.sites, 1);
    assert!(file.users.contains(&pid));

    // Records arrive byte for byte, in order, with the kernel's tgid and tid.
    let records = sample_records(pid, generation);
    let path = dir.path().join("records.bin");
    write_records(&path, &records);
    let (fired, tid) = agent.fire(&format!("fire {}", path.display()));
    assert_eq!(fired, records.len() as u64);
    wait_for(&sink, WAIT, "the records", |r| {
        r.events_of(pid).len() == records.len()
    });
    let events = sink.lock().unwrap().events_of(pid);
    let mut last_time = 0;
    for ((h, bytes), sent) in events.iter().zip(&records) {
        assert_eq!((h.tgid, h.tid, h.status), (pid, tid, EVENT_OK));
        assert_eq!(h.len as usize, sent.len());
        assert_eq!(bytes, sent);
        assert!(h.ktime_ns >= last_time);
        last_time = h.ktime_ns;
    }

    // Too long: reported without payload. A bad address: a fault.
    assert_eq!(agent.fire(&format!("long {}", MAX_RECORD + 1)).0, 1);
    assert_eq!(agent.fire("bad 100").0, 1);
    wait_for(&sink, WAIT, "the error events", |r| {
        r.events_of(pid).len() == records.len() + 2
    });
    let events = sink.lock().unwrap().events_of(pid);
    let errors: Vec<(u32, u32, usize)> = events[records.len()..]
        .iter()
        .map(|(h, b)| (h.status, h.len, b.len()))
        .collect();
    assert_eq!(
        errors,
        [
            (EVENT_TOO_LONG, MAX_RECORD as u32 + 1, 0),
            (EVENT_FAULT, 100, 0)
        ]
    );
    assert!(events[records.len()..]
        .iter()
        .all(|(h, _)| h.tgid == pid && h.tid == tid));

    // A re-send request: a new, larger generation reaches the process.
    sink.lock().unwrap().resync.push(pid);
    let answer = agent.ask(&format!("gen_after {generation}"));
    let second: u64 = answer.strip_prefix("gen ").unwrap().parse().unwrap();
    assert!(second > generation);
    wait_for(&sink, WAIT, "the second generation", |r| {
        r.generations_of(pid) == [generation, second]
    });

    // Another tracer writes a generation of its own: jpd follows it, so that it
    // accepts the re-send answering it.
    let symbol = control::control_symbol(&std::fs::read(&lib).unwrap()).unwrap();
    let addr = control::address_in(pid, dev, inode, &symbol).unwrap();
    let foreign = second + 12_345;
    let started = jp_daemon::usdt::discovery::start_time(pid).unwrap();
    control::write_generation(pid, started, addr, foreign).unwrap();
    wait_for(&sink, WAIT, "the foreign generation", |r| {
        r.generations_of(pid) == [generation, second, foreign]
    });

    // Counters reach the sink: this collector's program ran for this process only.
    let fired = records.len() as u64 + 2;
    wait_for(&sink, WAIT, "the kernel counters", |r| {
        r.counters.fired == fired
    });
    let c = sink.lock().unwrap().counters;
    assert_eq!(
        (c.sent, c.too_long, c.fault, c.ring_full),
        (fired, 1, 1, 0),
        "{c:?}"
    );

    // Exit: reported; the file stays attached, idle, for the next process that maps it.
    agent.exit();
    wait_for(&sink, WAIT, "the exit", |r| r.gone.contains(&pid));
    // The status is published after the scan that saw the exit.
    let idle = |status: &jp_daemon::store::jvm::sink::UsdtStatus| {
        status
            .files
            .iter()
            .any(|f| same_file(&lib, f.dev, f.inode) && f.idle && f.users.is_empty())
    };
    wait_status(&collector, "the file idle, still attached", |s| {
        idle(s) && !s.processes.contains(&pid)
    });

    // A process started now has its probe armed by the kernel when it maps the file,
    // before any scan found it: its records from the very first one arrive (a JVM
    // shorter than a rescan is not lost).
    let mut second = Agent::spawn(Command::new(&prog));
    let pid2 = second.pid;
    assert_eq!(semaphore(&mut second), 1, "semaphore armed at load time");
    let records2 = sample_records(pid2, 0);
    write_records(&path, &records2);
    let (fired2, _) = second.fire(&format!("fire {}", path.display()));
    assert_eq!(fired2, records2.len() as u64);
    second.exit();
    wait_for(&sink, WAIT, "the second process's records", |r| {
        r.events_of(pid2).len() == records2.len()
    });
    let got: Vec<Vec<u8>> = sink
        .lock()
        .unwrap()
        .events_of(pid2)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    assert_eq!(got, records2);

    // Deleted: no process can map it again, so it is detached.
    wait_status(&collector, "idle again after the second process", |s| {
        idle(s) && !s.processes.contains(&pid2)
    });
    std::fs::remove_file(&lib).unwrap();
    wait_status(&collector, "the deleted file detached", |s| {
        !s.files.iter().any(|f| f.dev == dev && f.inode == inode)
    });
    collector.shutdown();
}

#[test]
fn hostile_bytes_arrive_unchanged_and_shutdown_drops_the_semaphore() {
    // A collector of its own: the suite\'s other collectors take turns with it.
    let _turn = crate::support::exclusive();
    require_root();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (_lib, prog) = build(dir.path(), "libjptest-hostile.so");
    let rt = runtime();
    let _enter = rt.enter();
    let sink = Arc::new(Mutex::new(Recording::default()));
    let collector =
        UsdtCollector::start(options("libjptest-hostile.so", 4 << 20), sink.clone()).unwrap();
    let mut agent = Agent::spawn(Command::new(&prog));
    let pid = agent.pid;
    ready(&mut agent);

    // Random lengths and bytes, some starting with a valid magic, some too long.
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let mut records = Vec::new();
    for i in 0..300 {
        let len = (rng.next() % (MAX_RECORD as u64 + 200)) as usize;
        let mut r = rng.bytes(len);
        if i % 3 == 0 && len >= 4 {
            r[..4].copy_from_slice(&wire::MAGIC.to_le_bytes());
        }
        records.push(r);
    }
    let path = dir.path().join("hostile.bin");
    write_records(&path, &records);
    let (fired, tid) = agent.fire(&format!("fire {}", path.display()));
    assert_eq!(fired, records.len() as u64);
    wait_for(&sink, WAIT, "the hostile records", |r| {
        r.events_of(pid).len() == records.len()
    });
    let events = sink.lock().unwrap().events_of(pid);
    for ((h, bytes), sent) in events.iter().zip(&records) {
        assert_eq!((h.tgid, h.tid), (pid, tid));
        if sent.len() > MAX_RECORD {
            assert_eq!(
                (h.status, h.len as usize, bytes.len()),
                (EVENT_TOO_LONG, sent.len(), 0)
            );
        } else {
            assert_eq!(h.status, EVENT_OK);
            assert_eq!(bytes, sent);
        }
    }
    assert!(records.iter().any(|r| r.len() > MAX_RECORD));
    assert_eq!(collector.status().malformed_items, 0);

    // jpd goes away: the kernel drops the semaphore, the agent stops serializing.
    assert!(semaphore(&mut agent) > 0);
    collector.shutdown();
    assert_eq!(semaphore(&mut agent), 0);
    assert_eq!(agent.fire("bad 10").0, 0, "fired with nobody listening");
    agent.exit();
}

#[test]
fn process_in_another_mount_namespace_killed() {
    // A collector of its own: the suite\'s other collectors take turns with it.
    let _turn = crate::support::exclusive();
    require_root();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let built = dir.path().join("built");
    std::fs::create_dir(&built).unwrap();
    let (lib, prog) = build(&built, "libjptest-ns.so");
    // An empty directory on the host; inside the namespace a tmpfs holds the agent.
    let mount_point = dir.path().join("container");
    std::fs::create_dir(&mount_point).unwrap();
    let script = format!(
        "mount -t tmpfs jp-test {m} && cp {lib} {prog} {m}/ && exec {m}/jp_fake_agent",
        m = mount_point.display(),
        lib = lib.display(),
        prog = prog.display(),
    );
    let rt = runtime();
    let _enter = rt.enter();
    let sink = Arc::new(Mutex::new(Recording::default()));
    let collector =
        UsdtCollector::start(options("libjptest-ns.so", 1 << 20), sink.clone()).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let mut agent = Agent::spawn(cmd);
    let pid = agent.pid;
    let inner_lib = mount_point.join("libjptest-ns.so");
    assert!(
        !inner_lib.exists(),
        "the library must be invisible from the host"
    );
    let (tid, generation) = ready(&mut agent);
    assert_eq!(tid, pid);
    assert_eq!(sink.lock().unwrap().generations_of(pid), [generation]);
    wait_status(&collector, "the copy listed", |s| {
        s.files.iter().any(|f| f.users.contains(&pid))
    });
    let status = collector.status();
    let file = status
        .files
        .iter()
        .find(|f| f.users.contains(&pid))
        .unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(file.path, inner_lib.display().to_string());
    assert!(
        !same_file(&lib, file.dev, file.inode),
        "a copy, not the host's file"
    );

    let records = vec![b"from a container".to_vec()];
    // The records file is read by the program inside the namespace: put it in /tmp of
    // the host, which the private mount namespace still sees.
    let path = dir.path().join("records.bin");
    write_records(&path, &records);
    assert_eq!(agent.fire(&format!("fire {}", path.display())).0, 1);
    wait_for(&sink, WAIT, "the record", |r| r.events_of(pid).len() == 1);
    assert_eq!(sink.lock().unwrap().events_of(pid)[0].1, records[0]);

    // SIGKILL: the exit is seen by the next scan. A file on a tmpfs (as in a container)
    // is not kept attached: its descriptor would keep the filesystem alive.
    let (dev, inode) = (file.dev, file.inode);
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    wait_for(&sink, WAIT, "the exit", |r| r.gone.contains(&pid));
    wait_status(&collector, "the tmpfs file detached", |s| {
        !s.files.iter().any(|f| f.dev == dev && f.inode == inode)
    });
    collector.shutdown();
}

#[test]
fn ring_buffer_overflow_is_counted_and_jpd_keeps_going() {
    // A collector of its own: the suite\'s other collectors take turns with it.
    let _turn = crate::support::exclusive();
    require_root();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // A library name of its own: the counters of this collector's program then count
    // this process's firings only, and are compared exactly.
    let (_lib, prog) = build(dir.path(), "libjpflood.so");
    let rt = runtime();
    let _enter = rt.enter();
    let sink = Arc::new(Mutex::new(Recording::default()));
    let collector = UsdtCollector::start(options("libjpflood.so", 64 << 10), sink.clone()).unwrap();
    let mut agent = Agent::spawn(Command::new(&prog));
    let pid = agent.pid;
    ready(&mut agent);

    let n = 3000u64;
    assert_eq!(agent.fire(&format!("flood {n} {MAX_RECORD}")).0, n);
    wait_for(&sink, WAIT, "the counters", |r| r.counters.fired == n);
    let c = sink.lock().unwrap().counters;
    assert!(c.ring_full > 0, "a 64 KiB ring never overflowed: {c:?}");
    assert_eq!(c.sent + c.ring_full, n, "{c:?}");
    assert_eq!((c.fault, c.too_long), (0, 0));
    wait_for(&sink, WAIT, "every record sent", |r| {
        r.events_of(pid).len() as u64 == c.sent
    });
    let events = sink.lock().unwrap().events_of(pid);
    for (h, bytes) in &events {
        assert_eq!(
            (h.status, h.len as usize, bytes.len()),
            (EVENT_OK, MAX_RECORD, MAX_RECORD)
        );
        // Each flood record is one repeated byte: nothing was torn.
        assert!(bytes.iter().all(|&b| b == bytes[0]));
    }
    println!(
        "flood of {n} records of {MAX_RECORD} bytes into a 64 KiB ring: {} delivered, {} ring-full",
        c.sent, c.ring_full
    );

    // Still working.
    let path = dir.path().join("after.bin");
    write_records(&path, &[b"after the flood".to_vec()]);
    assert_eq!(agent.fire(&format!("fire {}", path.display())).0, 1);
    wait_for(&sink, WAIT, "a record after the flood", |r| {
        r.events_of(pid)
            .last()
            .is_some_and(|(_, b)| b == b"after the flood")
    });
    agent.exit();
    collector.shutdown();
}
