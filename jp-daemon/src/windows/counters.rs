//! What the windows cost and how they went, by origin, for `/metrics`: every part that
//! opens windows (the service for requests and HTTP, the rotation) counts here.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use crate::store::windows::WindowOrigin;

/// Origins there are (the per-origin arrays' length).
const ORIGINS: usize = WindowOrigin::ALL.len();

/// Counters per origin; they only grow.
#[derive(Debug, Default)]
pub struct WindowCounters {
    opened: [AtomicU64; ORIGINS],
    completed: [AtomicU64; ORIGINS],
    failed: [AtomicU64; ORIGINS],
    refused: [AtomicU64; ORIGINS],
    /// Time windows were open, in milliseconds.
    open_ms: [AtomicU64; ORIGINS],
}

/// One origin's counters, read at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    pub opened: u64,
    pub completed: u64,
    pub failed: u64,
    pub refused: u64,
    pub open_ms: u64,
}

impl WindowCounters {
    /// The agent accepted a window.
    pub fn opened(&self, o: WindowOrigin) {
        self.opened[o.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// A window's result was read and stored; it was open for `open`.
    pub fn completed(&self, o: WindowOrigin, open: Duration) {
        self.completed[o.index()].fetch_add(1, Ordering::Relaxed);
        let ms = u64::try_from(open.as_millis()).unwrap_or(u64::MAX);
        self.open_ms[o.index()].fetch_add(ms, Ordering::Relaxed);
    }

    /// A window that was tried and did not deliver (attach, agent, result file).
    pub fn failed(&self, o: WindowOrigin) {
        self.failed[o.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// A window not tried: a limit, a JVM that cannot have one.
    pub fn refused(&self, o: WindowOrigin) {
        self.refused[o.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, o: WindowOrigin) -> WindowCounts {
        let i = o.index();
        let load = |a: &[AtomicU64; ORIGINS]| a[i].load(Ordering::Relaxed);
        WindowCounts {
            opened: load(&self.opened),
            completed: load(&self.completed),
            failed: load(&self.failed),
            refused: load(&self.refused),
            open_ms: load(&self.open_ms),
        }
    }
}
