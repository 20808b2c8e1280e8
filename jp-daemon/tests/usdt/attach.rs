//! Uprobe perf events on USDT probes with the kernel managing the semaphore
//! (`ref_ctr_offset`), on a running C program (needs root, gcc and systemtap-sdt-dev).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::usdt::build_probe_program;
use jp_daemon::usdt::attach::{UprobeEvent, UprobePmu};
use jp_daemon::usdt::notes;

use crate::support::usdt::{read_semaphore, wait_semaphore};

#[test]
fn kernel_sets_and_clears_the_semaphore_and_counts_hits() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "perf_event_open of a uprobe needs root"
    );
    let pmu = UprobePmu::from_sysfs().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "pie", &["-O2"]);
    let probes = notes::read_file(&bin).unwrap();
    let probe = |name: &str| probes.iter().find(|p| p.name == name).unwrap().clone();
    let (tick, wide, plain) = (probe("tick"), probe("wide"), probe("plain"));

    // About 1 ms per iteration: a few seconds of probe hits.
    let mut child = Command::new(&bin)
        .arg("4000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let printed = line.trim().strip_prefix("semaphore 0x").unwrap();
    let tick_sema = u64::from_str_radix(printed, 16).unwrap();
    // The program prints where its tick semaphore is at run time; the load bias moves
    // the wide one by the same amount.
    let bias = tick_sema - tick.semaphore_addr.unwrap();
    let wide_sema = bias + wide.semaphore_addr.unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    assert_eq!(read_semaphore(&mem, tick_sema), 0);
    assert_eq!(read_semaphore(&mem, wide_sema), 0);

    let open = |p: &notes::Probe| {
        UprobeEvent::open(&pmu, &bin, p.file_offset, p.semaphore_offset, Some(pid), -1).unwrap()
    };
    let tick_event = open(&tick);
    wait_semaphore(&mem, tick_sema, 1, "tick attached");
    assert_eq!(
        read_semaphore(&mem, wide_sema),
        0,
        "only the attached probe's semaphore"
    );
    let wide_event = open(&wide);
    wait_semaphore(&mem, wide_sema, 1, "wide attached");
    let plain_event = open(&plain);

    std::thread::sleep(Duration::from_millis(300));
    // `wide` is read first: each of its hits follows a `tick` hit of the same
    // iteration, so an iteration between the two reads cannot make it look ahead.
    let wides = wide_event.count().unwrap();
    let ticks = tick_event.count().unwrap();
    let plains = plain_event.count().unwrap();
    assert!(
        ticks > 0 && wides > 0 && plains > 0,
        "hits: {ticks} {wides} {plains}"
    );
    // `wide` fires only when the program sees its semaphore, which happens after the
    // wide event is open; all three fire once per iteration.
    assert!(wides <= ticks, "{wides} wide hits > {ticks} tick hits");

    drop(wide_event);
    wait_semaphore(&mem, wide_sema, 0, "wide closed");
    assert_eq!(read_semaphore(&mem, tick_sema), 1, "tick still attached");
    let before = tick_event.count().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(tick_event.count().unwrap() > before, "tick still counts");
    drop(tick_event);
    wait_semaphore(&mem, tick_sema, 0, "tick closed");
    drop(plain_event);

    // The program itself saw the wide semaphore set (it fired `wide` only then), and
    // not after the event was closed.
    let mut rest = String::new();
    for line in stdout.lines() {
        rest = line.unwrap();
    }
    assert!(child.wait().unwrap().success());
    let seen: u64 = rest.strip_prefix("seen ").unwrap().parse().unwrap();
    assert!(
        seen >= wides && seen > 0,
        "program saw its semaphore {seen} times, {wides} hits counted"
    );
    println!("hits in 300 ms: tick {ticks}, wide {wides}, plain {plains}; program saw the semaphore {seen} times");
}

#[test]
fn semaphore_offset_beyond_the_format_bits_is_refused() {
    let pmu = UprobePmu::from_sysfs().unwrap();
    assert_eq!(
        (pmu.ref_ctr_shift, pmu.ref_ctr_bits),
        (32, 32),
        "this kernel's uprobe format"
    );
    let too_big = 1u64 << pmu.ref_ctr_bits;
    let err = UprobeEvent::open(
        &pmu,
        std::path::Path::new("/bin/true"),
        0,
        Some(too_big),
        None,
        0,
    )
    .unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
}

/// Environment variable that makes [`holder_process`] hold an event: `PATH:OFFSET:REF:PID`.
const HOLD_ENV: &str = "JP_USDT_TEST_HOLD";

/// Not a check: the child process of [`semaphore_is_cleared_when_the_holder_is_killed`],
/// which re-runs this test binary to open an event in a process it can SIGKILL.
#[test]
#[ignore = "helper process, run by semaphore_is_cleared_when_the_holder_is_killed"]
fn holder_process() {
    let Ok(spec) = std::env::var(HOLD_ENV) else {
        println!("{HOLD_ENV} unset: nothing to hold");
        return;
    };
    let fields: Vec<&str> = spec.rsplitn(4, ':').collect();
    let (pid, ref_ctr, offset, path) = (fields[0], fields[1], fields[2], fields[3]);
    let pmu = UprobePmu::from_sysfs().unwrap();
    let _event = UprobeEvent::open(
        &pmu,
        std::path::Path::new(path),
        offset.parse().unwrap(),
        Some(ref_ctr.parse().unwrap()),
        Some(pid.parse().unwrap()),
        -1,
    )
    .unwrap();
    println!("holding");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn semaphore_is_cleared_when_the_holder_is_killed() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "perf_event_open of a uprobe needs root"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "pie", &["-O2"]);
    let probes = notes::read_file(&bin).unwrap();
    let tick = probes.iter().find(|p| p.name == "tick").unwrap();
    let mut target = Command::new(&bin)
        .arg("4000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = target.id();
    let mut stdout = BufReader::new(target.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let printed = line.trim().strip_prefix("semaphore 0x").unwrap();
    let sema = u64::from_str_radix(printed, 16).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();

    let hold = format!(
        "{}:{}:{}:{pid}",
        bin.display(),
        tick.file_offset,
        tick.semaphore_offset.unwrap()
    );
    // The test's name in the suite: its module path without the crate.
    let holder_test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::holder_process"),
        None => "holder_process".to_string(),
    };
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &holder_test, "--ignored", "--nocapture"])
        .env(HOLD_ENV, hold)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut holder_out = BufReader::new(holder.stdout.take().unwrap());
    let mut said = String::new();
    while !said.contains("holding") {
        said.clear();
        assert!(
            holder_out.read_line(&mut said).unwrap() > 0,
            "holder exited without an event"
        );
    }
    wait_semaphore(&mem, sema, 1, "holder attached");
    holder.kill().unwrap();
    holder.wait().unwrap();
    wait_semaphore(&mem, sema, 0, "holder killed");
    target.kill().unwrap();
    target.wait().unwrap();
}

/// Starts the probe program, returns it, its stdout and its tick semaphore's address.
fn start_target(
    bin: &std::path::Path,
    iterations: u32,
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    u64,
) {
    let mut child = Command::new(bin)
        .arg(iterations.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let printed = line.trim().strip_prefix("semaphore 0x").unwrap();
    (child, stdout, u64::from_str_radix(printed, 16).unwrap())
}

/// Events on every CPU without a pid (what jpd needs to see JVMs it has not found yet)
/// install the probe in every process mapping the file, now or later.
#[test]
fn system_wide_events_reach_processes_started_later() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "perf_event_open of a uprobe needs root"
    );
    let pmu = UprobePmu::from_sysfs().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "pie", &["-O2"]);
    let probes = notes::read_file(&bin).unwrap();
    let tick = probes.iter().find(|p| p.name == "tick").unwrap();
    let (mut early, _early_out, early_sema) = start_target(&bin, 4000);
    let early_mem = std::fs::File::open(format!("/proc/{}/mem", early.id())).unwrap();
    let cpus = std::thread::available_parallelism().unwrap().get() as i32;
    let events: Vec<UprobeEvent> = (0..cpus)
        .map(|cpu| {
            UprobeEvent::open(
                &pmu,
                &bin,
                tick.file_offset,
                tick.semaphore_offset,
                None,
                cpu,
            )
            .unwrap()
        })
        .collect();
    // One event per CPU, but the kernel counts the semaphore once per process.
    wait_semaphore(&early_mem, early_sema, 1, "process running at attach");
    let (mut late, _late_out, late_sema) = start_target(&bin, 4000);
    let late_mem = std::fs::File::open(format!("/proc/{}/mem", late.id())).unwrap();
    wait_semaphore(&late_mem, late_sema, 1, "process started after attach");
    std::thread::sleep(Duration::from_millis(100));
    let total: u64 = events.iter().map(|e| e.count().unwrap()).sum();
    assert!(total > 0, "no hits");
    drop(events);
    wait_semaphore(&early_mem, early_sema, 0, "early process after close");
    wait_semaphore(&late_mem, late_sema, 0, "late process after close");
    println!("{cpus} per-CPU events: semaphore 1 in both processes, {total} hits, 0 after close");
    early.kill().unwrap();
    late.kill().unwrap();
    early.wait().unwrap();
    late.wait().unwrap();
}
