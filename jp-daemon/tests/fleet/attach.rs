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

const TIMEOUT: Duration = Duration::from_secs(10);
const NOBODY: u32 = 65534;

#[derive(Clone, Copy, Debug)]
enum Jdk {
    J17,
    J25,
}

impl Jdk {
    fn home(self) -> PathBuf {
        let (var, default) = match self {
            Jdk::J17 => ("JP_JDK17", "/usr/lib/jvm/java-17-openjdk-amd64"),
            Jdk::J25 => ("JP_JDK25", "/usr/lib/jvm/temurin-25-jdk-amd64"),
        };
        let home = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
        assert!(
            home.join("bin/java").exists(),
            "no JDK at {} ({var}): cargo xtask setup installs it",
            home.display()
        );
        home
    }

    fn feature(self) -> &'static str {
        match self {
            Jdk::J17 => "17",
            Jdk::J25 => "25",
        }
    }
}

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
        let mut child = cmd
            .envs(launch.env.iter().copied())
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start java");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the JVM's first line");
        assert_eq!(line.trim(), "ready");
        let pid = java_under(child.id());
        TestJvm { child, pid, stdout }
    }

    fn hotspot(&self) -> HotspotJvm {
        hotspot::hotspot_jvm(self.pid).expect("a HotSpot JVM")
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
