//! jpd, jp's host daemon. Data flows one way, one folder per stage:
//! probe (jp-ebpf, the agent) → map or ring buffer → collectors ([`kernel`], [`usdt`])
//! → stores ([`store`]) → gRPC ([`server`]) and HTTP exporters ([`export`]) → jpctl.
//! [`daemon`] runs one life of all of them; `docs/architecture.md` says what crosses
//! each seam.
pub mod bpf_stats;
pub mod config;
pub mod config_range;
pub mod daemon;
pub mod export;
pub mod kernel;
pub mod liveness;
pub mod lock;
pub mod notify;
pub mod probes;
pub mod refusals;
pub mod restart;
pub mod server;
pub mod store;
pub mod usdt;
pub mod windows;
