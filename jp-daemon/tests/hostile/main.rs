//! Hostile load: well-formed but hostile records from fake agents (processes that map a
//! `libjpagent.so` of their own and fire the probe) beside a real JVM with the real agent,
//! against the delivered jpd with its default configuration, as root. Each attack is one
//! test; each asserts the goals of a shared host: jpd's resident memory stays within its
//! store budget, `jpctl status` answers within a second throughout, the real JVM's tree
//! is complete and exact (node by node against its agent's own `out=` file) and it is
//! asked to re-send at most a bounded number of times, and jpd's refusal counters say
//! what it refused and why.
//!
//! `harness` is the scene (jpd, the real JVM, the sampler, the checks), `records` the
//! records the fake agents fire; the other modules are one attack each, and
//! `throughput` plays every attack seen and unseen by jpd beside one real JVM.
//! `cargo xtask bench hostile` runs these tests with `JP_HOSTILE_MEASURE` set to measure
//! jpd's memory and CPU beside each attack and the real JVM's throughput.
#[path = "../support/mod.rs"]
mod support;

mod harness;
mod records;

mod deep_chain;
mod fake_jvms;
mod far_node;
mod flood;
mod main_class;
mod method_ids;
mod resends;
mod thread_map;
mod throughput;
