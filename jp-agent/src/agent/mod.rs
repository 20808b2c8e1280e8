//! The JVMTI agent: start-up (`-agentpath` and `-javaagent`), the class-file hook, thread end
//! and VM death events, and the native methods of `jp.rt.Rt`.
//!
//! Every `extern` entry point runs its body inside [`guard`], so a panic never unwinds into
//! the JVM; errors are printed and the class or event is left alone.
//!
//! - [`startup`]: `Agent_OnLoad`, the `-javaagent` native, VM init (binding `jp.rt.Rt`).
//! - [`events`]: the JVMTI events (VM init and death, thread end, class-file load).
//! - [`natives`]: the native methods of `jp.rt.Rt` (profile writing, USDT firing).
//! - [`attach`]: `Agent_OnAttach`, the way in for a JVM started dormant or without the agent.
//! - [`vthreads`]: virtual threads' mounts, which repoint their carrier's context slot.
//! - [`window`]: exact windows: open (instrument a scope), close (restore, write the tree).
//!
//! This module holds the state they share.

mod attach;
mod events;
mod heap;
mod natives;
mod registry;
mod result;
mod runtime;
mod seeding;
mod startup;
mod vthreads;
mod window;

pub use natives::write_file;

use crate::ffi::jni::{Env, JClass, JMethodId, JObject, RawVm};
use crate::ffi::jvmti::Jvmti;
use crate::log::say;
use crate::options::Options;
use crate::stats::Stats;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::OnceLock;

pub static STATS: Stats = Stats::new();

struct Agent {
    jvmti: Jvmti,
    opts: Options,
    /// Whether the env holds can_retransform_classes (jdk=true or -javaagent).
    can_retransform: bool,
    /// Enter methods through `Rt.enterOutOfLine` (decided by the JDK's version at start).
    out_of_line_entry: bool,
    /// The JVM, for the threads the agent attaches itself (a window's deadline).
    vm: Vm,
}

/// The `JavaVM` pointer.
#[derive(Clone, Copy)]
struct Vm(RawVm);

// SAFETY: a JavaVM pointer is valid on every thread for the life of the VM (JNI spec,
// "Invocation API": any thread may call AttachCurrentThread through it).
unsafe impl Send for Vm {}
// SAFETY: as above; the pointer is never written.
unsafe impl Sync for Vm {}

/// What the agent needs of `jp.rt.Rt` once the VM is initialized.
struct JavaSide {
    rt: JClass,
    thread_ended: JMethodId,
    vm_death: JMethodId,
    /// `Rt.openWindow` and `Rt.closeWindow`: fresh trees for a window, and its merged tree.
    open_window: JMethodId,
    close_window: JMethodId,
    /// Global ref to the platform class loader (its classes count as JDK classes).
    platform_loader: JObject,
}

// SAFETY: global references and method ids are valid on every thread (JNI spec).
unsafe impl Send for JavaSide {}
// SAFETY: as above; they are never mutated after creation.
unsafe impl Sync for JavaSide {}

static AGENT: OnceLock<Agent> = OnceLock::new();
static JAVA: OnceLock<JavaSide> = OnceLock::new();
/// Set at VM init: from then on JDK classes may be instrumented (before it, `jp.rt` cannot
/// be relied on to load).
static LIVE: AtomicBool = AtomicBool::new(false);
/// Time spent in VM death (merging the trees and writing the profile), for the statistics.
static VM_DEATH_MS: AtomicU64 = AtomicU64::new(0);

fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            say!("jp-agent: internal error (panic caught at the JVM boundary); continuing");
            fallback
        }
    }
}

/// The statistics as printed (and as `Rt.agentStats()` returns them).
pub fn stats_summary() -> String {
    STATS.summary()
}

pub(super) fn is_jdk_loader(env: Env, loader: JObject) -> bool {
    if loader.is_null() {
        return true;
    }
    match JAVA.get() {
        Some(j) if !j.platform_loader.is_null() => env.is_same_object(loader, j.platform_loader),
        _ => false,
    }
}

impl Agent {
    /// The internal name (`pkg/Name`) of a class; None for arrays and primitives.
    fn class_name(&self, class: JClass) -> Option<String> {
        let sig = self.jvmti.class_signature(class)?;
        internal_name(&sig).map(str::to_string)
    }
}

/// The internal name (`pkg/Name`) of a class by its JVM signature (`Lpkg/Name;`); None for
/// arrays and primitives.
pub(super) fn internal_name(signature: &str) -> Option<&str> {
    signature.strip_prefix('L')?.strip_suffix(';')
}
