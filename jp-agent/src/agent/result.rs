//! A window's result: `DIR/window-ID.json` (the merged tree, `jp_mct::read_json`'s format),
//! then `DIR/window-ID.done` (`key=value` lines), each written to a temporary name and
//! renamed; or `DIR/window-ID.error`, one line, when a command is refused. Also the natives
//! the runtime calls at a window's close and while seeding.

use super::guard;
use super::registry::{Restored, REGISTRY};
use super::window::OpenState;
use crate::ffi::jni::{Env, JClass, JInt, JObject, JString, RawEnv};
use crate::log::say;
use crate::mct::Mct;
use crate::methods;
use crate::options::Format;
use crate::sync::lock;
use std::ffi::{c_void, CStr};
use std::fmt::Write as _;
use std::sync::Mutex;

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
    pub restore: Restored,
    pub loaded_in_window: u64,
}

fn path(dir: &str, id: u64, ext: &str) -> String {
    format!("{}/window-{id}.{ext}", dir.trim_end_matches('/'))
}

/// Writes `text` to `path` through a temporary name.
fn write_atomically(path: &str, text: &[u8]) -> std::io::Result<()> {
    let tmp = format!("{path}.{}.tmp", std::process::id());
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `DIR/window-ID.error`: one line, the reason a command was refused.
pub(super) fn write_error(dir: &str, id: u64, reason: &str) {
    let line = format!("{}\n", reason.replace('\n', " "));
    if let Err(e) = write_atomically(&path(dir, id, "error"), line.as_bytes()) {
        say!("jp-agent: window {id}: {reason} (and cannot write {dir}: {e})");
    }
}

/// The `.done` file's lines.
pub(super) fn done_text(c: &Closed, tree: &WindowTree) -> String {
    let o = c.open;
    let mut s = String::new();
    let contexts = tree.tree.nodes.len().saturating_sub(1);
    let lines: [(&str, String); 19] = [
        ("id", o.cmd.id.to_string()),
        ("pid", std::process::id().to_string()),
        ("seconds", o.cmd.seconds.to_string()),
        ("opened_unix_ms", o.opened_unix_ms.to_string()),
        ("closed_unix_ms", c.closed_unix_ms.to_string()),
        ("closed_by", c.by.name().to_string()),
        ("scope", o.cmd.scope_text.clone()),
        ("bba", o.opts.bba_name().to_string()),
        ("classes_transformed", o.transformed_at_open.to_string()),
        ("classes_skipped", o.skipped.to_string()),
        ("classes_loaded_in_window", c.loaded_in_window.to_string()),
        ("classes_restored", c.restore.restored.to_string()),
        (
            "retransformed_untransformed",
            c.restore.untransformed.to_string(),
        ),
        ("open_ms", o.open_ms.to_string()),
        ("close_ms", c.close_ms.to_string()),
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

/// `Rt.windowTree(parent, mid, calls, bytecodes, threads, seeded)`: the window's merged
/// tree (pre-order arrays, node 0 the root), during `Rt.closeWindow`.
#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn native_window_tree(
    raw: RawEnv,
    _cls: JClass,
    parent: JObject,
    mid: JObject,
    calls: JObject,
    bytecodes: JObject,
    threads: JInt,
    seeded: JInt,
) {
    guard((), || {
        // SAFETY: the JVM passes this thread's JNIEnv to a native method.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return;
        };
        let (p, m, c, b) = (
            env.int_array(parent),
            env.int_array(mid),
            env.long_array(calls),
            env.long_array(bytecodes),
        );
        let tree = {
            let table = methods::table();
            Mct::from_flat("default", &p, &m, &c, &b, |id| {
                table.as_ref().map(|t| t.info(id)).unwrap_or_default()
            })
        };
        match tree {
            Ok(tree) => {
                *lock(&CLOSED) = Some(WindowTree {
                    tree,
                    threads: u64::try_from(threads).unwrap_or(0),
                    seeded: u64::try_from(seeded).unwrap_or(0),
                })
            }
            Err(e) => say!("jp-agent: window tree: {e}"),
        }
    })
}

/// `Rt.seedMethod(class, name, descriptor)`: the id of a method of a class the open window
/// transformed (`class` in binary form, `a.b.C$D`), or -1: a frame of it running at the
/// switch seeds the thread's context path.
unsafe extern "system" fn native_seed_method(
    raw: RawEnv,
    _cls: JClass,
    class: JString,
    name: JString,
    descriptor: JString,
) -> JInt {
    guard(-1, || {
        // SAFETY: as in native_window_tree.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return -1;
        };
        let (Some(class), Some(name), Some(desc)) =
            (env.string(class), env.string(name), env.string(descriptor))
        else {
            return -1;
        };
        let class = class.replace('.', "/");
        if !lock(&REGISTRY).has_name(&class) {
            return -1;
        }
        methods::table()
            .as_ref()
            .and_then(|t| t.find(&class, &name, &desc))
            .and_then(|id| JInt::try_from(id).ok())
            .unwrap_or(-1)
    })
}

/// The natives of `jp.rt.Rt` windows use.
pub(super) fn natives() -> [(&'static CStr, &'static CStr, *mut c_void); 2] {
    [
        (
            c"windowTree",
            c"([I[I[J[JII)V",
            native_window_tree as *mut c_void,
        ),
        (
            c"seedMethod",
            c"(Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;)I",
            native_seed_method as *mut c_void,
        ),
    ]
}
