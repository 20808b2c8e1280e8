//! The daemon's life in-process, driven through `daemon::run_with` as `daemon::run`
//! drives it from signals: start (attached, serving on the socket and the exporter),
//! reload (a new sampling frequency, the exporter moved to another port), and the one
//! shutdown path (socket removed, exporter closed, `run_with` returns `Ok`), on a stop
//! request and on a closed control channel; a start that fails returns its error and
//! leaves nothing behind.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::jpd::{free_port, http_get, metric};
use crate::support::require_root;
use jp_daemon::daemon::{self, Control, Overrides};
use tokio::sync::mpsc;

/// jpd's log lines, as `[LEVEL target] message`.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let line = format!("[{} {}] {}", r.level(), r.target(), r.args());
            self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    }

    fn flush(&self) {}
}

static LOG: Capture = Capture(Mutex::new(Vec::new()));

fn capture_log() {
    // Both tests try; the first one installs it.
    let _ = log::set_logger(&LOG);
    log::set_max_level(log::LevelFilter::Info);
}

fn log_text() -> String {
    LOG.0.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < timeout,
            "{what}: not within {timeout:?}\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metrics(http: SocketAddr) -> String {
    let (status, body) = http_get(http, "/metrics");
    assert_eq!(status, 200, "GET http://{http}/metrics");
    String::from_utf8(body).expect("metrics are UTF-8")
}

fn samples(text: &str) -> u64 {
    ["kernel", "user", "idle"]
        .iter()
        .map(|m| {
            let series = format!("jp_kernel_samples_total{{mode=\"{m}\"}}");
            metric(text, &series).unwrap_or_else(|| panic!("{series} is not in /metrics"))
        })
        .sum()
}

fn jpctl_status(socket: &Path) -> String {
    let out = Command::new(jp_testkit::jpctl())
        .arg("--socket")
        .arg(socket)
        .arg("status")
        .output()
        .expect("run jpctl");
    assert!(out.status.success(), "jpctl status: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A configuration file in `dir` with the socket there and the exporter on `http`.
struct Setup {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    config: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("jpd.sock");
        let config = dir.path().join("jpd.toml");
        Setup {
            _dir: dir,
            socket,
            config,
        }
    }

    fn write(&self, frequency_hz: u64, http: SocketAddr) {
        std::fs::write(
            &self.config,
            format!(
                "[server]\nsocket = {:?}\n\n[export]\nenabled = true\nlisten = \"{http}\"\n\n[kernel]\nread_interval_ms = 100\nfrequency_hz = {frequency_hz}\n",
                self.socket.display().to_string()
            ),
        )
        .expect("write the configuration");
    }

    /// `daemon::run_with` on a thread of its own, with its control channel.
    fn start(&self) -> (mpsc::Sender<Control>, Life) {
        let overrides = Overrides {
            config: Some(self.config.clone()),
            ..Overrides::default()
        };
        let (config, source) = overrides.load().expect("the configuration loads");
        let (tx, rx) = mpsc::channel(4);
        let life = std::thread::spawn(move || daemon::run_with(&overrides, config, &source, rx));
        (tx, life)
    }
}

fn http_addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address")
}

type Life = JoinHandle<anyhow::Result<()>>;

/// jpd at 997 Hz with its exporter on a free port, once it answers on its socket and
/// its exporter (fails if it ended instead).
fn serving(setup: &Setup) -> (SocketAddr, mpsc::Sender<Control>, Life) {
    let http = http_addr();
    setup.write(997, http);
    let (tx, life) = setup.start();
    wait_for("jpd serving", Duration::from_secs(60), || {
        assert!(
            !life.is_finished(),
            "jpd ended during start-up\n{}",
            log_text()
        );
        setup.socket.exists() && http_get(http, "/metrics").0 == 200
    });
    (http, tx, life)
}

#[test]
fn run_with_starts_serves_reloads_and_stops() {
    require_root();
    let _one = crate::support::exclusive();
    capture_log();
    let setup = Setup::new();

    // Start: attached and serving.
    let (http, tx, life) = serving(&setup);
    assert!(
        jpctl_status(&setup.socket).contains("cpu-clock at 997 Hz"),
        "{}",
        jpctl_status(&setup.socket)
    );
    let before = metrics(http);
    assert_eq!(
        metric(&before, "jp_kernel_sampling_frequency_hertz"),
        Some(997)
    );

    // Reload: the new frequency applies, the exporter moves, nothing counted is lost.
    let http2 = http_addr();
    setup.write(499, http2);
    tx.blocking_send(Control::Reload)
        .expect("jpd takes requests");
    wait_for("the reload", Duration::from_secs(30), || {
        http_get(http2, "/metrics").0 == 200
            && metric(&metrics(http2), "jp_kernel_sampling_frequency_hertz") == Some(499)
    });
    assert_eq!(
        http_get(http, "/metrics").0,
        0,
        "the previous exporter still answers"
    );
    assert!(jpctl_status(&setup.socket).contains("cpu-clock at 499 Hz"));
    wait_for("samples after the reload", Duration::from_secs(10), || {
        samples(&metrics(http2)) > samples(&before)
    });
    assert!(
        log_text().contains("[INFO jpd] sampling at 499 Hz (was 997 Hz)"),
        "{}",
        log_text()
    );

    // Stop: the one shutdown path.
    tx.blocking_send(Control::Stop("the test"))
        .expect("jpd takes requests");
    let served = life.join().expect("the daemon's thread did not panic");
    assert!(served.is_ok(), "run_with: {served:?}");
    assert!(!setup.socket.exists(), "jpd left its socket behind");
    assert_eq!(
        http_get(http2, "/metrics").0,
        0,
        "the exporter still answers"
    );
    let log = log_text();
    assert!(log.contains("[INFO jpd] the test: shutting down"), "{log}");
    assert!(log.contains("[INFO jpd] stopped"), "{log}");
}

#[test]
fn run_with_stops_when_its_control_channel_closes_and_fails_a_start_cleanly() {
    require_root();
    let _one = crate::support::exclusive();
    capture_log();
    let setup = Setup::new();
    let (_, tx, life) = serving(&setup);
    drop(tx);
    let served = life.join().expect("the daemon's thread did not panic");
    assert!(served.is_ok(), "run_with: {served:?}");
    assert!(!setup.socket.exists(), "jpd left its socket behind");
    assert!(
        log_text().contains("[INFO jpd] the control channel closed: shutting down"),
        "{}",
        log_text()
    );

    // The exporter's port is taken: the start fails, with the collectors and the socket
    // gone again.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    setup.write(997, taken.local_addr().expect("its address"));
    let (_tx, life) = setup.start();
    wait_for("the failed start to end", Duration::from_secs(60), || {
        life.is_finished()
    });
    let served = life.join().expect("the daemon's thread did not panic");
    assert!(served.is_err(), "run_with started on a taken port");
    assert!(
        !setup.socket.exists(),
        "a failed start left its socket behind"
    );
}
