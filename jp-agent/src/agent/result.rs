//! A window's result: `DIR/window-ID.json` (the merged tree, `jp_mct::read_json`'s format),
//! then `DIR/window-ID.done` (`key=value` lines), each written to a temporary name and
//! renamed; or `DIR/window-ID.error`, one line, when a command is refused. Also the native
//! the runtime hands a window's merged tree to.

use super::guard;
use super::registry::Restored;
use crate::command::OpenWindow;
use crate::ffi::jni::{Env, JClass, JObject, RawEnv};
use crate::log::say;
use crate::mct::Mct;
use crate::options::Format;
use crate::options::Options;
use crate::sync::lock;
use std::ffi::{c_void, CStr};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::Mutex;

/// The window open now, and what it measured while opening.
pub(super) struct OpenState {
    pub cmd: OpenWindow,
    pub opts: Arc<Options>,
    pub opened_unix_ms: u64,
    pub open_ms: u64,
    /// CPU time of the thread that opened (its wall minus its wait for a CPU).
    pub open_cpu_ms: u64,
    /// Of that: the class-file hook rewriting the classes being retransformed (CPU).
    pub open_hook_ms: u64,
    pub longest_retransform_ms: u64,
    pub transformed_at_open: u64,
    pub skipped: u64,
    /// Of the skipped: refused by the rewriter in an earlier window, not retransformed again.
    pub refused_earlier: u64,
    /// Of the skipped: classes whose initialization failed (they can never run).
    pub unusable: u64,
    /// `java.vm.version`, as the live view's HELLO names the JVM: jpd's resource of
    /// the window says the same as a JVM profiled from start.
    pub jdk_version: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClosedBy {
    Deadline,
    Request,
    VmDeath,
}

impl ClosedBy {
    fn name(self) -> &'static str {
        match self {
            ClosedBy::Deadline => "deadline",
            ClosedBy::Request => "request",
            ClosedBy::VmDeath => "vm_death",
        }
    }
}

/// The merged tree `Rt.closeWindow` hands over, with what it counted.
pub(super) struct WindowTree {
    pub tree: Mct,
    pub threads: u64,
    pub seeded: u64,
}

/// Set by `Rt.windowTree` during `Rt.closeWindow`, taken by the closing thread.
pub(super) static CLOSED: Mutex<Option<WindowTree>> = Mutex::new(None);

/// What the close knows besides the tree.
pub(super) struct Closed<'a> {
    pub open: &'a OpenState,
    pub by: ClosedBy,
    pub closed_unix_ms: u64,
    pub close_ms: u64,
    pub close_cpu_ms: u64,
    pub restore: Restored,
    pub loaded_in_window: u64,
}

fn path(dir: &str, id: u64, ext: &str) -> String {
    format!("{}/window-{id}.{ext}", dir.trim_end_matches('/'))
}

/// Writes `text` to `path` through a temporary name (see [`crate::replace`]).
fn write_atomically(path: &str, text: &[u8]) -> std::io::Result<()> {
    crate::replace::replace_file(path, text)
}

/// `DIR/window-ID.error`: one line, the reason a command was refused.
pub(super) fn write_error(dir: &str, id: u64, reason: &str) {
    let line = format!("{}\n", reason.replace('\n', " "));
    if let Err(e) = write_atomically(&path(dir, id, "error"), line.as_bytes()) {
        say!("jp-agent: window {id}: {reason} (and cannot write {dir}: {e})");
    }
}

/// The scope as asked, and `jdk=true` when the JDK's classes were in it (from the
/// command or the start options): a reader must not take such a tree for the
/// application's alone.
fn scope_line(o: &OpenState) -> String {
    if o.opts.jdk {
        format!("{} jdk=true", o.cmd.scope_text)
    } else {
        o.cmd.scope_text.clone()
    }
}

/// The `.done` file's lines.
pub(super) fn done_text(c: &Closed, tree: &WindowTree) -> String {
    let o = c.open;
    let mut s = String::new();
    let contexts = tree.tree.nodes.len().saturating_sub(1);
    let lines: [(&str, String); 25] = [
        ("id", o.cmd.id.to_string()),
        ("pid", std::process::id().to_string()),
        ("seconds", o.cmd.seconds.to_string()),
        ("opened_unix_ms", o.opened_unix_ms.to_string()),
        ("closed_unix_ms", c.closed_unix_ms.to_string()),
        ("closed_by", c.by.name().to_string()),
        ("scope", scope_line(o)),
        ("bba", o.opts.bba_name().to_string()),
        ("jdk_version", o.jdk_version.clone()),
        ("classes_transformed", o.transformed_at_open.to_string()),
        ("classes_skipped", o.skipped.to_string()),
        ("classes_refused_earlier", o.refused_earlier.to_string()),
        ("classes_unusable", o.unusable.to_string()),
        ("classes_loaded_in_window", c.loaded_in_window.to_string()),
        ("classes_restored", c.restore.restored.to_string()),
        (
            "retransformed_untransformed",
            c.restore.untransformed.to_string(),
        ),
        ("open_ms", o.open_ms.to_string()),
        ("close_ms", c.close_ms.to_string()),
        ("open_cpu_ms", o.open_cpu_ms.to_string()),
        ("open_hook_ms", o.open_hook_ms.to_string()),
        ("close_cpu_ms", c.close_cpu_ms.to_string()),
        (
            "longest_retransform_ms",
            o.longest_retransform_ms
                .max(c.restore.longest_ms)
                .to_string(),
        ),
        ("seeded_contexts", tree.seeded.to_string()),
        ("threads", tree.threads.to_string()),
        ("contexts", contexts.to_string()),
    ];
    for (k, v) in lines {
        let _ = writeln!(s, "{k}={}", v.replace('\n', " "));
    }
    s
}

/// The tree, then the `.done` file that tells a reader the tree is complete.
pub(super) fn write_result(c: &Closed, tree: &WindowTree) -> std::io::Result<()> {
    let (dir, id) = (&c.open.cmd.dir, c.open.cmd.id);
    super::write_file(&tree.tree, Format::Json, &path(dir, id, "json"))?;
    write_atomically(&path(dir, id, "done"), done_text(c, tree).as_bytes())
}

/// `Rt.windowTree(parent, mid, calls, bytecodes, {threads, seeded})`: the window's merged
/// tree (pre-order arrays, node 0 the root), during `Rt.closeWindow`.
unsafe extern "system" fn native_window_tree(
    raw: RawEnv,
    _cls: JClass,
    parent: JObject,
    mid: JObject,
    calls: JObject,
    bytecodes: JObject,
    counts: JObject,
) {
    guard((), || {
        // SAFETY: the JVM passes this thread's JNIEnv to a native method.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return;
        };
        let counts = env.int_array(counts);
        let count = |i: usize| {
            counts
                .get(i)
                .and_then(|&n| u64::try_from(n).ok())
                .unwrap_or(0)
        };
        let (threads, seeded) = (count(0), count(1));
        match super::natives::flat_tree(env, "default", [parent, mid, calls, bytecodes]) {
            Ok(tree) => {
                *lock(&CLOSED) = Some(WindowTree {
                    tree,
                    threads,
                    seeded,
                })
            }
            Err(e) => say!("jp-agent: window tree: {e}"),
        }
    })
}

/// The natives of `jp.rt.Rt` windows use.
pub(super) fn natives() -> [(&'static CStr, &'static CStr, *mut c_void); 1] {
    [(
        c"windowTree",
        c"([I[I[J[J[I)V",
        native_window_tree as *mut c_void,
    )]
}
