//! Certificates for the TLS tests, made on the spot with rcgen (ring): a CA, server
//! certificates for 127.0.0.1/localhost, client certificates with chosen names; and
//! a bare rustls client that reports the certificate jpd serves.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its private key, PEM, plus the certificate's DER.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

fn name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

impl Ca {
    pub fn new(cn: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.distinguished_name = name(cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let cert = p.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    fn leaf(&self, sans: &[&str], cn: &str, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut p = CertificateParams::new(sans).expect("leaf params");
        p.distinguished_name = name(cn);
        p.extended_key_usages = vec![usage];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("leaf key");
        let cert = p.signed_by(&key, &self.issuer).expect("leaf certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    /// jpd's certificate: valid for 127.0.0.1 and localhost.
    pub fn server(&self) -> Leaf {
        self.leaf(
            &["127.0.0.1", "localhost"],
            "jpd test server",
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate with these DNS names and this common name.
    pub fn client(&self, dns: &[&str], cn: &str) -> Leaf {
        self.leaf(dns, cn, ExtendedKeyUsagePurpose::ClientAuth)
    }

    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, &self.pem).expect("write CA");
        p
    }
}

impl Leaf {
    /// Writes `NAME.pem` and `NAME.key` into `dir`; returns (cert, key).
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        write_atomically(&cert, self.cert_pem.as_bytes());
        write_atomically(&key, self.key_pem.as_bytes());
        (cert, key)
    }
}

/// As an operator's tooling would replace a certificate: no half-written file.
pub fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).expect("create");
    f.write_all(bytes).expect("write");
    f.sync_all().expect("sync");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The certificate jpd at `addr` presents (DER), checked against `ca_pem` for
/// 127.0.0.1; `client` is presented when given.
pub fn served_certificate(addr: SocketAddr, ca_pem: &str, client: Option<&Leaf>) -> Vec<u8> {
    let (conn, _sock) = tls_connection(addr, ca_pem, client);
    conn.peer_certificates()
        .and_then(|c| c.first())
        .expect("jpd presents a certificate")
        .to_vec()
}

/// A TLS connection to jpd with the handshake done (and nothing sent over it).
pub fn tls_connection(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<&Leaf>,
) -> (rustls::ClientConnection, TcpStream) {
    try_tls_connection(addr, ca_pem, client, std::time::Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// As [`tls_connection`], an error when the handshake fails or jpd does not answer
/// it within `timeout` (per read).
pub fn try_tls_connection(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<&Leaf>,
    timeout: std::time::Duration,
) -> Result<(rustls::ClientConnection, TcpStream), String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    let mut config = match client {
        Some(c) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from(c.der.clone())],
                PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).expect("key"),
            )
            .expect("client cert"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("connection");
    let mut sock =
        TcpStream::connect(addr).map_err(|e| format!("connect to jpd's TCP port: {e}"))?;
    sock.set_read_timeout(Some(timeout)).expect("timeout");
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| format!("TLS handshake with jpd: {e}"))?;
    }
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]), "jpd offers h2");
    Ok((conn, sock))
}
