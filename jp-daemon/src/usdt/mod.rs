//! USDT (SystemTap SDT) probes, which aya does not support: find the probe sites of a
//! file ([`notes`]), decode their argument specs for the eBPF side ([`spec`]), and open
//! uprobe events whose USDT semaphore the kernel manages, with a BPF program and an
//! attach cookie ([`attach`]), and find the processes mapping a library and a path to
//! it from jpd's mount namespace ([`maps`]).
//!
//! On top of these, the JVM agent's record probe: [`program`] loads the eBPF program
//! and its maps, [`discovery`] finds the processes mapping `libjpagent.so`, [`control`]
//! writes their control generation, [`ring`] reads the ring buffer and [`collector`]
//! runs it all and hands the records to a [`collector::RecordSink`] (the JVM store).
pub mod attach;
pub mod collector;
pub mod config;
pub mod control;
pub mod discovery;
pub mod maps;
pub mod notes;
pub mod program;
pub mod ring;
pub mod spec;
