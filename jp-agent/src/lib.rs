//! The jp JVM agent (`libjpagent.so`): rewrites classes as they load so that every thread
//! builds JP's Method Call Tree with exact bytecode counts, and writes the merged tree at exit.
//!
//! - [`classfile`]: the bytecode rewriter (Rust, no Java library).
//! - `agent`: JVMTI entry points (`Agent_OnLoad`, the `-javaagent` native), events, natives.
//! - [`usdt`]: the live view for jpd: the USDT probe `jp:record`, its semaphore, the control
//!   block, and the JVM stream of the wire format (`jp_common::wire`).
//! - [`mct`]: the merged tree and its file formats, from the `jp-mct` crate (shared with jpd).
//! - The Java runtime `jp.rt` lives in `java/` and is embedded by `build.rs`.
//!
//! Its design (ways in, options, the rewrite, the runtime's helpers, the hot path, the
//! threads): `docs/agent-design.md`.

pub mod classfile;

mod agent;
mod bootjar;
pub mod command;
mod ffi;
pub mod filter;
mod log;
pub use jp_mct as mct;
pub mod methods;
pub mod options;
mod replace;
pub mod stats;
mod sync;
pub mod usdt;

pub use agent::{stats_summary, write_file};
