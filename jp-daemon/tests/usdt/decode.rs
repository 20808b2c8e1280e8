//! The decoded argument specs give the values the program passed: the C probe program
//! runs under ptrace with a breakpoint on each probe site (found through our file
//! offsets), and at each hit every argument is fetched with `UsdtArg::fetch` from the
//! registers (`PTRACE_GETREGS`, named fields put in `pt_regs` order) and the
//! program's memory. The values are known from the C source. Needs root (or ptrace
//! rights on a child), gcc and systemtap-sdt-dev.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::support::usdt::build_probe_program;
use jp_common::usdt::{x86_64_reg, UnknownArgKind};
use jp_daemon::usdt::{maps, notes, spec};

/// `user_regs_struct` in the order of the kernel's `struct pt_regs`, by field name.
fn pt_regs(r: &libc::user_regs_struct) -> [u64; x86_64_reg::COUNT as usize] {
    [
        r.r15, r.r14, r.r13, r.r12, r.rbp, r.rbx, r.r11, r.r10, r.r9, r.r8, r.rax, r.rcx, r.rdx,
        r.rsi, r.rdi, r.orig_rax, r.rip, r.cs, r.eflags, r.rsp, r.ss,
    ]
}

fn check(ret: libc::c_long, what: &str) {
    assert!(ret >= 0, "{what}: {}", std::io::Error::last_os_error());
}

fn wait_stop(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out pointer.
    check(
        unsafe { libc::waitpid(pid, &mut status, 0) }.into(),
        "waitpid",
    );
    assert!(
        libc::WIFSTOPPED(status),
        "child not stopped: status {status:#x}"
    );
    libc::WSTOPSIG(status)
}

/// Runs `bin` under ptrace until each of `tick`, `wide` and `plain` fired once and
/// returns each probe's decoded arguments (as i64) at that first hit.
fn first_hits(bin: &Path) -> BTreeMap<String, Vec<i64>> {
    let probes = notes::read_file(bin).unwrap();
    let mut child = Command::new(bin);
    child.arg("3");
    // SAFETY: PTRACE_TRACEME in the forked child only makes its parent its tracer; it
    // allocates nothing and touches no shared state.
    unsafe {
        child.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = child.stdout(std::process::Stdio::null()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    assert_eq!(wait_stop(pid), libc::SIGTRAP, "stop at exec");

    // Run-time addresses: the mapping of the binary holding each file offset.
    let meta = std::fs::metadata(bin).unwrap();
    let map_lines = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let runtime = |offset: u64| -> u64 {
        map_lines
            .lines()
            .filter(|l| {
                maps::parse_maps(l).first().is_some_and(|f| {
                    use std::os::unix::fs::MetadataExt;
                    f.inode == meta.ino()
                })
            })
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (start, end) = f[0].split_once('-').unwrap();
                let start = u64::from_str_radix(start, 16).unwrap();
                let end = u64::from_str_radix(end, 16).unwrap();
                let map_offset = u64::from_str_radix(f[2], 16).unwrap();
                (offset >= map_offset && offset < map_offset + (end - start))
                    .then(|| start + offset - map_offset)
            })
            .unwrap_or_else(|| panic!("file offset {offset:#x} not mapped"))
    };
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .unwrap();
    let read = |addr: u64, size: u8| -> Result<u64, UnknownArgKind> {
        let mut bytes = [0u8; 8];
        mem.read_exact_at(&mut bytes[..usize::from(size)], addr)
            .unwrap();
        Ok(u64::from_le_bytes(bytes))
    };

    // Someone listens to `wide`: set its semaphore as the kernel would.
    let wide = probes.iter().find(|p| p.name == "wide").unwrap();
    mem.write_all_at(&1u16.to_ne_bytes(), runtime(wide.semaphore_offset.unwrap()))
        .unwrap();
    let mut sites = BTreeMap::new();
    for probe in probes.iter().filter(|p| p.name != "noargs") {
        let addr = runtime(probe.file_offset);
        let mut original = [0u8; 1];
        mem.read_exact_at(&mut original, addr).unwrap();
        assert_eq!(original[0], 0x90, "{}: no nop at {addr:#x}", probe.name);
        mem.write_all_at(&[0xcc], addr).unwrap();
        sites.insert(addr, probe);
    }

    let mut hits = BTreeMap::new();
    while hits.len() < sites.len() {
        // SAFETY: continues our stopped tracee.
        check(
            unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, 0) },
            "PTRACE_CONT",
        );
        assert_eq!(
            wait_stop(pid),
            libc::SIGTRAP,
            "stopped by something else than a probe"
        );
        // SAFETY: `user_regs_struct` is plain integers; zero is a valid value.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: our stopped tracee; `regs` is a valid out pointer of the right type.
        check(
            unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) },
            "PTRACE_GETREGS",
        );
        // int3 leaves rip after itself; the probe's nop is one byte.
        let addr = regs.rip - 1;
        let probe = sites
            .get(&addr)
            .unwrap_or_else(|| panic!("trap at {addr:#x}"));
        regs.rip = addr;
        let slots = pt_regs(&regs);
        let spec = spec::usdt_spec(&probe.args, 0).unwrap();
        let mut values: Vec<i64> = spec.args[..spec.arg_count as usize]
            .iter()
            .map(|arg| arg.fetch(|i| Ok(slots[usize::from(i)]), read).unwrap() as i64)
            .collect();
        if probe.name == "wide" {
            // What the pointer argument `&r.a` points to, now.
            values.push(read(values[5] as u64, 8).unwrap() as i64);
        }
        hits.entry(probe.name.clone()).or_insert(values);
        // Put the nop back and run it: one hit per probe is enough.
        mem.write_all_at(&[0x90], addr).unwrap();
        // SAFETY: our stopped tracee; `regs` is a valid register set.
        check(
            unsafe { libc::ptrace(libc::PTRACE_SETREGS, pid, 0, &regs) },
            "PTRACE_SETREGS",
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    hits
}

fn check_program(name: &str, flags: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), name, flags);
    let hits = first_hits(&bin);
    let args = |probe: &str| {
        let specs = notes::read_file(&bin).unwrap();
        specs.iter().find(|p| p.name == probe).unwrap().args.clone()
    };
    println!("{name}: {hits:?}");
    assert_eq!(hits["tick"], [1, -2, -5], "{name} tick: {}", args("tick"));
    assert_eq!(hits["plain"], [1, 1], "{name} plain: {}", args("plain"));
    let wide = &hits["wide"];
    assert_eq!(
        wide[..5],
        [-1000, -2, -3, -4, 250],
        "{name} wide: {}",
        args("wide")
    );
    assert_eq!(wide[6], 1_234_567_890_123, "{name} wide: {}", args("wide"));
    // Argument 6 is `&r.a`, which held r.a when the probe fired.
    assert_eq!(wide[7], -1000, "{name}: *&r.a");
    for probe in ["tick", "wide", "plain"] {
        println!("{name} {probe}: {}", args(probe));
    }
}

#[test]
fn optimised_pie_register_arguments() {
    check_program("pie", &["-O2"]);
}

#[test]
fn unoptimised_non_pie_stack_arguments() {
    check_program("nopie", &["-O0", "-no-pie"]);
}
