//! The service's rules with a stand-in for the JVMs: what it asks the agent, its limits
//! and refusals (each counted), a result that never comes, and hostile result files.
use std::collections::HashMap;
use std::path::Path;

use super::*;
use crate::windows::attach::WindowDir;
use crate::windows::WindowCounts;

/// What the stand-in agent does with an open command.
#[derive(Clone)]
enum Agent {
    /// Writes `json` and then `done` at once.
    Deliver { json: Vec<u8>, done: String },
    /// Accepts and writes nothing (the test may write the result itself).
    Silent,
    /// Answers `rc`, writing `error` as its reason.
    Refuse { rc: i32, error: String },
}

struct Fake {
    dir: PathBuf,
    agents: HashMap<u32, AgentPresence>,
    agent: Agent,
    alive: bool,
    commands: Mutex<Vec<String>>,
}

impl AttachJvm for Fake {
    fn jvm(&self, pid: u32) -> Result<HotspotJvm, String> {
        let agent = *self
            .agents
            .get(&pid)
            .ok_or_else(|| format!("pid {pid} is not a HotSpot JVM"))?;
        Ok(HotspotJvm {
            pid,
            start_time: 4242,
            uid: 1000,
            gid: 1000,
            nspid: pid,
            main_class: "Tiny".into(),
            java_version: Some("17".into()),
            agent,
            agent_path: None,
            attach_disabled: pid == 13,
        })
    }

    fn window_dir(&self, _: &HotspotJvm) -> Result<WindowDir, String> {
        Ok(WindowDir {
            host: self.dir.clone(),
            in_ns: "/tmp/.jp-windows".into(),
        })
    }

    fn stage_library(&self, _: &HotspotJvm, ours: &Path) -> Result<String, String> {
        assert_eq!(ours, Path::new("/opt/jp/libjpagent.so"));
        Ok("/tmp/.jp-lib/libjpagent-abc.so".into())
    }

    fn load_agent(
        &self,
        _: &HotspotJvm,
        lib: &str,
        command: &str,
        _: Duration,
    ) -> Result<i32, String> {
        assert_eq!(lib, "/tmp/.jp-lib/libjpagent-abc.so");
        lock(&self.commands).push(command.to_string());
        let id: u64 = command
            .split(',')
            .find_map(|kv| kv.strip_prefix("id="))
            .and_then(|v| v.parse().ok())
            .expect("an id");
        let files = WindowFiles::new(&self.dir, id);
        match &self.agent {
            Agent::Deliver { json, done } => {
                std::fs::write(files.tree(), json).unwrap();
                std::fs::write(files.done(), done).unwrap();
                Ok(0)
            }
            Agent::Silent => Ok(0),
            Agent::Refuse { rc, error } => {
                std::fs::write(files.error(), error).unwrap();
                Ok(*rc)
            }
        }
    }

    fn alive(&self, _: &HotspotJvm) -> bool {
        self.alive
    }
}

fn tiny_tree() -> jp_mct::Mct {
    let mut t = jp_mct::Mct::new("default");
    let info = |n: &str| jp_mct::MethodInfo {
        name: Arc::from(n),
        file: None,
    };
    let main = t.add(0, info("Tiny.main([Ljava/lang/String;)V"), 0, 0);
    t.add(main, info("Tiny.work()V"), 7, 21);
    t
}

fn tiny_json() -> Vec<u8> {
    let mut v = Vec::new();
    jp_mct::write_json(&tiny_tree(), &mut v).unwrap();
    v
}

const DONE: &str = "id=1\nopened_unix_ms=1000\nclosed_unix_ms=3500\nclosed_by=deadline\nscope=all application classes\nseeded_contexts=1\n";

struct Setup {
    windows: Windows,
    fake: Arc<Fake>,
    store: SharedWindowStore,
    _dir: tempfile::TempDir,
}

fn setup(agent: Agent, max_open: u32) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let agents = HashMap::from([
        (11, AgentPresence::Dormant),
        (12, AgentPresence::Dormant),
        (13, AgentPresence::Dormant),
        (20, AgentPresence::None),
        (30, AgentPresence::Live),
        (40, AgentPresence::Unknown),
        (50, AgentPresence::WindowOpen(77)),
    ]);
    let fake = Arc::new(Fake {
        dir: dir.path().to_path_buf(),
        agents,
        agent,
        alive: true,
        commands: Mutex::default(),
    });
    let store: SharedWindowStore = Arc::default();
    let config = WindowsConfig {
        agent_library: "/opt/jp/libjpagent.so".into(),
        max_open,
        ..WindowsConfig::default()
    };
    let timing = Timing {
        poll: Duration::from_millis(5),
        grace: Duration::ZERO,
        attach: Duration::from_secs(1),
    };
    let windows = Windows::new(config, Arc::clone(&store), fake.clone(), timing);
    Setup {
        windows,
        fake,
        store,
        _dir: dir,
    }
}

fn request(pid: u32) -> WindowRequest {
    WindowRequest {
        pid,
        seconds: 1,
        include: vec![],
        exclude: vec![],
        bba: None,
        origin: WindowOrigin::Request,
        load_agent: false,
    }
}

fn counts(w: &Windows) -> WindowCounts {
    w.counters().get(WindowOrigin::Request)
}

fn refused(r: Result<Arc<WindowProfile>, WindowError>) -> String {
    match r {
        Err(WindowError::Refused(m)) => m,
        other => panic!("not refused: {other:?}"),
    }
}

fn failed(r: Result<Arc<WindowProfile>, WindowError>) -> String {
    match r {
        Err(WindowError::Failed(m)) => m,
        other => panic!("not failed: {other:?}"),
    }
}

/// A window of 300 s in JVM `pid`, asked for in a task of its own.
fn long_window(
    w: &Windows,
    pid: u32,
) -> tokio::task::JoinHandle<Result<Arc<WindowProfile>, WindowError>> {
    let w = w.clone();
    tokio::spawn(async move {
        let req = WindowRequest {
            seconds: 300,
            ..request(pid)
        };
        w.profile(req).await
    })
}

/// The id of the first window the stand-in agent was asked to open, once asked.
async fn first_opened(fake: &Fake) -> u64 {
    while lock(&fake.commands).is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let command = lock(&fake.commands)[0].clone();
    command
        .split(',')
        .find_map(|kv| kv.strip_prefix("id="))
        .and_then(|v| v.parse().ok())
        .expect("an id")
}

#[tokio::test]
async fn a_window_is_opened_read_stored_and_its_files_removed() {
    let s = setup(
        Agent::Deliver {
            json: tiny_json(),
            done: DONE.into(),
        },
        2,
    );
    let req = WindowRequest {
        include: vec!["com.example.*".into(), "Tiny".into()],
        exclude: vec!["com.example.gen.*".into()],
        bba: Some(Bba::Precise),
        seconds: 3,
        ..request(11)
    };
    let w = s.windows.profile(req).await.unwrap();
    let commands = lock(&s.fake.commands).clone();
    assert_eq!(
        commands,
        [format!(
            "window=open,id={},seconds=3,dir=/tmp/.jp-windows,include=com.example.*;Tiny,exclude=com.example.gen.*,bba=precise",
            w.id
        )]
    );
    assert_eq!(w.tree, tiny_tree());
    assert_eq!((w.pid, w.start_time, w.seconds), (11, 4242, 3));
    assert_eq!(w.main_class, "Tiny");
    assert_eq!(w.scope, "all application classes", "as the agent says");
    assert_eq!(w.origin, WindowOrigin::Request);
    assert_eq!(
        w.jdk_version, "17",
        "an agent that does not say: the release file's"
    );
    assert_eq!(w.duration(), Duration::from_millis(2500));
    assert_eq!(
        w.meta.get("closed_by").map(String::as_str),
        Some("deadline")
    );
    assert_eq!(std::fs::read_dir(&s.fake.dir).unwrap().count(), 0);
    assert_eq!(lock(&s.store).list(Some(11)), [Arc::clone(&w)]);
    assert_eq!(
        counts(&s.windows),
        WindowCounts {
            opened: 1,
            completed: 1,
            failed: 0,
            refused: 0,
            open_ms: 2500,
        }
    );
    assert_eq!(s.windows.open_count(), 0);
    // Another window gets another id.
    let again = s.windows.profile(request(11)).await.unwrap();
    assert_ne!(again.id, w.id);
    assert_eq!(again.scope, "all application classes");
}

/// A window keeps who asked for it and the JVM's version as its agent says it, unless
/// the agent's word is not a plain short version.
#[tokio::test]
async fn a_window_keeps_its_origin_and_the_jvms_own_version() {
    for (said, kept) in [
        ("17.0.15+6-Debian-1deb12u1", "17.0.15+6-Debian-1deb12u1"),
        ("17 with a space", "17"),
        (&"9".repeat(65), "17"),
        ("", "17"),
    ] {
        let s = setup(
            Agent::Deliver {
                json: tiny_json(),
                done: format!("{DONE}jdk_version={said}\n"),
            },
            2,
        );
        for origin in WindowOrigin::ALL {
            let req = WindowRequest {
                origin,
                ..request(11)
            };
            let w = s.windows.profile(req).await.unwrap();
            assert_eq!(
                (w.origin, w.jdk_version.as_str()),
                (origin, kept),
                "{said:?}"
            );
            assert_eq!(s.windows.counters().get(origin).completed, 1);
        }
    }
}

#[tokio::test]
async fn requests_and_jvms_that_cannot_have_a_window_are_refused_and_counted() {
    let s = setup(
        Agent::Deliver {
            json: tiny_json(),
            done: DONE.into(),
        },
        2,
    );
    let w = &s.windows;
    let cases: Vec<(WindowRequest, String)> = vec![
        (
            WindowRequest {
                seconds: 0,
                ..request(11)
            },
            "a window lasts at least 1 second".into(),
        ),
        (
            WindowRequest {
                seconds: 301,
                ..request(11)
            },
            "301 s is more than windows.max_seconds = 300".into(),
        ),
        (
            WindowRequest {
                include: vec!["a,bba=precise".into()],
                ..request(11)
            },
            "include pattern \"a,bba=precise\": not a class pattern (empty, too long, or with a comma, semicolon, equals sign or control character)".into(),
        ),
        (request(99), "pid 99 is not a HotSpot JVM".into()),
        (
            request(13),
            "JVM 13 runs with -XX:+DisableAttachMechanism: jpd cannot reach it (it is left as it is)".into(),
        ),
        (
            request(30),
            "JVM 30 is profiled from start: its live tree is already exact: jpctl jvm tree 30".into(),
        ),
        (
            request(20),
            "JVM 20 runs without jp's agent, and only an explicit request (jpctl jvm profile) loads it".into(),
        ),
        (
            request(40),
            "JVM 40 maps jp's agent but its state cannot be read (still loading?): try again".into(),
        ),
        (request(50), "JVM 50 already has window 77 open".into()),
    ];
    let n = cases.len() as u64;
    for (req, message) in cases {
        assert_eq!(refused(w.profile(req).await), message);
    }
    assert!(lock(&s.fake.commands).is_empty(), "no agent was loaded");
    let c = counts(w);
    assert_eq!((c.refused, c.opened, c.completed, c.failed), (n, 0, 0, 0));
    // An explicit request loads the agent into a JVM without one.
    let loaded = WindowRequest {
        load_agent: true,
        ..request(20)
    };
    assert_eq!(w.profile(loaded).await.unwrap().tree, tiny_tree());
    assert_eq!(
        w.counters().get(WindowOrigin::Rotation),
        WindowCounts::default()
    );
}

#[tokio::test]
async fn one_window_per_jvm_and_max_open_on_the_host() {
    let s = setup(Agent::Silent, 1);
    let first = long_window(&s.windows, 11);
    let id = first_opened(&s.fake).await;
    assert_eq!(s.windows.open_count(), 1);
    assert_eq!(
        refused(s.windows.profile(request(11)).await),
        "JVM 11 already has a window open (one at a time per JVM)"
    );
    assert_eq!(
        refused(s.windows.profile(request(12)).await),
        "1 windows are open on this host, windows.max_open = 1: try again when one has closed"
    );
    // The agent delivers the first window: its slot is free again.
    let files = WindowFiles::new(&s.fake.dir, id);
    std::fs::write(files.tree(), tiny_json()).unwrap();
    std::fs::write(files.done(), DONE).unwrap();
    let w = first.await.unwrap().unwrap();
    assert_eq!(w.id, id);
    assert_eq!(s.windows.open_count(), 0);
    let c = counts(&s.windows);
    assert_eq!((c.opened, c.completed, c.refused, c.failed), (1, 1, 2, 0));
}

#[tokio::test]
async fn a_result_that_never_comes_fails_after_the_window_and_its_grace() {
    let s = setup(Agent::Silent, 2);
    let e = failed(s.windows.profile(request(11)).await);
    assert_eq!(e, "JVM 11 wrote no result 0 s after the window's end");
    let c = counts(&s.windows);
    assert_eq!((c.opened, c.completed, c.failed), (1, 0, 1));
    assert_eq!(s.windows.open_count(), 0);
}

#[tokio::test]
async fn a_jvm_that_exits_without_a_result_fails_at_once() {
    let s = setup(Agent::Silent, 2);
    let dead = Arc::new(Fake {
        dir: s.fake.dir.clone(),
        agents: s.fake.agents.clone(),
        agent: Agent::Silent,
        alive: false,
        commands: Mutex::default(),
    });
    let w = Windows::new(
        s.windows.config(),
        Arc::default(),
        dead,
        s.windows.inner.timing,
    );
    let req = WindowRequest {
        seconds: 300,
        ..request(12)
    };
    assert_eq!(
        failed(w.profile(req).await),
        "JVM 12 exited during the window, without a result"
    );
}

#[tokio::test]
async fn an_agent_refusal_is_told_with_its_reason() {
    let s = setup(
        Agent::Refuse {
            rc: 2,
            error: "window 5 is open\n".into(),
        },
        2,
    );
    assert_eq!(
        refused(s.windows.profile(request(11)).await),
        "JVM 11 already has a window open: window 5 is open"
    );
    assert_eq!(std::fs::read_dir(&s.fake.dir).unwrap().count(), 0);
    let s = setup(
        Agent::Refuse {
            rc: 4,
            error: "no can_retransform_classes".into(),
        },
        2,
    );
    assert_eq!(
        failed(s.windows.profile(request(11)).await),
        "JVM 11's JVMTI refused the window: no can_retransform_classes"
    );
    let c = counts(&s.windows);
    assert_eq!((c.opened, c.failed), (0, 1));
}

#[tokio::test]
async fn garbage_and_oversized_results_fail_and_are_removed() {
    let s = setup(
        Agent::Deliver {
            json: b"{\"format\": \"jp-mct/1\", \"nodes\": [[[[".to_vec(),
            done: DONE.into(),
        },
        2,
    );
    let e = failed(s.windows.profile(request(11)).await);
    assert!(e.starts_with("JVM 11: window "), "{e}");
    assert!(e.contains("jp-mct/1 JSON"), "{e}");
    assert_eq!(std::fs::read_dir(&s.fake.dir).unwrap().count(), 0);
    assert!(lock(&s.store).list(None).is_empty());

    // Too big to read: a sparse file, one byte over the cap.
    let s = setup(Agent::Silent, 2);
    let first = long_window(&s.windows, 11);
    let id = first_opened(&s.fake).await;
    let files = WindowFiles::new(&s.fake.dir, id);
    let big = std::fs::File::create(files.tree()).unwrap();
    big.set_len(crate::windows::result::MAX_RESULT_BYTES + 1)
        .unwrap();
    std::fs::write(files.done(), DONE).unwrap();
    let e = failed(first.await.unwrap());
    assert!(
        e.ends_with(&format!(
            "has {} bytes, more than jpd reads ({})",
            crate::windows::result::MAX_RESULT_BYTES + 1,
            crate::windows::result::MAX_RESULT_BYTES
        )),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&s.fake.dir).unwrap().count(), 0);
    assert_eq!(counts(&s.windows).failed, 1);
}
