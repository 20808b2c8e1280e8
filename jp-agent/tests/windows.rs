//! Exact windows (`mode=dormant`, `Agent_OnAttach`): a window's tree equals, node by node,
//! the oracle's tree of the invocations that began inside it, with the calls of frames
//! running at the opening under their seeded context, on JDK 17 and 25, both BBAs; for a
//! JVM started dormant and for one started without the agent (loaded by `jcmd
//! JVMTI.agent_load`); two windows back to back, one closed on request and one by its
//! deadline with nobody asking, one still open at VM death; a second open refused while one
//! is open; `mode=live` refusing windows; the classes the agent transformed (and only those)
//! given back; a window with the JDK's classes in scope (`jdk=true`) counting a JDK method's
//! calls exactly.
//!
//! The program (`fixtures/windows/WinExact.java`) stops at marker calls (`Mark.opened`,
//! `Mark.closing`) until the test has opened or closed the window with `jcmd`; the oracle
//! (`window=Mark`) opens and closes its windows at the same calls.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `fixtures/windows/*.java`, compiled once per test process by javac 17 (`--release 17`).
fn classes() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = scratch("windows-classes");
        let src = crate_dir().join("tests/fixtures/windows");
        let files: Vec<PathBuf> = std::fs::read_dir(&src)
            .expect("read tests/fixtures/windows")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "java"))
            .collect();
        let st = Command::new(Jdk::J17.home().join("bin/javac"))
            .args(["--release", "17", "-d"])
            .arg(&out)
            .args(&files)
            .status()
            .expect("javac");
        assert!(st.success(), "javac of tests/fixtures/windows failed");
        out
    })
}

/// The oracle's trees of the program's windows (`OUT.window-N.json`), and its stdout.
fn oracle_windows(jdk: Jdk, dir: &Path) -> (Vec<Mct>, String) {
    let out = dir.join("oracle.json");
    let args = vec![
        "-Xint".to_string(),
        format!(
            "-agentpath:{}=out={},window=Mark",
            oracle_lib(jdk).display(),
            out.display()
        ),
        "-Dwin.free=true".to_string(),
        "-cp".to_string(),
        classes().display().to_string(),
        "WinExact".to_string(),
        dir.display().to_string(),
    ];
    let run = java(jdk, &args, dir, LIMIT);
    run.assert_ok();
    let trees = (1..=2)
        .map(|n| {
            let p = dir.join(format!("oracle.json.window-{n}.json"));
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
                panic!("the oracle wrote no {}: {e}\n{}", p.display(), run.stderr)
            });
            assert!(
                text.contains("\"oracle_errors\":0,"),
                "the oracle saw inconsistent events: {}",
                &text[..text.len().min(200)]
            );
            Mct::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect();
    (trees, run.stdout)
}

/// `jcmd PID JVMTI.agent_load LIB [COMMAND]`: `Agent_OnAttach`'s return code.
fn agent_load(jdk: Jdk, pid: u32, command: Option<&str>) -> i32 {
    let mut cmd = Command::new(jdk.home().join("bin/jcmd"));
    cmd.arg(pid.to_string())
        .arg("JVMTI.agent_load")
        .arg(agent_lib());
    if let Some(c) = command {
        // jcmd would take `key=value` for an argument of its own: quoted, it is one string.
        cmd.arg(format!("\"{c}\""));
    }
    let out = cmd.output().expect("jcmd");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("return code: "))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "jcmd {pid} JVMTI.agent_load {command:?}: no return code\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn wait_for(path: &Path, what: &str, child: &mut Child) {
    let t0 = Instant::now();
    while !path.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the JVM ended ({st}) before {what} ({})", path.display());
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no {} after 120 s ({what})",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(t0.elapsed() < LIMIT, "the JVM did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `DIR/window-ID.done` as a map.
fn done(dir: &Path, id: u64) -> BTreeMap<String, String> {
    let p = dir.join(format!("window-{id}.done"));
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(d: &BTreeMap<String, String>, key: &str) -> u64 {
    d.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in {d:?}"))
}

/// What the `.done` file of a window must say, besides the tree.
fn check_done(d: &BTreeMap<String, String>, id: u64, closed_by: &str, bba: &str, pid: u32) {
    assert_eq!(num(d, "id"), id, "{d:?}");
    assert_eq!(num(d, "pid"), u64::from(pid), "{d:?}");
    assert_eq!(d["closed_by"], closed_by, "{d:?}");
    assert_eq!(d["bba"], bba, "{d:?}");
    assert_eq!(d["scope"], "exclude=Mark", "{d:?}");
    // Only what this agent transformed goes back, and all of it.
    assert_eq!(num(d, "retransformed_untransformed"), 0, "{d:?}");
    assert_eq!(
        num(d, "classes_restored"),
        num(d, "classes_transformed") + num(d, "classes_loaded_in_window"),
        "{d:?}"
    );
    assert!(
        num(d, "closed_unix_ms") >= num(d, "opened_unix_ms"),
        "{d:?}"
    );
}

/// How the agent gets into the JVM.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// `-agentpath:LIB=mode=dormant`.
    Dormant,
    /// No agent at start: the first `jcmd JVMTI.agent_load LIB` loads it.
    Late,
}

fn exact_windows(jdk: Jdk, bba: &str, start: Start) {
    let dir = scratch(&format!("windows-{}-{bba}-{start:?}", jdk.name()));
    let (oracle, oracle_stdout) = oracle_windows(jdk, &dir);
    let wdir = dir.join("w");
    std::fs::create_dir_all(&wdir).unwrap();
    let mut args = vec!["-Xverify:all".to_string()];
    if let Start::Dormant = start {
        args.push(format!("-agentpath:{}=mode=dormant", agent_lib().display()));
    }
    args.extend([
        "-cp".to_string(),
        classes().display().to_string(),
        "WinExact".to_string(),
        wdir.display().to_string(),
    ]);
    let stdout_p = dir.join("agent.stdout");
    let stderr_p = dir.join("agent.stderr");
    let mut child = Command::new(jdk.java())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_p).unwrap())
        .stderr(std::fs::File::create(&stderr_p).unwrap())
        .spawn()
        .expect("java");
    let pid = child.id();
    let w = |n: &str| wdir.join(n);
    let go = |n: u32| std::fs::write(wdir.join(format!("go-{n}")), "").unwrap();
    let open = |id: u64, seconds: u32| {
        format!(
            "window=open,id={id},seconds={seconds},dir={},exclude=Mark,bba={bba}",
            wdir.display()
        )
    };

    wait_for(&w("at-1"), "the first opening point", &mut child);
    if let Start::Late = start {
        assert_eq!(
            agent_load(jdk, pid, None),
            0,
            "loading the agent late, no command"
        );
    }
    assert_eq!(
        agent_load(jdk, pid, Some(&open(11, 600))),
        0,
        "open window 11"
    );
    // One window at a time.
    assert_eq!(agent_load(jdk, pid, Some(&open(99, 5))), 2, "second open");
    let why = std::fs::read_to_string(w("window-99.error")).expect("window-99.error");
    assert_eq!(why, "window 11 is open\n");
    go(1);

    wait_for(&w("at-2"), "the first closing point", &mut child);
    assert_eq!(
        agent_load(
            jdk,
            pid,
            Some(&format!("window=close,id=12,dir={}", wdir.display()))
        ),
        5,
        "closing a window that is not open"
    );
    assert_eq!(
        agent_load(jdk, pid, Some("window=close,id=11")),
        0,
        "close 11"
    );
    assert!(w("window-11.json").exists() && w("window-11.done").exists());
    go(2);

    wait_for(&w("at-3"), "the second opening point", &mut child);
    assert_eq!(
        agent_load(jdk, pid, Some(&open(12, 3))),
        0,
        "open window 12"
    );
    go(3);
    wait_for(&w("at-4"), "the second closing point", &mut child);
    // Nobody closes window 12: its deadline does.
    wait_for(&w("window-12.done"), "window 12's deadline", &mut child);
    go(4);

    let status = wait_exit(&mut child);
    let stderr = std::fs::read_to_string(&stderr_p).unwrap_or_default();
    assert!(status.success(), "JVM failed ({status}):\n{stderr}");
    let stdout = std::fs::read_to_string(&stdout_p).unwrap_or_default();
    assert_eq!(stdout, oracle_stdout, "the program's output changed");
    assert!(
        !stderr.contains("jp-agent:"),
        "the agent complained:\n{stderr}"
    );
    // JDK 21+ warns about an agent loaded dynamically (JEP 451), not about a library loaded
    // at start-up and loaded again (a dormant agent).
    if jdk == Jdk::J25 {
        let warned = stderr.contains("A JVM TI agent has been loaded dynamically");
        assert_eq!(warned, matches!(start, Start::Late), "{stderr}");
    }

    check_done(&done(&wdir, 11), 11, "request", bba, pid);
    check_done(&done(&wdir, 12), 12, "deadline", bba, pid);
    let d11 = done(&wdir, 11);
    // sub1, phase1 and main were running when window 11 opened; Late loaded inside it.
    assert_eq!(num(&d11, "seeded_contexts"), 3, "{d11:?}");
    assert_eq!(num(&d11, "threads"), 2, "{d11:?}");
    assert_eq!(num(&d11, "classes_loaded_in_window"), 2, "{d11:?}");
    let d12 = done(&wdir, 12);
    assert_eq!(num(&d12, "seeded_contexts"), 1, "{d12:?}");
    // Shape has nothing to rewrite: left alone in window 11 and not retransformed again in 12.
    // Broken's initialization failed: left alone in both, never handed to a retransformation
    // (HotSpot would refuse it, and with it the whole chunk it is in).
    assert_eq!(
        (
            num(&d11, "classes_skipped"),
            num(&d11, "classes_refused_earlier"),
            num(&d11, "classes_unusable")
        ),
        (2, 0, 1),
        "{d11:?}"
    );
    assert_eq!(
        (
            num(&d12, "classes_skipped"),
            num(&d12, "classes_refused_earlier"),
            num(&d12, "classes_unusable")
        ),
        (2, 1, 1),
        "{d12:?}"
    );

    for (n, id) in [(0, 11), (1, 12)] {
        let p = w(&format!("window-{id}.json"));
        let text = std::fs::read_to_string(&p).unwrap();
        let what = format!("window {id} on {} bba={bba} ({start:?})", jdk.name());
        let agent = parse_agent(&text, bba, &what);
        // The program throws nothing: both BBAs are exact.
        let diffs = compare(&oracle[n], &agent, Rule::Exact);
        assert_same(&what, &oracle[n], &agent, &diffs);
        assert_eq!(
            num(&done(&wdir, id), "contexts"),
            agent.nodes.len() as u64,
            "{what}"
        );
    }
}

#[test]
fn dormant_precise_jdk17() {
    exact_windows(Jdk::J17, "precise", Start::Dormant);
}

#[test]
fn dormant_default_jdk25() {
    exact_windows(Jdk::J25, "default", Start::Dormant);
}

#[test]
fn late_default_jdk17() {
    exact_windows(Jdk::J17, "default", Start::Late);
}

#[test]
fn late_precise_jdk25() {
    exact_windows(Jdk::J25, "precise", Start::Late);
}

/// A JVM profiled from start refuses windows (its live tree is already exact): code 3 and
/// one line in `DIR/window-ID.error`; a bad command is code 1.
fn live_refuses(jdk: Jdk) {
    let dir = scratch(&format!("windows-live-{}", jdk.name()));
    let out = dir.join("live.json");
    let mut child = Command::new(jdk.java())
        .arg(format!(
            "-agentpath:{}=profiler=file,out={}",
            agent_lib().display(),
            out.display()
        ))
        .arg("-cp")
        .arg(classes())
        .arg("WinExact")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("live.stderr")).unwrap())
        .spawn()
        .expect("java");
    let pid = child.id();
    wait_for(&dir.join("at-1"), "the first opening point", &mut child);
    let open = format!("window=open,id=7,seconds=5,dir={}", dir.display());
    assert_eq!(agent_load(jdk, pid, Some(&open)), 3);
    let why = std::fs::read_to_string(dir.join("window-7.error")).expect("window-7.error");
    assert!(
        why.starts_with("this JVM is profiled from start (mode=live)") && why.ends_with('\n'),
        "{why:?}"
    );
    assert_eq!(why.lines().count(), 1, "{why:?}");
    let bad = format!("window=open,id=8,seconds=0,dir={}", dir.display());
    assert_eq!(agent_load(jdk, pid, Some(&bad)), 1);
    let why = std::fs::read_to_string(dir.join("window-8.error")).expect("window-8.error");
    assert!(why.starts_with("bad command: seconds"), "{why:?}");
    for n in 1..=4 {
        std::fs::write(dir.join(format!("go-{n}")), "").unwrap();
    }
    let status = wait_exit(&mut child);
    assert!(status.success());
    assert!(out.exists(), "the live profile was still written");
}

#[test]
fn live_refuses_jdk17() {
    live_refuses(Jdk::J17);
}

#[test]
fn live_refuses_jdk25() {
    live_refuses(Jdk::J25);
}

/// A window still open when the VM dies is closed and written (`closed_by=vm_death`); its
/// classes are not restored (nothing runs after VM death).
fn vm_death_closes(jdk: Jdk) {
    let dir = scratch(&format!("windows-vm-death-{}", jdk.name()));
    let mut child = Command::new(jdk.java())
        .arg(format!("-agentpath:{}=mode=dormant", agent_lib().display()))
        .arg("-cp")
        .arg(classes())
        .arg("WinExact")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("jvm.stderr")).unwrap())
        .spawn()
        .expect("java");
    let pid = child.id();
    wait_for(&dir.join("at-1"), "the first opening point", &mut child);
    let open = format!(
        "window=open,id=21,seconds=600,dir={},exclude=Mark,bba=precise",
        dir.display()
    );
    assert_eq!(agent_load(jdk, pid, Some(&open)), 0);
    for n in 1..=4 {
        std::fs::write(dir.join(format!("go-{n}")), "").unwrap();
    }
    assert!(wait_exit(&mut child).success());
    let d = done(&dir, 21);
    assert_eq!(d["closed_by"], "vm_death", "{d:?}");
    assert_eq!(num(&d, "classes_restored"), 0, "{d:?}");
    assert_eq!(num(&d, "retransformed_untransformed"), 0, "{d:?}");
    let text = std::fs::read_to_string(dir.join("window-21.json")).unwrap();
    let tree = parse_agent(&text, "precise", "window 21");
    // main → phase1 → sub1 were running when it opened; after it, main ran to its end
    // (its last call of work(1) is inside the window).
    let seeded = [
        "WinExact.main([Ljava/lang/String;)V",
        "WinExact.phase1(Ljava/lang/String;)I",
        "WinExact.sub1(Ljava/lang/String;)I",
    ];
    for depth in 1..=3 {
        let c = tree.get(&seeded[..depth]).expect("seeded context");
        assert_eq!((c.calls, c.bytecodes), (0, 0), "{}", tree.render());
    }
    let last = tree
        .get(&["WinExact.main([Ljava/lang/String;)V", "WinExact.work(I)I"])
        .expect("main → work");
    // work(8), work(9) and work(1) after the opening: three calls from main.
    assert_eq!(last.calls, 3, "{}", tree.render());
}

#[test]
fn vm_death_closes_jdk17() {
    vm_death_closes(Jdk::J17);
}

#[test]
fn vm_death_closes_jdk25() {
    vm_death_closes(Jdk::J25);
}

/// Calls of `ArrayList.add` that `WinJdk` makes in its window.
const JDK_WINDOW_ADDS: u64 = 5000;

/// A window with the JDK's classes in scope (`jdk=true`): the program's calls of a JDK
/// method and that method's own callee are counted exactly, node by node, against a
/// derivation from the program and the JDK's bytecode (identical on JDK 17 and 25, see
/// `javap -c -p java.util.ArrayList`); the JDK classes it transformed, and only those, go
/// back at the close. The oracle cannot count JDK methods (breakpoints on the JDK's
/// classes), hence the derivation. The rest of the tree (Mark's polling, the JVM's own
/// threads) depends on timing and is not counted here.
fn jdk_window(jdk: Jdk, bba: &str) {
    let dir = scratch(&format!("windows-jdk-{}-{bba}", jdk.name()));
    let stderr_p = dir.join("jvm.stderr");
    let stdout_p = dir.join("jvm.stdout");
    let mut child = Command::new(jdk.java())
        .arg("-Xverify:all")
        .arg(format!("-agentpath:{}=mode=dormant", agent_lib().display()))
        .arg("-cp")
        .arg(classes())
        .arg("WinJdk")
        .arg(&dir)
        .arg(JDK_WINDOW_ADDS.to_string())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_p).unwrap())
        .stderr(std::fs::File::create(&stderr_p).unwrap())
        .spawn()
        .expect("java");
    let pid = child.id();
    wait_for(&dir.join("at-1"), "the opening point", &mut child);
    let open = format!(
        "window=open,id=41,seconds=600,dir={},exclude=Mark,bba={bba},jdk=true",
        dir.display()
    );
    assert_eq!(agent_load(jdk, pid, Some(&open)), 0, "open window 41");
    std::fs::write(dir.join("go-1"), "").unwrap();
    wait_for(&dir.join("at-2"), "the closing point", &mut child);
    assert_eq!(
        agent_load(jdk, pid, Some("window=close,id=41")),
        0,
        "close 41"
    );
    std::fs::write(dir.join("go-2"), "").unwrap();
    let status = wait_exit(&mut child);
    let stderr = std::fs::read_to_string(&stderr_p).unwrap_or_default();
    assert!(status.success(), "JVM failed ({status}):\n{stderr}");
    assert!(
        !stderr.contains("jp-agent:"),
        "the agent complained:\n{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&stdout_p).unwrap(),
        format!("{JDK_WINDOW_ADDS}\n")
    );

    let d = done(&dir, 41);
    assert_eq!(d["closed_by"], "request", "{d:?}");
    assert_eq!(d["scope"], "exclude=Mark jdk=true", "{d:?}");
    // Only what this agent transformed goes back, and all of it (JDK classes included).
    assert_eq!(num(&d, "retransformed_untransformed"), 0, "{d:?}");
    assert_eq!(
        num(&d, "classes_restored"),
        num(&d, "classes_transformed") + num(&d, "classes_loaded_in_window"),
        "{d:?}"
    );

    let what = format!("jdk=true window on {} bba={bba}", jdk.name());
    let text = std::fs::read_to_string(dir.join("window-41.json")).unwrap();
    let tree = parse_agent(&text, bba, &what);
    let main = "WinJdk.main([Ljava/lang/String;)V";
    let fill = "WinJdk.fill(Ljava/util/ArrayList;I)V";
    let add = "java.util.ArrayList.add(Ljava/lang/Object;)Z";
    let add3 = "java.util.ArrayList.add(Ljava/lang/Object;[Ljava/lang/Object;I)V";
    let n = JDK_WINDOW_ADDS;
    // main was waiting in Mark.opened: seeded. fill: 2 bytecodes before its loop, 9 per
    // round (load, load, compare, the call's 3 with its pop, iinc, goto), 4 at its end.
    // add(Object): 15 bytecodes, straight; add(Object, Object[], int): 14 when the array
    // has room (it skips grow()).
    let want: BTreeMap<Vec<String>, (u64, u64)> = [
        (vec![main], (0, 0)),
        (vec![main, fill], (1, 9 * n + 6)),
        (vec![main, fill, add], (n, 15 * n)),
        (vec![main, fill, add, add3], (n, 14 * n)),
    ]
    .into_iter()
    .map(|(p, c)| (p.into_iter().map(String::from).collect(), c))
    .collect();
    let got: BTreeMap<Vec<String>, (u64, u64)> = tree
        .nodes
        .iter()
        .filter(|(p, _)| p.first().map(String::as_str) == Some(main))
        .filter(|(p, _)| p.len() == 1 || p[1] == fill)
        .map(|(p, c)| (p.clone(), (c.calls, c.bytecodes)))
        .collect();
    assert_eq!(got, want, "{what}:\n{}", tree.render());
}

#[test]
fn jdk_window_default_jdk17() {
    jdk_window(Jdk::J17, "default");
}

#[test]
fn jdk_window_precise_jdk25() {
    jdk_window(Jdk::J25, "precise");
}

/// HotSpot's warning when a jar is appended to the boot class path in the live phase: from
/// then on class data sharing serves only the boot loader's classes.
const BOOT_APPEND_WARNING: &str =
    "Sharing is only supported for boot loader classes because bootstrap classpath has been appended";

/// The JEP 451 lines a JDK 21+ JVM prints once when an agent is loaded into it late.
const DYNAMIC_AGENT_WARNINGS: [&str; 3] = [
    "WARNING: A JVM TI agent has been loaded dynamically",
    "WARNING: If a serviceability tool is in use, please run with -XX:+EnableDynamicAgentLoading",
    "WARNING: Dynamic loading of agents will be disallowed by default in a future release",
];

/// A window brings the runtime up without a word on stderr and without touching class data
/// sharing: `-Xshare:on` (the JVM refuses to start without CDS; the other window tests run
/// `-Xverify:all`, which turns CDS off, so they cannot see the warning), and stderr holds
/// nothing but JEP 451's lines for an agent loaded late on JDK 25.
fn first_window_is_quiet(jdk: Jdk, start: Start) {
    let dir = scratch(&format!("windows-quiet-{}-{start:?}", jdk.name()));
    let stderr_p = dir.join("jvm.stderr");
    let mut java = Command::new(jdk.java());
    java.arg("-Xshare:on");
    if let Start::Dormant = start {
        java.arg(format!("-agentpath:{}=mode=dormant", agent_lib().display()));
    }
    let mut child = java
        .arg("-cp")
        .arg(classes())
        .arg("WinExact")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_p).unwrap())
        .spawn()
        .expect("java");
    let pid = child.id();
    wait_for(&dir.join("at-1"), "the first opening point", &mut child);
    if let Start::Late = start {
        assert_eq!(agent_load(jdk, pid, None), 0, "loading the agent late");
    }
    let open = format!(
        "window=open,id=31,seconds=600,dir={},exclude=Mark",
        dir.display()
    );
    assert_eq!(agent_load(jdk, pid, Some(&open)), 0, "open window 31");
    std::fs::write(dir.join("go-1"), "").unwrap();
    wait_for(&dir.join("at-2"), "the first closing point", &mut child);
    assert_eq!(
        agent_load(jdk, pid, Some("window=close,id=31")),
        0,
        "close 31"
    );
    for n in 2..=4 {
        std::fs::write(dir.join(format!("go-{n}")), "").unwrap();
    }
    let status = wait_exit(&mut child);
    let stderr = std::fs::read_to_string(&stderr_p).unwrap_or_default();
    assert!(status.success(), "JVM failed ({status}):\n{stderr}");
    assert_eq!(done(&dir, 31)["closed_by"], "request");
    assert!(!stderr.contains(BOOT_APPEND_WARNING), "{stderr}");
    let late_on_25 = jdk == Jdk::J25 && matches!(start, Start::Late);
    let unexpected: Vec<&str> = stderr
        .lines()
        .filter(|l| !(late_on_25 && DYNAMIC_AGENT_WARNINGS.iter().any(|w| l.starts_with(w))))
        .collect();
    assert_eq!(unexpected, Vec::<&str>::new(), "stderr:\n{stderr}");
}

#[test]
fn quiet_dormant_jdk17() {
    first_window_is_quiet(Jdk::J17, Start::Dormant);
}

#[test]
fn quiet_late_jdk17() {
    first_window_is_quiet(Jdk::J17, Start::Late);
}

#[test]
fn quiet_dormant_jdk25() {
    first_window_is_quiet(Jdk::J25, Start::Dormant);
}

#[test]
fn quiet_late_jdk25() {
    first_window_is_quiet(Jdk::J25, Start::Late);
}
