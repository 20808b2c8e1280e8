//! The one way jpd takes a mutex or a read-write lock.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, also when another holder panicked: every value jpd keeps behind a
/// mutex (stores, exporter caches, the collector's state) stays consistent between
/// statements, so a panic elsewhere must not take the daemon's data down with it.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads `rw`, also when a writer panicked (as [`lock`]).
pub fn read<T: ?Sized>(rw: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes `rw`, also when another holder panicked (as [`lock`]).
pub fn write<T: ?Sized>(rw: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks_with_its_data() {
        let mutex = std::sync::Arc::new(Mutex::new(vec![1]));
        let held = std::sync::Arc::clone(&mutex);
        let panicked = std::thread::spawn(move || {
            let mut guard = held.lock().unwrap_or_else(|p| p.into_inner());
            guard.push(2);
            panic!("a holder panics");
        })
        .join();
        assert!(panicked.is_err() && mutex.is_poisoned());
        assert_eq!(*lock(&mutex), [1, 2]);
    }
}
