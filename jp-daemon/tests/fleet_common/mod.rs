//! Shared by the fleet tests: jpd as `cargo xtask build` delivers it, started as a
//! service would be (exporters on), and the real peers that talk to it. Every missing
//! tool or privilege FAILS the test with what to install.
#![allow(dead_code)] // each test binary uses a different part

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Tests that attach kernel probes run one at a time (two jpds would count each other).
pub static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[path = "../test_support/mod.rs"]
mod test_support;
#[allow(unused_imports)] // each test binary uses a different part
pub use test_support::{binary, read_dev_zero, require_root};

/// `go tool pprof -top` of `file` by `sample_index`, every node: the table's rows as
/// (flat column, function name) and the whole output (for messages).
pub fn go_pprof_top(file: &Path, sample_index: &str) -> (Vec<(String, String)>, String) {
    let out = Command::new(tool("go", "golang-go"))
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodecount=100000",
            "-nodefraction=0",
            &format!("-sample_index={sample_index}"),
        ])
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "go tool pprof failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.trim_start().starts_with("flat ") {
            in_table = true;
        } else if in_table {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() >= 6 {
                rows.push((cols[0].to_string(), cols[5..].join(" ")));
            }
        }
    }
    (rows, text)
}

/// `name` on PATH, else a failure naming the Debian package.
pub fn tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("`{name}` is not installed: apt-get install {package} (or run `cargo xtask setup`)");
}

/// The workspace's target directory (where the tests keep generated files).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

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
        require_root();
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("jpd.sock");
        let config = dir.path().join("jpd.toml");
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        std::fs::write(
            &config,
            format!(
                "[server]\nsocket = {:?}\n{server_extra}\n[export]\nenabled = true\nlisten = \"{http}\"\nmax_profile_seconds = 60\n\n[kernel]\nread_interval_ms = 100\n{extra}",
                socket.display().to_string()
            ),
        )
        .expect("write config");
        let log = dir.path().join("jpd.log");
        let mut c = match wrapper.split_first() {
            Some((w, args)) => {
                let mut c = Command::new(w);
                c.args(args).arg(binary("JPD"));
                c
            }
            None => Command::new(binary("JPD")),
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
        let mut c = Command::new(binary("JPCTL"));
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

/// Percent-encoding for a query parameter value.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn jdk17() -> PathBuf {
    let home = std::env::var_os("JP_JDK17").map_or_else(
        || PathBuf::from("/usr/lib/jvm/java-17-openjdk-amd64"),
        PathBuf::from,
    );
    assert!(
        home.join("bin/javac").exists(),
        "no JDK 17 at {}: cargo xtask setup installs it",
        home.display()
    );
    home
}

/// FleetPaper.class (tests/fleet_jvm/FleetPaper.java) into `dir`.
pub fn compile_fleet_paper(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fleet_jvm/FleetPaper.java");
    let st = Command::new(jdk17().join("bin/javac"))
        .arg("-d")
        .arg(dir)
        .arg(&src)
        .status()
        .expect("run javac");
    assert!(st.success(), "javac {}", src.display());
}

/// FleetPaper under jp's agent, driven through stdin.
pub struct Java {
    pub child: Child,
    pub stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}
impl Java {
    /// Starts FleetPaper from `classes` with the agent `lib` and its `options`, and
    /// waits until jpd has attached to it.
    pub fn start(jpd: &Jpd, lib: &Path, classes: &Path, options: &str) -> Java {
        let mut child = Command::new(jdk17().join("bin/java"))
            .arg(format!("-agentpath:{}={options}", lib.display()))
            .arg("-cp")
            .arg(classes)
            .arg("FleetPaper")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start java");
        let pid = child.id();
        let mut java = Java {
            stdin: child.stdin.take().expect("stdin"),
            stdout: BufReader::new(child.stdout.take().expect("stdout")),
            child,
        };
        assert_eq!(java.line(), "ready");
        // jpd holds the JVM once it found the process (and attached to its library);
        // it writes the generation in the same scan.
        let t0 = Instant::now();
        while jpd.get(&format!("/debug/pprof/jvm?pid={pid}&seconds=0")).0 != 200 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "jpd did not find JVM {pid}:\n{}",
                jpd.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(500));
        java
    }

    pub fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout
            .read_line(&mut l)
            .expect("read the JVM's stdout");
        l.trim_end().to_string()
    }

    pub fn run_once(&mut self) {
        writeln!(self.stdin, "run").expect("write to the JVM");
        self.stdin.flush().expect("flush");
        assert_eq!(self.line(), "done");
    }
}

impl Drop for Java {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
