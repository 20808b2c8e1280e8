//! USDT (SystemTap SDT) probes, which aya does not support: find the probe sites of a
//! file ([`notes`]), decode their argument specs for the eBPF side ([`spec`]), and open
//! uprobe events whose USDT semaphore the kernel manages, with a BPF program and an
//! attach cookie ([`attach`]), and find the processes mapping a library and a path to
//! it from jpd's mount namespace ([`maps`]).
pub mod attach;
pub mod maps;
pub mod notes;
pub mod spec;
