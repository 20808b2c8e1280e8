//! The readprofile pipeline on a known workload: reading /dev/zero into /dev/null
//! keeps one CPU in the kernel's zeroing path. Root required; fails (never skips)
//! without it.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::kernel::*;
use jp_daemon::store::kernel::profile::{self, Profile};
use jp_daemon::store::kernel::{KernelCounts, KernelView};

/// What `read(/dev/zero)` runs on this kernel (6.18): `read_iter_zero` →
/// `iov_iter_zero` → `clear_user` → `rep_stos_alternative` (x86's user-memory
/// clearing loop); older kernels had `read_zero`/`__clear_user`.
const ZERO_READ_PATH: &[&str] = &[
    "read_zero",
    "read_iter_zero",
    "iov_iter_zero",
    "clear_user",
    "__clear_user",
    "rep_stos_alternative",
    "clear_user_erms",
    "clear_user_rep_good",
    "clear_user_original",
];

fn kernel_profile(v: &KernelView) -> Profile {
    let symbols = v.symbols.as_ref().expect("symbols published");
    profile::aggregate(
        &v.counts.buckets,
        &v.counts.other_ips,
        symbols,
        v.status.shift,
    )
}

fn print_top(title: &str, p: &Profile, n: usize) {
    println!(
        "{title}: {} samples in functions, {} unknown",
        p.total, p.unknown
    );
    for f in p.top(n) {
        println!(
            "{:8} {:40} {:8.4} {:?}",
            f.samples, f.name, f.load, f.module
        );
    }
}

/// The CPU that handles the disk's request interrupts (its effective affinity).
fn disk_irq_cpu() -> Option<u32> {
    let dev = std::fs::read_link("/sys/block/vda/device").ok()?;
    let dev = dev.file_name()?.to_string_lossy().into_owned();
    let (irq, _) = irq_lines(&format!("{dev}-req")).into_iter().next()?;
    let cpus = std::fs::read_to_string(format!("/proc/irq/{irq}/effective_affinity_list")).ok()?;
    cpus.trim().split([',', '-']).next()?.parse().ok()
}

/// Dropping the collector detaches and unloads every program it loaded.
#[test]
fn shutdown_unloads_every_program() {
    let before = bpf_programs();
    let (c, _store) = start();
    let during = bpf_programs();
    let ours: Vec<u32> = during
        .iter()
        .copied()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(
        ours.len() >= 5,
        "expected our 5 programs among the new ones: {ours:?}"
    );
    c.shutdown();
    let t0 = std::time::Instant::now();
    loop {
        let left: Vec<u32> = bpf_programs()
            .into_iter()
            .filter(|id| ours.contains(id))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "programs {left:?} still loaded after shutdown"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dev_zero_reads_are_the_top_kernel_functions_and_every_sample_is_accounted() {
    let (c, store) = start();
    let irq_cpu = disk_irq_cpu();
    c.refresh();
    store.reset();
    {
        // dd on the CPU that takes the disk interrupts, plus disk I/O, so that the
        // interrupts arrive while that CPU is zeroing user memory in the kernel.
        let _dd = Dd::start(irq_cpu);
        std::thread::sleep(Duration::from_millis(300));
        disk_io(6);
        std::thread::sleep(Duration::from_millis(1500));
    }
    c.refresh();
    let v = store.kernel_view();
    let p = kernel_profile(&v);
    print_top("kernel samples during dd", &p, 15);
    println!("modes {:?}", v.counts.modes);

    // Every kernel-mode sample is in a histogram (no loss) and idle ones are not.
    // The collector reads the mode counters before the histograms and the eBPF side
    // counts a sample after recording it, so samples taken in between can only make
    // the histograms larger; the next reading's counter covers them. That holds for
    // the totals since attach, not for differences since a reset (the reset's
    // reading may have had a few more in its histograms than in its counter).
    assert_eq!(v.status.events_lost, 0, "{:?}", v.status);
    let histogram_total = |c: &KernelCounts| -> u64 {
        c.buckets.values().sum::<u64>() + c.other_ips.values().sum::<u64>()
    };
    let totals = store.kernel_totals();
    let in_histograms = histogram_total(&totals.counts);
    assert!(
        totals.counts.modes.kernel <= in_histograms,
        "kernel samples missing from the histograms: {} counted, {in_histograms} recorded",
        totals.counts.modes.kernel
    );
    c.refresh();
    let next = store.kernel_totals();
    assert!(
        in_histograms <= next.counts.modes.kernel,
        "histogram samples not counted as kernel: {in_histograms} recorded, {} counted next",
        next.counts.modes.kernel
    );
    assert_eq!(
        p.total + p.unknown,
        histogram_total(&v.counts),
        "aggregation lost samples"
    );

    // ~2 s of one CPU zeroing memory at 997 Hz: the zeroing path dominates.
    let top: Vec<&str> = p.top(5).iter().map(|f| f.name.as_str()).collect();
    assert!(
        top.iter().any(|n| ZERO_READ_PATH.contains(n)),
        "none of {ZERO_READ_PATH:?} in the top 5 kernel functions: {top:?}"
    );
    let zero_path: u64 = p
        .functions
        .iter()
        .filter(|f| ZERO_READ_PATH.contains(&f.name.as_str()))
        .map(|f| f.samples)
        .sum();
    assert!(
        zero_path * 4 >= p.total,
        "the /dev/zero read path has only {zero_path} of {} kernel samples",
        p.total
    );
    for f in &p.functions {
        assert_eq!(
            f.load,
            profile::load(f.samples, f.len),
            "{}: load is samples/len",
            f.name
        );
    }

    // Interrupted IPs at handler entry: the disk interrupts land on dd's CPU, mostly
    // while it is clearing memory in the kernel.
    let symbols = v.symbols.as_ref().expect("symbols");
    let irq_p = profile::aggregate(
        &v.counts.irq_buckets,
        &v.counts.irq_other_ips,
        symbols,
        v.status.shift,
    );
    print_top("interrupted kernel IPs during dd + disk I/O", &irq_p, 10);
    println!("interrupted modes {:?}", v.counts.irq_modes);
    let handler_runs: u64 = v.counts.irqs.values().map(|h| h.count + h.unhandled).sum();
    assert!(handler_runs > 0, "no hard-IRQ handler ran");
    assert!(v.counts.irq_modes.total() > 0, "no interrupted IP sampled");
    let irq_zero: u64 = irq_p
        .functions
        .iter()
        .filter(|f| ZERO_READ_PATH.contains(&f.name.as_str()))
        .map(|f| f.samples)
        .sum();
    assert!(
        irq_zero > 0,
        "no interrupt landed in the /dev/zero read path on dd's CPU"
    );
    let by_name: HashMap<&str, u64> = irq_p
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.samples))
        .collect();
    println!("interrupted in the zero path: {irq_zero} ({by_name:?})");
    drop(c);
}
