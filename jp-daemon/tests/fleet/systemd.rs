//! jpd.service under a real systemd: a container whose PID 1 is systemd
//! (`systemd-nspawn --volatile=yes` over the host's /usr, see `systemd_container`),
//! with jp installed where `cargo xtask install` puts it. `systemctl start` returns
//! only after READY=1, `reload` goes through SIGHUP, a killed jpd is restarted, the
//! watchdog is armed and fires, `stop` ends it cleanly, the resource limits are in
//! effect; a stuck USDT manager and a dead ring reader (injected faults) each get jpd
//! restarted by the watchdog, named by `jpctl status` before; and under every hardening
//! option of the unit (its system call allow-list too) jpd samples the kernel and
//! profiles a JVM run by another service.
//!
//! Needs root, `systemd-nspawn` (Debian package systemd-container), `JPD`, `JPCTL`,
//! `JP_AGENT_LIB`, `JP_AGENT_JAR` and JDK 17 (as `cargo xtask test` passes them).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::fleet::{compile_fleet_paper, jdk17};
use crate::support::jpd::{free_port, http_get};
use crate::support::read_dev_zero;
use crate::support::systemd_container::{Bind, Container};
use serde_json::Value;

const UNIT: &str = include_str!("../../../deploy/systemd/jpd.service");
const CONFIG: &str = include_str!("../../jpd.toml");
/// CHOWN (bit 0), DAC_READ_SEARCH (2), SYS_PTRACE (19), SYS_ADMIN (21), SYSLOG (34):
/// the unit's CapabilityBoundingSet, nothing else.
const UNIT_CAPS: &str = "0000000400280005";
/// `systemd-analyze security jpd.service`'s overall exposure (0 best, 10 worst).
const EXPOSURE: f64 = 3.5;

/// jp laid out as `cargo xtask install` does (prefix /usr/local, /etc/jp), in a
/// directory the container binds over its /usr/local and /etc/jp.
struct Staged {
    dir: tempfile::TempDir,
}

impl Staged {
    fn new() -> Staged {
        // Left by a test process that was killed before its drop.
        for e in std::fs::read_dir(std::env::temp_dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("jp-systemd-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("jp-systemd-{}-", std::process::id()))
            .tempdir()
            .expect("temp dir");
        let local = dir.path().join("usr-local");
        for (from, to, mode) in [
            (jp_testkit::jpd(), "bin/jpd", 0o755),
            (jp_testkit::jpctl(), "bin/jpctl", 0o755),
            (jp_testkit::agent_lib(), "lib/jp/libjpagent.so", 0o755),
            (jp_testkit::agent_jar(), "lib/jp/jp-agent.jar", 0o644),
        ] {
            let to = local.join(to);
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            std::fs::copy(&from, &to)
                .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
            chmod(&to, mode);
        }
        // The repository's unit is written for prefix /usr/local: installed unchanged.
        let unit = local.join("lib/systemd/system/jpd.service");
        std::fs::create_dir_all(unit.parent().expect("parent")).expect("mkdir");
        std::fs::write(&unit, UNIT).expect("write the unit");
        let etc = dir.path().join("etc-jp");
        std::fs::create_dir_all(&etc).expect("mkdir");
        std::fs::write(etc.join("jpd.toml"), CONFIG).expect("write the config");
        // The JVM service's class path and its stdin/stdout.
        std::fs::create_dir_all(dir.path().join("classes")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("io")).expect("mkdir");
        // tempdir makes it 0700: 0755 as an installed tree would be.
        chmod(dir.path(), 0o755);
        Staged { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn binds(&self) -> Vec<Bind> {
        let p = self.path();
        vec![
            Bind::ro(&p.join("usr-local"), "/usr/local"),
            Bind::ro(&p.join("etc-jp"), "/etc/jp"),
            Bind::ro(&p.join("classes"), "/srv/jp-test/classes"),
            Bind::rw(&p.join("io"), "/srv/jp-test/io"),
        ]
    }

    /// Rewrites the installed /etc/jp/jpd.toml (the bind shows the change inside).
    fn set_config(&self, text: &str) {
        std::fs::write(self.path().join("etc-jp/jpd.toml"), text).expect("write the config");
    }
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A booted container with jp installed; systemd logs at debug level, so that its
/// journal shows every notification jpd sends.
fn boot(tag: &str) -> (Staged, Container) {
    let staged = Staged::new();
    let ct = Container::boot(tag, &staged.binds(), staged.path());
    ct.ok(&["systemd-analyze", "log-level", "debug"]);
    (staged, ct)
}

/// What systemd logged about jpd.service, then what jpd itself wrote. Two queries:
/// in this container journald files jpd's stdout/stderr under
/// `_SYSTEMD_UNIT=init.scope` (seen with `journalctl -o verbose`), so `-u` misses it.
fn journal(ct: &Container) -> String {
    let unit = ct.ok(&["journalctl", "--no-pager", "-o", "cat", "-u", "jpd.service"]);
    let own = ct.ok(&[
        "journalctl",
        "--no-pager",
        "-o",
        "cat",
        "SYSLOG_IDENTIFIER=jpd",
    ]);
    format!("{unit}{own}")
}

/// The notifications systemd received from jpd, in order (from its debug log).
fn notifications(ct: &Container) -> Vec<String> {
    journal(ct)
        .lines()
        .filter_map(|l| l.split_once("Got notification message from PID "))
        .filter_map(|(_, rest)| {
            let (_, msg) = rest.split_once(" (")?;
            Some(msg.strip_suffix(')').unwrap_or(msg).to_string())
        })
        .collect()
}

fn main_pid(ct: &Container) -> u32 {
    ct.property("jpd.service", "MainPID")
        .parse()
        .expect("MainPID is a number")
}

/// Polls until `what` holds (checked by `pred`) or `limit` passes.
fn wait_for(ct: &Container, limit: Duration, what: &str, mut pred: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !pred() {
        assert!(
            t0.elapsed() < limit,
            "{what}: not within {limit:?}\n{}\n{}",
            ct.sh("systemctl status jpd --no-pager"),
            journal(ct)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the journal of jpd.service holds every one of `lines` (jpd's output
/// reaches journald through a stream, a little after the fact).
fn wait_journal(ct: &Container, lines: &[&str]) {
    let t0 = Instant::now();
    loop {
        let log = journal(ct);
        let missing: Vec<&&str> = lines.iter().filter(|l| !log.contains(**l)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "not in the journal of jpd.service within 15 s: {missing:?}\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn jpctl_json(ct: &Container, args: &[&str]) -> Value {
    let mut a = vec!["jpctl"];
    a.extend_from_slice(args);
    let text = ct.ok(&a);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("jpctl {args:?}: not JSON ({e}):\n{text}"))
}

/// `systemctl start` blocks until READY=1; returns how long it took.
fn start(ct: &Container) -> Duration {
    let t0 = Instant::now();
    ct.ok(&["systemctl", "start", "jpd.service"]);
    let took = t0.elapsed();
    assert_eq!(ct.property("jpd.service", "ActiveState"), "active");
    took
}

/// A line of /proc/PID/status of a process in the container.
fn status_field(ct: &Container, pid: u32, field: &str) -> String {
    let text = std::fs::read_to_string(ct.host_path(&format!("/proc/{pid}/status")))
        .expect("the process's status");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// The unit's resource limits, as systemd holds them and as they reach the process.
/// The memory and CPU limits are checked as systemd holds them only: the container's
/// systemd is given no memory or CPU controller (the test machines mount cgroup v1
/// controllers; the container gets the `name=systemd` hierarchy and an empty unified
/// one), so there is no cgroup file of jpd's that could show them.
fn assert_limits(ct: &Container, pid: u32) {
    for (property, value) in [
        ("MemoryHigh", "805306368"),
        ("MemoryMax", "1073741824"),
        ("LimitNOFILE", "16384"),
        ("LimitNOFILESoft", "16384"),
        ("CPUWeight", "100"),
        ("SystemCallErrorNumber", "1"),
    ] {
        assert_eq!(ct.property("jpd.service", property), value, "{property}");
    }
    // An allow list: bpf and perf_event_open allowed, the rest of @privileged not.
    let filter = ct.property("jpd.service", "SystemCallFilter");
    let allowed: Vec<&str> = filter.split_whitespace().collect();
    for call in ["bpf", "perf_event_open", "openat", "ioctl", "chown"] {
        assert!(allowed.contains(&call), "{call} is not allowed: {filter}");
    }
    for call in [
        "mount",
        "init_module",
        "reboot",
        "setuid",
        "add_key",
        "mlock",
        "kexec_load",
    ] {
        assert!(!allowed.contains(&call), "{call} is allowed: {filter}");
    }
    let limits = std::fs::read_to_string(ct.host_path(&format!("/proc/{pid}/limits")))
        .expect("the process's limits");
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .unwrap_or_else(|| panic!("no open files limit:\n{limits}"));
    assert_eq!(open_files[3..5], ["16384", "16384"], "{limits}");
}

#[test]
fn start_reload_restart_and_stop_under_systemd() {
    let _one = crate::support::exclusive();
    let (staged, ct) = boot("life");
    assert_eq!(
        ct.property("jpd.service", "FragmentPath"),
        "/usr/local/lib/systemd/system/jpd.service",
        "systemd finds the unit where `cargo xtask install` puts it"
    );

    // Type=notify: `systemctl start` returned after READY=1, so the socket answers
    // at once, without a retry.
    let took = start(&ct);
    let status = jpctl_json(&ct, &["status", "--json"]);
    assert_eq!(status["kernel"]["attached"], true, "{status}");
    let text = ct.property("jpd.service", "StatusText");
    assert!(
        text.starts_with("attached jp_sample"),
        "StatusText {text:?}"
    );
    let notes = notifications(&ct);
    assert!(
        notes
            .first()
            .is_some_and(|n| n.starts_with("READY=1, STATUS=attached jp_sample")),
        "the first notification is READY: {notes:?}"
    );
    // ExecStartPre checked the configuration.
    wait_journal(&ct, &["/etc/jp/jpd.toml: OK"]);
    eprintln!("systemctl start jpd took {took:?}");

    // What the unit gives the process: capabilities, no_new_privs, nice, namespaces.
    let pid = main_pid(&ct);
    assert_eq!(status_field(&ct, pid, "CapEff"), UNIT_CAPS);
    assert_eq!(status_field(&ct, pid, "CapBnd"), UNIT_CAPS);
    assert_eq!(status_field(&ct, pid, "NoNewPrivs"), "1");
    let stat = std::fs::read_to_string(ct.host_path(&format!("/proc/{pid}/stat"))).expect("stat");
    let nice = stat[stat.rfind(')').expect("stat") + 2..]
        .split_whitespace()
        .nth(16)
        .expect("nice field");
    assert_eq!(nice, "0", "no Nice=: the CPU weight protects jpd");
    assert_limits(&ct, pid);
    // systemd applied the sandbox: seccomp filters, a read-only root with a writable
    // /run/jp, a private /tmp, no /root.
    assert_eq!(status_field(&ct, pid, "Seccomp"), "2");
    let mounts = std::fs::read_to_string(ct.host_path(&format!("/proc/{pid}/mountinfo")))
        .expect("mountinfo");
    let options = |point: &str| {
        mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(4) == Some(&point)).then(|| f.get(5).map(|o| o.to_string()))
            })
            .next_back()
            .flatten()
            .unwrap_or_else(|| panic!("{point} is not a mount of jpd's:\n{mounts}"))
    };
    for (point, mode) in [("/", "ro"), ("/etc/jp", "ro"), ("/run/jp", "rw")] {
        assert!(
            options(point).split(',').any(|o| o == mode),
            "{point} is not {mode} for jpd:\n{mounts}"
        );
    }
    let id = |p: std::path::PathBuf| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        (m.dev(), m.ino())
    };
    assert_ne!(
        id(ct.host_path(&format!("/proc/{pid}/root/tmp"))),
        id(ct.host_path("/tmp")),
        "PrivateTmp=yes gives jpd a /tmp of its own"
    );
    let root = std::fs::metadata(ct.host_path(&format!("/proc/{pid}/root/root")))
        .expect("/root in jpd's namespace");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&root.permissions()) & 0o777,
        0,
        "ProtectHome=yes leaves /root inaccessible"
    );

    // systemctl reload: SIGHUP, RELOADING=1, the new frequency, READY=1 again.
    staged.set_config(&CONFIG.replace("frequency_hz = 997", "frequency_hz = 499"));
    ct.ok(&["systemctl", "reload", "jpd.service"]);
    wait_for(
        &ct,
        Duration::from_secs(10),
        "StatusText after reload",
        || ct.property("jpd.service", "StatusText") == "configuration reloaded",
    );
    wait_journal(
        &ct,
        &[
            "SIGHUP: reloading the configuration from /etc/jp/jpd.toml",
            "sampling at 499 Hz (was 997 Hz)",
        ],
    );
    let notes = notifications(&ct);
    let reload = notes
        .iter()
        .position(|n| reload_notification(n))
        .unwrap_or_else(|| panic!("no RELOADING=1 with MONOTONIC_USEC: {notes:?}"));
    assert_eq!(
        notes.get(reload + 1).map(String::as_str),
        Some("READY=1, STATUS=configuration reloaded"),
        "{notes:?}"
    );
    assert_eq!(main_pid(&ct), pid, "a reload keeps the process");
    assert_eq!(ct.property("jpd.service", "ActiveState"), "active");

    // kill -9 of the main process: Restart=on-failure brings jpd back, serving.
    ct.ok(&["kill", "-9", &pid.to_string()]);
    wait_for(
        &ct,
        Duration::from_secs(30),
        "restart after SIGKILL",
        || {
            ct.property("jpd.service", "NRestarts") == "1"
                && ct.property("jpd.service", "ActiveState") == "active"
        },
    );
    let restarted = main_pid(&ct);
    assert_ne!(restarted, pid);
    let status = jpctl_json(&ct, &["status", "--json"]);
    assert_eq!(status["kernel"]["attached"], true, "{status}");
    wait_journal(&ct, &["Main process exited, code=killed, status=9/KILL"]);

    // systemctl stop: STOPPING=1, exit 0, the socket and /run/jp gone.
    let before = notifications(&ct).len();
    ct.ok(&["systemctl", "stop", "jpd.service"]);
    assert_eq!(ct.property("jpd.service", "ActiveState"), "inactive");
    assert_eq!(ct.property("jpd.service", "Result"), "success");
    assert_eq!(ct.property("jpd.service", "ExecMainStatus"), "0");
    let notes = notifications(&ct);
    assert_eq!(
        notes[before..].last().map(String::as_str),
        Some("STOPPING=1"),
        "{notes:?}"
    );
    wait_journal(&ct, &["SIGTERM: shutting down", "jpd] stopped"]);
    assert!(
        !ct.host_path("/run/jp/jpd.sock").exists(),
        "the socket stayed"
    );
    assert!(!ct.host_path("/run/jp").exists(), "RuntimeDirectory stayed");

    let security = ct.ok(&["systemd-analyze", "security", "--no-pager", "jpd.service"]);
    let line = security
        .lines()
        .find(|l| l.contains("Overall exposure level for jpd.service: "))
        .unwrap_or_else(|| panic!("no exposure level:\n{security}"));
    eprintln!("systemd-analyze security jpd.service: {line}");
    let exposure: f64 = line
        .split(": ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("exposure is not a number: {line}"));
    // Measured with systemd 252 (Debian 12). Higher means an option was dropped or
    // weakened: say why in the unit, and update this number and the README.
    assert!(
        exposure <= EXPOSURE,
        "exposure {exposure} > {EXPOSURE}:\n{security}"
    );
}

#[test]
fn the_watchdog_is_armed_fed_and_fires() {
    let _one = crate::support::exclusive();
    let (_staged, ct) = boot("watchdog");
    start(&ct);
    assert_eq!(ct.property("jpd.service", "WatchdogUSec"), "30s");
    let environ =
        std::fs::read(ct.host_path(&format!("/proc/{}/environ", main_pid(&ct)))).expect("environ");
    assert!(
        environ
            .split(|&b| b == 0)
            .any(|v| v == b"WATCHDOG_USEC=30000000"),
        "jpd was not given the watchdog period"
    );
    ct.ok(&["systemctl", "stop", "jpd.service"]);

    // The same unit with a 4 s period, so that the test sees several of them.
    let dropin = ct.host_path("/etc/systemd/system/jpd.service.d");
    std::fs::create_dir_all(&dropin).expect("drop-in dir");
    std::fs::write(
        dropin.join("test-watchdog.conf"),
        "[Service]\nWatchdogSec=4s\n",
    )
    .expect("drop-in");
    ct.ok(&["systemctl", "daemon-reload"]);
    start(&ct);
    let pid = main_pid(&ct);
    let pings = || {
        notifications(&ct)
            .iter()
            .filter(|n| *n == "WATCHDOG=1")
            .count()
    };
    let first = pings();
    std::thread::sleep(Duration::from_secs(10));
    // Fed every 2 s: about five pings in 2.5 periods, and no restart.
    let fed = pings() - first;
    assert!(fed >= 4, "{fed} WATCHDOG=1 in 10 s with WatchdogSec=4s");
    assert_eq!(main_pid(&ct), pid);
    assert_eq!(ct.property("jpd.service", "NRestarts"), "0");
    // Fed because each part makes progress, also on this idle host (no JVM records).
    let parts = subsystems(&ct);
    assert_eq!(
        parts
            .iter()
            .map(|(name, stuck, _)| (name.as_str(), *stuck))
            .collect::<Vec<_>>(),
        [
            ("kernel_reader", false),
            ("ring_reader", false),
            ("usdt_manager", false)
        ],
        "{parts:?}"
    );

    // A jpd that hangs (SIGSTOP) stops feeding it: systemd aborts and restarts it.
    ct.ok(&["kill", "-STOP", &pid.to_string()]);
    wait_for(
        &ct,
        Duration::from_secs(30),
        "restart after the watchdog",
        || {
            ct.property("jpd.service", "NRestarts") == "1"
                && ct.property("jpd.service", "ActiveState") == "active"
        },
    );
    assert_ne!(main_pid(&ct), pid);
    wait_journal(&ct, &["Watchdog timeout (limit 4s)!"]);
    ct.ok(&["jpctl", "status"]);
}

/// `jpctl status --json`'s subsystems: name, stuck, detail.
fn subsystems(ct: &Container) -> Vec<(String, bool, String)> {
    let status = jpctl_json(ct, &["status", "--json"]);
    status["subsystems"]
        .as_array()
        .unwrap_or_else(|| panic!("no subsystems: {status}"))
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap_or("?").to_string(),
                h["stuck"].as_bool().unwrap_or(false),
                h["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// jpd started with `fault` injected and a 6 s watchdog: `jpctl status` names `part`
/// stuck, then systemd's watchdog restarts jpd (a new main process, one restart
/// more), and the journal says why. Returns `part`'s detail as `jpctl status` gave it.
fn injected_fault_restarts_jpd(ct: &Container, fault: &str, part: &str) -> String {
    let dropin = ct.host_path("/etc/systemd/system/jpd.service.d");
    std::fs::create_dir_all(&dropin).expect("drop-in dir");
    // No core dump of the aborted jpd: the test wants the restart, not the core.
    std::fs::write(
        dropin.join("test-fault.conf"),
        format!("[Service]\nWatchdogSec=6s\nLimitCORE=0\nEnvironment=JPD_FAULT_INJECT={fault}\n"),
    )
    .expect("drop-in");
    ct.ok(&["systemctl", "daemon-reload"]);
    let restarts: u32 = ct
        .property("jpd.service", "NRestarts")
        .parse()
        .expect("NRestarts is a number");
    start(ct);
    let pid = main_pid(ct);
    wait_journal(
        ct,
        &[&format!("JPD_FAULT_INJECT: injecting the fault {fault}")],
    );

    // Seen stuck by jpd itself before systemd's timer runs out; the other parts not.
    let mut detail = String::new();
    wait_for(
        ct,
        Duration::from_secs(15),
        &format!("{part} stuck"),
        || {
            if main_pid(ct) != pid {
                panic!("jpd was restarted before `jpctl status` named {part} stuck");
            }
            let parts = subsystems(ct);
            for (name, stuck, why) in &parts {
                if name == part && *stuck {
                    detail.clone_from(why);
                } else {
                    assert!(!stuck, "{name} is stuck too: {parts:?}");
                }
            }
            !detail.is_empty()
        },
    );
    let text = ct.ok(&["jpctl", "status"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("  {part}")) && l.contains(" STUCK ")),
        "{text}"
    );

    wait_for(
        ct,
        Duration::from_secs(30),
        "restart by the watchdog",
        || {
            let now: u32 = ct
                .property("jpd.service", "NRestarts")
                .parse()
                .expect("NRestarts is a number");
            now > restarts && main_pid(ct) != pid && main_pid(ct) != 0
        },
    );
    wait_journal(
        ct,
        &[
            &format!("{part} stuck ("),
            "not feeding the watchdog",
            "Watchdog timeout (limit 6s)!",
        ],
    );
    // The restarted jpd has the fault too: stop it for good (the stalled manager
    // thread would hold up a clean stop until TimeoutStopSec).
    std::fs::remove_file(dropin.join("test-fault.conf")).expect("remove the drop-in");
    ct.ok(&["systemctl", "daemon-reload"]);
    ct.ok(&["systemctl", "kill", "--signal=KILL", "jpd.service"]);
    let _ = ct.run(&["systemctl", "stop", "jpd.service"]);
    detail
}

#[test]
fn a_stuck_usdt_manager_or_a_dead_ring_reader_gets_jpd_restarted() {
    let _one = crate::support::exclusive();
    let (_staged, ct) = boot("fault");
    // Interval 1 s (scan_interval_ms), grace 3 s: stuck once 5 s without a tick.
    let stalled = injected_fault_restarts_jpd(&ct, "usdt_manager_stall", "usdt_manager");
    assert!(
        stalled.starts_with("no progress for ") && stalled.ends_with(" s (allowed 5.0 s)"),
        "{stalled}"
    );
    let dead = injected_fault_restarts_jpd(&ct, "ring_reader_exit", "ring_reader");
    assert_eq!(dead, "ended: injected fault ring_reader_exit");
    // Without the switch, jpd runs healthy again.
    start(&ct);
    assert!(subsystems(&ct).iter().all(|(_, stuck, _)| !stuck));
    ct.ok(&["systemctl", "stop", "jpd.service"]);
}

/// FleetPaper as a service of its own (PrivateTmp, ProtectSystem), fed through a FIFO,
/// with the agent library in root's 0700 home, which jpd's ProtectHome=yes hides from
/// jpd's own mount namespace: jpd must reach it through the JVM's.
struct JvmService<'a> {
    ct: &'a Container,
    input: std::fs::File,
    output: std::path::PathBuf,
}

impl<'a> JvmService<'a> {
    fn start(ct: &'a Container, staged: &Staged) -> JvmService<'a> {
        compile_fleet_paper(&staged.path().join("classes"));
        let io = staged.path().join("io");
        let fifo = io.join("in");
        let c = std::ffi::CString::new(fifo.to_str().expect("UTF-8")).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let home = ct.host_path("/root");
        std::fs::create_dir_all(home.join("jp")).expect("mkdir /root/jp");
        chmod(&home, 0o700);
        std::fs::copy(jp_testkit::agent_lib(), home.join("jp/libjpagent.so"))
            .expect("copy the agent into /root/jp");
        let java = format!("{}/bin/java", jdk17().display());
        ct.ok(&[
            "systemd-run",
            "--unit=jp-test-jvm",
            "--property=PrivateTmp=yes",
            "--property=ProtectSystem=strict",
            "--property=StandardInput=file:/srv/jp-test/io/in",
            "--property=StandardOutput=file:/srv/jp-test/io/out",
            &java,
            "-agentpath:/root/jp/libjpagent.so=bba=precise,profiler=usdt",
            "-cp",
            "/srv/jp-test/classes",
            "FleetPaper",
        ]);
        // Blocks until the service opens its end.
        let input = std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .expect("open the JVM's stdin");
        let jvm = JvmService {
            ct,
            input,
            output: io.join("out"),
        };
        jvm.wait_lines("ready", 1);
        jvm
    }

    fn wait_lines(&self, line: &str, n: usize) {
        let t0 = Instant::now();
        loop {
            let text = std::fs::read_to_string(&self.output).unwrap_or_default();
            if text.lines().filter(|l| *l == line).count() >= n {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the JVM printed {n} x {line:?} not within 60 s: {text}\n{}",
                self.ct.sh("systemctl status jp-test-jvm --no-pager")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn pid(&self) -> u32 {
        self.ct
            .property("jp-test-jvm.service", "MainPID")
            .parse()
            .expect("MainPID")
    }

    fn run(&mut self, n: usize) {
        for _ in 0..n {
            writeln!(self.input, "run").expect("write to the JVM");
        }
        self.input.flush().expect("flush");
        self.wait_lines("done", n);
    }
}

impl Drop for JvmService<'_> {
    fn drop(&mut self) {
        let _ = self.ct.run(&["systemctl", "stop", "jp-test-jvm.service"]);
    }
}

#[test]
fn hardened_jpd_samples_the_kernel_and_profiles_a_jvm_of_another_service() {
    let _one = crate::support::exclusive();
    let (staged, ct) = boot("profile");
    // The exporters too (the container shares the host's network).
    let http: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    // Only [export]'s `enabled`: other sections (e.g. [pyroscope]) have one too.
    let export_at = CONFIG
        .find("[export]")
        .expect("jpd.toml has an [export] section");
    let (before, export) = CONFIG.split_at(export_at);
    let config = format!(
        "{before}{}",
        export.replacen("enabled = false", "enabled = true", 1)
    )
    .replace(
        "listen = \"127.0.0.1:9464\"",
        &format!("listen = \"{http}\""),
    );
    assert_ne!(
        config, CONFIG,
        "jpd.toml's [export] keys changed: update this test"
    );
    staged.set_config(&config);
    start(&ct);

    ct.ok(&["jpctl", "reset"]);
    read_dev_zero(Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(2500)); // two read intervals (1 s)
    let k = jpctl_json(&ct, &["kernel", "--json", "--top", "5"]);
    let kernel = k["samples"]["kernel"].as_u64().unwrap_or(0);
    assert!(
        kernel > 1000,
        "{kernel} kernel samples in 3 s of /dev/zero reads: {k}"
    );
    let hottest = k["functions"][0]["name"].as_str().unwrap_or("?");
    assert!(
        [
            "read_zero",
            "read_iter_zero",
            "iov_iter_zero",
            "clear_user_rep_good",
            "clear_user_erms",
            "rep_stos_alternative",
            "__clear_user"
        ]
        .contains(&hottest),
        "the hottest kernel function is not on the /dev/zero read path: {k}"
    );
    let (code, body) = http_get(http, "/metrics");
    let metrics = String::from_utf8_lossy(&body);
    assert_eq!(code, 200, "GET /metrics: {metrics}");
    assert!(
        metrics.contains("jp_kernel_samples_total{mode=\"kernel\"}"),
        "{metrics}"
    );

    // FleetPaper in a service of its own, with its own /tmp and mount namespace: jpd
    // finds the library through /proc/PID/maps and /proc/PID/root, attaches its probe
    // and writes the generation through /proc/PID/mem, all under its hardening.
    let mut jvm = JvmService::start(&ct, &staged);
    let pid = jvm.pid();
    let attached = format!(
        "USDT: attached to /root/jp/libjpagent.so (1 probe site(s), found in process {pid})"
    );
    wait_for(
        &ct,
        Duration::from_secs(30),
        "jpd attaches to the JVM",
        || journal(&ct).contains(&attached),
    );
    std::thread::sleep(Duration::from_millis(1500)); // the generation, at the next scan
    const RUNS: u64 = 3;
    jvm.run(RUNS as usize);

    // The probe reports the JVM by its pid on the host (the container has a pid
    // namespace of its own; on a host jpd is in the initial one and both are equal).
    let host = host_pid(&ct, pid);
    let t0 = Instant::now();
    let j = loop {
        let list = jpctl_json(&ct, &["jvm", "list", "--json"]);
        let entry = list["jvms"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|j| j["pid"].as_u64() == Some(u64::from(host)))
            })
            .cloned();
        // Each run's thread sends its tree when it ends: 68 calls per run.
        if let Some(j) = entry.filter(|j| j["calls"].as_u64() >= Some(68 * RUNS)) {
            break j;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "jpd has no profile of JVM {host} (pid {pid} in the container) within 30 s:\n{list}\n{}",
            journal(&ct)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(j["complete"], true, "{j}");
    assert_eq!(j["main"], "FleetPaper", "{j}");
    assert_eq!(j["ns_pid"].as_u64(), Some(u64::from(pid)), "{j}");
    let top = jpctl_json(
        &ct,
        &[
            "jvm",
            "top",
            &host.to_string(),
            "--by",
            "calls",
            "--limit",
            "0",
            "--json",
        ],
    );
    let calls = |m: &str| {
        top["methods"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["method"] == m))
            .and_then(|x| x["calls"].as_u64())
            .unwrap_or_else(|| panic!("{m} is not in the profile: {top}"))
    };
    // By the program's text: per run, Worker.run and f once, g 10 times, h 1 + 55 times.
    for (m, per_run) in [
        ("FleetPaper$Worker.run()V", 1),
        ("FleetPaper.f()V", 1),
        ("FleetPaper.g(I)V", 10),
        ("FleetPaper.h()V", 56),
    ] {
        assert_eq!(calls(m), per_run * RUNS, "{m}: {top}");
    }
    let log = journal(&ct);
    assert!(!log.contains("cannot write the generation"), "{log}");
    // The unit's MemoryHigh (768M) leaves the JVM store budget (512 MiB) above what
    // jpd itself takes: its peak here, kernel sampling, exporters and a JVM profiled.
    let jpd = main_pid(&ct);
    let peak_kib: u64 = status_field(&ct, jpd, "VmHWM")
        .trim_end_matches(" kB")
        .parse()
        .expect("VmHWM in kB");
    eprintln!("jpd's peak resident memory: {} MiB", peak_kib / 1024);
    assert!(
        peak_kib < 256 * 1024,
        "jpd peaked at {peak_kib} KiB: MemoryHigh=768M no longer leaves the store its 512 MiB"
    );
    drop(jvm);
    ct.ok(&["systemctl", "stop", "jpd.service"]);
}

/// The host pid of the process that has `pid` in the container's pid namespace.
fn host_pid(ct: &Container, pid: u32) -> u32 {
    let ns = std::fs::read_link(format!("/proc/{}/ns/pid", ct.leader)).expect("pid namespace");
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{p}/ns/pid")).ok() != Some(ns.clone()) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_whitespace().last()?.parse::<u32>().ok());
        if inner == Some(pid) {
            return p;
        }
    }
    panic!("no host process is pid {pid} in the container");
}

/// `RELOADING=1` with the `MONOTONIC_USEC=` that systemd 253 and later want beside it
/// (a positive number of microseconds of CLOCK_MONOTONIC).
fn reload_notification(n: &str) -> bool {
    n.strip_prefix("RELOADING=1, MONOTONIC_USEC=")
        .and_then(|us| us.parse::<u64>().ok())
        .is_some_and(|us| us > 0)
}
