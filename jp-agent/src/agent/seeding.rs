//! The natives of `jp.rt.Seeding`: a thread's stack as JVMTI sees it (method ids, no
//! strings), for the seeded contexts of an exact window. A JVMTI stack trace of the calling
//! thread needs no safepoint and compares frames by `jmethodID` (which a retransformation
//! keeps for the old and the new version of a method alike); `StackWalker` resolved names
//! and descriptors per frame and cost 2-20 µs a walk.

use super::registry::REGISTRY;
use super::{guard, AGENT};
use crate::ffi::jni::{Env, JClass, JInt, JLong, JMethodId, JObject, RawEnv};
use crate::methods;
use crate::sync::lock;
use std::ffi::{c_void, CStr};

/// Frames above the entering method's caller: the native itself, `Seeding.reseat`,
/// `Rt.enter` (or `enterOutOfLine`), the entering method.
const ABOVE_CALLER: JInt = 4;
/// Frames the usual re-walk looks at before it counts the whole stack.
const SHORT_WALK: usize = 16;
/// Deepest stack the seeding looks at.
const MAX_DEPTH: usize = 1 << 16;

/// `Seeding.seedStack()`: the frames below the entering method that run a method the open
/// window instrumented, outermost first, as `[mid, jmethodID]` pairs.
unsafe extern "system" fn native_seed_stack(raw: RawEnv, _cls: JClass) -> JObject {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the JVM passes this thread's JNIEnv to a native method.
        let (Some(env), Some(agent)) = (unsafe { Env::from_raw(raw) }, AGENT.get()) else {
            return std::ptr::null_mut();
        };
        let jvmti = agent.jvmti;
        let frames = jvmti.own_stack(ABOVE_CALLER, MAX_DEPTH);
        let mut pairs = Vec::new();
        for &m in frames.iter().rev() {
            let Some(class) = jvmti.method_class(m) else {
                continue;
            };
            let sig = jvmti.class_signature(class);
            env.delete_local_ref(class);
            let Some(name) = sig
                .as_deref()
                .and_then(|s| s.strip_prefix('L')?.strip_suffix(';'))
            else {
                continue;
            };
            if !lock(&REGISTRY).has_name(name) {
                continue;
            }
            let Some((method, desc)) = jvmti.method_name(m) else {
                continue;
            };
            let id = methods::table()
                .as_ref()
                .and_then(|t| t.find(name, &method, &desc));
            if let Some(id) = id {
                pairs.push(i64::from(id));
                pairs.push(m as JLong);
            }
        }
        env.new_long_array(&pairs)
    })
}

/// `Seeding.seededCaller(ids, top)`: how many of the seeded frames (`ids`, outermost first,
/// the first `top` of them possibly running) still run. The first frame below the entering
/// method that runs a seeded method is the innermost seeded frame still running; where that
/// method is seeded more than once (recursion), the whole stack is counted.
unsafe extern "system" fn native_seeded_caller(
    raw: RawEnv,
    _cls: JClass,
    ids: JObject,
    top: JInt,
) -> JInt {
    guard(0, || {
        // SAFETY: as in native_seed_stack.
        let (Some(env), Some(agent)) = (unsafe { Env::from_raw(raw) }, AGENT.get()) else {
            return 0;
        };
        let ids: Vec<JMethodId> = env
            .long_array(ids)
            .into_iter()
            .map(|i| i as usize as JMethodId)
            .collect();
        let top = usize::try_from(top).unwrap_or(0).min(ids.len());
        let seeds = &ids[..top];
        let near = agent.jvmti.own_stack(ABOVE_CALLER, SHORT_WALK);
        let found = innermost_seeded(seeds, &near);
        let alive = match found {
            Some(Some(i)) => i + 1,
            None if near.len() < SHORT_WALK => 0,
            _ => still_running(seeds, &agent.jvmti.own_stack(ABOVE_CALLER, MAX_DEPTH)),
        };
        JInt::try_from(alive).unwrap_or(0)
    })
}

/// The first frame (innermost first) that runs a seeded method: Some(Some(i)) when that
/// method is seeds[i] alone, Some(None) when it is seeded more than once, None if no frame
/// does.
pub(super) fn innermost_seeded<T: PartialEq>(seeds: &[T], frames: &[T]) -> Option<Option<usize>> {
    for f in frames {
        let mut hits = seeds.iter().enumerate().filter(|(_, s)| *s == f);
        if let Some((i, _)) = hits.next() {
            return Some(hits.next().is_none().then_some(i));
        }
    }
    None
}

/// The longest prefix of `seeds` found in order among `frames` (innermost first).
pub(super) fn still_running<T: PartialEq>(seeds: &[T], frames: &[T]) -> usize {
    let mut j = 0;
    for f in frames.iter().rev() {
        if j < seeds.len() && *f == seeds[j] {
            j += 1;
        }
    }
    j
}

/// The natives of `jp.rt.Seeding`.
pub(super) fn natives() -> [(&'static CStr, &'static CStr, *mut c_void); 2] {
    [
        (c"seedStack", c"()[J", native_seed_stack as *mut c_void),
        (
            c"seededCaller",
            c"([JI)I",
            native_seeded_caller as *mut c_void,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_seeded_frame_is_the_caller() {
        // Seeded main, run, loop (outermost first); frames innermost first.
        let seeds = ["main", "run", "loop"];
        assert_eq!(
            innermost_seeded(&seeds, &["jdk", "loop", "run", "main"]),
            Some(Some(2))
        );
        // loop returned: run calls.
        assert_eq!(innermost_seeded(&seeds, &["run", "main"]), Some(Some(1)));
        assert_eq!(innermost_seeded(&seeds, &["jdk"]), None);
        let rec = ["main", "f", "f"];
        assert_eq!(innermost_seeded(&rec, &["f", "f", "main"]), Some(None));
    }

    #[test]
    fn still_running_counts_the_seeded_prefix() {
        let rec = ["main", "f", "f"];
        assert_eq!(still_running(&rec, &["f", "jdk", "f", "main"]), 3);
        assert_eq!(still_running(&rec, &["f", "main"]), 2);
        assert_eq!(still_running(&rec, &["jdk", "main"]), 1);
        assert_eq!(still_running(&rec, &["other"]), 0);
    }
}
