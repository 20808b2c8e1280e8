//! The one jpd launcher: jpd as `cargo xtask build` delivers it, on a temporary socket
//! with its exporters on a free loopback port, read by jpctl and over HTTP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::require_root;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub struct Jpd {
    pub child: Child,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub http: SocketAddr,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
}

impl Jpd {
    /// jpd with its exporters on a free loopback port and `extra` TOML appended
    /// (whole sections other than [server] and [export]).
    pub fn start(extra: &str) -> Jpd {
        Jpd::start_with(extra, &[], "")
    }

    /// As [`Jpd::start`], with environment variables and extra [server] keys.
    pub fn start_with(extra: &str, env: &[(&str, &str)], server_extra: &str) -> Jpd {
        Jpd::start_full(extra, env, server_extra, &[])
    }

    /// As [`Jpd::start_with`], jpd run through `wrapper` (e.g. setpriv …) when not empty.
    pub fn start_full(
        extra: &str,
        env: &[(&str, &str)],
        server_extra: &str,
        wrapper: &[String],
    ) -> Jpd {
        Jpd::start_exporting(extra, env, server_extra, "", wrapper)
    }

    /// As [`Jpd::start_full`], with extra [export] keys.
    pub fn start_exporting(
        extra: &str,
        env: &[(&str, &str)],
        server_extra: &str,
        export_extra: &str,
        wrapper: &[String],
    ) -> Jpd {
        require_root();
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("jpd.sock");
        let config = dir.path().join("jpd.toml");
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        // Tests read the kernel's maps every 100 ms unless `extra` (which starts in the
        // [kernel] table) sets its own interval.
        let read_interval = if extra.contains("read_interval_ms") {
            ""
        } else {
            "read_interval_ms = 100\n"
        };
        std::fs::write(
            &config,
            format!(
                "[server]\nsocket = {:?}\n{server_extra}\n[export]\nenabled = true\nlisten = \"{http}\"\nmax_profile_seconds = 60\n{export_extra}\n[kernel]\n{read_interval}{extra}",
                socket.display().to_string()
            ),
        )
        .expect("write config");
        let log = dir.path().join("jpd.log");
        let mut c = match wrapper.split_first() {
            Some((w, args)) => {
                let mut c = Command::new(w);
                c.args(args).arg(jp_testkit::jpd());
                c
            }
            None => Command::new(jp_testkit::jpd()),
        };
        c.arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c.spawn().expect("start jpd");
        let mut d = Jpd {
            child,
            socket,
            config,
            http,
            dir,
            log,
        };
        let t0 = Instant::now();
        loop {
            if let Some(status) = d.child.try_wait().expect("wait jpd") {
                panic!("jpd exited during start-up: {status}\n{}", d.log_text());
            }
            if d.socket.exists() && d.get("/metrics").0 == 200 {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "jpd was not ready within 60 s\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        d
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill on our own child's pid, not yet reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0, "kill jpd");
    }

    /// GET `path` on the exporter: (status, body). 0 when it cannot connect.
    pub fn get(&self, path: &str) -> (u16, Vec<u8>) {
        http_get(self.http, path)
    }

    pub fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "GET /metrics");
        String::from_utf8(body).expect("metrics are UTF-8")
    }

    /// Waits (30 s at most) until `series` (name and labels, as /metrics writes them) is
    /// `value`.
    pub fn wait_metric(&self, series: &str, value: u64) {
        let t0 = Instant::now();
        while metric(&self.metrics(), series) != Some(value) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{series} never reached {value}:\n{}",
                self.metrics()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn jpctl(&self) -> Command {
        let mut c = Command::new(jp_testkit::jpctl());
        c.arg("--socket").arg(&self.socket);
        c
    }

    /// SIGTERM; jpd must exit 0 and remove its socket.
    pub fn stop(mut self) {
        self.signal(libc::SIGTERM);
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait jpd") {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "jpd did not exit within 15 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(
            status.success(),
            "jpd exited with {status}\n{}",
            self.log_text()
        );
        assert!(!self.socket.exists(), "jpd left its socket behind");
    }
}

impl Drop for Jpd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The integer value of `series` (name and labels) in a /metrics text.
pub fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A minimal HTTP/1.1 GET (Connection: close, no chunked bodies: jpd and Prometheus
/// send lengths for what the tests read).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return (0, Vec::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, Vec::new());
    }
    let mut raw = Vec::new();
    if s.read_to_end(&mut raw).is_err() {
        return (0, Vec::new());
    }
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (0, Vec::new());
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

impl Jpd {
    /// `jpctl ARGS` against this jpd: whether it succeeded.
    pub fn jpctl_ok(&self, args: &[&str]) -> bool {
        self.jpctl()
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// `jpctl ARGS`, which must succeed: its stdout.
    pub fn jpctl_output(&self, args: &[&str]) -> String {
        let out = self.jpctl().args(args).output().expect("run jpctl");
        assert!(
            out.status.success(),
            "jpctl {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("jpctl prints UTF-8")
    }

    /// `jpctl ARGS` printing JSON, parsed.
    pub fn jpctl_json(&self, args: &[&str]) -> Value {
        let text = self.jpctl_output(args);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("jpctl {args:?} printed no JSON ({e}):\n{text}"))
    }

    /// `jpctl jvm export PID --format FORMAT -o FILE` (an old FILE removed first).
    pub fn export_to(&self, pid: u32, format: &str, file: &Path) {
        let _ = std::fs::remove_file(file);
        self.jpctl_output(&[
            "jvm",
            "export",
            &pid.to_string(),
            "--format",
            format,
            "-o",
            file.to_str().expect("UTF-8 path"),
        ]);
    }

    /// SIGKILL: no clean-up by jpd; the kernel closes its descriptors.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if n == 0 {
            return out;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + n).min(b.len())]);
        b = &b[(start + n + 2).min(b.len())..];
    }
}
