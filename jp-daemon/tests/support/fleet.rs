//! Shared by the fleet tests: jpd as `cargo xtask build` delivers it, started as a
//! service would be (exporters on), and the real peers that talk to it. Every missing
//! tool or privilege FAILS the test with what to install.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::jpd::Jpd;

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

/// This machine's host name, as jpd reads it for `host.name` and its labels.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("read the host name")
        .trim()
        .to_string()
}

/// Polls `done` every 100 ms until it holds; fails naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn jdk17() -> PathBuf {
    jp_testkit::jdk::Jdk::J17.home()
}

/// FleetPaper.class (tests/fixtures/fleet_jvm/FleetPaper.java) into `dir`.
pub fn compile_fleet_paper(dir: &Path) {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fleet_jvm/FleetPaper.java");
    let st = Command::new(jdk17().join("bin/javac"))
        .arg("-d")
        .arg(dir)
        .arg(&src)
        .status()
        .expect("run javac");
    assert!(st.success(), "javac {}", src.display());
}

/// FleetPaper under the agent (its tree also to `out=`, JSON), four runs over about five
/// seconds — so that the tree reaches jpd in several intervals; two of them spin, so
/// that jpd's sampler has CPU to join to their contexts — then quit: its pid and the
/// agent's `out=` file.
pub fn paper_over_intervals(jpd: &Jpd, lib: &Path, classes: &Path) -> (u32, PathBuf) {
    paper_over_intervals_on(jp_testkit::jdk::Jdk::J17, jpd, lib, classes)
}

/// [`paper_over_intervals`] on `jdk` (the classes are JDK 17's, which every later JDK
/// runs).
pub fn paper_over_intervals_on(
    jdk: jp_testkit::jdk::Jdk,
    jpd: &Jpd,
    lib: &Path,
    classes: &Path,
) -> (u32, PathBuf) {
    let out_file = classes.join("agent.json");
    let mut java = Java::start_on(
        jdk,
        jpd,
        lib,
        classes,
        &format!(
            "bba=precise,profiler=usdt,out={},format=json",
            out_file.display()
        ),
    );
    for i in 0..4 {
        if i % 2 == 1 {
            java.spin(400);
        } else {
            java.run_once();
        }
        std::thread::sleep(Duration::from_millis(1300));
    }
    let pid = java.child.id();
    writeln!(java.stdin, "quit").expect("quit");
    assert!(java.child.wait().expect("wait java").success());
    (pid, out_file)
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
        Java::start_on(jp_testkit::jdk::Jdk::J17, jpd, lib, classes, options)
    }

    /// [`Java::start`] on `jdk`.
    pub fn start_on(
        jdk: jp_testkit::jdk::Jdk,
        jpd: &Jpd,
        lib: &Path,
        classes: &Path,
        options: &str,
    ) -> Java {
        // Reports paced by bytecodes (JP's way), not by time: the tests count each run's
        // calls exactly (68, from the worker thread, whose tree reaches jpd when it ends),
        // so the main thread, which waits on stdin between runs, must not report its own
        // calls at a moment of its own; a spinning worker still reports (and publishes its
        // context) every 10 M bytecodes.
        let mut child = Command::new(jdk.java())
            .arg(format!(
                "-agentpath:{}={options},granularity=10000000",
                lib.display()
            ))
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
        self.command("run");
    }

    /// f() over and over for `ms` milliseconds, on one new thread.
    pub fn spin(&mut self, ms: u32) {
        self.command(&format!("spin {ms}"));
    }

    fn command(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to the JVM");
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
