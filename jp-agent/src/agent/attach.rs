//! `Agent_OnAttach`: HotSpot calls it on every dynamic `load` of the library (`jcmd PID
//! JVMTI.agent_load LIB OPTIONS`, or jpd's attach). The options string is a command
//! (`crate::command`); an agent not yet started in this JVM starts dormant first.

use super::startup::{init_agent, start_dormant};
use super::{guard, window, AGENT};
use crate::command::code;
use crate::ffi::jni::{self, Env, JInt, RawVm};
use crate::log::say;
use crate::options::{Mode, Options};
use std::ffi::{c_char, c_void, CStr};

#[no_mangle]
pub extern "system" fn Agent_OnAttach(
    vm: RawVm,
    options: *const c_char,
    _reserved: *mut c_void,
) -> JInt {
    guard(code::JVMTI_REFUSED, || {
        let command = if options.is_null() {
            String::new()
        } else {
            // SAFETY: the JVM passes a NUL-terminated option string valid during this call.
            unsafe { CStr::from_ptr(options) }
                .to_string_lossy()
                .into_owned()
        };
        if AGENT.get().is_none() {
            let dormant = Options {
                mode: Mode::Dormant,
                ..Options::default()
            };
            if let Err(e) = init_agent(vm, dormant, true).and_then(start_dormant) {
                let reason = format!("cannot start the agent in this JVM: {e}");
                say!("jp-agent: {reason}");
                window::refuse_command(&command, &reason);
                return code::JVMTI_REFUSED;
            }
        }
        // SAFETY: vm is the JavaVM HotSpot handed to Agent_OnAttach; this (attach listener)
        // thread is a Java thread, so it has a JNIEnv.
        let env = unsafe { jni::vm_get_env(vm, jni::JNI_VERSION_1_6) }
            // SAFETY: GetEnv returned this thread's JNIEnv.
            .and_then(|raw| unsafe { Env::from_raw(raw.cast()) });
        let Some(env) = env else {
            window::refuse_command(&command, "no JNI environment on the attach thread");
            return code::JVMTI_REFUSED;
        };
        window::run_command(env, &command)
    })
}
