//! jpd on a fleet host with the real peers that talk to it: Prometheus, Pyroscope, an OTLP
//! receiver, go tool pprof, grpcio, systemd, tmux and a headless browser.
//! One test binary; each module is one area's tests, all sharing `support` (see
//! docs/architecture.md, "Tests").
#[path = "../../../jp-mct/tests/browser/mod.rs"]
mod browser;
#[path = "../support/mod.rs"]
mod support;

mod attach;
mod exporter;
mod flame;
mod grpc;
mod jvm;
mod otlp;
mod pprof;
mod prometheus;
mod pyroscope;
mod service;
mod systemd;
mod tls;
mod top;
