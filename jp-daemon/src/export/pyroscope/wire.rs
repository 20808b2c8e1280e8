//! The push API of Pyroscope and Grafana Cloud Profiles: `push.v1.PusherService/Push`
//! (grafana/pyroscope, api/push/v1/push.proto) called over the Connect protocol, unary:
//! an HTTP POST of the binary protobuf `PushRequest` with `Content-Type:
//! application/proto`, answered 200 with a `PushResponse`, or another status with a
//! JSON error. Grafana Alloy's `pyroscope.write` uses the same call.
//!
//! Why this and not `/ingest?name=…&format=pprof`: the push API carries labels as
//! label pairs (no name encoding), several profiles per request, and it is what current
//! Pyroscope servers, Grafana Cloud and Alloy's receiver all accept; `/ingest` is the
//! older Pyroscope 0.x API kept for compatibility.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use axum::http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::builderstates::WantsSchemes;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;

use super::config::PyroscopeConfig;

#[derive(Clone, PartialEq, prost::Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// `types.v1.LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawSample {
    /// A pprof profile, gzipped.
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    /// A UUID naming this profile.
    #[prost(string, tag = "2")]
    pub id: String,
}

/// Why a push did not go through.
#[derive(Debug, PartialEq, Eq)]
pub enum PushError {
    /// Worth retrying: no connection, a timeout, 408, 429 or 5xx (as Alloy does).
    Retry(String),
    /// The server refused this request for good (400, 401, 413, …): retrying the same
    /// bytes cannot help.
    Rejected(String),
}

/// Errors the server may explain in its body: the first bytes of it go to the log.
const ERROR_BODY_BYTES: usize = 1024;
/// A longer answer is cut (a hostile or broken server must not fill jpd's memory).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

pub struct Client {
    http: HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
    endpoint: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
    /// The configuration section, in messages.
    section: &'static str,
}

/// What an HTTP push client is made of, whatever the receiver.
pub struct HttpTarget<'a> {
    pub endpoint: Uri,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// A CA's PEM and the file it came from, instead of Mozilla's roots.
    pub ca: Option<(&'a [u8], &'a std::path::Path)>,
    pub timeout: Duration,
    pub section: &'static str,
}

impl Client {
    /// Reads the secret files; errors name the key to fix.
    pub fn new(cfg: &PyroscopeConfig) -> Result<Client, String> {
        let endpoint: Uri = cfg
            .endpoint()
            .parse()
            .map_err(|e| format!("pyroscope.url = {:?}: {e}", cfg.url))?;
        let mut headers = vec![
            (CONTENT_TYPE, HeaderValue::from_static("application/proto")),
            (
                HeaderName::from_static("connect-protocol-version"),
                HeaderValue::from_static("1"),
            ),
            (
                USER_AGENT,
                HeaderValue::from_static(concat!("jpd/", env!("CARGO_PKG_VERSION"))),
            ),
        ];
        let files = Files::read(cfg)?;
        if let Some(auth) = files.authorization {
            headers.push((AUTHORIZATION, auth));
        }
        if !cfg.tenant_id.is_empty() {
            let v = HeaderValue::from_str(&cfg.tenant_id).map_err(|_| {
                format!(
                    "pyroscope.tenant_id = {:?} is not a header value",
                    cfg.tenant_id
                )
            })?;
            headers.push((HeaderName::from_static("x-scope-orgid"), v));
        }
        let target = HttpTarget {
            endpoint,
            headers,
            ca: files
                .ca_pem
                .as_deref()
                .map(|pem| (pem, cfg.tls_ca_file.as_path())),
            timeout: Duration::from_secs(cfg.timeout_s),
            section: "pyroscope",
        };
        Client::over(target)
    }

    /// A client POSTing to `t.endpoint` over http or https (rustls).
    pub fn over(t: HttpTarget<'_>) -> Result<Client, String> {
        let section = t.section;
        let tls = tls_connector(section, t.ca)?;
        let https = tls.https_or_http().enable_http1().build();
        let http = HyperClient::builder(TokioExecutor::new()).build(https);
        Ok(Client {
            http,
            endpoint: t.endpoint,
            headers: t.headers,
            timeout: t.timeout,
            section,
        })
    }

    /// One `Push` call; the whole exchange is bounded by `timeout_s`.
    pub async fn push(&self, body: Bytes) -> Result<(), PushError> {
        let mut req = Request::post(self.endpoint.clone());
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| PushError::Rejected(format!("cannot build the request: {e}")))?;
        let exchange = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| PushError::Retry(error_chain(&e)))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, PushError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                PushError::Retry(format!(
                    "no answer within {} s ({}.timeout_s)",
                    self.timeout.as_secs(),
                    self.section
                ))
            })??;
        if status == StatusCode::OK {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_BYTES)])
            .trim()
            .to_string();
        let msg = format!("{} from {}: {text}", status, self.endpoint);
        if status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
            || status.is_server_error()
        {
            Err(PushError::Retry(msg))
        } else {
            Err(PushError::Rejected(msg))
        }
    }
}

/// An error and its causes on one line (hyper's own message is often just "client error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// A secret from a file: its content without the trailing newline.
fn secret(key: &str, path: &std::path::Path) -> Result<String, String> {
    let s = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "pyroscope.{key} = {:?}: cannot read it: {e}",
            path.display()
        )
    })?;
    let s = s.trim_end_matches(['\n', '\r']).to_string();
    if s.is_empty() {
        return Err(format!("pyroscope.{key} = {:?} is empty", path.display()));
    }
    Ok(s)
}

/// What the pusher reads from files: compared on SIGHUP, so that a rotated token or CA
/// applies without another change.
#[derive(Debug, PartialEq)]
pub struct Files {
    pub authorization: Option<HeaderValue>,
    pub ca_pem: Option<Vec<u8>>,
}

impl Files {
    /// Reads and checks them; errors name the key.
    pub fn read(cfg: &PyroscopeConfig) -> Result<Files, String> {
        let ca_pem = if cfg.tls_ca_file.as_os_str().is_empty() {
            None
        } else {
            let pem = std::fs::read(&cfg.tls_ca_file).map_err(|e| {
                format!(
                    "pyroscope.tls_ca_file = {:?}: cannot read it: {e}",
                    cfg.tls_ca_file.display()
                )
            })?;
            ca_roots("pyroscope", &pem, &cfg.tls_ca_file)?;
            Some(pem)
        };
        Ok(Files {
            authorization: authorization(cfg)?,
            ca_pem,
        })
    }
}

/// rustls (ring) for a push target: the certificates of `ca` (its PEM and the file it
/// came from, named in errors) as the only roots, else Mozilla's roots. Pyroscope,
/// OTLP/HTTP and OTLP/gRPC share it, so every exporter trusts alike.
pub(crate) fn tls_connector(
    section: &str,
    ca: Option<(&[u8], &std::path::Path)>,
) -> Result<HttpsConnectorBuilder<WantsSchemes>, String> {
    let provider = rustls::crypto::ring::default_provider();
    Ok(match ca {
        None => HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(provider)
            .map_err(|e| format!("{section}: cannot set up TLS: {e}"))?,
        Some((pem, path)) => {
            let roots = ca_roots(section, pem, path)?;
            let tls = rustls::ClientConfig::builder_with_provider(provider.into())
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("{section}: cannot set up TLS: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            HttpsConnectorBuilder::new().with_tls_config(tls)
        }
    })
}

/// The certificates of a PEM file, as trust anchors.
pub(crate) fn ca_roots(
    section: &str,
    pem: &[u8],
    path: &std::path::Path,
) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let bad = |why: String| format!("{section}.tls_ca_file = {:?}: {why}", path.display());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| bad(format!("not PEM certificates: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    Ok(roots)
}

/// The `Authorization` header the configuration asks for, if any (marked sensitive).
pub fn authorization(cfg: &PyroscopeConfig) -> Result<Option<HeaderValue>, String> {
    let value = if !cfg.basic_auth_user.is_empty() {
        let password = secret("basic_auth_password_file", &cfg.basic_auth_password_file)?;
        format!(
            "Basic {}",
            base64(format!("{}:{password}", cfg.basic_auth_user).as_bytes())
        )
    } else if !cfg.bearer_token_file.as_os_str().is_empty() {
        format!(
            "Bearer {}",
            secret("bearer_token_file", &cfg.bearer_token_file)?
        )
    } else {
        return Ok(None);
    };
    let mut v = HeaderValue::from_str(&value).map_err(|_| {
        "pyroscope: the credentials hold characters an HTTP header cannot carry".to_string()
    })?;
    v.set_sensitive(true);
    Ok(Some(v))
}

/// Standard base64 with padding (RFC 4648), for HTTP basic authentication.
pub fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A random (version 4) UUID for `RawSample.id`, hyphenated lowercase.
pub fn uuid_v4() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("123456:glc_abc", "MTIzNDU2OmdsY19hYmM="),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input}");
        }
    }

    #[test]
    fn uuids_are_version_4() {
        let a = uuid_v4();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!("89ab".contains(&a[19..20]), "{a}");
        assert_ne!(a, uuid_v4());
    }

    #[test]
    fn secrets_name_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let mut cfg = PyroscopeConfig {
            basic_auth_user: "123".into(),
            basic_auth_password_file: pw.clone(),
            ..PyroscopeConfig::default()
        };
        let v = authorization(&cfg).unwrap().unwrap();
        assert_eq!(
            v.to_str().unwrap(),
            format!("Basic {}", base64(b"123:s3cret"))
        );
        assert!(v.is_sensitive());
        cfg.basic_auth_password_file = dir.path().join("missing");
        let e = authorization(&cfg).unwrap_err();
        assert!(
            e.starts_with("pyroscope.basic_auth_password_file = \""),
            "{e}"
        );
        let cfg = PyroscopeConfig {
            bearer_token_file: pw,
            ..PyroscopeConfig::default()
        };
        assert_eq!(
            authorization(&cfg).unwrap().unwrap().to_str().unwrap(),
            "Bearer s3cret"
        );
        assert_eq!(authorization(&PyroscopeConfig::default()), Ok(None));
    }
}
