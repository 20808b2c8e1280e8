//! The collector's hard-IRQ and softirq counts against the kernel's own counters
//! (`/proc/interrupts`, `/proc/softirqs`), exactly, on this machine's virtio disk.
//! Root required; fails (never skips) without it.

use std::collections::BTreeMap;

use crate::support::kernel::*;
use jp_common::SOFTIRQ_NAMES;

/// The virtio device behind the root disk, e.g. `virtio1` for `/dev/vda`.
fn disk_virtio_device() -> String {
    let dev = std::fs::read_link("/sys/block/vda/device")
        .expect("this test needs the virtio disk /dev/vda (/sys/block/vda/device)");
    dev.file_name()
        .expect("device name")
        .to_string_lossy()
        .into_owned()
}

/// `/proc/irq/N/effective_affinity_list` of each line.
fn effective_affinity(irqs: &[u32]) -> Vec<String> {
    irqs.iter()
        .map(|i| {
            std::fs::read_to_string(format!("/proc/irq/{i}/effective_affinity_list"))
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn disk_irq_and_softirq_counts_equal_the_kernels_exactly() {
    let (c, store) = start();
    let device = disk_virtio_device();
    let lines = irq_lines(&format!("{device}-"));
    let req: Vec<&(u32, String)> = lines.iter().filter(|(_, n)| n.contains("req")).collect();
    assert!(
        !req.is_empty(),
        "no request-queue IRQ of {device} in /proc/interrupts: {lines:?}"
    );
    let irqs: Vec<u32> = lines.iter().map(|(i, _)| *i).collect();

    // Every invocation (handled or not) is one `/proc/interrupts` count for a line
    // with a single handler, which is the case for virtio MSI-X vectors.
    let ours_irq = || -> BTreeMap<u32, u64> {
        let v = store.kernel_view();
        irqs.iter()
            .map(|irq| {
                let n = v
                    .counts
                    .irqs
                    .iter()
                    .filter(|((i, _), _)| i == irq)
                    .map(|(_, h)| h.count + h.unhandled)
                    .sum();
                (*irq, n)
            })
            .collect()
    };
    let ours_softirq = || -> BTreeMap<String, u64> {
        let v = store.kernel_view();
        SOFTIRQ_NAMES
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let n = v.counts.softirqs.get(&(i as u32)).map_or(0, |s| s.count);
                (name.to_string(), n)
            })
            .collect()
    };

    // Another tracer attaching to or detaching from irq_handler_*/softirq_* while we
    // count was measured to make the kernel drop or repeat tracepoint calls (its
    // tracepoint-transition races; see the report). Exactness is therefore asserted
    // over a window in which the set of loaded BPF programs did not change; a
    // disturbed window is measured again. So is one during which an IRQ moved to
    // another CPU (e.g. right after a CPU came back online), as a vector migration can
    // deliver an interrupt twice or on the old vector.
    let mut attempt = 0;
    let mut mismatches = 0;
    let (kernel_irq, jp_irq, view0, view1, kernel_sirq, jp_sirq) = loop {
        attempt += 1;
        let programs_before = bpf_programs();
        let affinity_before = effective_affinity(&irqs);
        let (proc_irq0, ours_irq0) = quiet_snapshot(&c, || proc_interrupts(&irqs), ours_irq);
        // Softirqs are too frequent for quiet moments on a busy machine: bracket
        // instead (ours, then the kernel's, before; the kernel's, then ours, after).
        c.refresh();
        let ours_sirq0 = ours_softirq();
        let view0 = store.kernel_view();
        let proc_sirq0 = proc_softirqs();

        disk_io(8);
        {
            // Some kernel-heavy work too, so that timers and RCU have something to do.
            let _dd = Dd::start(None);
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        disk_io(8);

        let proc_sirq1 = proc_softirqs();
        c.refresh();
        let ours_sirq1 = ours_softirq();
        let (proc_irq1, ours_irq1) = quiet_snapshot(&c, || proc_interrupts(&irqs), ours_irq);
        let view1 = store.kernel_view();
        let (kernel_irq, jp_irq) = (delta(&proc_irq0, &proc_irq1), delta(&ours_irq0, &ours_irq1));
        let undisturbed =
            bpf_programs() == programs_before && effective_affinity(&irqs) == affinity_before;
        // One window in CI (a loaded host) once counted 2 more invocations than jp saw
        // (180 of 182), with no tracer or affinity change: a vCPU the host stalled
        // between the kernel's count and the handler, longer than the quiet window, is
        // the explanation we could not rule out; a full local run once had two such
        // windows in a row (117 of 118, 116 of 117) and none in six runs of this binary
        // after. A systematic loss shows in every window, so a mismatch is measured
        // again, up to three windows, and one of them must be exact.
        if undisturbed && (jp_irq == kernel_irq || mismatches == 2) {
            break (
                kernel_irq,
                jp_irq,
                view0,
                view1,
                delta(&proc_sirq0, &proc_sirq1),
                delta(&ours_sirq0, &ours_sirq1),
            );
        }
        assert!(
            attempt < 10,
            "BPF programs kept changing during 10 measurements"
        );
        if undisturbed {
            mismatches += 1;
            println!(
                "IRQ deltas differ: /proc/interrupts {kernel_irq:?}, jp {jp_irq:?}; measuring once more"
            );
        } else {
            println!("BPF programs or IRQ affinity changed during the measurement; again");
        }
    };
    println!("IRQ deltas: /proc/interrupts {kernel_irq:?}, jp {jp_irq:?}");
    assert_eq!(
        jp_irq, kernel_irq,
        "per-line invocations differ from /proc/interrupts"
    );
    for (irq, name) in &req {
        assert!(
            kernel_irq[irq] > 0,
            "disk I/O raised no interrupt on {name} (irq {irq})"
        );
    }

    // The request queue's handler: handled hits moved, time was measured, and the
    // handler address from the irqaction names the virtio ring's interrupt function.
    let symbols = view1.symbols.clone().expect("symbols published");
    for (irq, name) in &req {
        let key = (*irq, name.clone());
        let h1 = view1
            .counts
            .irqs
            .get(&key)
            .unwrap_or_else(|| panic!("no stats for {key:?}"));
        let h0 = view0.counts.irqs.get(&key).cloned().unwrap_or_default();
        assert!(
            h1.count > h0.count,
            "{name}: no IRQ_HANDLED invocation counted"
        );
        assert!(h1.time_ns > h0.time_ns, "{name}: no handler time measured");
        let function = symbols.name_of(h1.function_addr);
        println!(
            "{name}: {} handled, {} unhandled, {} ns, handler {:#x} = {function:?}",
            h1.count - h0.count,
            h1.unhandled - h0.unhandled,
            h1.time_ns - h0.time_ns,
            h1.function_addr
        );
        assert_eq!(
            function.as_deref(),
            Some("vring_interrupt"),
            "{name}'s handler function"
        );
    }

    println!("softirq deltas: /proc/softirqs {kernel_sirq:?}, jp {jp_sirq:?}");
    // Our window contains the kernel's, so we may see a few more (softirqs between
    // our reads and the kernel's); measured on this machine, the raw tracepoint also
    // misses ~0.3% of the softirqs /proc/softirqs counts (the probe itself counts every
    // run: see `softirq_probe_counts_every_run`). Hence a stated tolerance here.
    for name in SOFTIRQ_NAMES {
        let (k, j) = (kernel_sirq[name] as i64, jp_sirq[name] as i64);
        let tolerance = 10 + k / 50;
        assert!(
            (k - j).abs() <= tolerance,
            "{name}: jp {j} vs /proc/softirqs {k} (tolerance {tolerance})"
        );
    }
    for vector in ["TIMER", "BLOCK"] {
        assert!(jp_sirq[vector] > 0, "{vector} softirqs did not move");
    }
    for (i, name) in SOFTIRQ_NAMES.iter().enumerate() {
        let v = i as u32;
        let t0 = view0.counts.softirqs.get(&v).map_or(0, |s| s.time_ns);
        let t1 = view1.counts.softirqs.get(&v).map_or(0, |s| s.time_ns);
        if jp_sirq[*name] > 0 {
            assert!(
                t1 > t0,
                "{name}: {} runs but no time measured",
                jp_sirq[*name]
            );
        }
    }
    assert_eq!(
        view1.status.events_lost, 0,
        "events lost: {:?}",
        view1.status
    );
    drop(c);
}

/// Every run of the softirq-entry program is counted: our per-vector sum agrees with
/// the kernel's own run count of the program (BPF stats), read in between two of our
/// readings: ours(k) <= run_cnt(k) <= ours(k+1), exactly.
#[test]
fn softirq_probe_counts_every_run() {
    // The program's run count is a BPF statistic: off unless asked for.
    let (c, store) = start_with(jp_daemon::kernel::KernelOptions {
        bpf_stats: true,
        ..Default::default()
    });
    let total = |store: &jp_daemon::store::kernel::KernelStore| -> (u64, u64) {
        let v = store.kernel_view();
        let ours = v.counts.softirqs.values().map(|s| s.count).sum();
        let runs = v
            .status
            .programs
            .iter()
            .find(|p| p.name == "jp_sirq_entry")
            .map(|p| p.run_count)
            .expect("jp_sirq_entry in the status");
        (ours, runs)
    };
    let mut prev = None;
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        c.refresh();
        let (ours, runs) = total(&store);
        assert!(
            ours <= runs,
            "counted {ours} softirqs but the program ran only {runs} times"
        );
        if let Some(prev_runs) = prev {
            assert!(
                prev_runs <= ours,
                "the program ran {prev_runs} times but only {ours} were counted"
            );
        }
        prev = Some(runs);
    }
    assert!(prev.unwrap_or(0) > 0, "no softirq in 2 s");
    drop(c);
}

/// Hard-IRQ handler entries and interrupted-IP walks after some disk I/O.
fn entries_and_walks_after_disk_io(
    c: &jp_daemon::kernel::KernelCollector,
    store: &jp_daemon::store::kernel::KernelStore,
) -> (u64, u64) {
    disk_io(8);
    {
        let _dd = Dd::start(None);
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    disk_io(8);
    let read = || -> BTreeMap<&'static str, u64> {
        let v = store.kernel_view();
        [
            ("entries", v.counts.irq_entries),
            ("sampled", v.counts.irq_ip_sampled),
        ]
        .into()
    };
    let (_, now) = quiet_snapshot(c, BTreeMap::<&str, u64>::new, read);
    (now["entries"], now["sampled"])
}

/// `kernel.irq_ip_sample_every`: the interrupted IP is looked for at the first of every
/// N handler entries on each CPU, so with C CPUs and E entries in all the samples S obey
/// sum(ceil(e_i / N)): ceil(E / N) <= S <= (E + C (N - 1)) / N; with N = 1, S == E.
/// (Without the time budget: more walks per second than any CPU takes interrupts.)
#[test]
fn the_interrupted_ip_is_sampled_at_one_in_n_entries_per_cpu() {
    for every in [1u32, 7] {
        let (c, store) = start_with(jp_daemon::kernel::KernelOptions {
            irq_ip_sample_every: every,
            irq_ip_samples_per_second: u32::MAX,
            ..Default::default()
        });
        let (e, s) = entries_and_walks_after_disk_io(&c, &store);
        let cpus = c.status().cpus.len() as u64;
        c.shutdown();
        let n = u64::from(every);
        println!("every {n}: {e} handler entries on {cpus} CPUs, {s} interrupted IPs sampled");
        assert!(e >= 50, "too few hard IRQs to tell ({e}) after disk I/O");
        assert!(
            e.div_ceil(n) <= s && s <= (e + cpus * (n - 1)) / n,
            "1 in {n}: {s} samples for {e} entries on {cpus} CPUs"
        );
    }
}

/// `kernel.irq_ip_samples_per_second`: at most one walk per 1/R s on each CPU, so over
/// T seconds S <= C (R T + 1), however many interrupts there were; the handler counts
/// stay exact (the tests above), only the walks are bounded.
#[test]
fn the_interrupted_ip_walks_are_bounded_in_time_per_cpu() {
    let rate = 5u32;
    let t0 = std::time::Instant::now();
    let (c, store) = start_with(jp_daemon::kernel::KernelOptions {
        irq_ip_samples_per_second: rate,
        ..Default::default()
    });
    let (e, s) = entries_and_walks_after_disk_io(&c, &store);
    let elapsed = t0.elapsed().as_secs_f64();
    let cpus = c.status().cpus.len() as u64;
    c.shutdown();
    let bound = cpus as f64 * (f64::from(rate) * elapsed + 1.0);
    println!("{rate}/s per CPU over {elapsed:.1} s: {e} entries on {cpus} CPUs, {s} walks (bound {bound:.0})");
    assert!(s >= 1, "no interrupted IP sampled at all in {elapsed:.1} s");
    assert!(
        (s as f64) <= bound,
        "{s} walks in {elapsed:.1} s on {cpus} CPUs exceed {rate}/s per CPU"
    );
    assert!(
        e as f64 > 2.0 * bound,
        "too few hard IRQs ({e}) for the bound ({bound:.0}) to have mattered"
    );
}
