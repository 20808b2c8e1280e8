//! What one client may hold of jpd's gRPC server. jpd is a host daemon: its
//! callers are an operator's jpctl, a dashboard or two and a fleet collector, each
//! with a handful of calls in flight. Without these bounds tonic accepts any number
//! of streams per connection and hyper keeps every one of them (a Watch stream is
//! a task, a queue of updates and HTTP/2 state), so one client could grow jpd's
//! memory without bound and crowd out the others on the 2-thread runtime.
//!
//! The values are constants, not `[server]` keys: they are far above what a
//! legitimate caller uses and far below what hurts the host, so an operator has
//! no reason to tune them.

use std::time::Duration;

/// HTTP/2 streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
/// A client asking for more has its further calls queued by its own HTTP/2 stack
/// until one of its streams ends; jpd never sees them. `jpctl top` uses one Watch
/// stream; 64 leaves room for a dashboard's parallel queries.
pub const MAX_CONCURRENT_STREAMS: u32 = 64;

/// TCP (TLS) connections open at once. Further clients wait in the listen backlog
/// until one leaves. Every TCP client passed the TLS handshake, but without a client
/// CA that is anyone who can reach the port. A fleet scrapes a host from a few
/// collectors; 128 is generous for that and bounds jpd at 128 × 64 streams.
pub const MAX_TCP_CONNECTIONS: usize = 128;

/// An HTTP/2 ping when a connection has been silent this long, and the connection
/// closed when the ping is not answered in [`KEEPALIVE_TIMEOUT`]. A peer that
/// vanished (host powered off, network cut) otherwise holds its streams and, over
/// TCP, a connection slot forever: TCP alone never notices a silent dead peer.
/// Pings cost a few bytes a minute; a live client answers them without help.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A unary call (or a stream's opening) that has not answered after this fails with
/// DEADLINE_EXCEEDED, giving its stream slot back. The slowest legitimate call, a
/// big JVM's profile, takes seconds; a stream's messages are not bounded by it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The server builder with these limits applied; both listeners use it.
pub fn builder() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .timeout(REQUEST_TIMEOUT)
}
