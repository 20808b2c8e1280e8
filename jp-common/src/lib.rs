//! Types shared by the eBPF programs (`jp-ebpf`) and user space (`jp-daemon`).
//!
//! Everything here is `#[repr(C)]` and `no_std`: the same bytes are written by the
//! kernel side and read by jpd.
#![no_std]
