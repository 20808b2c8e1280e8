//! `jpctl top` in a real terminal: tmux runs it in a 120x40 pane while a JVM with jp's
//! agent runs, the test reads the screen with capture-pane (kernel, IRQ, softirq and
//! JVM panes), presses q, and checks that the terminal is given back
//! (alternate screen off, the shell in the foreground again, the view gone).

use crate::support::fleet::{compile_fleet_paper, tool, Java};
use crate::support::jpd::Jpd;
use crate::support::tmux::Tmux;

#[test]
fn jpctl_top_shows_its_panes_in_tmux_and_q_gives_the_terminal_back() {
    let bin = tool("tmux", "tmux");
    let lib = jp_testkit::agent_lib();
    let classes = tempfile::tempdir().expect("temp dir");
    compile_fleet_paper(classes.path());
    let _one = crate::support::exclusive();
    let jpd = Jpd::start("[usdt]\nscan_interval_ms = 100\n");
    // The JVM pane shows when jpd holds a JVM.
    let mut java = Java::start(&jpd, &lib, classes.path(), "bba=precise");
    java.run_once();
    let tmux = Tmux::session(bin, &format!("jp-fleet-{}", std::process::id()));
    tmux.jpctl_top(&jpd.socket);

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
    tmux.show_jvm(java.child.id());
    let screen = tmux.screen();
    assert!(
        screen
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("jp top")),
        "{screen}"
    );
    assert!(screen.contains("samples"), "{screen}");

    tmux.quit_top();
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
