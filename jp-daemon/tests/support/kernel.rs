//! Helpers shared by the kernel collector tests (real kernel, root).

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use jp_daemon::kernel::{KernelCollector, KernelOptions};
use jp_daemon::store::kernel::KernelStore;

use super::require_root;

/// Set once a collector of this suite has run. The kernel tears a detached probe's
/// tracepoint down after the collector is gone (the program ids vanish first), and
/// exact counts taken meanwhile were measured to miss a few IRQs: the next collector
/// starts after a pause.
static RAN_BEFORE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
const AFTER_TEARDOWN: Duration = Duration::from_millis(300);

pub struct Running {
    pub collector: KernelCollector,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Running {
    /// `KernelCollector::shutdown`, then the next test may start its collector.
    pub fn shutdown(self) {
        self.collector.shutdown();
    }
}

impl std::ops::Deref for Running {
    type Target = KernelCollector;
    fn deref(&self) -> &KernelCollector {
        &self.collector
    }
}

pub fn start() -> (Running, Arc<KernelStore>) {
    start_with(KernelOptions::default())
}

pub fn start_with(options: KernelOptions) -> (Running, Arc<KernelStore>) {
    require_root();
    let turn = super::exclusive();
    if RAN_BEFORE.swap(true, std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(AFTER_TEARDOWN);
    }
    let store = KernelStore::new();
    let c = match KernelCollector::start(options, store.clone()) {
        Ok(c) => c,
        Err(e) => panic!("cannot start the kernel collector: {e:#}"),
    };
    (
        Running {
            collector: c,
            _turn: turn,
        },
        store,
    )
}

/// `dd if=/dev/zero of=/dev/null bs=64k`, optionally pinned to one CPU, killed on drop.
pub struct Dd(Child);

impl Dd {
    pub fn start(cpu: Option<u32>) -> Dd {
        let mut cmd = match cpu {
            Some(cpu) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpu.to_string(), "dd"]);
                c
            }
            None => Command::new("dd"),
        };
        let child = cmd
            .args(["if=/dev/zero", "of=/dev/null", "bs=64k"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot run dd (coreutils) / taskset (util-linux)");
        Dd(child)
    }
}

impl Drop for Dd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes and fsyncs `rounds` × 4 MiB to a file on the root file system (the virtio
/// disk here), then reads it back with O_DIRECT so that the page cache cannot absorb
/// the reads.
pub fn disk_io(rounds: usize) {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::env::temp_dir().join(format!("jp-kernel-test-{}", std::process::id()));
    let block = vec![0x5au8; 4 << 20];
    {
        let mut f = std::fs::File::create(&path).expect("create test file");
        for _ in 0..rounds {
            f.write_all(&block).expect("write test file");
            f.sync_all().expect("fsync test file");
        }
    }
    {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .expect("open test file with O_DIRECT");
        // O_DIRECT needs an aligned buffer: carve a 4 KiB-aligned 1 MiB window.
        let mut raw = vec![0u8; (1 << 20) + 4096];
        let off = raw.as_ptr().align_offset(4096);
        let buf = &mut raw[off..off + (1 << 20)];
        f.rewind().expect("rewind");
        while f.read(buf).expect("O_DIRECT read") > 0 {}
    }
    let _ = std::fs::remove_file(&path);
}

/// Sum over CPUs of each `/proc/interrupts` line whose number is in `irqs`.
pub fn proc_interrupts(irqs: &[u32]) -> BTreeMap<u32, u64> {
    let text = std::fs::read_to_string("/proc/interrupts").expect("read /proc/interrupts");
    let ncpu = text
        .lines()
        .next()
        .map_or(0, |h| h.split_whitespace().count());
    let mut out = BTreeMap::new();
    for line in text.lines().skip(1) {
        let mut f = line.split_whitespace();
        let Some(irq) = f
            .next()
            .and_then(|s| s.trim_end_matches(':').parse::<u32>().ok())
        else {
            continue;
        };
        if irqs.contains(&irq) {
            let sum = f.take(ncpu).map(|c| c.parse::<u64>().expect("count")).sum();
            out.insert(irq, sum);
        }
    }
    out
}

/// IRQ lines of a device, by the handler names `/proc/interrupts` shows
/// (`virtio1-req.0`, …): (irq, name) for names starting with `prefix`.
pub fn irq_lines(prefix: &str) -> Vec<(u32, String)> {
    let text = std::fs::read_to_string("/proc/interrupts").expect("read /proc/interrupts");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let irq = line
                .split_whitespace()
                .next()?
                .trim_end_matches(':')
                .parse::<u32>()
                .ok()?;
            let name = line.split_whitespace().last()?;
            name.starts_with(prefix).then(|| (irq, name.to_string()))
        })
        .collect()
}

/// Per softirq vector name, the sum over CPUs of `/proc/softirqs`.
pub fn proc_softirqs() -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string("/proc/softirqs").expect("read /proc/softirqs");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let name = f.next()?.trim_end_matches(':').to_string();
            Some((name, f.map(|c| c.parse::<u64>().expect("count")).sum()))
        })
        .collect()
}

/// A moment when the kernel's counters (`proc`) and ours (`ours`, read through
/// `refresh`) stand still: the kernel's did not move across two of our reads taken a
/// few ms apart, and ours did not move either. Any event the kernel had counted before
/// the window has then been seen by the probes (handlers run for microseconds), and
/// none happened inside it, so the two readings describe the same set of events.
/// Returns (kernel's, ours); retries until such a quiet moment comes.
pub fn quiet_snapshot<K: Ord>(
    c: &KernelCollector,
    proc: impl Fn() -> BTreeMap<K, u64>,
    ours: impl Fn() -> BTreeMap<K, u64>,
) -> (BTreeMap<K, u64>, BTreeMap<K, u64>) {
    for _ in 0..2000 {
        let p1 = proc();
        c.refresh();
        let m1 = ours();
        // Long enough that a handler whose vCPU the host stalled mid-way (the kernel has
        // counted it, the exit probe not yet) shows as a change.
        std::thread::sleep(Duration::from_millis(50));
        c.refresh();
        let m2 = ours();
        let p2 = proc();
        if p1 == p2 && m1 == m2 {
            return (p1, m1);
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    panic!("no quiet moment in 2000 tries: the counters never stood still");
}

/// `after - before` per key (keys missing before count from 0).
pub fn delta<K: Ord + Clone>(
    before: &BTreeMap<K, u64>,
    after: &BTreeMap<K, u64>,
) -> BTreeMap<K, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .collect()
}

/// Ids of the loaded BPF programs: a change means some tracer attached or detached.
pub fn bpf_programs() -> Vec<u32> {
    jp_daemon::store::kernel::symbols::SymbolsStamp::current().bpf_programs
}
