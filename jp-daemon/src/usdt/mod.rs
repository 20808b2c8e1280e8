//! USDT (SystemTap SDT) probes, which aya does not support: find the probe sites of a
//! file ([`notes`]), decode their argument specs for the eBPF side ([`spec`]), and open
//! uprobe events whose USDT semaphore the kernel manages ([`attach`]).
pub mod attach;
pub mod notes;
pub mod spec;
