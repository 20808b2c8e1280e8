//! HotSpot dynamic attach from jpd's library, on real JVMs of both JDKs: a JVM of the
//! same user; a JVM of another user in its own mount and PID namespaces with a private
//! `/tmp`; a JVM with attach disabled (a clear error, and no SIGQUIT: no thread dump in
//! its output); a vanished pid; the listing of every HotSpot JVM; the agent library and
//! a window's directory staged where the JVM sees them, past links its user planted.
//!
//! Needs root, `JP_JDK17`, `JP_JDK25` and `JP_AGENT_LIB` (as `cargo xtask test` passes
//! them), unshare and setpriv (util-linux).

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use jp_daemon::windows::attach::{self, AttachError};
use jp_daemon::windows::hotspot::{self, AgentPresence, HotspotJvm};

use crate::support::fleet::{compile_fleet_paper, target_dir};
use crate::support::{java_under, require_root};
use jp_testkit::jdk::Jdk;

const TIMEOUT: Duration = Duration::from_secs(10);
const NOBODY: u32 = 65534;

/// FleetPaper compiled once into a directory every user can read (outside `/tmp`, which
/// the namespaced JVMs replace).
fn classes() -> PathBuf {
    static ONCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = target_dir().join("attach-tests-classes");
        std::fs::create_dir_all(&dir).expect("classes dir");
        compile_fleet_paper(&dir);
        let mut perms = std::fs::metadata(&dir).expect("classes dir").permissions();
        perms.set_mode(0o755);
        std::fs::set_permissions(&dir, perms).expect("chmod classes dir");
        dir
    })
    .clone()
}

/// How a test JVM is started.
#[derive(Default)]
struct Launch<'a> {
    options: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    /// As nobody, in new mount and PID namespaces with a tmpfs on /tmp.
    isolated: bool,
}

/// A JVM running FleetPaper (waiting on stdin), killed on drop.
struct TestJvm {
    child: Child,
    pid: u32,
    stdout: BufReader<ChildStdout>,
    stderr: tempfile::NamedTempFile,
}

impl TestJvm {
    fn start(jdk: Jdk, launch: Launch<'_>) -> TestJvm {
        require_root();
        let java = jdk.home().join("bin/java");
        let mut java_args: Vec<String> = vec![java.display().to_string()];
        java_args.extend(launch.options.iter().map(|s| s.to_string()));
        java_args.extend([
            "-cp".into(),
            classes().display().to_string(),
            "FleetPaper".into(),
        ]);
        let mut cmd = if launch.isolated {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--pid", "--fork", "--mount-proc", "sh", "-c"])
                .arg(concat!(
                    "mount -t tmpfs -o mode=1777 tmpfs /tmp && exec setpriv --reuid=nobody ",
                    "--regid=nogroup --clear-groups \"$@\""
                ))
                .arg("sh")
                .args(&java_args);
            c
        } else {
            let mut c = Command::new(&java_args[0]);
            c.args(&java_args[1..]);
            c
        };
        let stderr = tempfile::NamedTempFile::new().expect("stderr file");
        let mut child = cmd
            .envs(launch.env.iter().copied())
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().expect("stderr file"))
            .spawn()
            .expect("start java");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the JVM's first line");
        assert_eq!(line.trim(), "ready");
        let pid = java_under(child.id());
        TestJvm {
            child,
            pid,
            stdout,
            stderr,
        }
    }

    fn hotspot(&self) -> HotspotJvm {
        hotspot::hotspot_jvm(self.pid).expect("a HotSpot JVM")
    }

    /// What the JVM printed on its standard error so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).expect("the JVM's stderr")
    }

    /// Stops the JVM and returns what it printed after "ready".
    fn stop(mut self) -> String {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        // SAFETY: kill has no memory preconditions; the JVM may be under wrappers.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        let _ = self.child.wait();
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        rest
    }
}

impl Drop for TestJvm {
    fn drop(&mut self) {
        // SAFETY: as in stop.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn property(props: &str, key: &str) -> String {
    attach::process::property(props, key).unwrap_or_else(|| panic!("no {key} in:\n{props}"))
}

fn same_user(jdk: Jdk) {
    let jvm = TestJvm::start(jdk, Launch::default());
    let h = jvm.hotspot();
    assert_eq!(
        (
            h.uid,
            h.nspid,
            h.main_class.as_str(),
            h.agent,
            h.attach_disabled
        ),
        (0, jvm.pid, "FleetPaper", AgentPresence::None, false)
    );
    let version = h.java_version.clone().expect("the JDK's release file");
    assert!(version.starts_with(jdk.feature()), "{version}");
    let props = attach::execute(&h, "properties", &[], TIMEOUT).expect("properties");
    assert_eq!(
        property(&props, "java.vm.specification.version"),
        jdk.feature()
    );
    assert_eq!(property(&props, "user.name"), "root");
    // The listener runs now: a second command connects at once.
    let version_text = attach::execute(&h, "jcmd", &["VM.version"], TIMEOUT).expect("jcmd");
    assert!(version_text.contains(jdk.feature()), "{version_text}");
    // A library that does not load: status -1 on JDK 17, 0 on JDK 25, the same text.
    let missing = "/nonexistent/libjpagent.so";
    let err = attach::load_agent(&h, missing, "", TIMEOUT).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "JVM {} refused \"load {missing}=\": {missing} was not loaded.; {missing}: cannot \
             open shared object file: No such file or directory",
            jvm.pid
        )
    );
    let trigger = format!("/.attach_pid{}", jvm.pid);
    assert!(!Path::new(&trigger).exists(), "{trigger} left behind");
    let printed = jvm.stop();
    assert!(!printed.contains("Full thread dump"), "{printed}");
}

#[test]
fn properties_from_a_jvm_of_the_same_user_jdk17() {
    same_user(Jdk::J17);
}

#[test]
fn properties_from_a_jvm_of_the_same_user_jdk25() {
    same_user(Jdk::J25);
}

fn isolated(jdk: Jdk) {
    let jvm = TestJvm::start(
        jdk,
        Launch {
            isolated: true,
            ..Launch::default()
        },
    );
    let h = jvm.hotspot();
    assert_eq!(
        (h.uid, h.gid, h.nspid, h.main_class.as_str(), h.agent),
        (NOBODY, NOBODY, 1, "FleetPaper", AgentPresence::None)
    );
    let props = attach::execute(&h, "properties", &[], TIMEOUT).expect("properties");
    assert_eq!(property(&props, "user.name"), "nobody");
    assert_eq!(
        property(&props, "java.vm.specification.version"),
        jdk.feature()
    );
    // The socket is in the JVM's own /tmp only.
    let inside = format!("/proc/{}/root/tmp/.java_pid1", jvm.pid);
    let meta = std::fs::symlink_metadata(&inside).expect("the attach socket");
    assert_eq!(meta.uid(), NOBODY);
    let printed = jvm.stop();
    assert!(!printed.contains("Full thread dump"), "{printed}");
}

#[test]
fn properties_from_a_jvm_of_another_user_in_its_own_namespaces_jdk17() {
    isolated(Jdk::J17);
}

#[test]
fn properties_from_a_jvm_of_another_user_in_its_own_namespaces_jdk25() {
    isolated(Jdk::J25);
}

#[test]
fn attach_disabled_is_said_and_the_jvm_gets_no_signal() {
    let cases: [(Launch<'_>, &str); 2] = [
        (
            Launch {
                options: &["-XX:+DisableAttachMechanism"],
                ..Launch::default()
            },
            "the command line",
        ),
        (
            Launch {
                env: &[("JAVA_TOOL_OPTIONS", "-XX:+DisableAttachMechanism")],
                ..Launch::default()
            },
            "JAVA_TOOL_OPTIONS",
        ),
    ];
    for (launch, origin) in cases {
        let jvm = TestJvm::start(Jdk::J17, launch);
        let h = jvm.hotspot();
        assert!(h.attach_disabled, "{h:?}");
        let err = attach::execute(&h, "properties", &[], TIMEOUT).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "JVM {} was started with -XX:+DisableAttachMechanism ({origin}): nothing can \
                 attach to it; restart it without that option",
                jvm.pid
            )
        );
        let load = attach::load_agent(&h, "/nonexistent.so", "", TIMEOUT).unwrap_err();
        assert!(matches!(load, AttachError::AttachDisabled { .. }), "{load}");
        std::thread::sleep(Duration::from_millis(300));
        let printed = jvm.stop();
        assert!(!printed.contains("Full thread dump"), "{printed}");
    }
}

#[test]
fn a_vanished_jvm_is_said_so() {
    let jvm = TestJvm::start(Jdk::J17, Launch::default());
    let h = jvm.hotspot();
    let pid = jvm.pid;
    jvm.stop();
    let err = attach::execute(&h, "properties", &[], TIMEOUT).unwrap_err();
    assert_eq!(err.to_string(), format!("process {pid} has exited"));
    assert!(matches!(
        hotspot::hotspot_jvm(pid),
        Err(AttachError::Vanished { .. })
    ));
}

#[test]
fn listing_finds_every_hotspot_jvm_with_its_user_and_main_class() {
    let lib = jp_testkit::agent_lib();
    let plain = TestJvm::start(Jdk::J17, Launch::default());
    let other = TestJvm::start(
        Jdk::J25,
        Launch {
            isolated: true,
            ..Launch::default()
        },
    );
    let agentpath = format!("-agentpath:{}=profiler=usdt", lib.display());
    let live = TestJvm::start(
        Jdk::J17,
        Launch {
            options: &[&agentpath],
            ..Launch::default()
        },
    );
    let all = hotspot::list_hotspot_jvms();
    let row = |pid: u32| {
        let j = all
            .iter()
            .find(|j| j.pid == pid)
            .unwrap_or_else(|| panic!("JVM {pid} not listed: {all:?}"));
        (j.uid, j.main_class.clone(), j.agent, j.agent_path.clone())
    };
    assert_eq!(
        row(plain.pid),
        (0, "FleetPaper".to_string(), AgentPresence::None, None)
    );
    assert_eq!(
        row(other.pid),
        (NOBODY, "FleetPaper".to_string(), AgentPresence::None, None)
    );
    let lib_path = std::fs::canonicalize(&lib).expect("agent lib");
    assert_eq!(
        row(live.pid),
        (
            0,
            "FleetPaper".to_string(),
            AgentPresence::Live,
            Some(lib_path.display().to_string())
        )
    );
    // A JVM that runs the agent is given its own library back, never a second copy.
    let h = live.hotspot();
    assert_eq!(
        attach::stage_library(&h, &lib).expect("stage"),
        lib_path.display().to_string()
    );
    assert!(all.windows(2).all(|w| w[0].pid < w[1].pid), "sorted by pid");
}

#[test]
fn the_library_and_window_directory_are_staged_past_planted_links() {
    let lib = jp_testkit::agent_lib();
    let jvm = TestJvm::start(
        Jdk::J17,
        Launch {
            isolated: true,
            ..Launch::default()
        },
    );
    let h = jvm.hotspot();
    let tmp = PathBuf::from(format!("/proc/{}/root/tmp", jvm.pid));
    // The JVM's user plants links where jpd will write.
    let victim = target_dir().join("attach-tests-victim");
    std::fs::create_dir_all(&victim).expect("victim dir");
    std::os::unix::fs::symlink(&victim, tmp.join("jp-windows-65534")).expect("plant");
    std::os::unix::fs::symlink(&victim, tmp.join("jp-agent-lib")).expect("plant");
    let dir = attach::window_dir(&h).expect("window dir");
    assert_eq!(dir.in_ns, "/tmp/jp-windows-65534");
    assert_eq!(dir.host, tmp.join("jp-windows-65534"));
    let meta = std::fs::symlink_metadata(&dir.host).expect("window dir");
    assert!(meta.is_dir());
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (NOBODY, NOBODY, 0o700)
    );
    let staged = attach::stage_library(&h, &lib).expect("stage");
    let name = staged
        .strip_prefix("/tmp/jp-agent-lib/")
        .and_then(|s| s.strip_suffix("/libjpagent.so"))
        .unwrap_or_else(|| panic!("{staged}"));
    assert_eq!(name.len(), 16, "{staged}");
    let host = tmp.join(staged.trim_start_matches("/tmp/"));
    assert_eq!(
        std::fs::read(&host).expect("staged"),
        std::fs::read(&lib).expect("lib")
    );
    let meta = std::fs::metadata(&host).expect("staged");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o644));
    let top = std::fs::symlink_metadata(tmp.join("jp-agent-lib")).expect("lib dir");
    assert!(top.is_dir());
    assert_eq!((top.uid(), top.mode() & 0o7777), (0, 0o755));
    // Staged again: the same file, not rewritten.
    assert_eq!(
        attach::stage_library(&h, &lib).expect("stage again"),
        staged
    );
    assert_eq!(
        std::fs::read_dir(&victim).expect("victim").count(),
        0,
        "nothing written through the planted links"
    );
}

/// Loads the agent with an empty command into a JVM of another user started without it,
/// in its own namespaces: it becomes dormant (read back through its control block), a
/// second load reaches the same library (a close of no window: code 5), and a window
/// opened through attach is seen open, then written and closed by its deadline.
fn loaded_dormant(jdk: Jdk) {
    let lib = jp_testkit::agent_lib();
    let jvm = TestJvm::start(
        jdk,
        Launch {
            isolated: true,
            ..Launch::default()
        },
    );
    let h = jvm.hotspot();
    assert_eq!(h.agent, AgentPresence::None);
    let staged = attach::stage_library(&h, &lib).expect("stage");
    assert_eq!(
        attach::load_agent(&h, &staged, "", TIMEOUT).expect("load"),
        0
    );
    let h = jvm.hotspot();
    assert_eq!(
        (h.agent, h.agent_path.as_deref()),
        (AgentPresence::Dormant, Some(staged.as_str()))
    );
    assert_eq!(
        attach::stage_library(&h, &lib).expect("own library"),
        staged
    );
    let close = attach::load_agent(&h, &staged, "window=close,id=99", TIMEOUT).expect("close");
    assert_eq!(close, 5, "no such window");
    let dir = attach::window_dir(&h).expect("window dir");
    let open = format!("window=open,id=7,seconds=1,dir={}", dir.in_ns);
    assert_eq!(
        attach::load_agent(&h, &staged, &open, TIMEOUT).expect("open"),
        0
    );
    assert_eq!(jvm.hotspot().agent, AgentPresence::WindowOpen(7));
    let done = dir.host.join("window-7.done");
    let t0 = std::time::Instant::now();
    while !done.exists() {
        assert!(t0.elapsed() < TIMEOUT, "no {}", done.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(dir.host.join("window-7.json").exists());
    assert_eq!(jvm.hotspot().agent, AgentPresence::Dormant);
    let stderr = jvm.stderr();
    // JEP 451: JDK 21 and later warn on the JVM's stderr when an agent is loaded late.
    let warning = format!(
        "WARNING: A JVM TI agent has been loaded dynamically ({staged})\n\
         WARNING: If a serviceability tool is in use, please run with \
         -XX:+EnableDynamicAgentLoading to hide this warning\n\
         WARNING: Dynamic loading of agents will be disallowed by default in a future release\n"
    );
    match jdk {
        Jdk::J17 => assert!(!stderr.contains("WARNING: A JVM TI agent"), "{stderr}"),
        Jdk::J25 => assert_eq!(stderr.matches(&warning).count(), 1, "{stderr}"),
    }
    let printed = jvm.stop();
    assert!(!printed.contains("Full thread dump"), "{printed}");
}

#[test]
fn an_agent_loaded_with_no_command_is_dormant_jdk17() {
    loaded_dormant(Jdk::J17);
}

#[test]
fn an_agent_loaded_with_no_command_is_dormant_jdk25() {
    loaded_dormant(Jdk::J25);
}

/// A bad command in the load that brings the agent into a JVM: refused (code 1), and the
/// agent stays loaded — HotSpot unloads a library whose first `Agent_OnAttach` failed,
/// and an agent unloaded after it started crashes the JVM at exit — so the JVM ends
/// cleanly.
#[test]
fn a_bad_first_command_leaves_the_agent_loaded_and_the_jvm_exits_cleanly() {
    let lib = jp_testkit::agent_lib();
    let mut jvm = TestJvm::start(Jdk::J17, Launch::default());
    let h = jvm.hotspot();
    let staged = attach::stage_library(&h, &lib).expect("stage");
    let code = attach::load_agent(&h, &staged, "window=bogus", TIMEOUT).expect("load");
    assert_eq!(code, 1, "bad command");
    assert_eq!(jvm.hotspot().agent, AgentPresence::Dormant);
    let mut stdin = jvm.child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, b"quit\n").expect("quit");
    drop(stdin);
    let status = jvm.child.wait().expect("the JVM's exit");
    assert!(status.success(), "{status:?}: {}", jvm.stderr());
}

/// `jpctl jvm list --all` through the delivered jpd: every HotSpot JVM with its user,
/// Java version and agent state — without the agent, of another user in its own
/// namespaces, started dormant; the default list stays the profiled JVMs only.
#[test]
fn jpctl_lists_every_hotspot_jvm_with_its_agent_state() {
    let _turn = crate::support::exclusive();
    let jpd = crate::support::jpd::Jpd::start("");
    let lib = jp_testkit::agent_lib();
    let plain = TestJvm::start(Jdk::J17, Launch::default());
    let other = TestJvm::start(
        Jdk::J25,
        Launch {
            isolated: true,
            ..Launch::default()
        },
    );
    let agentpath = format!("-agentpath:{}=mode=dormant", lib.display());
    let dormant = TestJvm::start(
        Jdk::J17,
        Launch {
            options: &[&agentpath],
            ..Launch::default()
        },
    );
    let json = jpd.jpctl_json(&["jvm", "list", "--all", "--json"]);
    let row = |pid: u32| {
        let j = json["jvms"]
            .as_array()
            .expect("jvms")
            .iter()
            .find(|j| j["pid"] == pid)
            .unwrap_or_else(|| panic!("JVM {pid} not listed: {json}"));
        (
            j["uid"].as_u64(),
            j["ns_pid"].as_u64(),
            j["main"].as_str().map(str::to_string),
            j["agent"].as_str().map(str::to_string),
            j["attach_disabled"].as_bool(),
        )
    };
    let expect = |uid: u64, ns_pid: Option<u64>, agent: &str| {
        (
            Some(uid),
            ns_pid,
            Some("FleetPaper".to_string()),
            Some(agent.to_string()),
            Some(false),
        )
    };
    assert_eq!(row(plain.pid), expect(0, None, "none"));
    assert_eq!(row(other.pid), expect(u64::from(NOBODY), Some(1), "none"));
    assert_eq!(row(dormant.pid), expect(0, None, "dormant"));
    let text = jpd.jpctl_output(&["jvm", "list", "--all"]);
    let line = |pid: u32| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no line for {pid}:\n{text}"))
    };
    let version = |j: &TestJvm| j.hotspot().java_version.expect("release file");
    assert_eq!(
        line(plain.pid),
        format!("{} 0 {} no agent - FleetPaper", plain.pid, version(&plain))
    );
    assert_eq!(
        line(other.pid),
        format!(
            "{} {NOBODY} {} no agent - FleetPaper [pid 1 in its namespace]",
            other.pid,
            version(&other)
        )
    );
    let default = jpd.jpctl_output(&["jvm", "list"]);
    assert!(
        !default
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&plain.pid.to_string())),
        "{default}"
    );
    jpd.stop();
}
