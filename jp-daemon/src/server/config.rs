//! `[server]` of jpd.toml: where the API listens and who may call it.
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use crate::restart::{self, RestartNeeded};

pub const DEFAULT_SOCKET: &str = "/run/jp/jpd.sock";
pub const DEFAULT_GROUP: &str = "jp";
pub const MAX_WATCH_STREAMS_RANGE: std::ops::RangeInclusive<u64> = 1..=4096;

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub socket: PathBuf,
    /// Group of the socket file; members may connect. Missing group: the socket
    /// keeps root's group (only root may connect) and jpd warns.
    pub group: String,
    /// Users and groups that may call the API besides root and `group`'s members.
    pub allow_uids: Vec<u32>,
    pub allow_gids: Vec<u32>,
    /// Users and groups that may also change what every client sees (`Reset`), besides
    /// root and the user jpd runs as; everyone else allowed on the socket only reads.
    pub admin_uids: Vec<u32>,
    pub admin_gids: Vec<u32>,
    /// `host:port` for gRPC over TCP; empty = Unix socket only. Needs TLS.
    pub tcp: String,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// When set, TCP clients must present a certificate signed by this CA.
    pub tls_client_ca: PathBuf,
    /// When not empty, the client certificate must name one of these (DNS SAN or
    /// CN); needs `tls_client_ca`.
    pub tls_client_names: Vec<String>,
    /// TCP without `tls_client_ca` is refused at start unless this is true: then any
    /// client that reaches the port may read the API, and sees JVM command lines cut
    /// to the program's name (they often carry secrets). Default false.
    pub tcp_anonymous_reads: bool,
    /// Watch streams one caller may hold open at once (a user on the Unix socket, a
    /// client address over TCP; 1..=4096, default 8); more are refused with
    /// RESOURCE_EXHAUSTED and count `grpc/watch_quota`.
    #[serde(deserialize_with = "max_watch_streams_per_uid")]
    pub max_watch_streams_per_uid: u64,
    /// Watch streams open at once, all callers (1..=4096, default 64).
    #[serde(deserialize_with = "max_watch_streams")]
    pub max_watch_streams: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            group: DEFAULT_GROUP.into(),
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            admin_uids: Vec::new(),
            admin_gids: Vec::new(),
            tcp: String::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            tls_client_ca: PathBuf::new(),
            tls_client_names: Vec::new(),
            tcp_anonymous_reads: false,
            max_watch_streams_per_uid: 8,
            max_watch_streams: 64,
        }
    }
}

fn max_watch_streams_per_uid<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    crate::config_range::deserialize(d, "max_watch_streams_per_uid", MAX_WATCH_STREAMS_RANGE)
}

fn max_watch_streams<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    crate::config_range::deserialize(d, "max_watch_streams", MAX_WATCH_STREAMS_RANGE)
}

impl ServerConfig {
    /// The keys a reload cannot apply: the socket and the TCP listener are bound once,
    /// at start, and the Watch quotas are the server's. The access rules and the TLS
    /// files reload.
    pub fn restart_needed(&self, new: &Self) -> Vec<RestartNeeded> {
        restart::changed([
            (
                "server.socket",
                self.socket.display().to_string(),
                new.socket.display().to_string(),
            ),
            ("server.tcp", self.tcp.clone(), new.tcp.clone()),
            (
                "server.max_watch_streams_per_uid",
                self.max_watch_streams_per_uid.to_string(),
                new.max_watch_streams_per_uid.to_string(),
            ),
            (
                "server.max_watch_streams",
                self.max_watch_streams.to_string(),
                new.max_watch_streams.to_string(),
            ),
        ])
    }
}
