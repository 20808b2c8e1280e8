//! What a window transformed: the classes the close must give their original bytes back,
//! and only those. Retransforming a class no agent transformed makes HotSpot reconstitute
//! its class file from the running class, and the constant pool grows with every such cycle
//! (JDK 17 crashed after 14-16); a class the hook transformed has its original bytes cached
//! by the JVM, which a retransformation with the hook off hands back, stably.

use super::Agent;
use crate::ffi::jni::{Env, JClass, JObject};
use crate::sync::lock;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

/// At most this many classes per `RetransformClasses` call. A call's pause is mostly a
/// fixed cost (HotSpot walks every loaded class and every compiled method once per call:
/// ~12 ms of the VM thread's CPU in a warm jython JVM) plus ~0.017 ms a class: jython's 2589
/// classes cost the VM thread 117 ms in calls of at most 512, 92 ms of at most 768 (~23 ms each)
/// and 80 ms of at most 1024 (~27 ms each), on JDK 17.
const MAX_CHUNK: usize = 768;

/// The chunk size for `n` classes: as few calls as `MAX_CHUNK` allows, all of about the
/// same size (a short last call would pay the fixed cost for a few classes).
pub(super) fn chunk_size(n: usize) -> usize {
    let calls = n.div_ceil(MAX_CHUNK).max(1);
    n.div_ceil(calls).max(1)
}

pub(super) fn elapsed_ms(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The calling thread's CPU time, ns (0 if the clock cannot be read). A switch's wall time
/// on a busy host is mostly its wait for a CPU; this is the work it did.
pub(super) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the valid pointer it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// A global reference to a class.
pub(super) struct GlobalClass(JObject);

// SAFETY: a JNI global reference is valid on every thread until deleted (JNI spec).
unsafe impl Send for GlobalClass {}

/// The open window's transformed classes.
#[derive(Default)]
pub(super) struct Registry {
    /// Retransformed at the open, and loaded (and transformed) during the window.
    classes: Vec<(GlobalClass, String)>,
    /// Transformed by the retransformation call in progress, kept once it succeeded.
    pending: Vec<(GlobalClass, String)>,
    /// Every class name the hook transformed in this window.
    names: BTreeSet<String>,
    pub loaded_in_window: u64,
}

pub(super) static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    classes: Vec::new(),
    pending: Vec::new(),
    names: BTreeSet::new(),
    loaded_in_window: 0,
});

/// Classes the rewriter refused or found nothing to rewrite in: never retransformed again
/// (each retransformation of a class nobody transformed is one more reconstitution).
pub(super) static UNTRANSFORMABLE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

thread_local! {
    /// Classes the hook transformed on this thread while they were being loaded, waiting
    /// for their ClassLoad event (which hands over the class itself).
    static LOADING: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// What the close's restoration did.
#[derive(Default, Debug, Clone, Copy)]
pub(super) struct Restored {
    pub restored: u64,
    /// Classes the close was about to retransform although the hook never transformed
    /// them in this window: always 0 (they are left alone and counted, for the tests).
    pub untransformed: u64,
    pub longest_ms: u64,
}

impl Registry {
    /// The retransformation call succeeded: its transformed classes are the window's.
    pub fn commit(&mut self) -> u64 {
        let n = self.pending.len() as u64;
        self.classes.append(&mut self.pending);
        n
    }

    /// The retransformation call failed: JVMTI changed none of its classes.
    pub fn discard(&mut self, env: Env) {
        for (c, _) in self.pending.drain(..) {
            env.delete_global_ref(c.0);
        }
    }

    pub fn has_name(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Retransforms the transformed classes with the hook off (the JVM hands back their
    /// cached original bytes), in chunks like the open.
    pub fn restore(&self, agent: &Agent) -> Restored {
        let mut r = Restored::default();
        let mut todo = Vec::with_capacity(self.classes.len());
        for (c, name) in &self.classes {
            if self.names.contains(name) {
                todo.push(c.0);
            } else {
                r.untransformed += 1;
            }
        }
        for chunk in todo.chunks(chunk_size(todo.len())) {
            let t0 = Instant::now();
            let ok = agent.jvmti.retransform(chunk).is_ok();
            r.longest_ms = r.longest_ms.max(elapsed_ms(t0));
            if ok {
                r.restored += chunk.len() as u64;
                continue;
            }
            for &c in chunk {
                if agent.jvmti.retransform(&[c]).is_ok() {
                    r.restored += 1;
                }
            }
        }
        r
    }

    /// Deletes the global references.
    pub fn release(self, env: Env) {
        for (c, _) in self.classes.into_iter().chain(self.pending) {
            env.delete_global_ref(c.0);
        }
    }
}

/// The hook transformed `name`: a class being retransformed (`redefined`) joins the call's
/// pending list; one being loaded waits for its ClassLoad on this thread.
pub(super) fn note_transformed(env: Option<Env>, name: &str, redefined: JClass) {
    if redefined.is_null() {
        LOADING.with(|l| l.borrow_mut().push(name.to_string()));
        lock(&REGISTRY).names.insert(name.to_string());
        return;
    }
    let Some(env) = env else {
        return;
    };
    let g = env.new_global_ref(redefined);
    if g.is_null() {
        return;
    }
    let mut r = lock(&REGISTRY);
    r.names.insert(name.to_string());
    r.pending.push((GlobalClass(g), name.to_string()));
}

/// The rewriter refused `name` or found nothing to rewrite in it.
pub(super) fn refuse(name: &str) {
    if !name.is_empty() {
        lock(&UNTRANSFORMABLE).insert(name.to_string());
    }
}

/// JVMTI ClassLoad on the thread whose hook just transformed the class.
pub(super) fn class_loaded(env: Env, agent: &Agent, class: JClass) {
    let waiting = LOADING.with(|l| !l.borrow().is_empty());
    if !waiting {
        return;
    }
    let Some(name) = agent.class_name(class) else {
        return;
    };
    let found = LOADING.with(|l| {
        let mut l = l.borrow_mut();
        match l.iter().position(|n| *n == name) {
            Some(i) => {
                l.swap_remove(i);
                true
            }
            None => false,
        }
    });
    if !found {
        return;
    }
    let g = env.new_global_ref(class);
    if g.is_null() {
        return;
    }
    let mut r = lock(&REGISTRY);
    r.loaded_in_window += 1;
    r.classes.push((GlobalClass(g), name));
}

#[cfg(test)]
mod tests {
    use super::{chunk_size, MAX_CHUNK};

    #[test]
    fn chunks_are_few_and_even() {
        // jython's 2589 classes: 4 calls of 648 (647 the last), not 768 × 3 + 285.
        assert_eq!(chunk_size(2589), 648);
        assert_eq!(chunk_size(200), 200);
        assert_eq!(chunk_size(MAX_CHUNK), MAX_CHUNK);
        assert_eq!(chunk_size(MAX_CHUNK + 1), MAX_CHUNK / 2 + 1);
        assert_eq!(chunk_size(0), 1);
        for n in 1..5000 {
            let size = chunk_size(n);
            assert!(size <= MAX_CHUNK, "{n}: {size}");
            assert_eq!(n.div_ceil(size), n.div_ceil(MAX_CHUNK), "{n}: {size}");
        }
    }
}
