//! tmux for tests of `jpctl top` in a real terminal: a server of the test's own (`-L`),
//! screens read with capture-pane, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Tmux {
    pub bin: PathBuf,
    /// The `-L` socket name: a server of the test's own.
    pub server: String,
}

impl Tmux {
    /// A detached 120x40 session `top` running `sh`, kept on screen when its command
    /// exits (so that a test can read what was left).
    pub fn session(bin: PathBuf, server: &str) -> Tmux {
        let tmux = Tmux {
            bin,
            server: server.to_string(),
        };
        tmux.cmd(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "120",
            "-y",
            "40",
            "sh",
        ]);
        tmux.cmd(&["set-option", "-t", "top", "remain-on-exit", "on"]);
        tmux
    }

    /// Types `jpctl top` against the jpd on `socket` into the session's shell.
    pub fn jpctl_top(&self, socket: &Path) {
        let line = format!(
            "TERM=xterm-256color {} --socket {} top",
            jp_testkit::jpctl().display(),
            socket.display()
        );
        self.cmd(&["send-keys", "-t", "top", &line, "Enter"]);
    }

    pub fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .args(["-L", &self.server])
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "top"])
    }

    pub fn format(&self, f: &str) -> String {
        self.cmd(&["display-message", "-p", "-t", "top", f])
            .trim()
            .to_string()
    }

    /// Other JVMs with the agent may run on this host: `]` steps the JVM pane to `pid`.
    pub fn show_jvm(&self, pid: u32) {
        let title = format!(" JVM {pid} ");
        let t0 = Instant::now();
        while !self.screen().contains(&title) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "`]` never showed {title:?}:\n{}",
                self.screen()
            );
            self.cmd(&["send-keys", "-t", "top", "]"]);
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// `q` to `jpctl top`, then waits until the session's shell has the terminal again.
    pub fn quit_top(&self) {
        self.cmd(&["send-keys", "-t", "top", "q"]);
        self.wait_for("jpctl to quit", |t| {
            t.format("#{pane_current_command}") == "sh"
        });
    }

    pub fn wait_for(&self, what: &str, ok: impl Fn(&Tmux) -> bool) {
        let t0 = Instant::now();
        while !ok(self) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{what} did not happen within 20 s; screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new(&self.bin)
            .args(["-L", &self.server, "kill-server"])
            .output();
    }
}
