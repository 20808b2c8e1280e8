//! End to end, for real: the `jpd` and `jpctl` that `cargo xtask build` delivers.
//! One test binary; each module is one area's tests, all sharing `support` (see
//! docs/architecture.md, "Tests").
#[path = "../../../jp-mct/tests/browser/mod.rs"]
mod browser;
#[path = "../support/mod.rs"]
mod support;

mod cpu;
mod cpu_views;
mod cpu_virtual;
mod flame_offcpu;
mod jvm;
mod kernel;
mod offcpu;
mod offcpu_idle;
mod offcpu_io;
mod offcpu_pid_reuse;
mod offcpu_virtual;
mod rotation;
mod windows;
