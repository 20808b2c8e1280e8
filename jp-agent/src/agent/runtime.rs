//! The Java runtime `jp.rt` brought up in a running JVM: its classes defined, its natives
//! registered, what the agent calls in it bound, `Rt.init` called. Shared by VM init and by
//! an exact window's first bring-up; it knows neither of them.
use super::natives::{
    native_agent_stats, native_bind, native_buffer_address, native_count_contexts,
    native_count_reports, native_export_internal, native_fire, native_method_name,
    native_os_thread_id, native_usdt_control, native_usdt_end, native_usdt_hello, native_usdt_pid,
    native_usdt_semaphore, native_write_profile,
};
use super::{Agent, JavaSide, JAVA};
use crate::bootjar;
use crate::ffi::jni::{Env, JClass, JMethodId, JValue};
use crate::methods::MethodTable;
use crate::options::Publish;
use std::ffi::{c_void, CStr};

/// Defines the runtime jar's classes into the boot loader, each after its supertypes, for
/// windows: unlike appending the jar to the boot class path in the live phase, this prints
/// nothing and leaves class data sharing (CDS) of the other loaders as it was. The classes
/// are in the boot loader's unnamed module, as from the jar, so the JIT honours their
/// `jdk.internal.vm.annotation`s and `Rt.exportInternal` works the same.
pub(super) fn define_runtime_classes(env: Env) -> Result<(), String> {
    for class in bootjar::runtime_classes()? {
        let defined = env
            .define_boot_class(&class.name, class.bytes)
            .ok_or_else(|| format!("cannot define {} in the boot loader", class.name))?;
        env.delete_local_ref(defined);
    }
    Ok(())
}

/// Registers every native method of `jp.rt.Rt`.
pub(super) fn register_natives(env: Env, rt: JClass) -> Result<(), String> {
    let mut natives = profile_natives().to_vec();
    natives.extend(usdt_natives());
    natives.extend(super::result::natives());
    if !env.register_natives(rt, &natives) {
        return Err("RegisterNatives on jp.rt.Rt failed".into());
    }
    let seeding = env
        .find_class("jp/rt/Seeding")
        .ok_or("cannot load jp.rt.Seeding from the runtime jar")?;
    if !env.register_natives(seeding, &super::seeding::natives()) {
        return Err("RegisterNatives on jp.rt.Seeding failed".into());
    }
    env.delete_local_ref(seeding);
    Ok(())
}

/// The natives of `jp.rt.Rt` every profiler uses: thread binding, the method table, the
/// statistics, the profile file and the context publishing.
fn profile_natives() -> [(&'static CStr, &'static CStr, *mut c_void); 9] {
    [
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
        (c"osThreadId", c"()I", native_os_thread_id as *mut c_void),
        (
            c"heapCell",
            c"(Ljp/rt/ThreadState;II)J",
            super::heap::native_heap_cell as *mut c_void,
        ),
        (
            c"exportInternal",
            c"(Ljava/lang/Module;Ljava/lang/String;Ljava/lang/Module;)Z",
            native_export_internal as *mut c_void,
        ),
        (
            c"countReports",
            c"(J)V",
            native_count_reports as *mut c_void,
        ),
        (
            c"countContexts",
            c"(JJJ)V",
            native_count_contexts as *mut c_void,
        ),
    ]
}

/// The natives of `jp.rt.Rt` the live view (`profiler=usdt`) fires records through.
fn usdt_natives() -> [(&'static CStr, &'static CStr, *mut c_void); 7] {
    [
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
    ]
}

/// Looks up what the agent calls in `jp.rt.Rt` later (thread end, VM death) and the platform
/// loader, and keeps them in [`JAVA`]; returns `Rt.init`, which is called once.
pub(super) fn bind_java_side(env: Env, rt: JClass) -> Result<JMethodId, String> {
    let init = env
        .static_method(rt, "init", "(Ljava/lang/String;IIJJIII)V")
        .ok_or("jp.rt.Rt.init not found")?;
    let thread_ended = env
        .static_method(rt, "threadEnded", "(Ljava/lang/Object;)V")
        .ok_or("jp.rt.Rt.threadEnded not found")?;
    let vm_death = env
        .static_method(rt, "vmDeath", "()V")
        .ok_or("jp.rt.Rt.vmDeath not found")?;
    let open_window = env
        .static_method(rt, "openWindow", "()V")
        .ok_or("jp.rt.Rt.openWindow not found")?;
    let close_window = env
        .static_method(rt, "closeWindow", "()V")
        .ok_or("jp.rt.Rt.closeWindow not found")?;
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
        open_window,
        close_window,
        platform_loader,
    });
    Ok(init)
}

/// Calls `Rt.init` with the options the runtime needs, which makes the profiler.
pub(super) fn start_runtime(
    env: Env,
    rt: JClass,
    init: JMethodId,
    agent: &Agent,
    profiler: &str,
    publish: Publish,
) -> Result<(), String> {
    let name = env.new_string(profiler);
    if name.is_null() {
        return Err("NewStringUTF failed".into());
    }
    let overflow_mid = crate::methods::table()
        .get_or_insert_with(MethodTable::default)
        .overflow_id();
    let to_jlong = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let args = [
        JValue { l: name },
        JValue {
            i: agent.opts.granularity(),
        },
        JValue {
            i: i32::try_from(overflow_mid).unwrap_or(i32::MAX),
        },
        JValue {
            j: agent.opts.max_contexts.map_or(-1, to_jlong),
        },
        JValue {
            j: to_jlong(agent.opts.max_thread_contexts),
        },
        JValue {
            i: i32::from(agent.opts.report_budget),
        },
        JValue {
            i: publish.java_value(),
        },
        JValue {
            i: agent.opts.report_pace_ms(),
        },
    ];
    if !env.call_static_void(rt, init, &args) {
        return Err(format!(
            "cannot start profiler '{}' (see the exception above; a custom profiler needs a public \
             no-argument constructor and must implement jp.rt.Profiler)",
            profiler
        ));
    }
    env.delete_local_ref(name);
    Ok(())
}
