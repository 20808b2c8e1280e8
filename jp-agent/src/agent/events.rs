//! The JVMTI events the agent enables: VM init and death, thread end, class-file load.

use super::{guard, is_jdk_loader, registry, window, Agent, AGENT, JAVA, LIVE, STATS, VM_DEATH_MS};
use crate::classfile::{rewrite_class, RewriteOptions, Rewritten};
use crate::ffi::jni::{Env, JClass, JInt, JObject, JValue, RawEnv};
use crate::ffi::jvmti::RawJvmti;
use crate::filter::{decide, Decision};
use crate::log::say;
use crate::methods::GlobalIds;
use crate::options::{Mode, Options};
use std::ffi::{c_char, c_uchar, CStr};
use std::sync::atomic::Ordering;
use std::time::Instant;

pub(super) unsafe extern "system" fn on_vm_death(_jvmti: RawJvmti, raw: RawEnv) {
    guard((), || {
        // SAFETY: as in on_vm_init.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return;
        };
        let t0 = Instant::now();
        window::close_at_vm_death(env);
        if let Some(j) = JAVA.get() {
            env.call_static_void(j.rt, j.vm_death, &[]);
        }
        VM_DEATH_MS.store(
            u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let folded = STATS.calls_folded.load(Ordering::Relaxed)
            + STATS.merged_contexts_folded.load(Ordering::Relaxed);
        if let Some(a) = AGENT.get().filter(|a| a.opts.warn && folded > 0) {
            let per_thread = match a.opts.max_thread_contexts {
                0 => String::new(),
                n => format!(", max_thread_contexts={n}"),
            };
            say!(
                "jp-agent: warning: a context limit was reached (max_contexts={}{per_thread}): \
                 {} calls and {} merged contexts were counted in '{}.{}' nodes instead of \
                 contexts of their own",
                STATS.context_budget.load(Ordering::Relaxed),
                STATS.calls_folded.load(Ordering::Relaxed),
                STATS.merged_contexts_folded.load(Ordering::Relaxed),
                crate::methods::OVERFLOW_CLASS,
                crate::methods::OVERFLOW_NAME,
            );
        }
        if AGENT.get().is_some_and(|a| a.opts.stats) {
            say!(
                "jp-agent: stats: {} vm_death_ms={}",
                STATS.summary(),
                VM_DEATH_MS.load(Ordering::Relaxed)
            );
        }
    })
}

pub(super) unsafe extern "system" fn on_thread_end(_jvmti: RawJvmti, raw: RawEnv, thread: JObject) {
    guard((), || {
        // SAFETY: as in on_vm_init.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return;
        };
        let (Some(agent), Some(j)) = (AGENT.get(), JAVA.get()) else {
            return;
        };
        let state = agent.jvmti.thread_local(thread);
        if state.is_null() {
            return;
        }
        // The reference stays bound while the runtime ends the thread, which may publish
        // the thread's context on the heap through it (see `heap`); the runtime holds the
        // thread off attaching meanwhile, so nothing binds another.
        env.call_static_void(j.rt, j.thread_ended, &[JValue { l: state }]);
        let _ = agent.jvmti.set_thread_local(std::ptr::null_mut());
        env.delete_global_ref(state);
    })
}

/// A class the JVM is about to define, as the ClassFileLoadHook hands it over.
struct LoadedClass<'a> {
    /// Internal name (`pkg/Class`).
    name: &'a str,
    bytes: &'a [u8],
    loader: JObject,
    /// The class being retransformed (null: being loaded).
    redefined: JClass,
}

impl LoadedClass<'_> {
    fn retransformed(&self) -> bool {
        !self.redefined.is_null()
    }
}

/// Where the hook hands a changed class file back to the JVM.
struct NewClassData {
    len: *mut JInt,
    data: *mut *mut c_uchar,
}

pub(super) unsafe extern "system" fn on_class_file_load(
    _jvmti: RawJvmti,
    raw: RawEnv,
    redefined: JClass,
    loader: JObject,
    name: *const c_char,
    _domain: JObject,
    len: JInt,
    data: *const c_uchar,
    new_len: *mut JInt,
    new_data: *mut *mut c_uchar,
) {
    guard((), || {
        let Some(agent) = AGENT.get() else {
            return;
        };
        if name.is_null() || data.is_null() || new_len.is_null() || new_data.is_null() || len <= 0 {
            return;
        }
        // SAFETY: the JVM passes a NUL-terminated class name valid during the callback.
        let Ok(name) = (unsafe { CStr::from_ptr(name) }).to_str() else {
            return;
        };
        STATS.classes_seen.fetch_add(1, Ordering::Relaxed);
        let class = LoadedClass {
            name,
            // SAFETY: the JVM passes `len` readable bytes of class file at `data`.
            bytes: unsafe { std::slice::from_raw_parts(data, len as usize) },
            loader,
            redefined,
        };
        let out = NewClassData {
            len: new_len,
            data: new_data,
        };
        // SAFETY: as in on_vm_init.
        instrument_class(agent, unsafe { Env::from_raw(raw) }, &class, out);
    })
}

/// Rewrites `class` if the options want it instrumented and hands the result to the JVM;
/// a class that cannot be rewritten loads unchanged (counted, and warned about).
fn instrument_class(agent: &Agent, env: Option<Env>, class: &LoadedClass, out: NewClassData) {
    // A dormant agent instruments only while a window is open, with the window's scope.
    let window = match agent.opts.mode {
        Mode::Live => None,
        Mode::Dormant => match window::scope() {
            Some(scope) => Some(scope),
            None => return,
        },
    };
    let opts: &Options = window.as_deref().unwrap_or(&agent.opts);
    let name = class.name;
    let jdk_loader = match env {
        Some(env) => is_jdk_loader(env, class.loader),
        None => class.loader.is_null(),
    };
    let decision = decide(opts, name, jdk_loader);
    let jdk_too_early = decision == Decision::Instrument
        && (jdk_loader
            || name.starts_with("java/")
            || name.starts_with("jdk/")
            || name.starts_with("sun/"))
        && !LIVE.load(Ordering::Acquire);
    if decision != Decision::Instrument || jdk_too_early {
        STATS.classes_skipped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // Second bodies are new methods: only when the class is loaded, not retransformed, and
    // never in a window (its classes must be restorable by a retransformation).
    let opts = RewriteOptions {
        bba: opts.bba,
        pass_context: !class.retransformed()
            && window.is_none()
            && crate::filter::may_pass_context(opts),
        out_of_line_entry: agent.out_of_line_entry,
    };
    let t0 = Instant::now();
    // CPU, not wall, for a window's open: on a busy host its wall is mostly waiting.
    let cpu0 = class.retransformed().then(registry::thread_cpu_ns);
    let result = rewrite_class(class.bytes, &opts, &mut GlobalIds);
    let nanos = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    STATS.rewrite_nanos.fetch_add(nanos, Ordering::Relaxed);
    if let Some(cpu0) = cpu0 {
        let cpu = registry::thread_cpu_ns().saturating_sub(cpu0);
        STATS
            .retransform_rewrite_nanos
            .fetch_add(cpu, Ordering::Relaxed);
    }
    match result {
        Ok(Rewritten::Changed { bytes, stats }) => {
            if hand_over(agent, name, &bytes, out) {
                STATS.add_class(&stats);
                if class.retransformed() {
                    STATS.classes_retransformed.fetch_add(1, Ordering::Relaxed);
                }
                if window.is_some() {
                    registry::note_transformed(env, name, class.redefined);
                }
            } else if window.is_some() {
                registry::refuse(name);
            }
        }
        Ok(Rewritten::Unchanged { .. }) => {
            STATS.classes_unchanged.fetch_add(1, Ordering::Relaxed);
            if window.is_some() {
                registry::refuse(name);
            }
        }
        Err(e) => {
            STATS.classes_failed.fetch_add(1, Ordering::Relaxed);
            if window.is_some() {
                registry::refuse(name);
            }
            if agent.opts.warn {
                say!("jp-agent: warning: {name} loaded unchanged: {e}");
            }
        }
    }
}

/// JVMTI ClassLoad (enabled while a window is open): a class the hook transformed while it
/// was being loaded is remembered, so that the close restores it too.
pub(super) unsafe extern "system" fn on_class_load(
    _jvmti: RawJvmti,
    raw: RawEnv,
    _thread: JObject,
    class: JClass,
) {
    guard((), || {
        // SAFETY: as in on_vm_init.
        let (Some(env), Some(agent)) = (unsafe { Env::from_raw(raw) }, AGENT.get()) else {
            return;
        };
        registry::class_loaded(env, agent, class);
    })
}

/// Copies the rewritten class file into JVMTI memory and points the hook's out-parameters
/// at it; false (counted as failed) if it could not, and the class loads unchanged.
fn hand_over(agent: &Agent, name: &str, bytes: &[u8], out: NewClassData) -> bool {
    let Ok(out_len) = JInt::try_from(bytes.len()) else {
        STATS.classes_failed.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    let Some(p) = agent.jvmti.allocate(bytes.len()) else {
        STATS.classes_failed.fetch_add(1, Ordering::Relaxed);
        if agent.opts.warn {
            say!("jp-agent: warning: {name} loaded unchanged: JVMTI Allocate failed");
        }
        return false;
    };
    // SAFETY: p points at bytes.len() freshly allocated bytes; the JVM takes ownership of
    // them through the hook's new_class_data, and both out-pointers were checked non-null
    // by the hook (JVMTI ClassFileLoadHook contract).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        *out.len = out_len;
        *out.data = p;
    }
    true
}
