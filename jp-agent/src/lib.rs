//! The jp JVM agent.
pub mod classfile;
