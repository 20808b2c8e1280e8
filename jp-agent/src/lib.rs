//! The jp JVM agent.
