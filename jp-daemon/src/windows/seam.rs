//! The service's one seam to the JVMs: finding a HotSpot JVM, its window directory,
//! staging the agent library in it and HotSpot's dynamic attach (`windows::hotspot`,
//! `windows::attach`). A trait so that the service's rules (limits, refusals, time-outs,
//! hostile result files) are tested without a JVM.
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the service does to JVMs; every call blocks (run it on the blocking pool).
/// Errors are one line a user understands.
pub trait AttachJvm: Send + Sync + 'static {
    /// The HotSpot JVM `pid`, or why it is none.
    fn jvm(&self, pid: u32) -> Result<HotspotJvm, String>;
    /// The directory for window results, in the JVM's /tmp.
    fn window_dir(&self, jvm: &HotspotJvm) -> Result<WindowDir, String>;
    /// The agent library's path as the JVM sees it (its own when it maps one).
    fn stage_library(&self, jvm: &HotspotJvm, ours: &Path) -> Result<String, String>;
    /// Loads the library with `command` as its options: `Agent_OnAttach`'s code.
    fn load_agent(
        &self,
        jvm: &HotspotJvm,
        lib_in_ns: &str,
        command: &str,
        timeout: Duration,
    ) -> Result<i32, String>;
    /// Whether `jvm` still runs (the same process: pid and start time).
    fn alive(&self, jvm: &HotspotJvm) -> bool;
}

/// The real JVMs of this host.
pub struct HotspotAttach;

impl AttachJvm for HotspotAttach {
    fn jvm(&self, pid: u32) -> Result<HotspotJvm, String> {
        Err(format!(
            "pid {pid}: this jpd was built without HotSpot attach"
        ))
    }

    fn window_dir(&self, _: &HotspotJvm) -> Result<WindowDir, String> {
        Err("this jpd was built without HotSpot attach".into())
    }

    fn stage_library(&self, _: &HotspotJvm, _: &Path) -> Result<String, String> {
        Err("this jpd was built without HotSpot attach".into())
    }

    fn load_agent(&self, _: &HotspotJvm, _: &str, _: &str, _: Duration) -> Result<i32, String> {
        Err("this jpd was built without HotSpot attach".into())
    }

    fn alive(&self, jvm: &HotspotJvm) -> bool {
        Path::new(&format!("/proc/{}", jvm.pid)).exists()
    }
}

// The JVM as `windows::hotspot` describes it, until that module lands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotspotJvm {
    pub pid: u32,
    pub start_time: u64,
    pub uid: u32,
    pub gid: u32,
    pub nspid: u32,
    pub main_class: String,
    pub java_version: Option<String>,
    pub agent: AgentPresence,
    pub agent_path: Option<String>,
    pub attach_disabled: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentPresence {
    None,
    Live,
    Dormant,
    WindowOpen(u64),
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowDir {
    pub host: PathBuf,
    pub in_ns: String,
}
