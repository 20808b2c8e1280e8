//! A BPF program on our own uprobe events (semaphore managed by the kernel) sees each
//! probe's attach cookie: the building block for selecting a USDT argument spec.
//! The program is assembled here by hand (it counts hits per cookie in an array map),
//! so that the test does not depend on jp-ebpf. Needs root, gcc and systemtap-sdt-dev.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use crate::support::usdt::build_probe_program;
use jp_daemon::usdt::attach::{UprobeEvent, UprobePmu};
use jp_daemon::usdt::notes;

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const SLOTS: u32 = 4;

fn bpf(cmd: libc::c_int, attr: &mut [u64; 16]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zero-padded 128-byte `union bpf_attr` prefix filled for `cmd`;
    // the pointers in it refer to buffers alive for the call.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 128u32) };
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: a new descriptor returned by the bpf syscall, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// One instruction: opcode, dst, src, off, imm.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | u64::from(dst | (src << 4)) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// `counts[bpf_get_attach_cookie(ctx)] += 1` (cookies below [`SLOTS`]), returning 1
/// so that the perf event counts the hit as well (with 0 it does not: a real probe
/// program returns 0 to skip that work).
fn load_counter(map: BorrowedFd<'_>) -> OwnedFd {
    let program = [
        insn(0x85, 0, 0, 0, 174), // call bpf_get_attach_cookie (r1 = ctx)
        insn(0x63, 10, 0, -4, 0), // *(u32 *)(r10 - 4) = r0
        insn(0x18, 1, 1, 0, map.as_raw_fd()), // r1 = map (BPF_PSEUDO_MAP_FD)
        insn(0, 0, 0, 0, 0),
        insn(0xbf, 2, 10, 0, 0), // r2 = r10
        insn(0x07, 2, 0, 0, -4), // r2 += -4
        insn(0x85, 0, 0, 0, 1),  // call bpf_map_lookup_elem
        insn(0x15, 0, 0, 2, 0),  // if r0 == 0 goto +2
        insn(0xb7, 1, 0, 0, 1),  // r1 = 1
        insn(0xdb, 0, 1, 0, 0),  // lock *(u64 *)(r0 + 0) += r1
        insn(0xb7, 0, 0, 0, 1),  // r0 = 1: the event counts the hit too
        insn(0x95, 0, 0, 0, 0),  // exit
    ];
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = [0u64; 16];
    attr[0] = u64::from(BPF_PROG_TYPE_KPROBE) | (program.len() as u64) << 32;
    attr[1] = program.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = 1 | (log.len() as u64) << 32; // log_level 1, log_size
    attr[4] = log.as_mut_ptr() as u64;
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => owned(fd),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            panic!(
                "BPF_PROG_LOAD: {e}\n{}",
                String::from_utf8_lossy(&log[..end])
            );
        }
    }
}

fn lookup(map: BorrowedFd<'_>, key: u32) -> u64 {
    let mut value = 0u64;
    let mut attr = [0u64; 16];
    attr[0] = map.as_raw_fd() as u64;
    attr[1] = &key as *const u32 as u64;
    attr[2] = &mut value as *mut u64 as u64;
    bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).unwrap();
    value
}

#[test]
fn program_on_our_uprobe_events_sees_each_probes_cookie() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "loading BPF programs needs root"
    );
    let mut attr = [0u64; 16];
    attr[0] = u64::from(BPF_MAP_TYPE_ARRAY) | 4 << 32; // key_size 4
    attr[1] = 8 | u64::from(SLOTS) << 32; // value_size 8, max_entries
    let map = owned(bpf(BPF_MAP_CREATE, &mut attr).unwrap());
    let program = load_counter(map.as_fd());

    let pmu = UprobePmu::from_sysfs().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "nopie", &["-O0", "-no-pie"]);
    let probes = notes::read_file(&bin).unwrap();
    let probe = |name: &str| probes.iter().find(|p| p.name == name).unwrap().clone();
    let (tick, wide, plain) = (probe("tick"), probe("wide"), probe("plain"));

    // The program waits on stdin until all three links are in place: a hit between an
    // event's open (which sets the semaphore) and its link would be counted by the
    // event but never reach the program.
    let iterations = 500;
    let mut child = Command::new(&bin)
        .args([iterations.to_string().as_str(), "wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();

    let mut attached = Vec::new();
    for (p, cookie) in [(&tick, 1u64), (&wide, 2), (&plain, 3)] {
        let event = UprobeEvent::open(&pmu, &bin, p.file_offset, p.semaphore_offset, Some(pid), -1)
            .unwrap();
        let link = event.attach_bpf(program.as_fd(), cookie).unwrap();
        attached.push((event, link, cookie));
    }
    let mut go = child.stdin.take().unwrap();
    go.write_all(b"go\n").unwrap();
    drop(go);
    let mut last = String::new();
    for line in stdout.lines() {
        last = line.unwrap();
    }
    assert!(child.wait().unwrap().success());
    let seen: u64 = last.strip_prefix("seen ").unwrap().parse().unwrap();

    // The program has finished: the kernel's hit count of each event and the program's
    // count under that event's cookie are final, and equal.
    let mut counts = Vec::new();
    for (event, _link, cookie) in &attached {
        let hits = event.count().unwrap();
        assert_eq!(lookup(map.as_fd(), *cookie as u32), hits, "cookie {cookie}");
        counts.push(hits);
    }
    assert_eq!(lookup(map.as_fd(), 0), 0, "no hit without a cookie");
    // Everything was attached before the first iteration: `tick` and `plain` fire on
    // each, and `wide` too, since the kernel had set its semaphore.
    assert_eq!(counts, [iterations; 3]);
    assert_eq!(seen, iterations);
    println!(
        "hits by cookie: tick {}, wide {}, plain {} of {iterations} iterations",
        counts[0], counts[1], counts[2]
    );
}
