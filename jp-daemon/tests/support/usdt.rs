//! Shared by the USDT tests: a small C program with SDT probes (one with a semaphore),
//! compiled at test time, and readelf as an independent oracle.

pub mod fake_agent;

use std::path::{Path, PathBuf};
use std::process::Command;

pub const LIBJVM: &str = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";

/// Probes with semaphores (`_SDT_HAS_SEMAPHORES` makes every probe of the unit
/// reference `PROVIDER_NAME_semaphore`). `tick` fires on every iteration; `wide` only
/// while someone listens, and the program prints how often it saw the semaphore set.
/// In iteration `i` (from 1) the arguments are: tick `i, -2, -5`; wide `-1000 i, -2,
/// -3, -4, 250, &r.a, 1234567890123`; plain `i, i`; noargs none. With a second
/// argument `wait` the program reads a line from stdin after printing its semaphore's
/// address and before the first iteration, so that a test can attach everything first.
const MAIN_C: &str = r#"
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

unsigned short jp_test_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short jp_test_wide_semaphore __attribute__((unused)) __attribute__((section(".probes")));

struct rec { long a; int b; short c; signed char d; unsigned char e; };
void plain(long i);

__attribute__((noinline)) static long fire(long i, struct rec *r) {
    long seen = 0;
    STAP_PROBE3(jp_test, tick, i, r->b, -5);
    if (jp_test_wide_semaphore) {
        seen = 1;
        STAP_PROBE7(jp_test, wide, r->a, r->b, r->c, r->d, r->e, &r->a, 1234567890123L);
    }
    plain(i);
    return seen;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    struct rec r = { -1, -2, -3, -4, 250 };
    long seen = 0;
    printf("semaphore %p\n", (void *)&jp_test_tick_semaphore);
    fflush(stdout);
    if (argc > 2) {
        char go[16];
        if (!fgets(go, sizeof go, stdin)) return 1;
    }
    for (long i = 1; i <= n; i++) {
        r.a = -1000 * i;
        seen += fire(i, &r);
        usleep(1000);
    }
    printf("seen %ld\n", seen);
    return 0;
}
"#;

/// A probe without semaphore (a unit without `_SDT_HAS_SEMAPHORES`).
const PLAIN_C: &str = r#"
#include <sys/sdt.h>
__attribute__((noinline)) void plain(long i) {
    volatile int local = (int)i;
    STAP_PROBE2(jp_test, plain, i, local);
    DTRACE_PROBE(jp_test, noargs);
}
"#;

/// Compiles the probe program into `dir` with extra cc flags; fails with what to
/// install if the compiler or `sys/sdt.h` is missing.
pub fn build_probe_program(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let main_c = dir.join(format!("{name}-main.c"));
    let plain_c = dir.join(format!("{name}-plain.c"));
    std::fs::write(&main_c, MAIN_C).unwrap();
    std::fs::write(&plain_c, PLAIN_C).unwrap();
    let out = dir.join(name);
    let result = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&main_c)
        .arg(&plain_c)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc ({e}): install the Debian package gcc"));
    assert!(
        result.status.success(),
        "cc failed (is Debian systemtap-sdt-dev installed for sys/sdt.h?):\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// One probe as `readelf --notes` prints it.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadelfProbe {
    pub provider: String,
    pub name: String,
    pub location: u64,
    pub base: u64,
    pub semaphore: u64,
    pub args: String,
}

fn run(cmd: &str, args: &[&str], file: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd} ({e}): install the Debian package binutils"));
    assert!(
        out.status.success(),
        "{cmd} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim().trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// Every SDT probe of `file`, by `readelf --notes --wide` (which prints "Provider:" on
/// the note's header line, and no "Arguments:" line for a probe without arguments).
pub fn readelf_probes(file: &Path) -> Vec<ReadelfProbe> {
    let text = run("readelf", &["--notes", "--wide"], file);
    let mut probes: Vec<ReadelfProbe> = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("stapsdt ") {
            assert!(line.contains("NT_STAPSDT"), "{line:?}");
            probes.push(ReadelfProbe {
                provider: String::new(),
                name: String::new(),
                location: 0,
                base: 0,
                semaphore: 0,
                args: String::new(),
            });
        }
        let Some(probe) = probes.last_mut() else {
            continue;
        };
        let after = |label: &str| {
            line.find(label)
                .map(|at| line[at + label.len()..].trim().to_owned())
        };
        if let Some(provider) = after("Provider:") {
            probe.provider = provider;
        } else if let Some(name) = after("Name:") {
            probe.name = name;
        } else if let Some(args) = after("Arguments:") {
            probe.args = args;
        } else if let Some(location) = after("Location:") {
            let parts: Vec<&str> = location.split(", ").collect();
            assert_eq!(parts.len(), 3, "{location:?}");
            probe.location = hex(parts[0]);
            probe.base = hex(parts[1].strip_prefix("Base: ").unwrap());
            probe.semaphore = hex(parts[2].strip_prefix("Semaphore: ").unwrap());
        }
    }
    for probe in &probes {
        assert!(
            !probe.provider.is_empty() && !probe.name.is_empty() && probe.location != 0,
            "{probe:?}"
        );
    }
    probes
}

/// `PT_LOAD` segments by `readelf -l`: (offset, vaddr, filesz, flags).
pub fn readelf_loads(file: &Path) -> Vec<(u64, u64, u64, String)> {
    run("readelf", &["-lW"], file)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.first() == Some(&"LOAD"))
                .then(|| (hex(f[1]), hex(f[2]), hex(f[4]), f[6..f.len() - 1].join("")))
        })
        .collect()
}

/// The address of symbol `name` by `nm`.
pub fn nm_address(file: &Path, name: &str) -> u64 {
    let text = run("nm", &[], file);
    let line = text
        .lines()
        .find(|line| line.split_whitespace().nth(2) == Some(name))
        .unwrap_or_else(|| panic!("no symbol {name} in {}", file.display()));
    hex(line.split_whitespace().next().unwrap())
}

/// The probe semaphore at `addr` in a process's memory (`/proc/PID/mem`).
pub fn read_semaphore(mem: &std::fs::File, addr: u64) -> u16 {
    let mut bytes = [0u8; 2];
    std::os::unix::fs::FileExt::read_exact_at(mem, &mut bytes, addr).unwrap();
    u16::from_ne_bytes(bytes)
}

/// Polls until the semaphore at `addr` has `want` (the kernel updates it while it
/// installs or removes the breakpoint); panics after 2 s.
pub fn wait_semaphore(mem: &std::fs::File, addr: u64, want: u16, what: &str) {
    let start = std::time::Instant::now();
    loop {
        let value = read_semaphore(mem, addr);
        if value == want {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "{what}: semaphore is {value}, not {want}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
