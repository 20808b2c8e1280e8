//! The kernel collector on the real kernel (root): its counts against the kernel's own;
//! and the daemon's life in-process, which starts it.
//! One test binary; each module is one area's tests, all sharing `support` (see
//! docs/architecture.md, "Tests").
#[path = "../support/mod.rs"]
mod support;

mod daemon_life;
mod hotplug;
mod interrupts;
mod join;
mod profile;
