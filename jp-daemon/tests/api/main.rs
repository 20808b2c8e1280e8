//! The library's seams without root: the gRPC server over stores, its limits and the JVM
//! store's ingestion.
//! One test binary; each module is one area's tests, all sharing `support` (see
//! docs/architecture.md, "Tests").
#[path = "../support/mod.rs"]
mod support;

mod callers;
mod jvm_props;
mod jvm_tap;
mod limits;
mod server;
