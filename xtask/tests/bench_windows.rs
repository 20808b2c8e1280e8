//! `cargo xtask bench windows --quick` runs to its end on both JDKs with the built agent:
//! every part writes its tables, and the repeated windows all closed without a crash. It
//! judges no timing (benchmarks do, tests don't).
use std::process::Command;

#[test]
fn the_quick_windows_bench_runs_every_part_on_both_jdks() {
    let lib = std::env::var("JP_AGENT_LIB").expect(
        "JP_AGENT_LIB must name the built libjpagent.so (cargo xtask test --suite bench sets it)",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "windows", "--quick", "--agent", &lib])
        .env("JP_WIN_CYCLES", "3")
        .output()
        .expect("cannot run xtask");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench windows --quick failed:\n{stdout}\n{stderr}"
    );
    for part in ["dormant", "switching", "repeats", "attach"] {
        let marker = format!("<!-- bench:windows-{part} (quick run, not written) -->");
        assert_eq!(stdout.matches(&marker).count(), 1, "{marker} in:\n{stdout}");
    }
    for jdk in ["JDK 17", "JDK 25"] {
        let line = format!("- {jdk}, rhino (JavaScript): 3 cycles without a crash;");
        assert_eq!(stdout.matches(&line).count(), 1, "{line} in:\n{stdout}");
    }
    assert!(!stdout.contains("NaN"), "a figure is missing:\n{stdout}");
}
