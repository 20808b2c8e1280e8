//! Shared test support: the two JDKs, the C oracle and the Java test programs
//! (both built here, at test time), the agent artifacts (built by
//! `cargo xtask build`, never here), and JVM runs with a time limit.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod mct;
pub mod tap;
pub mod tree;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use mct::{compare, Counts, Mct, Rule};

pub use jp_testkit::jdk::Jdk;

/// The jp-agent crate directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh scratch directory for one test, kept after the run for inspection
/// (until a later test process finds its owner gone and removes it).
pub fn scratch(name: &str) -> PathBuf {
    static CLEAN: OnceLock<()> = OnceLock::new();
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    CLEAN.get_or_init(|| remove_stale_scratch(&base));
    let d = base
        .join(format!("jp-agent-tests-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// Removes the scratch directories of test processes that no longer exist.
fn remove_stale_scratch(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("jp-agent-tests-"))
        else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {:?}: {e}", cmd.get_program()));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{:?}\n{}{}",
        out.status,
        cmd,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `tests/fixtures/programs/*.java` compiled once per test process by javac 17 with
/// `--release 17`, so that both JDKs run the same class files.
pub fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = scratch("programs-classes");
        let src = crate_dir().join("tests/fixtures/programs");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&src)
            .expect("read tests/fixtures/programs")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "java"))
            .collect();
        files.sort();
        let javac = Jdk::J17.home().join("bin/javac");
        run_checked(
            Command::new(javac)
                .args(["--release", "17", "-encoding", "UTF-8", "-d"])
                .arg(&out)
                .args(&files),
            "javac of tests/fixtures/programs",
        );
        out
    })
}

/// The C oracle (`oracle/jporacle.c`) compiled for `jdk` once per test process.
pub fn oracle_lib(jdk: Jdk) -> PathBuf {
    static LIBS: OnceLock<std::sync::Mutex<Vec<(Jdk, PathBuf)>>> = OnceLock::new();
    let libs = LIBS.get_or_init(Default::default);
    let mut libs = libs.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = libs.iter().find(|(j, _)| *j == jdk) {
        return p.clone();
    }
    let home = jdk.home();
    let dir = scratch(&format!("oracle-{}", jdk.name()));
    let lib = dir.join("libjporacle.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-O2", "-Wall", "-Werror", "-shared", "-fPIC"])
        .arg(format!("-I{}", home.join("include").display()))
        .arg(format!("-I{}", home.join("include/linux").display()))
        .arg("-o")
        .arg(&lib)
        .arg(crate_dir().join("oracle/jporacle.c"));
    if Command::new(&cc)
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        panic!("\n\n*** no C compiler `{cc}`: install gcc (Debian package `gcc`) to build the oracle ***\n");
    }
    run_checked(&mut cmd, "compiling the C oracle");
    libs.push((jdk, lib.clone()));
    lib
}

/// The agent library, built by `cargo xtask build` (this test never builds it): found by
/// `jp_testkit`'s rule (`$JP_AGENT_LIB`, else `target/jp/libjpagent.so`).
pub fn agent_lib() -> PathBuf {
    jp_testkit::agent_lib()
}

/// `jp-agent.jar` (for `-javaagent:`), found like [`agent_lib`] with `$JP_AGENT_JAR`.
pub fn agent_jar() -> PathBuf {
    jp_testkit::agent_jar()
}

/// The result of one JVM run.
pub struct Run {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub cmdline: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "JVM failed ({}):\n  {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status,
            self.cmdline,
            tail(&self.stdout),
            tail(&self.stderr)
        );
        self
    }
}

fn tail(s: &str) -> &str {
    let n = s.len();
    if n > 6000 {
        let mut i = n - 6000;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        &s[i..]
    } else {
        s
    }
}

/// Runs `java ARGS` in `dir` with a time limit; stdout/stderr go to files there.
pub fn java(jdk: Jdk, args: &[String], dir: &Path, limit: Duration) -> Run {
    run_program(&jdk.java(), args, dir, limit)
}

pub fn run_program(prog: &Path, args: &[String], dir: &Path, limit: Duration) -> Run {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out_p = dir.join(format!("run{n}.stdout"));
    let err_p = dir.join(format!("run{n}.stderr"));
    let cmdline = format!("{} {}", prog.display(), args.join(" "));
    let start = Instant::now();
    let mut child = Command::new(prog)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_p).expect("stdout file"))
        .stderr(std::fs::File::create(&err_p).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmdline}: {e}"));
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "timed out after {:?}: {cmdline}\n--- stderr ---\n{}",
                limit,
                std::fs::read_to_string(&err_p).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        stdout: std::fs::read_to_string(&out_p).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_p).unwrap_or_default(),
        cmdline,
        elapsed: start.elapsed(),
    }
}

pub const LIMIT: Duration = Duration::from_secs(180);

/// Runs test program `main` under the oracle (interpreted); returns its MCT and stdout.
pub fn run_oracle(jdk: Jdk, main: &str, dir: &Path) -> (Mct, String) {
    let (out, stdout) = run_oracle_file(jdk, main, dir);
    let text = std::fs::read_to_string(&out).expect("oracle JSON");
    let m = Mct::parse(&text).unwrap_or_else(|e| panic!("oracle JSON {}: {e}", out.display()));
    assert!(!m.nodes.is_empty(), "oracle recorded nothing for {main}");
    (m, stdout)
}

/// Runs test program `main` under the oracle; returns the path of its JSON and stdout.
pub fn run_oracle_file(jdk: Jdk, main: &str, dir: &Path) -> (PathBuf, String) {
    let out = dir.join(format!("{main}.{}.oracle.json", jdk.name()));
    let args = vec![
        "-Xint".to_string(),
        "-Xverify:all".to_string(),
        format!(
            "-agentpath:{}=out={}",
            oracle_lib(jdk).display(),
            out.display()
        ),
        "-cp".to_string(),
        programs().display().to_string(),
        main.to_string(),
    ];
    let run = java(jdk, &args, dir, LIMIT);
    run.assert_ok();
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("oracle wrote no {}: {e}\n{}", out.display(), run.stderr));
    // The oracle writes this field before the tree.
    assert!(
        text.starts_with("{\"format\":\"jp-mct/1\",\"bba\":\"oracle\",\"oracle_errors\":0,"),
        "the oracle saw events that do not match its shadow stack ({main}, {}):\n{}\n{}",
        jdk.name(),
        &text[..text.len().min(200)],
        run.stderr
    );
    (out, run.stdout)
}

/// The agent's option string for a profile written to `out`.
pub fn agent_opts(bba: &str, granularity: Option<u64>, out: &Path, extra: &str) -> String {
    let mut o = format!("bba={bba},format=json,out={}", out.display());
    if let Some(g) = granularity {
        o.push_str(&format!(",granularity={g}"));
    }
    if !extra.is_empty() {
        o.push(',');
        o.push_str(extra);
    }
    o
}

/// Runs test program `main` with `-agentpath:libjpagent.so=OPTS`; returns the JSON text and stdout.
pub fn run_agent(jdk: Jdk, main: &str, opts: &str, out: &Path, dir: &Path) -> (String, String) {
    let args = vec![
        "-Xverify:all".to_string(),
        format!("-agentpath:{}={opts}", agent_lib().display()),
        "-cp".to_string(),
        programs().display().to_string(),
        main.to_string(),
    ];
    let run = java(jdk, &args, dir, LIMIT);
    run.assert_ok();
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| {
        panic!(
            "the agent wrote no profile {}: {e}\n{}\n{}",
            out.display(),
            run.cmdline,
            run.stderr
        )
    });
    (text, run.stdout)
}

/// Parses agent JSON and checks its "bba" field.
pub fn parse_agent(text: &str, bba: &str, what: &str) -> Mct {
    let m =
        Mct::parse(text).unwrap_or_else(|e| panic!("{what}: invalid agent profile: {e}\n{text}"));
    assert_eq!(m.bba, bba, "{what}: profile says bba={}", m.bba);
    m
}

/// Panics with every differing path, both trees in full, when `diffs` is not empty.
pub fn assert_same(what: &str, oracle: &Mct, agent: &Mct, diffs: &[String]) {
    if diffs.is_empty() {
        return;
    }
    panic!(
        "\n{what}: {} difference(s) between oracle and agent:\n  {}\n\n--- oracle tree ---\n{}\n--- agent tree ---\n{}",
        diffs.len(),
        diffs.join("\n  "),
        oracle.render(),
        agent.render()
    );
}
