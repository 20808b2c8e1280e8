//! The one way the agent takes a mutex.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, also when another holder panicked: the agent's shared state (the method
/// table, the JVM stream, the tap file) stays consistent between statements, and a
/// panic caught at a JNI or JVMTI entry point must not stop profiling for good.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
