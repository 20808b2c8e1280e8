//! Kernel hotspots: the eBPF samplers' user-space half.
//!
//! [`KernelCollector`] loads and attaches the programs and copies their maps into the
//! [`KernelStore`](crate::store::kernel::KernelStore) every `read_interval`. Its files, by job:
//! - `collector`: the public handle (start, refresh, frequency, status, shutdown);
//! - `reader`: the reader thread and its schedule, a pass, the join's wakes
//!   ([`JoinWaker`]) and the kernel symbols' reload;
//! - `attach`: the probe configuration, the object's load, the programs' attach, CPU
//!   hotplug and the sampling frequency;
//! - `read`: the maps read and merged into [`KernelCounts`](crate::store::kernel::KernelCounts),
//!   with `text_counts`, `ctx_log`, `mapping` and `batch` underneath;
//! - `status`: the published status, BPF run-time statistics and the errors counted;
//! - `offcpu`: the off-CPU program's attach and log ([`offcpu::OffcpuPass`] to the join);
//! - `join`: the JVM threads the sampler joins to their contexts ([`join::ContextJoin`]).
//!
//! The maps' names and sizes are `jp_common::maps`, shared with jp-ebpf.
//!
//! # Use from the daemon (`daemon/start.rs`)
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use jp_daemon::{kernel::{KernelCollector, KernelOptions}, store::kernel::KernelStore};
//! let store = KernelStore::new();
//! // Loads and attaches everything (root), publishes a first reading, then a reader
//! // thread publishes every `read_interval`. No async runtime needed: call it from
//! // `main` or inside `tokio::task::spawn_blocking`.
//! let collector = KernelCollector::start(KernelOptions::default(), store.clone())?;
//! // … serve `store` …
//! collector.shutdown(); // on SIGINT/SIGTERM: stops the thread, detaches every link
//! # Ok(()) }
//! ```
//! Dropping the collector also detaches. `refresh()` reads the maps immediately
//! (useful before answering a request that must be current, and in tests).
//!
//! Symbolizing: `store.symbols()` is the current
//! [`Symbols`](crate::store::kernel::symbols::Symbols);
//! [`aggregate`](crate::store::kernel::profile::aggregate) turns `buckets`/`other_ips`
//! (or `irq_buckets`/`irq_other_ips`) into per-function samples and loads;
//! `Symbols::name_of(function_addr)` names an IRQ handler function.
mod attach;
mod batch;
mod btf;
mod collector;
mod ctx_log;
pub mod join;
mod mapping;
pub mod offcpu;
mod online_cpus;
mod options;
mod read;
mod reader;
mod status;
mod text_counts;

pub use collector::KernelCollector;
pub use options::KernelOptions;
pub use reader::JoinWaker;
