//! The JVMTI agent: start-up (`-agentpath` and `-javaagent`), the class-file hook, thread end
//! and VM death events, and the native methods of `jp.rt.Rt`.
//!
//! Every `extern` entry point runs its body inside [`guard`], so a panic never unwinds into
//! the JVM; errors are printed and the class or event is left alone.

use crate::bootjar;
use crate::classfile::{rewrite_class, RewriteOptions, Rewritten};
use crate::ffi::jni::{
    self, Env, JClass, JInt, JLong, JMethodId, JObject, JString, JValue, RawEnv, RawVm,
};
use crate::ffi::jvmti::{self, Callbacks, Capabilities, Jvmti, RawJvmti};
use crate::filter::{decide, Decision};
use crate::mct::{self, Mct};
use crate::methods::{self, GlobalIds};
use crate::options::{Format, Options, Profiling};
use crate::stats::Stats;
use crate::usdt;
use std::ffi::{c_char, c_uchar, c_void, CStr};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Prints a line to stderr; never panics (unlike `eprintln!` on a closed stderr).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub static STATS: Stats = Stats::new();

struct Agent {
    jvmti: Jvmti,
    opts: Options,
    /// Whether the env holds can_retransform_classes (jdk=true or -javaagent).
    can_retransform: bool,
}

/// What the agent needs of `jp.rt.Rt` once the VM is initialized.
struct JavaSide {
    rt: JClass,
    thread_ended: JMethodId,
    vm_death: JMethodId,
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

/// Prints `msg` the first time only (for conditions that would repeat per record).
pub(crate) fn warn_once(msg: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        say!("jp-agent: warning: {msg}");
    }
}

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

// ---------------------------------------------------------------- start-up

/// `-agentpath:libjpagent.so=OPTIONS`. A non-zero return stops the JVM.
#[no_mangle]
pub extern "system" fn Agent_OnLoad(
    vm: RawVm,
    options: *const c_char,
    _reserved: *mut c_void,
) -> JInt {
    guard(1, || {
        let opts = if options.is_null() {
            String::new()
        } else {
            // SAFETY: the JVM passes a NUL-terminated option string valid during this call.
            unsafe { CStr::from_ptr(options) }
                .to_string_lossy()
                .into_owned()
        };
        match start(vm, &opts, None) {
            Ok(()) => 0,
            Err(msg) => {
                say!("jp-agent: {msg}");
                1
            }
        }
    })
}

/// `-javaagent:jp-agent.jar=OPTIONS`: `jp.agent.Premain.init(String)`, in the live phase.
#[no_mangle]
pub extern "system" fn Java_jp_agent_Premain_init(
    raw: RawEnv,
    _cls: JClass,
    options: JString,
) -> JInt {
    guard(1, || {
        // SAFETY: the JVM passes this thread's JNIEnv to a native method.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return 1;
        };
        let opts = env.string(options).unwrap_or_default();
        let Some(vm) = env.java_vm() else {
            say!("jp-agent: GetJavaVM failed");
            return 1;
        };
        match start(vm, &opts, Some(env)) {
            Ok(()) => 0,
            Err(msg) => {
                say!("jp-agent: {msg}");
                1
            }
        }
    })
}

fn start(vm: RawVm, options: &str, live_env: Option<Env>) -> Result<(), String> {
    if AGENT.get().is_some() {
        say!("jp-agent: already loaded; ignoring the second start");
        return Ok(());
    }
    let opts = Options::parse(options).map_err(|e| e.to_string())?;
    // SAFETY: vm is the JavaVM the JVM handed to Agent_OnLoad or to a native method.
    let raw = unsafe { jni::vm_get_env(vm, jvmti::JVMTI_VERSION_1_2) }
        .ok_or("cannot get a JVMTI 1.2 environment")?;
    // SAFETY: raw came from GetEnv and is never disposed.
    let jvmti = unsafe { Jvmti::from_raw(raw) };

    // Retransformation is how classes loaded before VM init (the JDK) get instrumented.
    let can_retransform = opts.jdk || !opts.include.is_empty() || live_env.is_some();
    let potential = jvmti.potential_capabilities();
    let mut caps = Capabilities::default();
    if can_retransform {
        if !potential.has(Capabilities::CAN_RETRANSFORM_CLASSES) {
            return Err(
                "this JVM cannot retransform classes (needed for jdk=true and -javaagent)".into(),
            );
        }
        caps.set(Capabilities::CAN_RETRANSFORM_CLASSES);
    }
    if potential.has(Capabilities::CAN_GENERATE_ALL_CLASS_HOOK_EVENTS) {
        caps.set(Capabilities::CAN_GENERATE_ALL_CLASS_HOOK_EVENTS);
    }
    jvmti.add_capabilities(&caps)?;

    // With -javaagent the jar's Boot-Class-Path already provides jp.rt; only if the jar was
    // renamed (the manifest names "jp-agent.jar") does the embedded copy have to be appended.
    let rt_visible = live_env.is_some_and(|env| match env.try_find_class("jp/rt/Rt") {
        Some(c) => {
            env.delete_local_ref(c);
            true
        }
        None => false,
    });
    if !rt_visible {
        let jar = bootjar::install()?;
        let jar = jar
            .to_str()
            .ok_or("runtime jar path is not UTF-8")?
            .to_string();
        jvmti.add_to_bootstrap_search(&jar)?;
    }

    let cb = Callbacks {
        vm_init: Some(on_vm_init),
        vm_death: Some(on_vm_death),
        thread_start: None,
        thread_end: Some(on_thread_end),
        class_file_load_hook: Some(on_class_file_load),
    };
    jvmti.set_callbacks(&cb)?;
    let agent = Agent {
        jvmti,
        opts,
        can_retransform,
    };
    if AGENT.set(agent).is_err() {
        return Ok(());
    }
    let Some(agent) = AGENT.get() else {
        return Err("agent state lost".into());
    };
    if live_env.is_none() {
        jvmti.enable(jvmti::EVENT_VM_INIT)?;
    }
    jvmti.enable(jvmti::EVENT_VM_DEATH)?;
    jvmti.enable(jvmti::EVENT_THREAD_END)?;
    jvmti.enable(jvmti::EVENT_CLASS_FILE_LOAD_HOOK)?;

    let o = &agent.opts;
    if let Some(tap) = &o.usdt_tap {
        usdt::start_tap(tap)?;
    }
    let mut target = match &o.profiler {
        Profiling::Custom(class) => format!("profiler={class}"),
        p => format!("profiler={}", p.java_name()),
    };
    if o.profiler.usdt() {
        target.push_str(" fires USDT jp:record for jpd");
        if let Some(tap) = &o.usdt_tap {
            target.push_str(&format!(" (tapped to {tap})"));
        }
    }
    if o.profiler.writes_file() {
        target.push_str(&format!(
            "{} writes {} to {} at exit",
            if o.profiler.usdt() { " and" } else { "" },
            o.format.name(),
            o.out_path()
        ));
    }
    say!(
        "jp-agent: bba={} granularity={} jdk={} {target}",
        o.bba_name(),
        o.granularity,
        o.jdk
    );

    if let Some(env) = live_env {
        vm_init(env)?;
    }
    Ok(())
}

/// Binds `jp.rt.Rt`, starts the profiler and, when allowed, instruments what loaded earlier.
fn vm_init(env: Env) -> Result<(), String> {
    let agent = AGENT.get().ok_or("agent not started")?;
    let rt = env
        .find_class("jp/rt/Rt")
        .ok_or("cannot load jp.rt.Rt from the runtime jar on the boot class path")?;
    let natives: [(&CStr, &CStr, *mut c_void); 12] = [
        (
            c"bind",
            c"(Ljp/rt/ThreadState;)V",
            native_bind as *mut c_void,
        ),
        (
            c"writeProfile",
            c"([I[I[J[J)V",
            native_write_profile as *mut c_void,
        ),
        (
            c"methodName",
            c"(I)Ljava/lang/String;",
            native_method_name as *mut c_void,
        ),
        (
            c"agentStats",
            c"()Ljava/lang/String;",
            native_agent_stats as *mut c_void,
        ),
        (
            c"usdtSemaphore",
            c"()Ljava/nio/ByteBuffer;",
            native_usdt_semaphore as *mut c_void,
        ),
        (
            c"usdtControl",
            c"()Ljava/nio/ByteBuffer;",
            native_usdt_control as *mut c_void,
        ),
        (
            c"bufferAddress",
            c"(Ljava/nio/ByteBuffer;)J",
            native_buffer_address as *mut c_void,
        ),
        (c"fire", c"(JII)V", native_fire as *mut c_void),
        (c"usdtHello", c"(JI)V", native_usdt_hello as *mut c_void),
        (c"usdtEnd", c"(I)V", native_usdt_end as *mut c_void),
        (c"usdtPid", c"()I", native_usdt_pid as *mut c_void),
        (
            c"countReports",
            c"(J)V",
            native_count_reports as *mut c_void,
        ),
    ];
    if !env.register_natives(rt, &natives) {
        return Err("RegisterNatives on jp.rt.Rt failed".into());
    }
    let init = env
        .static_method(rt, "init", "(Ljava/lang/String;I)V")
        .ok_or("jp.rt.Rt.init not found")?;
    let thread_ended = env
        .static_method(rt, "threadEnded", "(Ljava/lang/Object;)V")
        .ok_or("jp.rt.Rt.threadEnded not found")?;
    let vm_death = env
        .static_method(rt, "vmDeath", "()V")
        .ok_or("jp.rt.Rt.vmDeath not found")?;
    let platform_loader = env
        .find_class("java/lang/ClassLoader")
        .and_then(|cl| {
            env.static_method(cl, "getPlatformClassLoader", "()Ljava/lang/ClassLoader;")
                .map(|m| (cl, m))
        })
        .and_then(|(cl, m)| env.call_static_object(cl, m, &[]))
        .map(|l| env.new_global_ref(l))
        .unwrap_or(std::ptr::null_mut());
    let rt_global = env.new_global_ref(rt);
    if rt_global.is_null() {
        return Err("NewGlobalRef failed".into());
    }
    let _ = JAVA.set(JavaSide {
        rt: rt_global,
        thread_ended,
        vm_death,
        platform_loader,
    });

    usdt::set_hello_info(usdt::HelloInfo {
        start_time_ms: usdt::process_start_ms().unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }),
        granularity: u64::try_from(agent.opts.granularity).unwrap_or(0),
        bba: u64::from(agent.opts.bba_name() == "precise"),
        jdk_version: agent
            .jvmti
            .system_property("java.vm.version")
            .unwrap_or_default(),
        main: agent
            .jvmti
            .system_property("sun.java.command")
            .unwrap_or_default(),
    });
    let name = env.new_string(agent.opts.profiler.java_name());
    if name.is_null() {
        return Err("NewStringUTF failed".into());
    }
    let args = [
        JValue { l: name },
        JValue {
            i: agent.opts.granularity,
        },
    ];
    if !env.call_static_void(rt, init, &args) {
        return Err(format!(
            "cannot start profiler '{}' (see the exception above; a custom profiler needs a public \
             no-argument constructor and must implement jp.rt.Profiler)",
            agent.opts.profiler.java_name()
        ));
    }
    env.delete_local_ref(name);
    LIVE.store(true, Ordering::Release);
    if agent.can_retransform {
        retransform_loaded(env, agent);
    }
    Ok(())
}

/// Instruments classes that loaded before the agent could (JDK classes from VM start-up with
/// jdk=true; with -javaagent, everything loaded before premain).
fn retransform_loaded(env: Env, agent: &Agent) {
    let jvmti = agent.jvmti;
    let classes = match jvmti.loaded_classes() {
        Ok(c) => c,
        Err(e) => {
            say!("jp-agent: warning: {e}; classes loaded so far stay uninstrumented");
            return;
        }
    };
    let mut todo = Vec::new();
    for c in classes {
        let wanted = jvmti.is_modifiable(c)
            && jvmti
                .class_signature(c)
                .and_then(|s| {
                    s.strip_prefix('L')
                        .and_then(|s| s.strip_suffix(';'))
                        .map(str::to_string)
                })
                .is_some_and(|name| {
                    let loader = jvmti.class_loader(c);
                    let jdk = is_jdk_loader(env, loader);
                    env.delete_local_ref(loader);
                    decide(&agent.opts, &name, jdk) == Decision::Instrument
                });
        if wanted {
            todo.push(c);
        } else {
            env.delete_local_ref(c);
        }
    }
    for batch in todo.chunks(64) {
        if jvmti.retransform(batch).is_err() {
            // One bad class fails the whole call: retry one by one to keep the others.
            for &c in batch {
                if let Err(e) = jvmti.retransform(&[c]) {
                    let name = jvmti.class_signature(c).unwrap_or_default();
                    if agent.opts.warn {
                        say!("jp-agent: warning: {name} stays uninstrumented: {e}");
                    }
                }
            }
        }
    }
    for c in todo {
        env.delete_local_ref(c);
    }
}

fn is_jdk_loader(env: Env, loader: JObject) -> bool {
    if loader.is_null() {
        return true;
    }
    match JAVA.get() {
        Some(j) if !j.platform_loader.is_null() => env.is_same_object(loader, j.platform_loader),
        _ => false,
    }
}

// ---------------------------------------------------------------- events

unsafe extern "system" fn on_vm_init(_jvmti: RawJvmti, raw: RawEnv, _thread: JObject) {
    guard((), || {
        // SAFETY: the JVM passes this thread's JNIEnv to the event callback.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return;
        };
        if let Err(e) = vm_init(env) {
            say!("jp-agent: {e}");
            std::process::exit(1);
        }
    })
}

unsafe extern "system" fn on_vm_death(_jvmti: RawJvmti, raw: RawEnv) {
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
        if AGENT.get().is_some_and(|a| a.opts.stats) {
            say!(
                "jp-agent: stats: {} vm_death_ms={}",
                STATS.summary(),
                VM_DEATH_MS.load(Ordering::Relaxed)
            );
        }
    })
}

unsafe extern "system" fn on_thread_end(_jvmti: RawJvmti, raw: RawEnv, thread: JObject) {
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
        let _ = agent.jvmti.set_thread_local(std::ptr::null_mut());
        env.call_static_void(j.rt, j.thread_ended, &[JValue { l: state }]);
        env.delete_global_ref(state);
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn on_class_file_load(
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
        // Stays valid if the rewriter grows options (their defaults apply).
        #[allow(clippy::needless_update)]
        let opts = RewriteOptions {
            bba: agent.opts.bba,
            ..Default::default()
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

// ---------------------------------------------------------------- natives of jp.rt.Rt

unsafe extern "system" fn native_bind(raw: RawEnv, _cls: JClass, state: JObject) {
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

unsafe extern "system" fn native_write_profile(
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
        let (p, m, c, b) = (
            env.int_array(parent),
            env.int_array(mid),
            env.long_array(calls),
            env.long_array(bytecodes),
        );
        let tree = {
            let table = methods::table();
            Mct::from_flat(agent.opts.bba_name(), &p, &m, &c, &b, |id| {
                table.as_ref().map(|t| t.info(id)).unwrap_or_default()
            })
        };
        let path = agent.opts.out_path();
        match tree {
            Ok(t) => match write_file(&t, agent.opts.format, &path) {
                Ok(()) => say!("jp-agent: wrote {} ({} contexts)", path, t.nodes.len() - 1),
                Err(e) => say!("jp-agent: cannot write {path}: {e}"),
            },
            Err(e) => say!("jp-agent: {e}"),
        }
    })
}

/// Writes `t` in `format` to `path` (through a temporary file, so a reader never sees half).
pub fn write_file(t: &Mct, format: Format, path: &str) -> std::io::Result<()> {
    let mut buf = Vec::new();
    match format {
        Format::Json => mct::write_json(t, &mut buf)?,
        Format::Pprof => mct::write_pprof(t, &mut buf)?,
        Format::Folded => mct::write_folded(t, &mut buf)?,
        Format::Tree => mct::write_tree(t, &mut buf)?,
        Format::Html => mct::write_html(t, &mut buf)?,
    }
    let tmp = format!("{path}.{}.tmp", std::process::id());
    std::fs::write(&tmp, &buf)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

unsafe extern "system" fn native_method_name(raw: RawEnv, _cls: JClass, mid: JInt) -> JString {
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

unsafe extern "system" fn native_agent_stats(raw: RawEnv, _cls: JClass) -> JString {
    guard(std::ptr::null_mut(), || {
        // SAFETY: as in native_bind.
        match unsafe { Env::from_raw(raw) } {
            Some(env) => env.new_string(&STATS.summary()),
            None => std::ptr::null_mut(),
        }
    })
}

unsafe extern "system" fn native_usdt_semaphore(raw: RawEnv, _cls: JClass) -> JObject {
    guard(std::ptr::null_mut(), || {
        // SAFETY: as in native_bind.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return std::ptr::null_mut();
        };
        let p = usdt::probe::jp_record_semaphore.as_ptr();
        // SAFETY: the semaphore is a static u16: valid for the life of the process. Java
        // only reads it.
        unsafe { env.new_direct_byte_buffer(p.cast(), 2) }
    })
}

unsafe extern "system" fn native_usdt_control(raw: RawEnv, _cls: JClass) -> JObject {
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

unsafe extern "system" fn native_buffer_address(
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
unsafe extern "system" fn native_fire(
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
unsafe extern "system" fn native_usdt_hello(
    _raw: RawEnv,
    _cls: JClass,
    generation: jni::JLong,
    live_threads: JInt,
) {
    guard((), || {
        usdt::answer_generation(generation as u64, u64::try_from(live_threads).unwrap_or(0));
    })
}

unsafe extern "system" fn native_usdt_pid(_raw: RawEnv, _cls: JClass) -> JInt {
    // A pid fits in an int (pid_max is at most 2^22).
    guard(0, || JInt::try_from(std::process::id()).unwrap_or(0))
}

/// `Rt.usdtEnd(liveThreads)`: VM death, after every thread's last record.
unsafe extern "system" fn native_usdt_end(_raw: RawEnv, _cls: JClass, live_threads: JInt) {
    guard((), || {
        usdt::jvm_end(u64::try_from(live_threads).unwrap_or(0));
    })
}

/// `Rt.countReports(n)`: at VM death, how often the profiler was called in all.
unsafe extern "system" fn native_count_reports(_raw: RawEnv, _cls: JClass, reports: JLong) {
    guard((), || {
        STATS
            .reports
            .store(u64::try_from(reports).unwrap_or(0), Ordering::Relaxed);
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
