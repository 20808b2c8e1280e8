//! Exact windows (docs/agent-design.md, "Exact windows"): a dormant agent instruments the
//! loaded classes of a scope for a while, the threads build fresh trees, and at the close
//! the classes it transformed get their original bytes back and the merged tree is written
//! to `DIR/window-ID.json`, then `DIR/window-ID.done`.
//!
//! One window at a time. Commands (the attach thread), the deadline (a thread of the
//! agent's own) and VM death take [`WINDOW`] for the whole open or close; the class-file
//! hook never takes it (it runs inside the open's retransformation), only [`SCOPE`] and
//! [`REGISTRY`].

use super::registry::{chunk_size, elapsed_ms, thread_cpu_ns, Registry, REGISTRY};
use super::runtime::{bind_java_side, define_runtime_classes, register_natives, start_runtime};
use super::{is_jdk_loader, Agent, AGENT, JAVA, LIVE, STATS};
use crate::command::{code, Command, OpenWindow};
use crate::ffi::jni::{self, Env, JClass};
use crate::ffi::jvmti;
use crate::filter::{decide, Decision};
use crate::log::say;
use crate::mct::Mct;
use crate::options::{Mode, Options, Publish};
use crate::sync::lock;
use crate::usdt::probe::jp_usdt_control;
use jp_common::wire;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::result::{write_error, write_result, Closed, ClosedBy, OpenState, WindowTree, CLOSED};

#[derive(Default)]
struct WindowSlot {
    open: Option<OpenState>,
    /// `jp.rt` is on the boot class path, bound and initialized for windows.
    runtime_up: bool,
}

static WINDOW: Mutex<WindowSlot> = Mutex::new(WindowSlot {
    open: None,
    runtime_up: false,
});

/// The options the class-file hook instruments with while a window is open (None: the
/// hook leaves every class alone).
static SCOPE: RwLock<Option<Arc<Options>>> = RwLock::new(None);

/// Bumped at every open and close, so that a deadline thread closes only its own window.
static DEADLINE: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

/// The scope the hook instruments with now (dormant mode: only while a window is open).
pub(super) fn scope() -> Option<Arc<Options>> {
    match SCOPE.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

fn set_scope(s: Option<Arc<Options>>) {
    match SCOPE.write() {
        Ok(mut g) => *g = s,
        Err(p) => *p.into_inner() = s,
    }
}

pub(super) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A command that failed before it could run: its reason into `DIR/window-ID.error` when
/// the command names both.
pub(super) fn refuse_command(command: &str, reason: &str) {
    let (id, dir) = match Command::parse(command) {
        Ok(Command::Open(w)) => (Some(w.id), Some(w.dir)),
        Ok(Command::Close { id, dir }) => (Some(id), dir),
        Ok(Command::Load) => (None, None),
        Err(e) => (e.id, e.dir),
    };
    if let (Some(id), Some(dir)) = (id, dir) {
        write_error(&dir, id, reason);
    }
}

/// Runs one `Agent_OnAttach` command; returns its code (`command::code`).
pub(super) fn run_command(env: Env, command: &str) -> i32 {
    let Some(agent) = AGENT.get() else {
        return code::JVMTI_REFUSED;
    };
    let cmd = match Command::parse(command) {
        Ok(c) => c,
        Err(e) => {
            say!("jp-agent: bad command '{command}': {}", e.reason);
            if let (Some(id), Some(dir)) = (e.id, &e.dir) {
                write_error(dir, id, &format!("bad command: {}", e.reason));
            }
            return code::BAD_COMMAND;
        }
    };
    let refuse = |id: u64, dir: Option<&str>, code: i32, reason: &str| {
        if let Some(dir) = dir {
            write_error(dir, id, reason);
        }
        code
    };
    match cmd {
        Command::Load => code::ACCEPTED,
        Command::Open(w) if agent.opts.mode == Mode::Live => refuse(
            w.id,
            Some(&w.dir),
            code::PROFILED_FROM_START,
            "this JVM is profiled from start (mode=live): its live tree is already exact",
        ),
        Command::Close { id, dir } if agent.opts.mode == Mode::Live => refuse(
            id,
            dir.as_deref(),
            code::PROFILED_FROM_START,
            "this JVM is profiled from start (mode=live): it has no windows",
        ),
        Command::Open(w) => {
            let mut slot = lock(&WINDOW);
            if let Some(open) = &slot.open {
                let reason = format!("window {} is open", open.cmd.id);
                return refuse(w.id, Some(&w.dir), code::WINDOW_OPEN, &reason);
            }
            let (id, dir) = (w.id, w.dir.clone());
            match open_window(env, agent, &mut slot, w) {
                Ok(()) => code::ACCEPTED,
                Err(e) => refuse(id, Some(&dir), code::JVMTI_REFUSED, &e),
            }
        }
        Command::Close { id, dir } => {
            let mut slot = lock(&WINDOW);
            if slot.open.as_ref().is_none_or(|o| o.cmd.id != id) {
                return refuse(
                    id,
                    dir.as_deref(),
                    code::NO_SUCH_WINDOW,
                    "no such window is open",
                );
            }
            close_window(env, agent, &mut slot, ClosedBy::Request);
            code::ACCEPTED
        }
    }
}

/// Brings `jp.rt` up once, for windows: defined into the boot loader, natives bound,
/// `Rt.init` with the window profiler (no live view, no pacer).
fn bring_up_runtime(env: Env, agent: &Agent) -> Result<(), String> {
    define_runtime_classes(env)?;
    let rt = env
        .find_class("jp/rt/Rt")
        .ok_or("jp.rt.Rt is not in the boot loader")?;
    register_natives(env, rt)?;
    let init = bind_java_side(env, rt)?;
    start_runtime(env, rt, init, agent, "window", Publish::Off)?;
    LIVE.store(true, Ordering::Release);
    agent.jvmti.enable(jvmti::EVENT_THREAD_END)?;
    Ok(())
}

fn open_window(
    env: Env,
    agent: &Agent,
    slot: &mut WindowSlot,
    cmd: OpenWindow,
) -> Result<(), String> {
    if !slot.runtime_up {
        bring_up_runtime(env, agent)?;
        slot.runtime_up = true;
    }
    let java = JAVA.get().ok_or("the runtime is not bound")?;
    let t0 = Instant::now();
    let cpu0 = thread_cpu_ns();
    let hook0 = STATS.retransform_rewrite_nanos.load(Ordering::Relaxed);
    let opened_unix_ms = unix_ms(SystemTime::now());
    *lock(&REGISTRY) = Registry::default();
    if !env.call_static_void(java.rt, java.open_window, &[]) {
        return Err("jp.rt.Rt.openWindow failed".into());
    }
    let opts = Arc::new(cmd.options(&agent.opts));
    set_scope(Some(opts.clone()));
    let hooks = agent
        .jvmti
        .enable(jvmti::EVENT_CLASS_LOAD)
        .and_then(|()| agent.jvmti.enable(jvmti::EVENT_CLASS_FILE_LOAD_HOOK));
    if let Err(e) = hooks {
        set_scope(None);
        let _ = agent.jvmti.disable(jvmti::EVENT_CLASS_FILE_LOAD_HOOK);
        let _ = agent.jvmti.disable(jvmti::EVENT_CLASS_LOAD);
        env.call_static_void(java.rt, java.close_window, &[]);
        return Err(e);
    }
    jp_usdt_control.set_agent_state(wire::AGENT_STATE_WINDOW_OPEN, cmd.id);
    let done = instrument_loaded(env, agent, &opts);
    let state = OpenState {
        cmd,
        opts,
        opened_unix_ms,
        open_ms: elapsed_ms(t0),
        open_cpu_ms: thread_cpu_ns().saturating_sub(cpu0) / 1_000_000,
        open_hook_ms: STATS
            .retransform_rewrite_nanos
            .load(Ordering::Relaxed)
            .saturating_sub(hook0)
            / 1_000_000,
        longest_retransform_ms: done.longest_ms,
        transformed_at_open: done.transformed,
        skipped: done.skipped,
        refused_earlier: done.refused_earlier,
        unusable: done.unusable,
        jdk_version: agent
            .jvmti
            .system_property("java.vm.version")
            .unwrap_or_default(),
    };
    let (id, seconds) = (state.cmd.id, state.cmd.seconds);
    slot.open = Some(state);
    start_deadline(agent, id, seconds);
    Ok(())
}

/// The loaded classes in the window's scope, sorted.
struct InScope {
    /// May be retransformed, not refused before, not in the error state.
    todo: Vec<JClass>,
    skipped: u64,
    refused_earlier: u64,
    /// Of the skipped: classes whose initialization failed (they never run again).
    unusable: u64,
}

/// The loaded classes the window's scope selects, that may be retransformed and that the
/// rewriter did not refuse before. A class whose initialization failed is left out: it
/// can never run, and HotSpot refuses to redefine it, which fails its whole chunk after
/// the hook and the parsing of every class before it (a JDK 25 jython open spent ~40 %
/// of its CPU halving such chunks).
fn classes_in_scope(env: Env, agent: &Agent, opts: &Options) -> InScope {
    let jvmti = agent.jvmti;
    let classes = match jvmti.loaded_classes() {
        Ok(c) => c,
        Err(e) => {
            say!("jp-agent: warning: {e}; the window instruments only classes loaded from now");
            return InScope {
                todo: Vec::new(),
                skipped: 0,
                refused_earlier: 0,
                unusable: 0,
            };
        }
    };
    let refused = lock(&super::registry::UNTRANSFORMABLE).clone();
    let mut todo = Vec::new();
    let mut skipped = 0;
    let mut refused_earlier = 0;
    let mut unusable = 0;
    for c in classes {
        let name = agent.class_name(c);
        let in_scope = name.as_deref().is_some_and(|name| {
            let loader = jvmti.class_loader(c);
            let jdk = is_jdk_loader(env, loader);
            env.delete_local_ref(loader);
            decide(opts, name, jdk) == Decision::Instrument
        });
        if !in_scope {
            env.delete_local_ref(c);
        } else if name.is_some_and(|n| refused.contains(&n)) {
            skipped += 1;
            refused_earlier += 1;
            env.delete_local_ref(c);
        } else if !jvmti.is_modifiable(c) {
            skipped += 1;
            env.delete_local_ref(c);
        } else if jvmti
            .class_status(c)
            .is_some_and(|s| s & jvmti::CLASS_STATUS_ERROR != 0)
        {
            skipped += 1;
            unusable += 1;
            env.delete_local_ref(c);
        } else {
            todo.push(c);
        }
    }
    InScope {
        todo,
        skipped,
        refused_earlier,
        unusable,
    }
}

/// What the open's retransformation did.
struct Instrumented {
    transformed: u64,
    skipped: u64,
    refused_earlier: u64,
    unusable: u64,
    longest_ms: u64,
}

/// Retransforms the loaded classes in scope, in chunks.
fn instrument_loaded(env: Env, agent: &Agent, opts: &Options) -> Instrumented {
    let InScope {
        todo,
        mut skipped,
        refused_earlier,
        unusable,
    } = classes_in_scope(env, agent, opts);
    let mut longest = 0;
    let mut transformed = 0;
    for chunk in todo.chunks(chunk_size(todo.len())) {
        let ok = retransform_halving(env, agent, chunk, &mut longest);
        transformed += ok;
        skipped += chunk.len() as u64 - ok.min(chunk.len() as u64);
    }
    for c in todo {
        env.delete_local_ref(c);
    }
    Instrumented {
        transformed,
        skipped,
        refused_earlier,
        unusable,
        longest_ms: longest,
    }
}

/// Retransforms `classes` in one call; returns how many the agent transformed. One bad
/// class fails the whole call and none is changed: the halves are tried apart, down to the
/// bad class alone, which is refused for good. One by one instead, a JDK 25 jython window
/// whose chunk held one such class paused the JVM 514 times; halving costs about two calls
/// per level for each bad class (a failing call stops before its safepoint).
fn retransform_halving(env: Env, agent: &Agent, classes: &[JClass], longest: &mut u64) -> u64 {
    let t0 = Instant::now();
    let result = agent.jvmti.retransform(classes);
    *longest = (*longest).max(elapsed_ms(t0));
    match result {
        Ok(()) => lock(&REGISTRY).commit(),
        Err(e) => {
            lock(&REGISTRY).discard(env);
            if let [c] = classes {
                super::registry::refuse(&class_name(agent, *c));
                if agent.opts.warn {
                    say!(
                        "jp-agent: warning: {} stays uninstrumented: {e}",
                        class_name(agent, *c)
                    );
                }
                return 0;
            }
            let (a, b) = classes.split_at(classes.len() / 2);
            retransform_halving(env, agent, a, longest)
                + retransform_halving(env, agent, b, longest)
        }
    }
}

fn class_name(agent: &Agent, c: JClass) -> String {
    agent.class_name(c).unwrap_or_default()
}

/// Closes the open window: the hook off, the classes this agent transformed back to their
/// original bytes (not at VM death: nothing runs after it), every thread's tree merged and
/// written, the agent dormant again.
fn close_window(env: Env, agent: &Agent, slot: &mut WindowSlot, by: ClosedBy) {
    let Some(open) = slot.open.take() else {
        return;
    };
    {
        let (gen, cv) = &DEADLINE;
        *lock(gen) += 1;
        cv.notify_all();
    }
    let t0 = Instant::now();
    let cpu0 = thread_cpu_ns();
    let _ = agent.jvmti.disable(jvmti::EVENT_CLASS_FILE_LOAD_HOOK);
    set_scope(None);
    let registry = std::mem::take(&mut *lock(&REGISTRY));
    let restore = if by == ClosedBy::VmDeath {
        super::registry::Restored::default()
    } else {
        registry.restore(agent)
    };
    let _ = agent.jvmti.disable(jvmti::EVENT_CLASS_LOAD);
    if let Some(java) = JAVA.get() {
        env.call_static_void(java.rt, java.close_window, &[]);
    }
    let tree = lock(&CLOSED).take();
    let loaded_in_window = registry.loaded_in_window;
    registry.release(env);
    let closed = Closed {
        open: &open,
        by,
        closed_unix_ms: unix_ms(SystemTime::now()),
        close_ms: elapsed_ms(t0),
        close_cpu_ms: thread_cpu_ns().saturating_sub(cpu0) / 1_000_000,
        restore,
        loaded_in_window,
    };
    let mut tree = tree.unwrap_or_else(|| WindowTree {
        tree: Mct::new("default"),
        threads: 0,
        seeded: 0,
    });
    tree.tree.bba = open.opts.bba_name().to_string();
    if let Err(e) = write_result(&closed, &tree) {
        say!(
            "jp-agent: cannot write the result of window {}: {e}",
            open.cmd.id
        );
        write_error(
            &open.cmd.dir,
            open.cmd.id,
            &format!("cannot write the result: {e}"),
        );
    }
    jp_usdt_control.set_agent_state(wire::AGENT_STATE_DORMANT, open.cmd.id);
}

/// VM death: an open window closes (its result is written; classes are not restored).
/// A close already under way on the deadline thread, which the dying VM may have stopped
/// in Java code, is waited for two seconds at most: the VM's exit must not hang on it.
pub(super) fn close_at_vm_death(env: Env) {
    let Some(agent) = AGENT.get() else {
        return;
    };
    let t0 = Instant::now();
    loop {
        match WINDOW.try_lock() {
            Ok(mut slot) => return close_window(env, agent, &mut slot, ClosedBy::VmDeath),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                return close_window(env, agent, &mut p.into_inner(), ClosedBy::VmDeath)
            }
            Err(std::sync::TryLockError::WouldBlock) if t0.elapsed() < Duration::from_secs(2) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    }
}

/// A thread of the agent's own that closes window `id` at its deadline, also when nobody
/// asks (jpd may be gone). Attached to the JVM as a daemon: it never holds the VM up.
fn start_deadline(agent: &Agent, id: u64, seconds: u32) {
    let generation = {
        let (gen, _) = &DEADLINE;
        let mut g = lock(gen);
        *g += 1;
        *g
    };
    let vm = agent.vm;
    let deadline = Instant::now() + Duration::from_secs(u64::from(seconds));
    let spawned = std::thread::Builder::new()
        .name("jp-window-deadline".into())
        .spawn(move || {
            let vm = vm;
            if !wait_for_deadline(generation, deadline) {
                return;
            }
            // SAFETY: vm is the JavaVM the agent was started with; this native thread has
            // no Java frames.
            let Some(env) = (unsafe { jni::vm_attach_daemon(vm.0, c"jp-window-deadline") }) else {
                say!("jp-agent: cannot attach the deadline thread; window {id} stays open");
                return;
            };
            if let Some(agent) = AGENT.get() {
                let mut slot = lock(&WINDOW);
                if slot.open.as_ref().is_some_and(|o| o.cmd.id == id)
                    && *lock(&DEADLINE.0) == generation
                {
                    close_window(env, agent, &mut slot, ClosedBy::Deadline);
                }
            }
            // SAFETY: attached above, no Java frames on this thread.
            unsafe { jni::vm_detach(vm.0) };
        });
    if let Err(e) = spawned {
        say!("jp-agent: cannot start the deadline thread of window {id}: {e}");
    }
}

/// Waits until `deadline`; false if the window closed (or another opened) before.
fn wait_for_deadline(generation: u64, deadline: Instant) -> bool {
    let (gen, cv) = &DEADLINE;
    let mut g = lock(gen);
    loop {
        if *g != generation {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        g = match cv.wait_timeout(g, deadline - now) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
}
