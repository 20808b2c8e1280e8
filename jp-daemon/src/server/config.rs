//! `[server]` of jpd.toml: where the API listens and who may call it.
use std::path::PathBuf;

use serde::Deserialize;

use crate::restart::{self, RestartNeeded};

pub const DEFAULT_SOCKET: &str = "/run/jp/jpd.sock";
pub const DEFAULT_GROUP: &str = "jp";

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
        }
    }
}

impl ServerConfig {
    /// The keys a reload cannot apply: the socket and the TCP listener are bound once,
    /// at start. The access rules and the TLS files reload.
    pub fn restart_needed(&self, new: &Self) -> Vec<RestartNeeded> {
        restart::changed([
            (
                "server.socket",
                self.socket.display().to_string(),
                new.socket.display().to_string(),
            ),
            ("server.tcp", self.tcp.clone(), new.tcp.clone()),
        ])
    }
}
