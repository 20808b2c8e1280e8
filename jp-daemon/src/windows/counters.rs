//! What the windows cost and how they went, by origin, for `/metrics`: every part that
//! opens windows (the service for requests, the rotation) counts here.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Who asked for a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WindowOrigin {
    /// An explicit request: jpctl, gRPC, HTTP.
    Request,
    /// jpd's fleet rotation.
    Rotation,
}

impl WindowOrigin {
    pub const ALL: [WindowOrigin; 2] = [WindowOrigin::Request, WindowOrigin::Rotation];

    /// The `origin` label's value.
    pub fn label(self) -> &'static str {
        match self {
            WindowOrigin::Request => "request",
            WindowOrigin::Rotation => "rotation",
        }
    }

    fn index(self) -> usize {
        match self {
            WindowOrigin::Request => 0,
            WindowOrigin::Rotation => 1,
        }
    }
}

/// Counters per origin; they only grow.
#[derive(Debug, Default)]
pub struct WindowCounters {
    opened: [AtomicU64; 2],
    completed: [AtomicU64; 2],
    failed: [AtomicU64; 2],
    refused: [AtomicU64; 2],
    /// Time windows were open, in milliseconds.
    open_ms: [AtomicU64; 2],
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
        let load = |a: &[AtomicU64; 2]| a[i].load(Ordering::Relaxed);
        WindowCounts {
            opened: load(&self.opened),
            completed: load(&self.completed),
            failed: load(&self.failed),
            refused: load(&self.refused),
            open_ms: load(&self.open_ms),
        }
    }
}
