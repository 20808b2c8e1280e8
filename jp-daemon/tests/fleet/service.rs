//! jpd as a service: `--check-config`, the systemd notification protocol (READY only
//! once attached, WATCHDOG at half the period, RELOADING/READY around SIGHUP,
//! STOPPING), SIGHUP reloading without losing data, the socket's group and
//! per-request authorization from peer credentials, and the unit's capability set.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::fleet::tool;
use crate::support::jpd::Jpd;

const UNIT: &str = include_str!("../../../deploy/systemd/jpd.service");

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{series} is not in /metrics:\n{text}"))
}

fn samples(text: &str) -> f64 {
    ["kernel", "user", "idle"]
        .iter()
        .map(|m| metric(text, &format!("jp_kernel_samples_total{{mode=\"{m}\"}}")))
        .sum()
}

#[test]
fn check_config_validates_and_names_file_line_and_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "[kernel]\nfrequency_hz = 499\n[export]\nenabled = true\n",
    )
    .unwrap();
    let out = Command::new(jp_testkit::jpd())
        .arg("--check-config")
        .arg(&good)
        .output()
        .expect("run jpd");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}: OK\n", good.display())
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[server]\ngroup = \"jp\"\n\n[export]\nlisten = \"everywhere\"\n",
    )
    .unwrap();
    let out = Command::new(jp_testkit::jpd())
        .arg("--check-config")
        .arg(&bad)
        .output()
        .expect("run jpd");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "jpd: invalid config {}, line 5, column 10: listen = \"everywhere\" is not an IP address and port (e.g. \"127.0.0.1:9464\")\n",
            bad.display()
        )
    );
    let out = Command::new(jp_testkit::jpd())
        .arg("--check-config")
        .arg(dir.path().join("missing.toml"))
        .output()
        .expect("run jpd");
    assert_eq!(out.status.code(), Some(1));
}

/// Datagrams jpd sends to $NOTIFY_SOCKET, each as one string.
struct NotifySocket {
    sock: UnixDatagram,
    name: String,
}

impl NotifySocket {
    fn new() -> NotifySocket {
        let name = format!("jp-fleet-notify-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        let sock = UnixDatagram::bind_addr(&addr).expect("bind the notify socket");
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        NotifySocket { sock, name }
    }

    fn env(&self) -> String {
        format!("@{}", self.name)
    }

    fn next(&self, within: Duration) -> Option<String> {
        let t0 = Instant::now();
        let mut buf = [0u8; 4096];
        while t0.elapsed() < within {
            if let Ok(n) = self.sock.recv(&mut buf) {
                return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        None
    }

    /// Messages until one starts with `prefix` (which is returned last).
    fn until(&self, prefix: &str, within: Duration) -> Vec<String> {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while t0.elapsed() < within {
            if let Some(m) = self.next(Duration::from_millis(200)) {
                let done = m.starts_with(prefix);
                seen.push(m);
                if done {
                    return seen;
                }
            }
        }
        panic!("no {prefix:?} within {within:?}; got {seen:?}");
    }
}

#[test]
fn notify_ready_watchdog_reload_and_stop() {
    let _one = crate::support::exclusive();
    let notify = NotifySocket::new();
    let env = notify.env();
    let jpd = Jpd::start_with(
        "",
        &[("NOTIFY_SOCKET", &env), ("WATCHDOG_USEC", "1000000")],
        "",
    );

    // READY=1 is the first message, and names what was attached.
    let first = notify
        .next(Duration::from_secs(5))
        .expect("a first notification");
    assert!(
        first.starts_with("READY=1\nSTATUS=attached jp_sample, jp_irq_entry"),
        "{first:?}"
    );
    assert!(
        first.contains(&format!("\nMAINPID={}", jpd.pid())),
        "{first:?}"
    );

    // WATCHDOG=1 every 0.5 s: 4 (±1) in 2 s.
    let t0 = Instant::now();
    let mut pings = 0;
    while t0.elapsed() < Duration::from_secs(2) {
        if let Some(m) = notify.next(Duration::from_millis(100)) {
            assert_eq!(m, "WATCHDOG=1");
            pings += 1;
        }
    }
    assert!(
        (3..=5).contains(&pings),
        "{pings} watchdog pings in 2 s at WATCHDOG_USEC=1s"
    );

    // SIGHUP: a new frequency, nothing counted is lost.
    let before = jpd.metrics();
    let text = std::fs::read_to_string(&jpd.config).unwrap();
    std::fs::write(
        &jpd.config,
        text.replace("[kernel]\n", "[kernel]\nfrequency_hz = 499\nshift = 5\n"),
    )
    .unwrap();
    jpd.signal(libc::SIGHUP);
    let msgs = notify.until("READY=1", Duration::from_secs(5));
    let reloading = msgs
        .iter()
        .position(|m| {
            // systemd >= 253 wants the reload's CLOCK_MONOTONIC time with it.
            m.strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
                .is_some_and(|usec| usec.parse::<u64>().is_ok_and(|u| u > 0))
        })
        .expect("RELOADING=1 with MONOTONIC_USEC before READY=1");
    assert_eq!(
        msgs.last().map(String::as_str),
        Some("READY=1\nSTATUS=configuration reloaded")
    );
    assert!(reloading < msgs.len() - 1);
    std::thread::sleep(Duration::from_millis(500));
    let after = jpd.metrics();
    assert_eq!(metric(&after, "jp_kernel_sampling_frequency_hertz"), 499.0);
    assert!(
        samples(&after) > samples(&before),
        "samples went from {} to {}",
        samples(&before),
        samples(&after)
    );
    let log = jpd.log_text();
    assert!(log.contains("sampling at 499 Hz (was 997 Hz)"), "{log}");
    assert!(
        log.contains(
            "kernel.shift changed (4 → 5) but cannot be reloaded: restart jpd to apply it"
        ),
        "{log}"
    );

    // A broken file changes nothing.
    std::fs::write(&jpd.config, "[kernel]\nfrequency_hz = \"fast\"\n").unwrap();
    jpd.signal(libc::SIGHUP);
    notify.until("READY=1", Duration::from_secs(5));
    assert_eq!(
        metric(&jpd.metrics(), "jp_kernel_sampling_frequency_hertz"),
        499.0
    );
    assert!(jpd.log_text().contains("keeping the running configuration"));

    let socket = jpd.socket.clone();
    let mut jpd = jpd;
    jpd.signal(libc::SIGTERM);
    let msgs = notify.until("STOPPING=1", Duration::from_secs(10));
    assert_eq!(msgs.last().map(String::as_str), Some("STOPPING=1"));
    let status = jpd.child.wait().expect("wait jpd");
    assert!(status.success());
    assert!(!socket.exists());
}

/// `jpctl COMMAND` as uid 65534 with the given supplementary groups.
fn jpctl_as_nobody(jpd: &Jpd, groups: &str, command: &str) -> std::process::Output {
    Command::new(tool("setpriv", "util-linux"))
        .args(["--reuid=65534", "--regid=65534"])
        .arg(if groups.is_empty() {
            "--clear-groups".to_string()
        } else {
            format!("--groups={groups}")
        })
        .arg(jp_testkit::jpctl())
        .arg("--socket")
        .arg(&jpd.socket)
        .arg(command)
        .output()
        .expect("run jpctl through setpriv")
}

#[test]
fn socket_group_and_peer_credentials_decide_who_may_call() {
    let _one = crate::support::exclusive();
    // Debian's `daemon` group (gid 1) stands for `jp`.
    let jpd = Jpd::start_with("", &[], "group = \"daemon\"\n");
    let meta = std::fs::metadata(&jpd.socket).expect("socket");
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o660, 0, 1)
    );

    // Open the file for everyone: the authorization itself must refuse strangers.
    std::fs::set_permissions(jpd.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&jpd.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = jpctl_as_nobody(&jpd, "", "status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "uid 65534 was let in");
    assert!(
        err.contains("uid 65534 (gid 65534) may not use this API: add the user to group \"daemon\", or list it in server.allow_uids"),
        "{err}"
    );
    // A member of the socket's group through a supplementary group is allowed.
    let out = jpctl_as_nobody(&jpd, "1", "status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ... to read, not to erase what every other client sees.
    let out = jpctl_as_nobody(&jpd, "1", "reset");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a reader could reset");
    assert!(
        err.contains("uid 65534 (gid 65534) may read but not call Reset"),
        "{err}"
    );

    // allow_uids, reloaded on SIGHUP.
    let text = std::fs::read_to_string(&jpd.config).unwrap();
    std::fs::write(
        &jpd.config,
        text.replace(
            "[server]\n",
            "[server]\nallow_uids = [65534]\nadmin_uids = [65534]\n",
        ),
    )
    .unwrap();
    jpd.signal(libc::SIGHUP);
    let t0 = Instant::now();
    while !jpd.log_text().contains("access now") {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no reload: {}",
            jpd.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = jpctl_as_nobody(&jpd, "", "status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // admin_uids, reloaded with it: now it may reset.
    let out = jpctl_as_nobody(&jpd, "", "reset");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    jpd.stop();
}

/// The unit's CapabilityBoundingSet, as setpriv arguments.
fn unit_capabilities() -> Vec<String> {
    let line = UNIT
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet");
    line.split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect()
}

fn setpriv(caps: &[String]) -> Vec<String> {
    vec![
        tool("setpriv", "util-linux").display().to_string(),
        "--no-new-privs".into(),
        format!("--bounding-set=-all,{}", caps.join(",")),
        "--inh-caps=-all".into(),
        "--".into(),
    ]
}

#[test]
fn the_units_capabilities_are_enough_and_without_syslog_jpd_refuses_to_start() {
    let _one = crate::support::exclusive();
    let caps = unit_capabilities();
    assert_eq!(
        caps,
        [
            "+sys_admin",
            "+syslog",
            "+sys_ptrace",
            "+dac_read_search",
            "+chown"
        ]
    );
    // bpf_stats: whether the unit's capabilities suffice to turn the run-time
    // statistics on is part of what this checks.
    let jpd = Jpd::start_full(
        "bpf_stats = true\n",
        &[],
        "group = \"daemon\"\n",
        &setpriv(&caps),
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", jpd.pid())).unwrap();
    // Effective set = exactly the unit's five: CHOWN (bit 0), DAC_READ_SEARCH (2),
    // SYS_PTRACE (19), SYS_ADMIN (21), SYSLOG (34).
    assert!(status.contains("\nCapEff:\t0000000400280005\n"), "{status}");
    std::thread::sleep(Duration::from_millis(500));
    let m = jpd.metrics();
    assert!(samples(&m) > 0.0);
    assert!(
        metric(&m, "jp_bpf_program_runs_total{program=\"jp_sample\"}") > 0.0,
        "run-time statistics need CAP_SYS_ADMIN"
    );
    assert_eq!(
        std::fs::metadata(&jpd.socket).unwrap().gid(),
        1,
        "CAP_CHOWN gives the socket to the group"
    );
    jpd.stop();

    // Without CAP_SYSLOG kallsyms hides addresses: jpd refuses to start, and says why.
    let without: Vec<String> = caps.iter().filter(|c| *c != "+syslog").cloned().collect();
    let out = Command::new(&setpriv(&without)[0])
        .args(&setpriv(&without)[1..])
        .arg(jp_testkit::jpd())
        .args(["--socket", "/nonexistent-dir-for-jp-test/x.sock"])
        .output()
        .expect("run jpd");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read kernel symbols"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
