//! Virtual threads (JDK 21+): a carrier's published context follows the virtual thread
//! mounted on it. JVMTI's `VirtualThreadMount` and `VirtualThreadUnmount` extension events and
//! the standard `VirtualThreadEnd` call `Rt.carried(carrier, mounted)` on the virtual thread,
//! which repoints the carrier's context slot at the virtual thread's stream and context and
//! back (see `Carriers.java`). JDK 17 has no virtual threads: nothing is asked there.
//!
//! At an unmount it also says why the virtual thread leaves (`wire::unmounted`), from the
//! virtual thread's own state at that moment (`VirtualThread.state`: parking, timed
//! parking, yielding, blocking on a monitor, waiting in `Object.wait`), and for a timed
//! park whether `VirtualThread.sleepNanos` runs it (a `Thread.sleep`): the runtime times the
//! virtual thread off its carriers under that reason.

use super::guard;
use crate::ffi::jni::{Env, JClass, JFieldId, JInt, JMethodId, JObject, JValue, RawEnv};
use crate::ffi::jvmti::{self, Capabilities, Jvmti, RawJvmti};
use crate::log::say;
use crate::options::{Mode, Options, Publish};
use jp_common::wire::unmounted;
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
    why: Option<Why>,
}

/// `Rt.carried`'s `why` at a mount, and at a virtual thread's end (no period starts).
const MOUNTED: JInt = 0;
const ENDED: JInt = -1;
/// In [`Why::by_state`]: a timed park, a `Thread.sleep` if `sleepNanos` runs it.
const TIMED_PARK: u8 = u8::MAX;
/// In [`Why::by_state`]: still running at its unmount, which is its last (the JDK's end of
/// a virtual thread unmounts it after its task, in state RUNNING): it waits for nothing.
const LEAVING: u8 = u8::MAX - 1;

/// Why a virtual thread unmounts, from `VirtualThread.state` at its unmount event: the
/// states' values differ between JDKs, so they are read by name at VM init.
struct Why {
    state: JFieldId,
    /// State (low byte; higher bits are flags such as SUSPENDED) → `wire::unmounted` code,
    /// 0 for a state not named here.
    by_state: [u8; 256],
    sleep_nanos: JMethodId,
}

impl Why {
    fn new(env: Env) -> Option<Why> {
        let vt = env.try_find_class("java/lang/VirtualThread")?;
        let state = env.field(vt, "state", "I")?;
        let sleep_nanos = env.method(vt, "sleepNanos", "(J)V")?;
        let mut by_state = [0u8; 256];
        const NAMES: [(&str, u8); 13] = [
            ("RUNNING", LEAVING),
            ("PARKING", unmounted::PARKED as u8),
            ("PARKED", unmounted::PARKED as u8),
            ("TIMED_PARKING", TIMED_PARK),
            ("TIMED_PARKED", TIMED_PARK),
            ("YIELDING", unmounted::YIELD as u8),
            ("YIELDED", unmounted::YIELD as u8),
            ("BLOCKING", unmounted::MONITOR as u8),
            ("BLOCKED", unmounted::MONITOR as u8),
            ("WAITING", unmounted::OBJECT_WAIT as u8),
            ("WAIT", unmounted::OBJECT_WAIT as u8),
            ("TIMED_WAITING", unmounted::OBJECT_WAIT as u8),
            ("TIMED_WAIT", unmounted::OBJECT_WAIT as u8),
        ];
        // A JDK without one of the states never is in it.
        for (name, why) in NAMES {
            if let Some(v) = env
                .static_int(vt, name)
                .and_then(|v| usize::try_from(v).ok())
            {
                if let Some(slot) = by_state.get_mut(v) {
                    *slot = why;
                }
            }
        }
        Some(Why {
            state,
            by_state,
            sleep_nanos,
        })
    }

    /// Why `vthread`, the current thread, unmounts now.
    fn of(&self, env: Env, jvmti: &Jvmti, vthread: JObject) -> JInt {
        // SAFETY: `state` is VirtualThread's int field and the event's thread a live
        // VirtualThread.
        let state = unsafe { env.int_field(vthread, self.state) } & 0xff;
        let why = match self.by_state[state as usize] {
            0 => unmounted::OTHER as u8,
            LEAVING => return ENDED,
            // The unmount event's frames: notifyJvmtiUnmount, yieldContinuation,
            // parkNanos, then sleepNanos for a sleep.
            TIMED_PARK if jvmti.runs_in::<4>(1, self.sleep_nanos) => unmounted::SLEEP as u8,
            TIMED_PARK => unmounted::PARKED as u8,
            w => w,
        };
        JInt::from(why)
    }
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
        env.static_method(rt, "carried", "(Ljava/lang/Thread;I)V"),
    ) else {
        return;
    };
    let (thread, rt) = (env.new_global_ref(thread), env.new_global_ref(rt));
    if thread.is_null() || rt.is_null() {
        return;
    }
    let why = Why::new(env);
    if why.is_none() {
        say!("jp-agent: virtual threads' states unknown: their time off carriers is not timed");
    }
    let _ = JAVA.set(Carried {
        thread,
        current_carrier,
        rt,
        carried,
        why,
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
    carried(raw, |_, _| MOUNTED);
}

unsafe extern "C" fn on_unmount(jvmti: RawJvmti, raw: RawEnv, thread: JObject) {
    carried(raw, |env, j| match &j.why {
        // Nobody listens: the runtime times nothing, the stack walk is not needed.
        Some(why) if crate::usdt::probe::enabled() => {
            // SAFETY: the JVM passes its jvmtiEnv to the event callback.
            let jvmti = unsafe { Jvmti::from_raw(jvmti.cast()) };
            why.of(env, &jvmti, thread)
        }
        _ => unmounted::OTHER as JInt,
    });
}

/// A virtual thread's end comes without an unmount: the carrier's slot must stop naming it.
pub(super) unsafe extern "system" fn on_virtual_thread_end(
    _jvmti: RawJvmti,
    raw: RawEnv,
    _thread: JObject,
) {
    carried(raw, |_, _| ENDED);
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

/// Calls `Rt.carried(carrier, why)`: `why` is [`MOUNTED`], [`ENDED`], or at an unmount a
/// `wire::unmounted` code.
fn carried(raw: RawEnv, why: impl FnOnce(Env, &Carried) -> JInt) {
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
        let why = why(env, j);
        env.call_static_void(j.rt, j.carried, &[JValue { l: carrier }, JValue { i: why }]);
    })
}
