//! How an encoded export reaches the receiver: OTLP/gRPC (`ProfilesService/Export`,
//! jp-proto's generated client) or OTLP/HTTP with a protobuf body (the Pyroscope
//! pusher's HTTP client). Both classify failures the way the OTLP specification does:
//! worth retrying (the receiver is down, slow or overloaded) or refused for good
//! (dropped and counted: the same bytes cannot do better).

use std::time::Duration;

use axum::body::Bytes;
use axum::http::header::{HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};
use axum::http::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use jp_proto::otlp_collector::profiles_service_client::ProfilesServiceClient;
use jp_proto::otlp_collector::ExportProfilesServiceRequest;
use prost::Message;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::config::OtlpConfig;
use crate::export::pyroscope::wire::{tls_connector, Client, HttpTarget, PushError};
use crate::export::pyroscope::Deliver;

/// OTLP/gRPC: one channel, connected lazily (and again after a failure) by tonic.
pub struct GrpcClient {
    client: ProfilesServiceClient<Channel>,
    headers: Vec<(
        MetadataKey<tonic::metadata::Ascii>,
        MetadataValue<tonic::metadata::Ascii>,
    )>,
    timeout: Duration,
}

impl GrpcClient {
    pub fn new(cfg: &OtlpConfig) -> Result<GrpcClient, String> {
        let timeout = Duration::from_secs(cfg.timeout_s);
        let endpoint = Endpoint::from_shared(cfg.endpoint.clone())
            .map_err(|e| format!("otlp.endpoint = {:?}: {e}", cfg.endpoint))?
            .connect_timeout(timeout)
            .timeout(timeout)
            .user_agent(concat!("jpd/", env!("CARGO_PKG_VERSION")))
            .map_err(|e| format!("otlp: {e}"))?;
        let headers = cfg
            .headers
            .iter()
            .map(|(k, v)| {
                let key = MetadataKey::from_bytes(k.as_bytes())
                    .map_err(|_| format!("otlp.headers: {k:?} is not a gRPC metadata key"))?;
                let value = MetadataValue::try_from(v.as_str())
                    .map_err(|_| format!("otlp.headers: the value of {k:?} is not valid"))?;
                Ok((key, value))
            })
            .collect::<Result<_, String>>()?;
        Ok(GrpcClient {
            client: ProfilesServiceClient::new(
                endpoint.connect_with_connector_lazy(grpc_connector(cfg)?),
            ),
            headers,
            timeout,
        })
    }

    async fn export(&self, body: Bytes) -> Result<(), PushError> {
        let message = ExportProfilesServiceRequest::decode(body)
            .map_err(|e| PushError::Rejected(format!("cannot decode the queued export: {e}")))?;
        let mut request = tonic::Request::new(message);
        for (k, v) in &self.headers {
            request.metadata_mut().insert(k.clone(), v.clone());
        }
        request.set_timeout(self.timeout);
        let mut client = self.client.clone();
        let answer = tokio::time::timeout(self.timeout, client.export(request))
            .await
            .map_err(|_| {
                PushError::Retry(format!(
                    "no answer within {} s (otlp.timeout_s)",
                    self.timeout.as_secs()
                ))
            })?;
        match answer {
            Ok(response) => {
                if let Some(p) = response.into_inner().partial_success {
                    if p.rejected_profiles > 0 || !p.error_message.is_empty() {
                        log::warn!(
                            "otlp: the receiver rejected {} profiles: {}",
                            p.rejected_profiles,
                            p.error_message
                        );
                    }
                }
                Ok(())
            }
            Err(status) => Err(classify(&status)),
        }
    }
}

/// The OTLP specification's retryable gRPC codes; any other failure is final.
fn classify(status: &tonic::Status) -> PushError {
    let msg = format!("{:?}: {}", status.code(), status.message());
    match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss
        | Code::ResourceExhausted => PushError::Retry(msg),
        _ => PushError::Rejected(msg),
    }
}

impl Deliver for GrpcClient {
    fn deliver(
        &self,
        body: Bytes,
    ) -> impl std::future::Future<Output = Result<(), PushError>> + Send {
        self.export(body)
    }
}

/// OTLP/HTTP: POST `<endpoint>/v1development/profiles`, `application/x-protobuf`.
pub struct HttpClient(Client);

impl HttpClient {
    pub fn new(cfg: &OtlpConfig) -> Result<HttpClient, String> {
        let url = cfg.http_url();
        let endpoint: Uri = url
            .parse()
            .map_err(|e| format!("otlp.endpoint = {:?}: {e}", cfg.endpoint))?;
        let mut headers = vec![
            (
                CONTENT_TYPE,
                HeaderValue::from_static("application/x-protobuf"),
            ),
            (
                USER_AGENT,
                HeaderValue::from_static(concat!("jpd/", env!("CARGO_PKG_VERSION"))),
            ),
        ];
        for (k, v) in &cfg.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("otlp.headers: {k:?} is not a header name"))?;
            let mut value = HeaderValue::from_str(v)
                .map_err(|_| format!("otlp.headers: the value of {k:?} is not valid"))?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        let ca_pem = read_ca(cfg)?;
        let target = HttpTarget {
            endpoint,
            headers,
            ca: ca_pem
                .as_deref()
                .map(|pem| (pem, cfg.tls_ca_file.as_path())),
            timeout: Duration::from_secs(cfg.timeout_s),
            section: "otlp",
        };
        Client::over(target).map(HttpClient)
    }
}

impl Deliver for HttpClient {
    fn deliver(
        &self,
        body: Bytes,
    ) -> impl std::future::Future<Output = Result<(), PushError>> + Send {
        self.0.push(body)
    }
}

/// The gRPC channel's connections: plain TCP for `http://`, rustls for `https://` with
/// the roots every exporter uses (`tls_ca_file`, checked here so that a bad file stops
/// the start instead of failing every export, else Mozilla's roots), HTTP/2 offered by
/// ALPN. jpd makes its TLS itself rather than through tonic's TLS features: a workspace
/// build would unify those into jpctl's tonic, which then refuses the https URI of a
/// channel whose TLS jpctl's own connector makes.
fn grpc_connector(cfg: &OtlpConfig) -> Result<HttpsConnector<HttpConnector>, String> {
    let pem = read_ca(cfg)?;
    let ca = pem.as_deref().map(|pem| (pem, cfg.tls_ca_file.as_path()));
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    Ok(tls_connector("otlp", ca)?
        .https_or_http()
        .enable_http2()
        .wrap_connector(tcp))
}

/// `tls_ca_file`'s PEM, if set.
fn read_ca(cfg: &OtlpConfig) -> Result<Option<Vec<u8>>, String> {
    if cfg.tls_ca_file.as_os_str().is_empty() {
        return Ok(None);
    }
    std::fs::read(&cfg.tls_ca_file).map(Some).map_err(|e| {
        format!(
            "otlp.tls_ca_file = {:?}: cannot read it: {e}",
            cfg.tls_ca_file.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn https(ca: &std::path::Path) -> OtlpConfig {
        OtlpConfig {
            enabled: true,
            endpoint: "https://collector.example:4317".into(),
            tls_ca_file: ca.to_path_buf(),
            ..OtlpConfig::default()
        }
    }

    #[tokio::test]
    async fn grpc_over_tls_takes_a_ca_file_and_refuses_a_bad_one_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, params.self_signed(&key).unwrap().pem()).unwrap();
        assert!(GrpcClient::new(&https(&ca)).is_ok());

        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "not a certificate\n").unwrap();
        let e = GrpcClient::new(&https(&not_pem)).err().unwrap();
        assert_eq!(
            e,
            format!(
                "otlp.tls_ca_file = {:?}: holds no certificate",
                not_pem.display()
            )
        );
        let missing = dir.path().join("missing.pem");
        let e = GrpcClient::new(&https(&missing)).err().unwrap();
        assert!(e.starts_with("otlp.tls_ca_file = "), "{e}");
        // Mozilla's roots without a CA file.
        let mut cfg = https(&missing);
        cfg.tls_ca_file = Default::default();
        assert!(GrpcClient::new(&cfg).is_ok());
    }
}
