//! `cargo xtask bench kernel`: what kernel sampling costs with jp, against the
//! timer-interrupt floor both tools share and against `perf record -e cpu-clock -a`.
//! Three parts, each its own section of BENCHMARKS.md: the workload's cost side by side
//! (`workload`), each eBPF program's cost per event from the kernel's BPF statistics
//! (`events`), and jpd's own CPU with nothing to do (`idle`). This module holds what
//! they share: the pinned worker, the disk IRQ load, and starting perf (jpd's launcher
//! is the benches' `harness`).
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use super::report::{median, write_section, write_section_after};
use crate::build::Deliverables;

mod events;
mod idle;
mod workload;

/// CPU time of one repetition of the fixed work (calibrated once).
const REP_CPU: Duration = Duration::from_millis(15);

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    Events,
    Idle,
    Workload,
}

pub fn run(out: &Deliverables, parts: &[Part]) -> Result<()> {
    let all = parts.is_empty();
    let wants = |p: Part| all || parts.contains(&p);
    if !Path::new("/proc/sys/kernel/bpf_stats_enabled").exists() {
        bail!("this kernel has no kernel.bpf_stats_enabled: cannot read eBPF run time");
    }
    Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .context("perf not found (cargo xtask setup installs Debian's linux-perf)")?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let worker = Worker::start(cpus - 1)?;
    let iters = worker.calibrate()?;

    if wants(Part::Events) {
        eprintln!("xtask: bench kernel: per-event costs (BPF statistics on)");
        let events = events::run(out, &worker, iters, cpus)?;
        write_section_after("kernel-events", Some("kernel"), &events.render())?;
    }
    if wants(Part::Idle) {
        eprintln!("xtask: bench kernel: jpd at idle");
        let idle = idle::run(out)?;
        write_section_after("kernel-idle", Some("kernel"), &idle.render())?;
    }
    if wants(Part::Workload) {
        let w = workload::run(out, &worker, iters, cpus)?;
        write_section("kernel", &w.render())?;
    }
    Ok(())
}

/// Runs the fixed work on a thread pinned to one CPU, on request.
struct Worker {
    tx: mpsc::Sender<(u64, usize)>,
    rx: mpsc::Receiver<Result<Vec<f64>>>,
}

impl Worker {
    fn start(cpu: usize) -> Result<Worker> {
        let (tx, work_rx) = mpsc::channel::<(u64, usize)>();
        let (done_tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("bench-work".into())
            .spawn(move || {
                let pinned = pin_to(cpu);
                while let Ok((iters, reps)) = work_rx.recv() {
                    let r = pinned
                        .as_ref()
                        .map_err(|e| anyhow::anyhow!("{e}"))
                        .and_then(|_| (0..reps).map(|_| work(iters)).collect());
                    if done_tx.send(r).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Worker { tx, rx })
    }

    /// CPU ns of each of `reps` repetitions of `iters` iterations.
    fn reps(&self, iters: u64, reps: usize) -> Result<Vec<f64>> {
        self.tx.send((iters, reps)).context("work thread gone")?;
        self.rx.recv().context("work thread gone")?
    }

    /// Iterations that take about `REP_CPU` of CPU.
    fn calibrate(&self) -> Result<u64> {
        let per = median(&mut self.reps(200, 9)?) / 200.0;
        Ok(((REP_CPU.as_nanos() as f64 / per) as u64).max(1))
    }
}

fn pin_to(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays inside it for
    // cpu < CPU_SETSIZE; sched_setaffinity(0) applies to the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!(
                "cannot pin to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

fn thread_cpu_ns() -> f64 {
    super::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) as f64
}

/// One repetition of the fixed kernel work; its CPU time in ns.
fn work(iters: u64) -> Result<f64> {
    let mut zero = std::fs::File::open("/dev/zero")?;
    let mut null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    let mut buf = vec![0u8; 64 * 1024];
    let t0 = thread_cpu_ns();
    for _ in 0..iters {
        let n = zero.read(&mut buf)?;
        null.write_all(&buf[..n])?;
    }
    Ok(thread_cpu_ns() - t0)
}

/// Hard interrupts from the disk: 4 KiB O_DIRECT reads of a file on the repository's
/// file system (one virtio-blk completion interrupt each), on every CPU but the
/// worker's... and the worker's too: the kernel picks where completions land.
struct IrqLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    path: PathBuf,
}

impl IrqLoad {
    fn start() -> Result<IrqLoad> {
        let path =
            crate::build::target_dir().join(format!("jp-bench-irq-{}.dat", std::process::id()));
        std::fs::write(&path, vec![1u8; 16 << 20])
            .with_context(|| format!("cannot write {}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for t in 0..2u64 {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .with_context(|| format!("cannot open {} with O_DIRECT", path.display()))?;
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                use std::os::unix::fs::FileExt as _;
                let layout = std::alloc::Layout::from_size_align(4096, 4096).ok();
                let Some(layout) = layout else { return };
                // SAFETY: a non-zero-sized layout; freed below.
                let buf = unsafe { std::alloc::alloc(layout) };
                if buf.is_null() {
                    return;
                }
                // SAFETY: `buf` is 4096 writable bytes (O_DIRECT needs the alignment).
                let slice = unsafe { std::slice::from_raw_parts_mut(buf, 4096) };
                let mut block = t * 7919;
                while !stop.load(Ordering::Relaxed) {
                    block = (block * 1_103_515_245 + 12_345) % 4096;
                    if file.read_at(slice, block * 4096).is_err() {
                        break;
                    }
                }
                // SAFETY: allocated above with this layout.
                unsafe { std::alloc::dealloc(buf, layout) };
            }));
        }
        Ok(IrqLoad {
            stop,
            threads,
            path,
        })
    }
}

impl Drop for IrqLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn socket_path() -> PathBuf {
    std::env::temp_dir().join(format!("jp-bench-{}.sock", std::process::id()))
}

/// A jpd configuration with `irq_ip_samples_per_second` if given.
fn jpd_config(rate: Option<u32>) -> Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("jp-bench-{}.toml", std::process::id()));
    // The JVM collector off: on a shared machine it would follow other people's JVMs.
    let body = match rate {
        Some(r) => {
            format!("[kernel]\nirq_ip_samples_per_second = {r}\n\n[usdt]\nenabled = false\n")
        }
        None => "[usdt]\nenabled = false\n".to_string(),
    };
    std::fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

struct Perf {
    child: Child,
    data: std::path::PathBuf,
}

impl Drop for Perf {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.data);
    }
}

impl Perf {
    fn start(hz: u64) -> Result<Perf> {
        let data = std::env::temp_dir().join(format!("jp-bench-perf-{}.data", std::process::id()));
        let child = Command::new("perf")
            .args([
                "record",
                "-e",
                "cpu-clock",
                "-F",
                &hz.to_string(),
                "-a",
                "-q",
                "-o",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start perf (Debian package linux-perf)")?;
        // perf record takes a few hundred ms to open its events and start writing.
        std::thread::sleep(Duration::from_millis(700));
        Ok(Perf { child, data })
    }
    fn stop(mut self) -> Result<()> {
        // SAFETY: kill on our own child's pid, which we have not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait()?;
        let _ = std::fs::remove_file(&self.data);
        // perf record finishes its file on SIGINT, then re-raises it: that is its
        // normal end, not a failure.
        use std::os::unix::process::ExitStatusExt;
        if !status.success() && status.signal() != Some(libc::SIGINT) && status.code() != Some(130)
        {
            bail!("perf record failed: {status}");
        }
        Ok(())
    }
}
