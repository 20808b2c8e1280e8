//! The service's one seam to the JVMs: finding a HotSpot JVM, its window directory,
//! staging the agent library in it and HotSpot's dynamic attach (`windows::hotspot`,
//! `windows::attach`). A trait so that the service's rules (limits, refusals, time-outs,
//! hostile result files) are tested without a JVM.
use std::path::Path;
use std::time::Duration;

use super::attach::{self, WindowDir};
use super::hotspot::{self, HotspotJvm};

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
        hotspot::hotspot_jvm(pid).map_err(|e| e.to_string())
    }

    fn window_dir(&self, jvm: &HotspotJvm) -> Result<WindowDir, String> {
        attach::window_dir(jvm).map_err(|e| e.to_string())
    }

    fn stage_library(&self, jvm: &HotspotJvm, ours: &Path) -> Result<String, String> {
        attach::stage_library(jvm, ours).map_err(|e| e.to_string())
    }

    fn load_agent(
        &self,
        jvm: &HotspotJvm,
        lib_in_ns: &str,
        command: &str,
        timeout: Duration,
    ) -> Result<i32, String> {
        attach::load_agent(jvm, lib_in_ns, command, timeout).map_err(|e| e.to_string())
    }

    /// Polled while a window is open: only whether the pid still runs (a pid reused
    /// within a window's seconds is not worth a read of the JVM's maps each time).
    fn alive(&self, jvm: &HotspotJvm) -> bool {
        attach::error::process_exists(jvm.pid)
    }
}
