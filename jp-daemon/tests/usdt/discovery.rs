//! Discovery against processes that try to hang it or balloon it: a process whose
//! library's directory keeps being swapped for one holding a FIFO of the library's
//! name, and a process mapping a sparse gigabyte named like the library. Needs root,
//! gcc and systemtap-sdt-dev.

use std::ffi::CString;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::collector::{options, runtime, wait_status, SERIAL};
use crate::support::require_root;
use crate::support::usdt::fake_agent::{build, Agent, Recording};
use jp_daemon::refusals::{self, Refusal};
use jp_daemon::usdt::collector::UsdtCollector;

const MALFORMED: Refusal = Refusal::new("discovery", "malformed");
const NOT_REGULAR_FILE: Refusal = Refusal::new("discovery", "not_regular_file");

fn mkfifo(path: &Path) {
    let c_path = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
}

/// Exchanges two directories in one step (`renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &CString, b: &CString) {
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let ret = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(ret, 0, "{}", std::io::Error::last_os_error());
}

/// Exchanges two directories back and forth until stopped.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Swapper {
    fn start(a: &Path, b: &Path) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let c = |p: &Path| CString::new(p.to_str().unwrap()).unwrap();
        let (a, b) = (c(a), c(b));
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !flag.load(Ordering::Relaxed) {
                exchange(&a, &b);
                swaps += 1;
            }
            swaps
        });
        Swapper {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap())
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn copy_into(dir: &Path, files: &[&Path]) {
    std::fs::create_dir_all(dir).unwrap();
    for f in files {
        std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).unwrap().ino()
}

/// Starts a collector on another thread: its first scan runs in `start`, and a scan
/// stuck for good must fail the test, not hang it (the thread is then leaked).
fn start_or_leak(
    rt: &tokio::runtime::Handle,
    sink: Arc<Mutex<Recording>>,
    library: &str,
) -> UsdtCollector {
    let (tx, rx) = std::sync::mpsc::channel();
    let (rt, library) = (rt.clone(), library.to_owned());
    std::thread::spawn(move || {
        let _enter = rt.enter();
        let started = UsdtCollector::start(options(&library, 1 << 20), sink);
        let _ = tx.send(started.map_err(|e| format!("{e:#}")));
    });
    match rx.recv_timeout(crate::collector::WAIT) {
        Ok(started) => started.unwrap(),
        Err(_) => panic!("the collector's first scan is stuck"),
    }
}

/// Waits until the collector's status satisfies `pred`. On a timeout the collector is
/// leaked, not shut down: its manager thread may be stuck for good, and joining it
/// would hang the test instead of failing it.
fn wait_or_leak(
    collector: UsdtCollector,
    what: &str,
    pred: impl Fn(&jp_daemon::store::jvm::sink::UsdtStatus) -> bool,
) -> UsdtCollector {
    let start = std::time::Instant::now();
    loop {
        let status = collector.status();
        if pred(&status) {
            return collector;
        }
        if start.elapsed() >= crate::collector::WAIT {
            std::mem::forget(collector);
            panic!("waiting for {what} (the USDT manager is stuck?): {status:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_directory_swapped_for_a_fifo_does_not_hang_discovery() {
    let _turn = crate::support::exclusive();
    require_root();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const LIB: &str = "libjptest-swap.so";
    // Each process maps a copy of its own (a file of its own, opened once each) from
    // `real/DEEP/K/`; `real` is then exchanged, again and again, with `fifo`, whose `DEEP/K/`
    // entries of the library's name are FIFOs nobody writes: a path opened after a
    // check of it blocks there for good. DEEP is a long chain of directories: the swapped one is passed at the start of each walk, and a whole
    // walk lies between a check and an open. Many processes, many chances to fall
    // into that gap.
    const PROCESSES: usize = 32;
    let deep: std::path::PathBuf = std::iter::repeat_n("d", 1800).collect();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let built = dir.path().join("built");
    std::fs::create_dir(&built).unwrap();
    let (lib, prog) = build(&built, LIB);
    let (real, fifo) = (dir.path().join("real"), dir.path().join("fifo"));
    std::fs::create_dir(&real).unwrap();
    std::fs::create_dir(&fifo).unwrap();
    let mut agents = Vec::new();
    let mut inodes = Vec::new();
    for k in 0..PROCESSES {
        let own = real.join(&deep).join(k.to_string());
        copy_into(&own, &[&lib, &prog]);
        let planted = fifo.join(&deep).join(k.to_string());
        std::fs::create_dir_all(&planted).unwrap();
        mkfifo(&planted.join(LIB));
        inodes.push(inode(&own.join(LIB)));
        agents.push(Agent::spawn(Command::new(own.join("jp_fake_agent"))));
    }
    let swapper = Swapper::start(&real, &fifo);
    let not_regular_before = refusals::get(NOT_REGULAR_FILE);

    // Not dropped if the test fails: dropping it would wait for a stuck manager.
    let rt = std::mem::ManuallyDrop::new(runtime());
    let enter = rt.enter();
    let sink = Arc::new(Mutex::new(Recording::default()));
    let collector = start_or_leak(rt.handle(), sink, LIB);
    // Every swapped process is listed, through the file it maps whatever its path says.
    let pids: Vec<u32> = agents.iter().map(|a| a.pid).collect();
    let collector = wait_or_leak(collector, "every swapped process listed", |s| {
        pids.iter().all(|p| s.processes.contains(p))
    });
    // A process started afterwards is found too: the manager is not stuck.
    let late = dir.path().join("late");
    copy_into(&late, &[&lib, &prog]);
    let late_agent = Agent::spawn(Command::new(late.join("jp_fake_agent")));
    let collector = wait_or_leak(collector, "the process started afterwards listed", |s| {
        s.processes.contains(&late_agent.pid)
    });
    let swaps = swapper.stop();
    assert!(swaps > 0, "the directories were never swapped");

    let status = collector.status();
    let mut attached: Vec<u64> = status
        .files
        .iter()
        .filter(|f| f.users.iter().any(|u| pids.contains(u)))
        .map(|f| f.inode)
        .collect();
    attached.sort_unstable();
    inodes.sort_unstable();
    assert_eq!(
        attached, inodes,
        "each process's own file, not what its path names"
    );
    assert_eq!(status.refused.len(), 0, "{:?}", status.refused);
    assert_eq!(
        refusals::get(NOT_REGULAR_FILE) - not_regular_before,
        0,
        "the FIFO is never opened"
    );
    for agent in agents {
        agent.exit();
    }
    late_agent.exit();
    collector.shutdown();
    drop(enter);
    drop(std::mem::ManuallyDrop::into_inner(rt));
}

/// A program that maps the first page of the file it is given, says its pid and waits
/// for its standard input to close.
const MAPPER_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0 || mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED)
        return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("pid %d\n", getpid());
    while (getchar() != EOF)
        ;
    return 0;
}
"#;

/// `VmHWM` (peak resident memory since the last reset) or `VmRSS`, in bytes.
fn memory_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().unwrap();
    kib << 10
}

#[test]
fn a_sparse_gigabyte_named_like_the_agent_costs_only_its_headers() {
    let _turn = crate::support::exclusive();
    require_root();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const LIB: &str = "libjptest-sparse.so";
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let source = dir.path().join("mapper.c");
    let mapper = dir.path().join("mapper");
    std::fs::write(&source, MAPPER_C).unwrap();
    let out = Command::new("cc")
        .args(["-O2", "-o"])
        .args([&mapper, &source])
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc ({e}): install the Debian package gcc"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sparse = dir.path().join(LIB);
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();

    let rt = runtime();
    let _enter = rt.enter();
    let sink = Arc::new(Mutex::new(Recording::default()));
    let collector = UsdtCollector::start(options(LIB, 1 << 20), sink).unwrap();
    wait_status(&collector, "a first scan", |s| s.scans > 0);
    // The collector runs in this process: its peak memory from here on is jpd's.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = memory_bytes("VmRSS:");
    let malformed_before = refusals::get(MALFORMED);
    let mut mapper = Agent::spawn({
        let mut cmd = Command::new(&mapper);
        cmd.arg(&sparse);
        cmd
    });
    let shown = sparse.display().to_string();
    wait_status(&collector, "the sparse file refused", |s| {
        s.refused.iter().any(|r| r.path == shown)
    });
    let peak = memory_bytes("VmHWM:");
    assert!(
        peak.saturating_sub(before) < 32 << 20,
        "resident memory grew from {before} to a peak of {peak} bytes"
    );
    assert_eq!(refusals::get(MALFORMED) - malformed_before, 1);
    let status = collector.status();
    assert!(!status.processes.contains(&mapper.pid), "{status:?}");
    mapper.child.kill().unwrap();
    mapper.child.wait().unwrap();
    collector.shutdown();
}
