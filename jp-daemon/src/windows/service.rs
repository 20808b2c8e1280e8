//! The windows service: opens an exact window in a HotSpot JVM on request, waits for
//! the agent to close it, reads its tree and keeps it in the window store.
//!
//! A window's life: the request is checked (seconds within `windows.max_seconds`, sane
//! patterns), a slot is taken (at most `windows.max_open` windows at once on the host,
//! one per JVM), the JVM is looked at (a HotSpot JVM that allows attach, whose agent is
//! dormant — or absent, when the request may load it), the library is staged in the
//! JVM's /tmp and loaded with the open command, and the service polls for
//! `window-ID.done` until the window's seconds and a grace have passed. Each window
//! runs as a task of its own, so a caller that goes away does not lose it: it is still
//! read, stored and counted.
//!
//! At jpd's shutdown nothing needs doing: the agent closes every window at its deadline
//! by itself, restores the classes and writes its result, whether anyone reads it or
//! not (a later jpd finds the JVM dormant again).
use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::config::WindowsConfig;
use super::counters::{WindowCounters, WindowOrigin};
use super::hotspot::{AgentPresence, HotspotJvm};
use super::result::WindowFiles;
use super::seam::AttachJvm;
use crate::lock::lock;
use crate::store::windows::{SharedWindowStore, WindowProfile};

/// The basic-block algorithm of a window's counts (the agent's `bba=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bba {
    Default,
    Precise,
}

impl Bba {
    pub fn as_str(self) -> &'static str {
        match self {
            Bba::Default => "default",
            Bba::Precise => "precise",
        }
    }
}

/// One window asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowRequest {
    pub pid: u32,
    pub seconds: u32,
    /// Class patterns in scope (the agent's `include=`); empty: its default.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// `None`: the agent's start option, else its default.
    pub bba: Option<Bba>,
    pub origin: WindowOrigin,
    /// May load the agent into a JVM started without it.
    pub load_agent: bool,
}

/// Why a window was not delivered, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// Not tried: a limit, or a JVM that cannot have a window.
    Refused(String),
    /// Tried, and it did not deliver.
    Failed(String),
}

impl fmt::Display for WindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowError::Refused(m) | WindowError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for WindowError {}

/// How long the service waits, and how often it looks.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Between two looks for the result.
    pub poll: Duration,
    /// After the window's seconds, for the agent to restore the classes and write.
    pub grace: Duration,
    /// For HotSpot's attach listener to answer the load.
    pub attach: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            poll: Duration::from_millis(100),
            grace: Duration::from_secs(60),
            attach: Duration::from_secs(30),
        }
    }
}

/// Patterns per list, and bytes per pattern, a request may carry.
const MAX_PATTERNS: usize = 64;
const MAX_PATTERN_BYTES: usize = 512;

/// The service; clones share it.
#[derive(Clone)]
pub struct Windows {
    inner: Arc<Inner>,
}

struct Inner {
    config: RwLock<WindowsConfig>,
    /// jpd's own path, where the default agent library is found.
    exe: PathBuf,
    attach: Arc<dyn AttachJvm>,
    store: SharedWindowStore,
    counters: Arc<WindowCounters>,
    /// Pids with a window open (or opening).
    open: Mutex<BTreeSet<u32>>,
    timing: Timing,
}

impl Windows {
    pub fn new(
        config: WindowsConfig,
        store: SharedWindowStore,
        attach: Arc<dyn AttachJvm>,
        timing: Timing,
    ) -> Windows {
        lock(&store).set_keep(config.keep as usize);
        Windows {
            inner: Arc::new(Inner {
                config: RwLock::new(config),
                exe: std::env::current_exe().unwrap_or_default(),
                attach,
                store,
                counters: Arc::default(),
                open: Mutex::default(),
                timing,
            }),
        }
    }

    /// A reloaded `[windows]`: applies to the next windows (and `keep` at once).
    pub fn set_config(&self, config: WindowsConfig) {
        lock(&self.inner.store).set_keep(config.keep as usize);
        *crate::lock::write(&self.inner.config) = config;
    }

    pub fn config(&self) -> WindowsConfig {
        crate::lock::read(&self.inner.config).clone()
    }

    /// The counters every opener of windows adds to.
    pub fn counters(&self) -> Arc<WindowCounters> {
        Arc::clone(&self.inner.counters)
    }

    /// Windows open (or opening) now, host-wide.
    pub fn open_count(&self) -> usize {
        lock(&self.inner.open).len()
    }

    /// The HotSpot JVM `pid` as jpd sees it now.
    pub async fn jvm(&self, pid: u32) -> Result<HotspotJvm, String> {
        let attach = Arc::clone(&self.inner.attach);
        blocking(move || attach.jvm(pid)).await
    }

    /// Opens a window as `req` asks, and gives its tree once the agent closed it; the
    /// window is also kept in the window store.
    pub async fn profile(&self, req: WindowRequest) -> Result<Arc<WindowProfile>, WindowError> {
        let config = self.config();
        let slot = check_request(&req, &config)
            .and_then(|()| Slot::take(&self.inner, req.pid, config.max_open as usize));
        let slot = match slot {
            Ok(slot) => slot,
            Err(e) => {
                self.inner.counters.refused(req.origin);
                return Err(e);
            }
        };
        let inner = Arc::clone(&self.inner);
        // Its own task: the window is read, stored and counted even when the caller
        // goes away.
        let task = tokio::spawn(async move {
            let origin = req.origin;
            let r = run(&inner, req, &config).await;
            drop(slot);
            match &r {
                Ok(w) => inner.counters.completed(origin, w.duration()),
                Err(WindowError::Refused(m)) => {
                    inner.counters.refused(origin);
                    log::debug!("window refused: {m}");
                }
                Err(WindowError::Failed(m)) => {
                    inner.counters.failed(origin);
                    log::warn!("window failed: {m}");
                }
            }
            r
        });
        task.await.unwrap_or_else(|e| {
            Err(WindowError::Failed(format!(
                "the window's task failed: {e}"
            )))
        })
    }
}

/// A pid's place among the windows open; given back when dropped.
struct Slot {
    inner: Arc<Inner>,
    pid: u32,
}

impl Slot {
    fn take(inner: &Arc<Inner>, pid: u32, max_open: usize) -> Result<Slot, WindowError> {
        let mut open = lock(&inner.open);
        if open.contains(&pid) {
            return Err(WindowError::Refused(format!(
                "JVM {pid} already has a window open (one at a time per JVM)"
            )));
        }
        if open.len() >= max_open {
            return Err(WindowError::Refused(format!(
                "{} windows are open on this host, windows.max_open = {max_open}: try again when one has closed",
                open.len()
            )));
        }
        open.insert(pid);
        Ok(Slot {
            inner: Arc::clone(inner),
            pid,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.inner.open).remove(&self.pid);
    }
}

/// The request's own limits.
fn check_request(req: &WindowRequest, config: &WindowsConfig) -> Result<(), WindowError> {
    if req.seconds == 0 {
        return Err(WindowError::Refused(
            "a window lasts at least 1 second".into(),
        ));
    }
    if req.seconds > config.max_seconds {
        return Err(WindowError::Refused(format!(
            "{} s is more than windows.max_seconds = {}",
            req.seconds, config.max_seconds
        )));
    }
    for (what, list) in [("include", &req.include), ("exclude", &req.exclude)] {
        if list.len() > MAX_PATTERNS {
            return Err(WindowError::Refused(format!(
                "{} {what} patterns, at most {MAX_PATTERNS}",
                list.len()
            )));
        }
        if let Some(p) = list.iter().find(|p| !pattern_ok(p)) {
            return Err(WindowError::Refused(format!(
                "{what} pattern {p:?}: not a class pattern (empty, too long, or with a comma, semicolon, equals sign or control character)"
            )));
        }
    }
    Ok(())
}

/// A pattern the agent's option syntax carries as it is.
fn pattern_ok(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= MAX_PATTERN_BYTES
        && !p.contains([',', ';', '='])
        && !p.chars().any(char::is_control)
}

/// Whether `jvm` can have the window `req` asks for.
fn check_jvm(jvm: &HotspotJvm, req: &WindowRequest) -> Result<(), WindowError> {
    let pid = jvm.pid;
    if jvm.attach_disabled {
        return Err(WindowError::Refused(format!(
            "JVM {pid} runs with -XX:+DisableAttachMechanism: jpd cannot reach it (it is left as it is)"
        )));
    }
    match jvm.agent {
        AgentPresence::Dormant => Ok(()),
        AgentPresence::None if req.load_agent => Ok(()),
        AgentPresence::None => Err(WindowError::Refused(format!(
            "JVM {pid} runs without jp's agent, and only an explicit request (jpctl jvm profile) loads it"
        ))),
        AgentPresence::Live => Err(live_refusal(pid)),
        AgentPresence::WindowOpen(id) => Err(WindowError::Refused(format!(
            "JVM {pid} already has window {id} open"
        ))),
        AgentPresence::Unknown => Err(WindowError::Refused(format!(
            "JVM {pid} maps jp's agent but its state cannot be read (still loading?): try again"
        ))),
    }
}

fn live_refusal(pid: u32) -> WindowError {
    WindowError::Refused(format!(
        "JVM {pid} is profiled from start: its live tree is already exact: jpctl jvm tree {pid}"
    ))
}

/// The agent's `window=open` command (patterns were checked: no separators in them).
fn open_command(id: u64, req: &WindowRequest, dir_in_ns: &str) -> String {
    let mut c = format!(
        "window=open,id={id},seconds={},dir={dir_in_ns}",
        req.seconds
    );
    if !req.include.is_empty() {
        c += &format!(",include={}", req.include.join(";"));
    }
    if !req.exclude.is_empty() {
        c += &format!(",exclude={}", req.exclude.join(";"));
    }
    if let Some(b) = req.bba {
        c += &format!(",bba={}", b.as_str());
    }
    c
}

/// The scope as the agent names it, for a result that does not say.
fn scope_text(req: &WindowRequest) -> String {
    match (req.include.is_empty(), req.exclude.is_empty()) {
        (true, true) => "all application classes".into(),
        (false, true) => format!("include={}", req.include.join(";")),
        (true, false) => format!("exclude={}", req.exclude.join(";")),
        (false, false) => format!(
            "include={} exclude={}",
            req.include.join(";"),
            req.exclude.join(";")
        ),
    }
}

/// What `Agent_OnAttach`'s code `rc` (not 0) says, with the agent's own reason.
fn agent_refusal(pid: u32, rc: i32, reason: Option<String>) -> WindowError {
    let why = reason.map_or_else(String::new, |r| format!(": {r}"));
    match rc {
        1 => WindowError::Failed(format!("JVM {pid}'s agent refused the command{why}")),
        2 => WindowError::Refused(format!("JVM {pid} already has a window open{why}")),
        3 => live_refusal(pid),
        4 => WindowError::Failed(format!("JVM {pid}'s JVMTI refused the window{why}")),
        rc => WindowError::Failed(format!("JVM {pid}'s agent answered {rc}{why}")),
    }
}

/// A new window id: random, so unique across jpd's runs too (53 bits: exact in any
/// JSON reader).
fn new_window_id() -> u64 {
    (uuid::Uuid::new_v4().as_u64_pair().0 >> 11).max(1)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("a blocking task failed: {e}")))
}

/// One window, from the look at the JVM to the stored tree.
async fn run(
    inner: &Arc<Inner>,
    req: WindowRequest,
    config: &WindowsConfig,
) -> Result<Arc<WindowProfile>, WindowError> {
    let pid = req.pid;
    let jvm = {
        let attach = Arc::clone(&inner.attach);
        blocking(move || attach.jvm(pid))
            .await
            .map_err(WindowError::Refused)?
    };
    check_jvm(&jvm, &req)?;
    let id = new_window_id();
    let (dir, lib) = {
        let (attach, jvm, ours) = (
            Arc::clone(&inner.attach),
            jvm.clone(),
            config.library(&inner.exe),
        );
        blocking(move || Ok((attach.window_dir(&jvm)?, attach.stage_library(&jvm, &ours)?)))
            .await
            .map_err(|e| WindowError::Failed(format!("JVM {pid}: {e}")))?
    };
    let files = WindowFiles::new(&dir.host, id);
    let rc = {
        let (attach, jvm) = (Arc::clone(&inner.attach), jvm.clone());
        let (command, timeout) = (open_command(id, &req, &dir.in_ns), inner.timing.attach);
        blocking(move || attach.load_agent(&jvm, &lib, &command, timeout))
            .await
            .map_err(|e| WindowError::Failed(format!("cannot attach to JVM {pid}: {e}")))?
    };
    if rc != 0 {
        let reason = files.refusal();
        files.remove();
        return Err(agent_refusal(pid, rc, reason));
    }
    inner.counters.opened(req.origin);
    let opened = SystemTime::now();
    // `Agent_OnAttach` returns once the loaded classes in scope are rewritten: from
    // here on the window counts (the agent's state says "open" a little earlier).
    log::info!(
        "window {id} opened in JVM {pid} ({}): {}, {} s",
        jvm.main_class,
        scope_text(&req),
        req.seconds
    );
    if let Err(e) = wait_done(inner, &jvm, &files, req.seconds).await {
        files.remove();
        return Err(e);
    }
    let (meta, tree) = {
        let files = files.clone();
        blocking(move || {
            let r = files.read();
            files.remove();
            r
        })
        .await
        .map_err(|e| WindowError::Failed(format!("JVM {pid}: {e}")))?
    };
    let at = |key: &str, or: SystemTime| {
        meta.get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(or, |ms| UNIX_EPOCH + Duration::from_millis(ms))
    };
    let profile = Arc::new(WindowProfile {
        id,
        pid,
        start_time: jvm.start_time,
        main_class: jvm.main_class.clone(),
        scope: meta
            .get("scope")
            .cloned()
            .unwrap_or_else(|| scope_text(&req)),
        seconds: req.seconds,
        origin: req.origin,
        jdk_version: jdk_version(&meta, &jvm),
        opened: at("opened_unix_ms", opened),
        closed: at("closed_unix_ms", SystemTime::now()),
        tree,
        meta,
    });
    lock(&inner.store)
        .insert(Arc::clone(&profile))
        .map_err(|e| WindowError::Failed(format!("JVM {pid}: {e}")))?;
    Ok(profile)
}

/// Longest JVM version kept (a HotSpot `java.vm.version` is about 30 bytes).
const MAX_VERSION_BYTES: usize = 64;

/// The JVM's version: its agent's word (`java.vm.version`, what a JVM profiled from
/// start reports) when it is a plain short string, else its JDK's `release` file's.
fn jdk_version(meta: &std::collections::BTreeMap<String, String>, jvm: &HotspotJvm) -> String {
    meta.get("jdk_version")
        .filter(|v| {
            !v.is_empty() && v.len() <= MAX_VERSION_BYTES && v.chars().all(|c| c.is_ascii_graphic())
        })
        .or(jvm.java_version.as_ref())
        .cloned()
        .unwrap_or_default()
}

/// Waits for the agent's `window-ID.done`: the window's seconds, then the grace.
async fn wait_done(
    inner: &Inner,
    jvm: &HotspotJvm,
    files: &WindowFiles,
    seconds: u32,
) -> Result<(), WindowError> {
    let deadline = Instant::now() + Duration::from_secs(u64::from(seconds)) + inner.timing.grace;
    loop {
        if files.is_done() {
            return Ok(());
        }
        if !inner.attach.alive(jvm) {
            // It may have written its result at VM death, just before.
            if files.is_done() {
                return Ok(());
            }
            return Err(WindowError::Failed(format!(
                "JVM {} exited during the window, without a result",
                jvm.pid
            )));
        }
        if Instant::now() >= deadline {
            return Err(WindowError::Failed(format!(
                "JVM {} wrote no result {} s after the window's end",
                jvm.pid,
                inner.timing.grace.as_secs()
            )));
        }
        tokio::time::sleep(inner.timing.poll).await;
    }
}

#[cfg(test)]
mod tests;
