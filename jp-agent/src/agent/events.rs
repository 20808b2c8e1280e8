//! The JVMTI events the agent enables: VM init and death, thread end, class-file load.

use super::{guard, is_jdk_loader, AGENT, JAVA, LIVE, STATS, VM_DEATH_MS};
use crate::classfile::{rewrite_class, RewriteOptions, Rewritten};
use crate::ffi::jni::{Env, JClass, JInt, JObject, JValue, RawEnv};
use crate::ffi::jvmti::RawJvmti;
use crate::filter::{decide, Decision};
use crate::log::say;
use crate::methods::GlobalIds;
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

#[allow(clippy::too_many_arguments)]
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
        // SAFETY: as in on_vm_init.
        let env = unsafe { Env::from_raw(raw) };
        let jdk_loader = match env {
            Some(env) => is_jdk_loader(env, loader),
            None => loader.is_null(),
        };
        let decision = decide(&agent.opts, name, jdk_loader);
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
        // SAFETY: the JVM passes `len` readable bytes of class file at `data`.
        let bytes = unsafe { std::slice::from_raw_parts(data, len as usize) };
        // Second bodies are new methods: only when the class is loaded, not retransformed.
        let opts = RewriteOptions {
            bba: agent.opts.bba,
            pass_context: redefined.is_null() && crate::filter::may_pass_context(&agent.opts),
            out_of_line_entry: agent.out_of_line_entry,
        };
        let t0 = Instant::now();
        let result = rewrite_class(bytes, &opts, &mut GlobalIds);
        let nanos = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        STATS.rewrite_nanos.fetch_add(nanos, Ordering::Relaxed);
        match result {
            Ok(Rewritten::Changed { bytes: out, stats }) => {
                let Ok(out_len) = JInt::try_from(out.len()) else {
                    STATS.classes_failed.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                let Some(p) = agent.jvmti.allocate(out.len()) else {
                    STATS.classes_failed.fetch_add(1, Ordering::Relaxed);
                    if agent.opts.warn {
                        say!("jp-agent: warning: {name} loaded unchanged: JVMTI Allocate failed");
                    }
                    return;
                };
                // SAFETY: p points at out.len() freshly allocated bytes; the JVM takes
                // ownership of them through new_data (JVMTI ClassFileLoadHook contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(out.as_ptr(), p, out.len());
                    *new_len = out_len;
                    *new_data = p;
                }
                STATS.add_class(&stats);
                if !redefined.is_null() {
                    STATS.classes_retransformed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Rewritten::Unchanged { .. }) => {
                STATS.classes_unchanged.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                STATS.classes_failed.fetch_add(1, Ordering::Relaxed);
                if agent.opts.warn {
                    say!("jp-agent: warning: {name} loaded unchanged: {e}");
                }
            }
        }
    })
}
