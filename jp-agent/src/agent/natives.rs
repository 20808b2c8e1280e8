//! The native methods of `jp.rt.Rt`, registered at VM init.

use super::{guard, AGENT, STATS};
use crate::ffi::jni::{self, Env, JClass, JInt, JLong, JObject, JString, RawEnv};
use crate::log::say;
use crate::mct::{self, Mct};
use crate::methods::{self};
use crate::options::Format;
use crate::usdt;
use std::sync::atomic::Ordering;

pub(super) unsafe extern "system" fn native_bind(raw: RawEnv, _cls: JClass, state: JObject) {
    guard((), || {
        // SAFETY: the JVM passes this thread's JNIEnv to a native method.
        let (Some(env), Some(agent)) = (unsafe { Env::from_raw(raw) }, AGENT.get()) else {
            return;
        };
        let g = env.new_global_ref(state);
        if g.is_null() {
            return;
        }
        let old = agent.jvmti.thread_local(std::ptr::null_mut());
        if agent.jvmti.set_thread_local(g).is_err() {
            env.delete_global_ref(g);
            return;
        }
        if !old.is_null() {
            env.delete_global_ref(old);
        }
    })
}

pub(super) unsafe extern "system" fn native_write_profile(
    raw: RawEnv,
    _cls: JClass,
    parent: JObject,
    mid: JObject,
    calls: JObject,
    bytecodes: JObject,
) {
    guard((), || {
        // SAFETY: as in native_bind.
        let (Some(env), Some(agent)) = (unsafe { Env::from_raw(raw) }, AGENT.get()) else {
            return;
        };
        let tree = flat_tree(env, agent.opts.bba_name(), [parent, mid, calls, bytecodes]);
        let path = agent.opts.out_path();
        match tree {
            Ok(t) => match write_file(&t, agent.opts.format, &path) {
                Ok(()) if agent.opts.verbose => {
                    say!("jp-agent: wrote {} ({} contexts)", path, t.nodes.len() - 1)
                }
                Ok(()) => {}
                Err(e) => say!("jp-agent: cannot write {path}: {e}"),
            },
            Err(e) => say!("jp-agent: {e}"),
        }
    })
}

/// A tree the runtime hands over as pre-order arrays (`parent`, `mid`, `calls`,
/// `bytecodes`; node 0 the root), its methods named from the method table.
pub(super) fn flat_tree(env: Env, bba: &str, arrays: [JObject; 4]) -> Result<Mct, mct::MctError> {
    let [parent, mid, calls, bytecodes] = arrays;
    let (p, m, c, b) = (
        env.int_array(parent),
        env.int_array(mid),
        env.long_array(calls),
        env.long_array(bytecodes),
    );
    let table = methods::table();
    Mct::from_flat(bba, &p, &m, &c, &b, |id| {
        table.as_ref().map(|t| t.info(id)).unwrap_or_default()
    })
}

/// Writes `t` in `format` to `path` (through a temporary file, so a reader never sees
/// half: see [`crate::replace`]).
pub fn write_file(t: &Mct, format: Format, path: &str) -> std::io::Result<()> {
    let mut buf = Vec::new();
    match format {
        Format::Json => mct::write_json(t, &mut buf)?,
        Format::Pprof => mct::write_pprof(t, mct::PprofOptions::default(), &mut buf)?,
        Format::Folded => mct::write_folded(t, &mut buf)?,
        Format::Tree => mct::write_tree(t, &mut buf)?,
        Format::Html => mct::write_html(t, &mut buf)?,
    }
    crate::replace::replace_file(path, &buf)
}

pub(super) unsafe extern "system" fn native_method_name(
    raw: RawEnv,
    _cls: JClass,
    mid: JInt,
) -> JString {
    guard(std::ptr::null_mut(), || {
        // SAFETY: as in native_bind.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return std::ptr::null_mut();
        };
        let name = methods::table()
            .as_ref()
            .and_then(|t| t.get(mid).map(|e| e.display_name()));
        match name {
            Some(n) => env.new_string(&n),
            None => std::ptr::null_mut(),
        }
    })
}

pub(super) unsafe extern "system" fn native_agent_stats(raw: RawEnv, _cls: JClass) -> JString {
    guard(std::ptr::null_mut(), || {
        // SAFETY: as in native_bind.
        match unsafe { Env::from_raw(raw) } {
            Some(env) => env.new_string(&STATS.summary()),
            None => std::ptr::null_mut(),
        }
    })
}

pub(super) unsafe extern "system" fn native_usdt_semaphore(raw: RawEnv, _cls: JClass) -> JObject {
    guard(std::ptr::null_mut(), || {
        // SAFETY: as in native_bind.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return std::ptr::null_mut();
        };
        let p = usdt::probe::jp_record_semaphore.0.as_ptr();
        // SAFETY: the semaphore is a static u16: valid for the life of the process. Java
        // only reads it.
        unsafe { env.new_direct_byte_buffer(p.cast(), 2) }
    })
}

pub(super) unsafe extern "system" fn native_usdt_control(raw: RawEnv, _cls: JClass) -> JObject {
    guard(std::ptr::null_mut(), || {
        // SAFETY: as in native_bind.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return std::ptr::null_mut();
        };
        let p = usdt::probe::jp_usdt_control.as_mut_ptr();
        // SAFETY: a static 64-byte block: valid for the life of the process. Java only
        // reads it.
        unsafe {
            env.new_direct_byte_buffer(p.cast(), std::mem::size_of::<jp_common::wire::Control>())
        }
    })
}

pub(super) unsafe extern "system" fn native_buffer_address(
    raw: RawEnv,
    _cls: JClass,
    buf: JObject,
) -> jni::JLong {
    guard(0, || {
        // SAFETY: as in native_bind.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return 0;
        };
        env.direct_buffer_address(buf) as jni::JLong
    })
}

/// `Rt.fire(addr, len, liveThreads)`: a thread record serialized by the Java runtime into
/// its direct buffer at `addr`.
pub(super) unsafe extern "system" fn native_fire(
    _raw: RawEnv,
    _cls: JClass,
    addr: jni::JLong,
    len: JInt,
    live_threads: JInt,
) {
    guard((), || {
        let (Ok(len), Ok(live)) = (usize::try_from(len), u64::try_from(live_threads)) else {
            return;
        };
        // SAFETY: Java passes the address of its own direct buffer (from bufferAddress),
        // which it keeps reachable and unchanged during this call; len is within it (the
        // callee also rejects anything above MAX_RECORD, the buffer's size).
        unsafe { usdt::fire_thread_record(addr as usize as *const u8, len, live) };
    })
}

/// `Rt.usdtHello(generation, liveThreads)`: HELLO and the method table for a generation the
/// runtime has not answered yet.
pub(super) unsafe extern "system" fn native_usdt_hello(
    _raw: RawEnv,
    _cls: JClass,
    generation: jni::JLong,
    live_threads: JInt,
) {
    guard((), || {
        usdt::answer_generation(generation as u64, u64::try_from(live_threads).unwrap_or(0));
    })
}

pub(super) unsafe extern "system" fn native_usdt_pid(_raw: RawEnv, _cls: JClass) -> JInt {
    // A pid fits in an int (pid_max is at most 2^22).
    guard(0, || JInt::try_from(std::process::id()).unwrap_or(0))
}

/// `Rt.osThreadId()`: the kernel's id of the calling thread, which the eBPF sampler sees
/// as the interrupted task's pid.
pub(super) unsafe extern "system" fn native_os_thread_id(_raw: RawEnv, _cls: JClass) -> JInt {
    // SAFETY: gettid takes no arguments and cannot fail.
    guard(0, || unsafe { libc::gettid() })
}

/// `Rt.exportInternal(from, pkg, to)`: lets the runtime (the boot loader's unnamed module,
/// `to`) use `pkg` of `from` (java.base), through JVMTI since no Java code may.
pub(super) unsafe extern "system" fn native_export_internal(
    raw: RawEnv,
    _cls: JClass,
    from: JObject,
    package: JString,
    to: JObject,
) -> u8 {
    guard(0, || {
        // SAFETY: the JVM passes this thread's JNIEnv to a native method.
        let (Some(env), Some(agent)) = (unsafe { Env::from_raw(raw) }, AGENT.get()) else {
            return 0;
        };
        let Some(pkg) = env.string(package) else {
            return 0;
        };
        match agent.jvmti.add_module_exports(from, &pkg, to) {
            Ok(()) => 1,
            Err(e) => {
                crate::log::warn_once(&format!(
                    "cannot export {pkg} to the runtime ({e}): no CPU per context"
                ));
                0
            }
        }
    })
}

/// `Rt.usdtEnd(liveThreads)`: VM death, after every thread's last record.
pub(super) unsafe extern "system" fn native_usdt_end(
    _raw: RawEnv,
    _cls: JClass,
    live_threads: JInt,
) {
    guard((), || {
        usdt::jvm_end(u64::try_from(live_threads).unwrap_or(0));
    })
}

/// `Rt.countReports(n)`: at VM death, how often the profiler was called in all.
pub(super) unsafe extern "system" fn native_count_reports(
    _raw: RawEnv,
    _cls: JClass,
    reports: JLong,
) {
    guard((), || {
        STATS
            .reports
            .store(u64::try_from(reports).unwrap_or(0), Ordering::Relaxed);
    })
}

pub(super) unsafe extern "system" fn native_count_contexts(
    _raw: RawEnv,
    _cls: JClass,
    folded_calls: JLong,
    folded_merged: JLong,
    budget: JLong,
) {
    guard((), || {
        let set = |a: &std::sync::atomic::AtomicU64, v: JLong| {
            a.store(u64::try_from(v).unwrap_or(0), Ordering::Relaxed)
        };
        set(&STATS.calls_folded, folded_calls);
        set(&STATS.merged_contexts_folded, folded_merged);
        set(&STATS.context_budget, budget);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mct::MethodInfo;

    #[test]
    fn write_file_writes_every_format_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("jp-write-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut t = Mct::new("default");
        let info = MethodInfo {
            name: "A.main([Ljava/lang/String;)V".into(),
            file: Some("A.java".into()),
        };
        t.add(0, info, 1, 5);
        for (format, start) in [
            (Format::Json, &b"{\"format\": \"jp-mct/1\""[..]),
            (Format::Pprof, &b"\x1f\x8b"[..]),
            (Format::Folded, &b"A.main(java.lang.String[]) 5\n"[..]),
            (Format::Tree, &b"# jp method call tree"[..]),
            (Format::Html, &b"<!DOCTYPE html>"[..]),
        ] {
            let path = dir.join(format.name());
            let p = path.to_str().unwrap();
            write_file(&t, format, p).unwrap();
            assert!(
                std::fs::read(p).unwrap().starts_with(start),
                "{}",
                format.name()
            );
        }
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 5, "{names:?}");
        assert!(write_file(
            &t,
            Format::Json,
            dir.join("no/such/dir/x").to_str().unwrap()
        )
        .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
