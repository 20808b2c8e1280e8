//! `jpctl top` in a real terminal: tmux runs it in a 120x40 pane while a JVM with jp's
//! agent runs, the test reads the screen with capture-pane (kernel, IRQ, softirq and
//! JVM panes), presses q, and checks that the terminal is given back
//! (alternate screen off, the shell in the foreground again, the view gone).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::binary;
use crate::support::fleet::{compile_fleet_paper, tool, Java};
use crate::support::jpd::Jpd;

struct Tmux {
    bin: PathBuf,
    server: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
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

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "top"])
    }

    fn format(&self, f: &str) -> String {
        self.cmd(&["display-message", "-p", "-t", "top", f])
            .trim()
            .to_string()
    }

    fn wait_for(&self, what: &str, ok: impl Fn(&Tmux) -> bool) {
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

#[test]
fn jpctl_top_shows_its_panes_in_tmux_and_q_gives_the_terminal_back() {
    let bin = tool("tmux", "tmux");
    let lib = binary("JP_AGENT_LIB");
    let classes = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(classes.path());
    let _one = crate::support::exclusive();
    let jpd = Jpd::start("[usdt]\nscan_interval_ms = 100\n");
    // The JVM pane shows when jpd holds a JVM.
    let mut java = Java::start(&jpd, &lib, classes.path(), "bba=precise");
    java.run_once();
    let jvm_title = format!(" JVM {} ", java.child.id());
    let tmux = Tmux {
        bin,
        server: format!("jp-fleet-{}", std::process::id()),
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
    let line = format!(
        "TERM=xterm-256color {} --socket {} top",
        binary("JPCTL").display(),
        jpd.socket.display()
    );
    tmux.cmd(&["send-keys", "-t", "top", &line, "Enter"]);

    let panes = ["Kernel functions", "IRQ handlers", "Softirqs", "┌ JVM "];
    tmux.wait_for(&format!("the panes {panes:?}"), |t| {
        let s = t.screen();
        panes.iter().all(|p| s.contains(p))
    });
    assert_eq!(
        tmux.format("#{alternate_on}"),
        "1",
        "top draws on the alternate screen"
    );
    // Other JVMs with the agent may run on this host: `]` steps to ours.
    let t0 = Instant::now();
    while !tmux.screen().contains(&jvm_title) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "`]` never showed {jvm_title:?}:\n{}",
            tmux.screen()
        );
        tmux.cmd(&["send-keys", "-t", "top", "]"]);
        std::thread::sleep(Duration::from_millis(300));
    }
    let screen = tmux.screen();
    assert!(
        screen
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("jp top")),
        "{screen}"
    );
    assert!(screen.contains("samples"), "{screen}");

    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    tmux.wait_for("jpctl to quit", |t| {
        t.format("#{pane_current_command}") == "sh"
    });
    assert_eq!(
        tmux.format("#{alternate_on}"),
        "0",
        "the alternate screen is left"
    );
    let after = tmux.screen();
    assert!(
        !after.contains("Kernel functions"),
        "the view is gone:\n{after}"
    );
    assert!(
        after.contains(" top"),
        "the shell's own screen is back:\n{after}"
    );
    // The terminal is usable: the shell echoes what it is sent.
    tmux.cmd(&["send-keys", "-t", "top", "echo jp-fleet-$((40+2))", "Enter"]);
    tmux.wait_for("the shell to answer", |t| {
        t.screen().contains("jp-fleet-42")
    });
    drop(java);
    jpd.stop();
}
