//! `--connect https://HOST:PORT`: jpd's gRPC API over TCP with TLS. The server's
//! certificate is checked against `--ca FILE` (else the system's CA bundle) and the
//! host name (or `--tls-server-name`); `--cert`/`--key` present a client
//! certificate when jpd asks for one. TLS failures are explained in terms of these
//! flags and of jpd's configuration keys.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use anyhow::{anyhow, bail, Context};
use hyper_util::rt::TokioIo;
use jp_proto::v1::jp_client::JpClient;
use jp_proto::v1::GetStatusRequest;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::errors::{root_cause, rpc_failure};

/// Debian's bundle of the system's trusted CAs, used when `--ca` is not given.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What the TLS flags say.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

/// `https://HOST:PORT` split up; anything else is refused with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// As given, for messages.
    pub url: String,
    /// Without IPv6 brackets: what is dialled and (by default) verified.
    pub host: String,
    pub port: u16,
}

impl Target {
    pub fn parse(url: &str) -> anyhow::Result<Target> {
        let uri: Uri = url
            .parse()
            .map_err(|e| anyhow!("--connect {url:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") => bail!(
                "--connect {url:?}: jpd serves gRPC over TCP only with TLS: use https://HOST:PORT"
            ),
            _ => bail!("--connect {url:?}: expected https://HOST:PORT"),
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            bail!("--connect {url:?}: expected https://HOST:PORT, without a path");
        }
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| anyhow!("--connect {url:?}: no host"))?;
        let port = uri
            .port_u16()
            .ok_or_else(|| anyhow!("--connect {url:?}: no port (jpd has no default TCP port)"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Ok(Target {
            url: url.to_string(),
            host: host.to_string(),
            port,
        })
    }
}

fn read_certificates(flag: &str, path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("{flag} {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{flag} {}: not a valid PEM file: {e}", path.display()))?;
    if certs.is_empty() {
        bail!(
            "{flag} {}: no \"-----BEGIN CERTIFICATE-----\" block in it",
            path.display()
        );
    }
    Ok(certs)
}

/// Where the trusted CAs came from, for messages.
fn ca_source(opts: &TlsOptions) -> String {
    match &opts.ca {
        Some(ca) => format!("--ca {}", ca.display()),
        None => format!("the system's CAs ({SYSTEM_CA_BUNDLE}; pass --ca FILE for jpd's CA)"),
    }
}

fn client_config(opts: &TlsOptions) -> anyhow::Result<rustls::ClientConfig> {
    let (flag, ca) = match &opts.ca {
        Some(ca) => ("--ca", ca.clone()),
        None => ("system CA bundle", PathBuf::from(SYSTEM_CA_BUNDLE)),
    };
    let mut roots = RootCertStore::empty();
    if opts.ca.is_none() && !ca.exists() {
        bail!(
            "no --ca given and no system CA bundle at {SYSTEM_CA_BUNDLE}: pass --ca FILE, the CA that signed jpd's certificate"
        );
    }
    let certs = read_certificates(flag, &ca)?;
    if opts.ca.is_some() {
        for c in certs {
            roots
                .add(c)
                .map_err(|e| anyhow!("--ca {}: not a usable CA certificate: {e}", ca.display()))?;
        }
    } else {
        // A system bundle may hold a few certificates webpki cannot use; skip those.
        roots.add_parsable_certificates(certs);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS set-up")?
        .with_root_certificates(roots);
    let mut config = match (&opts.cert, &opts.key) {
        (Some(cert), Some(key)) => {
            let chain = read_certificates("--cert", cert)?;
            let pem = std::fs::read(key).with_context(|| format!("--key {}", key.display()))?;
            let der = PrivateKeyDer::from_pem_slice(&pem)
                .map_err(|e| anyhow!("--key {}: no usable PEM private key: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, der)
                .map_err(|e| match e {
                    rustls::Error::InconsistentKeys(_) => anyhow!(
                        "--key {} does not belong to the certificate in --cert {}",
                        key.display(),
                        cert.display()
                    ),
                    e => anyhow!("--cert/--key: {e}"),
                })?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => bail!("--cert and --key go together"),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Connects and completes the TLS handshake now; requests reuse the connection.
pub async fn connect(url: &str, opts: &TlsOptions) -> anyhow::Result<JpClient<Channel>> {
    let target = Target::parse(url)?;
    let config = Arc::new(client_config(opts)?);
    let name_text = opts.server_name.clone().unwrap_or(target.host.clone());
    let name = ServerName::try_from(name_text.clone())
        .map_err(|e| anyhow!("{name_text:?} is not a server name to verify: {e}"))?;
    // The connector below makes the TLS connection itself; the channel's URI only names
    // the authority (a tonic built with TLS features would refuse an https one it was
    // given no TLS settings for).
    let authority = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let endpoint = Endpoint::from_shared(format!("http://{authority}"))
        .with_context(|| format!("--connect {url}"))?;
    let (host, port) = (target.host.clone(), target.port);
    let last_error = LastTlsError::default();
    let recorder = last_error.clone();
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let (config, name, host) = (Arc::clone(&config), name.clone(), host.clone());
            let recorder = recorder.clone();
            async move {
                let tcp = TcpStream::connect((host.as_str(), port)).await?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await?;
                Ok::<_, std::io::Error>(TokioIo::new(Recording {
                    inner: tls,
                    last_error: recorder,
                }))
            }
        }))
        .await
        .map_err(|e| {
            anyhow!(
                "cannot connect to jpd at {}: {}",
                target.url,
                explain(&e, opts, &name_text)
            )
        })?;
    let mut client = JpClient::new(channel).max_decoding_message_size(64 << 20);
    // With TLS 1.3 the client's handshake ends before jpd has judged the client
    // certificate: a refusal only shows on the first read. Ask once now so that
    // every command reports it as a connection error, worded for the flags.
    if let Err(s) = client.get_status(GetStatusRequest {}).await {
        // The HTTP/2 layer reports a connection that TLS ended as "cancelled";
        // the reason is the TLS error the connection recorded.
        let why = last_error
            .take()
            .map(|e| describe(&e, opts, &name_text))
            .or_else(|| explain_tls(&s, opts, &name_text));
        if let Some(why) = why {
            bail!("cannot connect to jpd at {}: {why}", target.url);
        }
        bail!("jpd at {}: {}", target.url, rpc_failure(&s));
    }
    Ok(client)
}

/// The TLS error somewhere in `e`'s chain (tokio-rustls wraps it in an io::Error,
/// which hides it from `source()`).
fn find_tls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return Some(inner);
        }
        cur = err.source();
    }
    None
}

/// A TLS failure in words that say what to change; `None` when `e` is not one.
pub fn explain_tls(
    e: &(dyn std::error::Error + 'static),
    opts: &TlsOptions,
    server_name: &str,
) -> Option<String> {
    find_tls_error(e).map(|tls| describe(tls, opts, server_name))
}

fn describe(tls: &rustls::Error, opts: &TlsOptions, server_name: &str) -> String {
    match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "jpd's certificate is not trusted: it is not signed by a CA in {}",
                ca_source(opts)
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!(
                    "jpd's certificate is not valid for {server_name:?} (pass --tls-server-name with a name its certificate carries)"
                )
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "jpd's certificate has expired (renew server.tls_cert and send jpd SIGHUP)".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "jpd's certificate is not valid yet (check the clocks)".into()
            }
            other => format!("jpd's certificate was rejected: {other:?}"),
        },
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired)
        | rustls::Error::AlertReceived(AlertDescription::HandshakeFailure)
            if opts.cert.is_none() =>
        {
            "jpd requires a client certificate: pass --cert FILE --key FILE (signed by the CA in jpd's server.tls_client_ca)".into()
        }
        rustls::Error::AlertReceived(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::DecryptError,
        ) => match &opts.cert {
            Some(cert) => format!(
                "jpd refused the client certificate {}: it is not signed by the CA in jpd's server.tls_client_ca",
                cert.display()
            ),
            None => format!("jpd refused the connection: TLS alert {tls}"),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "the server did not answer in TLS: is it jpd's server.tcp port?".into()
        }
        rustls::Error::NoApplicationProtocol => {
            "the server does not speak HTTP/2 over TLS (no ALPN h2): is it jpd?".into()
        }
        other => format!("TLS: {other}"),
    }
}

/// The last TLS error a connection's reads ran into.
#[derive(Clone, Default)]
struct LastTlsError(Arc<Mutex<Option<rustls::Error>>>);

impl LastTlsError {
    fn record(&self, e: &std::io::Error) {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(tls.clone());
        }
    }

    fn take(&self) -> Option<rustls::Error> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A TLS stream that keeps its last TLS error for [`connect`]'s message.
struct Recording<T> {
    inner: T,
    last_error: LastTlsError,
}

impl<T: AsyncRead + Unpin> AsyncRead for Recording<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Err(e)) = &r {
            self.last_error.record(e);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Recording<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn explain(e: &(dyn std::error::Error + 'static), opts: &TlsOptions, server_name: &str) -> String {
    explain_tls(e, opts, server_name).unwrap_or_else(|| root_cause(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_urls() {
        let t = Target::parse("https://jp-host.example:9465").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("jp-host.example", 9465));
        let t = Target::parse("https://[::1]:9465/").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9465));
        let e = |u: &str| Target::parse(u).unwrap_err().to_string();
        assert_eq!(
            e("http://127.0.0.1:9465"),
            "--connect \"http://127.0.0.1:9465\": jpd serves gRPC over TCP only with TLS: use https://HOST:PORT"
        );
        assert_eq!(
            e("https://127.0.0.1"),
            "--connect \"https://127.0.0.1\": no port (jpd has no default TCP port)"
        );
        assert_eq!(
            e("127.0.0.1:9465"),
            "--connect \"127.0.0.1:9465\": expected https://HOST:PORT"
        );
        assert_eq!(
            e("https://h:1/jp.v1.Jp"),
            "--connect \"https://h:1/jp.v1.Jp\": expected https://HOST:PORT, without a path"
        );
    }

    #[test]
    fn tls_errors_name_the_flag_to_change() {
        let with_ca = TlsOptions {
            ca: Some("/etc/jp/ca.pem".into()),
            ..TlsOptions::default()
        };
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, unknown);
        assert_eq!(
            explain_tls(&io, &with_ca, "h").unwrap(),
            "jpd's certificate is not trusted: it is not signed by a CA in --ca /etc/jp/ca.pem"
        );
        let required = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        assert_eq!(
            describe(&required, &with_ca, "h"),
            "jpd requires a client certificate: pass --cert FILE --key FILE (signed by the CA in jpd's server.tls_client_ca)"
        );
        let other = std::io::Error::other("refused");
        assert_eq!(explain_tls(&other, &with_ca, "h"), None);
    }
}
