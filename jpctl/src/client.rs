//! Connecting to jpd over its Unix socket (over TCP with TLS: [`crate::tls`]).

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use jp_proto::v1::jp_client::JpClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::errors::{self, root_cause};

pub const DEFAULT_SOCKET: &str = "/run/jp/jpd.sock";

pub type Client = JpClient<Channel>;

/// jpd could not be reached; the message says how to start it.
#[derive(Debug)]
pub struct ConnectError {
    pub socket: PathBuf,
    pub cause: String,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot connect to jpd at {}: {} (is jpd running? start it with `cargo xtask run` or `systemctl start jpd`)",
            self.socket.display(),
            self.cause
        )
    }
}

impl std::error::Error for ConnectError {}

/// Connects once, now; requests on the returned client reuse that connection.
pub async fn connect(socket: &Path) -> Result<Client, ConnectError> {
    let path = socket.to_path_buf();
    // The URI is required by the HTTP/2 layer but never resolved: the connector
    // below always dials the Unix socket.
    let endpoint = Endpoint::from_static("http://jpd.sock");
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| ConnectError {
            socket: socket.to_path_buf(),
            cause: root_cause(&e),
        })?;
    // Responses are small except Watch and profiles with buckets; allow those.
    Ok(JpClient::new(channel).max_decoding_message_size(64 << 20))
}

/// A failed RPC, worded for the terminal.
pub fn status_message(s: &tonic::Status) -> String {
    // A TLS connection that broke (e.g. a certificate refused after the handshake).
    if let Some(why) = crate::tls::explain_tls(s, &crate::tls::TlsOptions::default(), "") {
        return format!("jpd answered {:?}: {why}", s.code());
    }
    errors::rpc_failure(s)
}
