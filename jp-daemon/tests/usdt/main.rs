//! The USDT path: ELF notes and argument specs, uprobes and semaphores, the collector
//! against a fake agent and the real one, hostile files and processes.
//! One test binary; each module is one area's tests, all sharing `support` (see
//! docs/architecture.md, "Tests").
#[path = "../support/mod.rs"]
mod support;

mod attach;
mod bpf;
mod collector;
mod decode;
mod fair;
mod hostile;
mod namespace;
mod notes;
mod real_agent;
mod throughput;
