//! Start-up: `-agentpath` (`Agent_OnLoad`) and `-javaagent` (`Premain.init`) ways in, and VM init.

use super::events::{on_class_file_load, on_class_load, on_thread_end, on_vm_death};
use super::runtime::{bind_java_side, register_natives, start_runtime};
use super::{guard, is_jdk_loader, Agent, AGENT, LIVE};
use crate::bootjar;
use crate::ffi::jni::{self, Env, JClass, JInt, JObject, JString, RawEnv, RawVm};
use crate::ffi::jvmti::{self, Callbacks, Capabilities, Jvmti, RawJvmti};
use crate::filter::{decide, Decision};
use crate::log::say;
use crate::options::{Mode, Options, Profiling, Publish};
use crate::usdt;
use jp_common::wire;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

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
    let agent = init_agent(vm, opts, live_env.is_some())?;
    if agent.opts.mode == Mode::Dormant {
        return start_dormant(agent);
    }
    let jvmti = agent.jvmti;
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
        append_runtime_jar(&jvmti)?;
    }
    if live_env.is_none() {
        jvmti.enable(jvmti::EVENT_VM_INIT)?;
    }
    jvmti.enable(jvmti::EVENT_VM_DEATH)?;
    jvmti.enable(jvmti::EVENT_THREAD_END)?;
    jvmti.enable(jvmti::EVENT_CLASS_FILE_LOAD_HOOK)?;
    usdt::probe::jp_usdt_control.set_agent_state(wire::AGENT_STATE_LIVE, 0);

    let o = &agent.opts;
    if let Some(tap) = &o.usdt_tap {
        usdt::start_tap(tap)?;
    }
    if o.verbose {
        say!("jp-agent: {}", banner(o, agent.out_of_line_entry));
    }

    if let Some(env) = live_env {
        vm_init(env)?;
    }
    Ok(())
}

/// `mode=dormant`, or an agent loaded late: nothing is rewritten and no Java code of the
/// agent runs until a window opens; only VM death is listened to (it closes an open window).
pub(super) fn start_dormant(agent: &Agent) -> Result<(), String> {
    agent.jvmti.enable(jvmti::EVENT_VM_DEATH)?;
    usdt::probe::jp_usdt_control.set_agent_state(wire::AGENT_STATE_DORMANT, 0);
    if agent.opts.verbose {
        say!(
            "jp-agent: dormant (windows only): bba={} jdk={}",
            agent.opts.bba_name(),
            agent.opts.jdk
        );
    }
    Ok(())
}

/// Writes out the embedded runtime jar and puts it on the boot class path.
pub(super) fn append_runtime_jar(jvmti: &Jvmti) -> Result<(), String> {
    let jar = bootjar::install()?;
    let jar = jar
        .to_str()
        .ok_or("runtime jar path is not UTF-8")?
        .to_string();
    jvmti.add_to_bootstrap_search(&jar)
}

/// The JVMTI environment, its capabilities and callbacks: what every way in needs. A
/// dormant agent always takes `can_retransform_classes`, here at its start: taken later,
/// the first retransformation deoptimizes far more compiled code.
pub(super) fn init_agent(
    vm: RawVm,
    opts: Options,
    live_phase: bool,
) -> Result<&'static Agent, String> {
    // SAFETY: vm is the JavaVM the JVM handed to Agent_OnLoad or to a native method.
    let raw = unsafe { jni::vm_get_env(vm, jvmti::JVMTI_VERSION_1_2) }
        .ok_or("cannot get a JVMTI 1.2 environment")?;
    // SAFETY: raw came from GetEnv and is never disposed.
    let jvmti = unsafe { Jvmti::from_raw(raw) };

    // Retransformation is how classes loaded before VM init (the JDK) get instrumented,
    // and how windows instrument and restore what is loaded.
    let can_retransform =
        opts.jdk || !opts.include.is_empty() || live_phase || opts.mode == Mode::Dormant;
    let potential = jvmti.potential_capabilities();
    let mut caps = Capabilities::default();
    if can_retransform {
        if !potential.has(Capabilities::CAN_RETRANSFORM_CLASSES) {
            return Err(
                "this JVM cannot retransform classes (needed for jdk=true, -javaagent and windows)"
                    .into(),
            );
        }
        caps.set(Capabilities::CAN_RETRANSFORM_CLASSES);
    }
    if potential.has(Capabilities::CAN_GENERATE_ALL_CLASS_HOOK_EVENTS) {
        caps.set(Capabilities::CAN_GENERATE_ALL_CLASS_HOOK_EVENTS);
    }
    super::vthreads::ask_capability(&opts, &potential, &mut caps);
    jvmti.add_capabilities(&caps)?;

    let cb = Callbacks {
        vm_init: Some(on_vm_init),
        vm_death: Some(on_vm_death),
        thread_end: Some(on_thread_end),
        class_file_load_hook: Some(on_class_file_load),
        class_load: Some(on_class_load),
        virtual_thread_end: Some(super::vthreads::on_virtual_thread_end),
        ..Callbacks::default()
    };
    jvmti.set_callbacks(&cb)?;
    let out_of_line_entry = wants_out_of_line_entry(&jvmti);
    let agent = Agent {
        jvmti,
        opts,
        can_retransform,
        out_of_line_entry,
        vm: super::Vm(vm),
    };
    if AGENT.set(agent).is_err() {
        return Err("the agent was started twice at once".into());
    }
    AGENT.get().ok_or_else(|| "agent state lost".into())
}

/// The start-up line of `verbose=true`: what is profiled, where the profile goes, and the
/// entry helper this JDK gets (`wants_out_of_line_entry`).
fn banner(o: &Options, out_of_line_entry: bool) -> String {
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
    format!(
        "bba={} granularity={} jdk={} entry={} {target}",
        o.bba_name(),
        o.granularity(),
        o.jdk,
        if out_of_line_entry {
            "enterOutOfLine"
        } else {
            "enter"
        }
    )
}

/// Binds `jp.rt.Rt`, starts the profiler and, when allowed, instruments what loaded earlier.
pub(super) fn vm_init(env: Env) -> Result<(), String> {
    let agent = AGENT.get().ok_or("agent not started")?;
    let rt = env
        .find_class("jp/rt/Rt")
        .ok_or("cannot load jp.rt.Rt from the runtime jar on the boot class path")?;
    register_natives(env, rt)?;
    let init = bind_java_side(env, rt)?;
    set_hello_info(agent);
    start_runtime(
        env,
        rt,
        init,
        agent,
        agent.opts.profiler.java_name(),
        publish_mode(&agent.opts),
    )?;
    super::vthreads::start(env, &agent.jvmti, rt);
    LIVE.store(true, Ordering::Release);
    if agent.can_retransform {
        retransform_loaded(env, agent);
    }
    Ok(())
}

/// What the live view's HELLO record tells jpd about this JVM.
fn set_hello_info(agent: &Agent) {
    usdt::set_hello_info(usdt::HelloInfo {
        start_time_ms: usdt::process_start_ms().unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }),
        granularity: u64::try_from(agent.opts.granularity()).unwrap_or(0),
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

/// Where threads publish their context: `publish=true` asks for the heap, which a
/// collector that moves objects while threads run does not allow (see `heap`).
fn publish_mode(opts: &Options) -> Publish {
    if opts.publish != Publish::Heap {
        return opts.publish;
    }
    let Some(gc) = super::heap::concurrent_mover() else {
        return Publish::Heap;
    };
    if opts.verbose {
        say!(
            "jp-agent: {gc} moves objects while threads run: threads publish their context \
             in native slots"
        );
    }
    Publish::Slot
}

/// Whether instrumented code enters methods through `Rt.enterOutOfLine`, which C2 never
/// inlines (`RewriteOptions::out_of_line_entry`): on JDKs before 25. Measured on 17, where
/// inlining `Rt.enter` gains real programs nothing and, in the JVMs where C2 does it, costs
/// 2-4 times the compile time (a program with one calling pattern gains 0.5-2.3 ns a call),
/// and on 25, where C2 always inlines it and rhino runs 6 % faster for it.
/// Where between the two C2 changed was not measured.
fn wants_out_of_line_entry(jvmti: &Jvmti) -> bool {
    // The VM's own properties are there at Agent_OnLoad, not the class library's
    // (`java.specification.version` is not yet).
    jvmti
        .system_property("java.vm.specification.version")
        .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
        .is_some_and(|feature| feature < 25)
}
