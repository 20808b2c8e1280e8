//! Virtual threads (JDK 21+): a carrier's published context follows the virtual thread
//! mounted on it. JVMTI's `VirtualThreadMount` and `VirtualThreadUnmount` extension events and
//! the standard `VirtualThreadEnd` call `Rt.carried(carrier, mounted)` on the virtual thread,
//! which repoints the carrier's context slot at the virtual thread's stream and context and
//! back (see `Carriers.java`). JDK 17 has no virtual threads: nothing is asked there.

use super::guard;
use crate::ffi::jni::{Env, JClass, JMethodId, JObject, JValue, RawEnv};
use crate::ffi::jvmti::{self, Capabilities, Jvmti, RawJvmti};
use crate::log::say;
use crate::options::{Mode, Options, Publish};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

const MOUNT: &str = "com.sun.hotspot.events.VirtualThreadMount";
const UNMOUNT: &str = "com.sun.hotspot.events.VirtualThreadUnmount";

/// The capability was added at load: the events can be set up at VM init.
static WANTED: AtomicBool = AtomicBool::new(false);
static JAVA: OnceLock<Carried> = OnceLock::new();

/// What the events call: `Thread.currentCarrierThread` (package-private, which JNI may
/// call) and `Rt.carried`.
struct Carried {
    thread: JClass,
    current_carrier: JMethodId,
    rt: JClass,
    carried: JMethodId,
}

// SAFETY: global references and method ids are valid on every thread (JNI spec).
unsafe impl Send for Carried {}
// SAFETY: as above; never mutated after creation.
unsafe impl Sync for Carried {}

/// Asks for `can_support_virtual_threads` where the JVM has it and threads publish their
/// context for jpd (only the usdt profiler's threads do).
pub(super) fn ask_capability(opts: &Options, potential: &Capabilities, caps: &mut Capabilities) {
    // A dormant agent's windows publish nothing: the capability would cost its mounts only.
    let publishing =
        opts.profiler.usdt() && opts.publish != Publish::Off && opts.mode == Mode::Live;
    if publishing && potential.has(Capabilities::CAN_SUPPORT_VIRTUAL_THREADS) {
        caps.set(Capabilities::CAN_SUPPORT_VIRTUAL_THREADS);
        WANTED.store(true, Ordering::Release);
    }
}

/// At VM init, once `rt` (jp.rt.Rt) is loaded: binds the Java side and sets the events up.
/// A JVM without them keeps virtual threads as before (their carriers counted by name).
pub(super) fn start(env: Env, jvmti: &Jvmti, rt: JClass) {
    if !WANTED.load(Ordering::Acquire) {
        return;
    }
    let Some(thread) = env.find_class("java/lang/Thread") else {
        return;
    };
    let (Some(current_carrier), Some(carried)) = (
        env.static_method(thread, "currentCarrierThread", "()Ljava/lang/Thread;"),
        env.static_method(rt, "carried", "(Ljava/lang/Thread;Z)V"),
    ) else {
        return;
    };
    let (thread, rt) = (env.new_global_ref(thread), env.new_global_ref(rt));
    if thread.is_null() || rt.is_null() {
        return;
    }
    let _ = JAVA.set(Carried {
        thread,
        current_carrier,
        rt,
        carried,
    });
    let set = jvmti
        .set_extension_callback(MOUNT, on_mount)
        .and_then(|m| Ok(m && jvmti.set_extension_callback(UNMOUNT, on_unmount)?))
        .and_then(|both| {
            if both {
                jvmti.enable(jvmti::EVENT_VIRTUAL_THREAD_END)?;
            }
            Ok(both)
        });
    match set {
        Ok(true) => {}
        Ok(false) => say!("jp-agent: no virtual-thread mount events: carriers are counted by name"),
        Err(e) => {
            say!("jp-agent: virtual-thread events not set up ({e}): carriers are counted by name")
        }
    }
}

unsafe extern "C" fn on_mount(_jvmti: RawJvmti, raw: RawEnv, _thread: JObject) {
    carried(raw, true);
}

unsafe extern "C" fn on_unmount(_jvmti: RawJvmti, raw: RawEnv, _thread: JObject) {
    carried(raw, false);
}

/// A virtual thread's end comes without an unmount: the carrier's slot must stop naming it.
pub(super) unsafe extern "system" fn on_virtual_thread_end(
    _jvmti: RawJvmti,
    raw: RawEnv,
    _thread: JObject,
) {
    carried(raw, false);
}

thread_local! {
    /// This OS thread's carrier (a platform thread keeps its OS thread for life): a global
    /// reference, so that a mount costs one upcall (`Rt.carried`), not two.
    static CARRIER: Cell<JObject> = const { Cell::new(std::ptr::null_mut()) };
}

/// The carrier of the calling OS thread.
fn carrier(env: Env, j: &Carried) -> Option<JObject> {
    let known = CARRIER.with(Cell::get);
    if !known.is_null() {
        return Some(known);
    }
    let local = env.call_static_object(j.thread, j.current_carrier, &[])?;
    let global = env.new_global_ref(local);
    if global.is_null() {
        return Some(local);
    }
    CARRIER.with(|c| c.set(global));
    Some(global)
}

fn carried(raw: RawEnv, mounted: bool) {
    guard((), || {
        // SAFETY: the JVM passes this thread's JNIEnv to the event callback.
        let Some(env) = (unsafe { Env::from_raw(raw) }) else {
            return;
        };
        let Some(j) = JAVA.get() else {
            return;
        };
        let Some(carrier) = carrier(env, j) else {
            return;
        };
        env.call_static_void(
            j.rt,
            j.carried,
            &[
                JValue { l: carrier },
                JValue {
                    z: u8::from(mounted),
                },
            ],
        );
    })
}
