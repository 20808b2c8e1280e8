//! jpd and jpctl as `cargo xtask build` delivers them, driven from end-to-end tests.
//! `cargo xtask test` passes their paths in `JPD` and `JPCTL`; without them, or without
//! root, the tests fail and say why.
#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../test_support/mod.rs"]
mod test_support;
#[allow(unused_imports)] // each test binary uses a different part
pub use test_support::{binary, read_dev_zero, require_root};

pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
}

/// One jpd at a time: two daemons sampling at once would each count the other.
pub static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Daemon {
    /// Starts jpd with a 100 ms read interval, so that a short quiet moment is enough
    /// to compare its counts with the kernel's own.
    pub fn start(tag: &str) -> Daemon {
        Daemon::start_with(tag, "")
    }

    /// Starts jpd with `extra` appended to its configuration (whole TOML sections).
    pub fn start_with(tag: &str, extra: &str) -> Daemon {
        require_root();
        let dir = std::env::temp_dir();
        let socket = dir.join(format!("jp-e2e-{tag}-{}.sock", std::process::id()));
        let config = dir.join(format!("jp-e2e-{tag}-{}.toml", std::process::id()));
        std::fs::write(
            &config,
            format!("[kernel]\nread_interval_ms = 100\n{extra}"),
        )
        .expect("write config");
        let child = Command::new(binary("JPD"))
            .arg("--config")
            .arg(&config)
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null())
            .spawn()
            .expect("start jpd");
        let mut d = Daemon { child, socket };
        let t0 = Instant::now();
        loop {
            if let Some(status) = d.child.try_wait().expect("wait jpd") {
                panic!("jpd exited during start-up: {status}");
            }
            if d.socket.exists() && d.jpctl_ok(&["status"]) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "jpd was not ready within 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = std::fs::remove_file(&config);
        d
    }

    pub fn jpctl_ok(&self, args: &[&str]) -> bool {
        Command::new(binary("JPCTL"))
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    pub fn jpctl(&self, args: &[&str]) -> String {
        let out = Command::new(binary("JPCTL"))
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run jpctl");
        assert!(
            out.status.success(),
            "jpctl {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("jpctl prints UTF-8")
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let text = self.jpctl(args);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("jpctl {args:?} printed no JSON ({e}):\n{text}"))
    }

    /// SIGTERM, then the daemon must exit cleanly and remove its socket.
    pub fn stop(mut self) {
        // SAFETY: kill on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
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
        assert!(status.success(), "jpd exited with {status} after SIGTERM");
        assert!(
            !self.socket.exists(),
            "jpd left its socket {} behind",
            self.socket.display()
        );
    }
}

impl Daemon {
    /// SIGKILL: no clean-up by jpd; the kernel closes its descriptors.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}
