//! The kernel collector on the real kernel (root): its counts against the kernel's own.
//! One test binary; each module is one area's tests, all sharing `support` (see
//! docs/architecture.md, "Tests").
#[path = "../support/mod.rs"]
mod support;

mod hotplug;
mod interrupts;
mod join;
mod profile;
