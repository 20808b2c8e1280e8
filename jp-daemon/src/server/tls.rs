//! gRPC over TCP: the TLS listener. The certificate, key and client CA come from
//! PEM files named in `[server]`; [`load`] checks them (also for `--check-config`)
//! with errors that name the key to fix. SIGHUP re-reads them: [`TlsSettings::set`]
//! swaps the configuration new handshakes use, connections already open keep theirs.
//!
//! Every accepted connection carries a [`TlsPeer`] in its requests' extensions: the
//! authorization layer tells TCP callers from Unix-socket callers by it.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;

use super::config::ServerConfig;
use super::conn::Tagged;
use super::limits::MAX_TCP_CONNECTIONS;

/// A client that connects but does not finish the handshake is dropped after this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait in the listen backlog.
const MAX_HANDSHAKES: usize = 64;
/// Each time the TCP listener is full and a client has to wait.
pub const TOO_MANY_CONNECTIONS: crate::refusals::Refusal =
    crate::refusals::Refusal::new("grpc", "too_many_connections");
/// How long, and how much, a refused client may still send (see [`linger`]).
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// A TLS file that cannot be used; `key` is the `[server]` key naming it.
#[derive(Debug)]
pub struct TlsError {
    pub key: &'static str,
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "server.{} = {:?}: {}",
            self.key,
            self.path.display().to_string(),
            self.message
        )
    }
}

impl std::error::Error for TlsError {}

fn error(key: &'static str, path: &Path, message: impl Into<String>) -> TlsError {
    TlsError {
        key,
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| error(key, path, format!("cannot read it: {e}")))
}

/// Every CERTIFICATE block of a PEM file (at least one).
fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(key, path, format!("not a valid PEM file: {e}")))?;
    if certs.is_empty() {
        return Err(error(
            key,
            path,
            "no certificate in it (expected PEM \"-----BEGIN CERTIFICATE-----\" blocks)",
        ));
    }
    for (i, c) in certs.iter().enumerate() {
        if let Err(e) = webpki::EndEntityCert::try_from(c) {
            return Err(error(
                key,
                path,
                format!("certificate {} is not valid X.509: {e}", i + 1),
            ));
        }
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("tls_key", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => error(
            "tls_key",
            path,
            "no private key in it (expected a PEM \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\" block)",
        ),
        e => error("tls_key", path, format!("not a valid PEM file: {e}")),
    })
}

/// The server side of TLS from `[server]`'s files: checked (parseable, key matches
/// the certificate, CA usable), ready for new handshakes. ALPN offers only h2.
pub fn load(server: &ServerConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates("tls_cert", &server.tls_cert)?;
    let key = private_key(&server.tls_key)?;
    let verifier = if server.tls_client_ca.as_os_str().is_empty() {
        WebPkiClientVerifier::no_client_auth()
    } else {
        let path = &server.tls_client_ca;
        let mut roots = RootCertStore::empty();
        for (i, ca) in certificates("tls_client_ca", path)?.into_iter().enumerate() {
            roots.add(ca).map_err(|e| {
                error(
                    "tls_client_ca",
                    path,
                    format!("certificate {} cannot be a trust anchor: {e}", i + 1),
                )
            })?;
        }
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| error("tls_client_ca", path, format!("unusable CA: {e}")))?
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| error("tls_cert", &server.tls_cert, format!("TLS set-up: {e}")))?
        .with_client_cert_verifier(verifier);
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => error(
            "tls_key",
            &server.tls_key,
            format!(
                "this key does not belong to the certificate in server.tls_cert ({})",
                server.tls_cert.display()
            ),
        ),
        e => error(
            "tls_key",
            &server.tls_key,
            format!("unusable with server.tls_cert: {e}"),
        ),
    })?;
    // gRPC is HTTP/2 only; clients such as grpc-core insist on ALPN h2.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS configuration new handshakes use, replaced as a whole on reload.
#[derive(Clone)]
pub struct TlsSettings {
    current: Arc<RwLock<Arc<rustls::ServerConfig>>>,
}

impl TlsSettings {
    pub fn new(config: Arc<rustls::ServerConfig>) -> TlsSettings {
        TlsSettings {
            current: Arc::new(RwLock::new(config)),
        }
    }

    pub fn set(&self, config: Arc<rustls::ServerConfig>) {
        *crate::lock::write(&self.current) = config;
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = Arc::clone(&crate::lock::read(&self.current));
        tokio_rustls::TlsAcceptor::from(config)
    }
}

/// Who called over TCP, as the handshake established it. A request carrying this
/// came through the TLS listener: it has no Unix credentials and never gets the
/// Unix socket's rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPeer {
    pub remote: SocketAddr,
    /// The client certificate's DNS names and common names; empty without one.
    pub client_names: Vec<String>,
    /// A client certificate was presented. jpd only ever asks for one with
    /// `tls_client_ca` set, and then the handshake fails unless it verifies, so a
    /// presented certificate is a verified one.
    pub client_certificate: bool,
}

/// A TCP listener whose connections are TLS-terminated before gRPC sees them.
pub struct TlsListener {
    listener: TcpListener,
    settings: TlsSettings,
}

impl TlsListener {
    /// Binds `addr` (inside a tokio runtime).
    pub fn bind(addr: &str, settings: TlsSettings) -> anyhow::Result<TlsListener> {
        use anyhow::Context as _;
        let std = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on server.tcp = {addr:?}"))?;
        std.set_nonblocking(true)
            .context("cannot make the TCP listener non-blocking")?;
        let listener = TcpListener::from_std(std).context("cannot register the TCP listener")?;
        Ok(TlsListener { listener, settings })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The connections whose handshake succeeded, for `serve_with_incoming`. The
    /// listening socket closes when the stream is dropped (at shutdown).
    pub fn incoming(self) -> tokio_stream::wrappers::ReceiverStream<io::Result<TlsConn>> {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(accept_loop(self.listener, self.settings, tx));
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

async fn accept_loop(
    listener: TcpListener,
    settings: TlsSettings,
    tx: mpsc::Sender<io::Result<TlsConn>>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    // A slot is taken before accepting and given back when the connection (or its
    // failed handshake) ends, so that at the cap new clients wait in the backlog.
    let connections = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
    loop {
        let slot = match Arc::clone(&connections).try_acquire_owned() {
            Ok(slot) => Ok(slot),
            Err(_) => {
                crate::refusals::count(TOO_MANY_CONNECTIONS, 1);
                log::warn!(
                    "{MAX_TCP_CONNECTIONS} TCP clients connected: the next one waits until one leaves"
                );
                tokio::select! {
                    _ = tx.closed() => return,
                    s = Arc::clone(&connections).acquire_owned() => s,
                }
            }
        };
        // The semaphore is never closed; an error would only mean shutting down.
        let Ok(slot) = slot else {
            return;
        };
        let permit = tokio::select! {
            _ = tx.closed() => return,
            p = Arc::clone(&handshakes).acquire_owned() => p,
        };
        // The semaphore is never closed; an error would only mean shutting down.
        let Ok(permit) = permit else {
            return;
        };
        let accepted = tokio::select! {
            _ = tx.closed() => return,
            a = listener.accept() => a,
        };
        let (tcp, remote) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                log::warn!("TCP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = settings.acceptor();
        let tx = tx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let handshake = acceptor.accept(tcp).into_fallible();
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(stream)) => {
                    let _ = tx.send(Ok(tls_conn(stream, remote, slot))).await;
                }
                Ok(Err((e, tcp))) => {
                    log::info!("TLS handshake with {remote} failed: {e}");
                    linger(tcp).await;
                }
                Err(_) => log::info!(
                    "TLS handshake with {remote} did not finish within {} s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ),
            }
        });
    }
}

/// Closes a connection whose handshake failed so that the client can still read the
/// alert saying why (e.g. "certificate required"). With TLS 1.3 the client has
/// finished its side and sent requests by then; closing with those unread would
/// reset the connection, and the reset would destroy the alert in flight.
async fn linger(mut tcp: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tcp.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut total = 0usize;
        while total < LINGER_BYTES {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

/// One TLS connection, with what the handshake told about the client and the TCP
/// connection slot it holds.
pub type TlsConn = Tagged<TlsStream<TcpStream>, TlsPeer>;

fn tls_conn(
    stream: TlsStream<TcpStream>,
    remote: SocketAddr,
    slot: OwnedSemaphorePermit,
) -> TlsConn {
    let cert = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first());
    let peer = TlsPeer {
        remote,
        client_names: cert.map(super::cert_names::names).unwrap_or_default(),
        client_certificate: cert.is_some(),
    };
    log::debug!("TLS connection from {peer:?}");
    Tagged::new(stream, peer, Some(slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(sans: &[&str], cn: &str) -> (rcgen::Certificate, rcgen::KeyPair) {
        let mut p =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        (p.self_signed(&key).unwrap(), key)
    }

    fn server_config(dir: &Path, cert: &str, key: &str, ca: &str) -> ServerConfig {
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        ServerConfig {
            tcp: "127.0.0.1:1".into(),
            tls_cert: write("c.pem", cert),
            tls_key: write("k.pem", key),
            tls_client_ca: if ca.is_empty() {
                PathBuf::new()
            } else {
                write("ca.pem", ca)
            },
            ..ServerConfig::default()
        }
    }

    #[test]
    fn names_are_dns_sans_then_common_names() {
        let (c, _) = leaf(&["ops.example", "127.0.0.1", "b.example"], "ops runner");
        assert_eq!(
            super::super::cert_names::names(c.der()),
            ["ops.example", "b.example", "ops runner"]
        );
        let (c, _) = leaf(&[], "ci");
        assert_eq!(super::super::cert_names::names(c.der()), ["ci"]);
    }

    #[test]
    fn load_checks_every_file_and_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = leaf(&["localhost"], "jpd");
        let (other, other_key) = leaf(&["localhost"], "other");
        let (cert, key) = (c.pem(), k.serialize_pem());
        let s = server_config(dir.path(), &cert, &key, "");
        let config = load(&s).unwrap();
        assert_eq!(config.alpn_protocols, [b"h2".to_vec()]);
        assert!(load(&server_config(dir.path(), &cert, &key, &other.pem())).is_ok());

        let e = load(&server_config(
            dir.path(),
            &cert,
            &other_key.serialize_pem(),
            "",
        ))
        .unwrap_err();
        assert_eq!(e.key, "tls_key");
        assert!(e.message.starts_with("this key does not belong"), "{e}");
        let e = load(&server_config(dir.path(), "", &key, "")).unwrap_err();
        assert_eq!(e.key, "tls_cert");
        assert!(
            e.to_string().ends_with(
                ": no certificate in it (expected PEM \"-----BEGIN CERTIFICATE-----\" blocks)"
            ),
            "{e}"
        );
        let e = load(&server_config(dir.path(), &cert, &cert, "")).unwrap_err();
        assert_eq!(e.key, "tls_key");
        let e = load(&server_config(dir.path(), &cert, &key, "garbage")).unwrap_err();
        assert_eq!(e.key, "tls_client_ca");
        let mut s = server_config(dir.path(), &cert, &key, "");
        s.tls_cert = dir.path().join("missing.pem");
        let e = load(&s).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "server.tls_cert = {:?}: cannot read it: No such file or directory (os error 2)",
                s.tls_cert.display().to_string()
            )
        );
    }
}
