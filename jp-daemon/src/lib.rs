//! jpd, jp's host daemon. Data flows one way:
//! probe (jp-ebpf) → map → collector (`kernel::collector`) → [`store`] → gRPC
//! (`server`) → jpctl.
pub mod config;
pub mod export;
pub mod jvm;
pub mod kernel;
pub mod notify;
pub mod server;
pub mod store;
pub mod usdt;
