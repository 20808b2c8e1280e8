//! Who may call the API: every request is authorized from the caller's credentials
//! on the Unix socket (SO_PEERCRED and SO_PEERGROUPS, read at accept time into the
//! connection's [`UnixPeer`]), not only by the socket file's mode. Allowed: root, the user jpd
//! runs as, members (primary or supplementary) of the allowed groups — the socket's
//! group among them — and the configured user ids. Everyone else gets
//! PERMISSION_DENIED with a message saying how to get access. Reading and changing are
//! apart: a method outside [`READ_ONLY_METHODS`] (`Reset`, which changes what every
//! client sees) is for admins only — root, the user jpd runs as, and the configured
//! admin users and groups — so that being allowed to look is not being allowed to
//! erase what others look at.
//!
//! Requests that arrive over TCP carry no peer credentials: they come through the TLS
//! listener, which tags them with a [`TlsPeer`] instead of a [`UnixPeer`]. The TLS
//! handshake (client certificates when `tls_client_ca` is set) authenticates them,
//! and [`TlsPolicy`] may narrow them to named client certificates; callers without
//! a client certificate may only read (no Reset). A request carries
//! exactly one of the two tags or it is refused: nothing arriving over TCP can be
//! judged by the Unix rules (root, jpd's own user), and tonic's plain
//! `TcpConnectInfo` is refused outright, since jpd never serves plain-text TCP.

use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use tonic::codegen::{http, BoxFuture, Service};
use tonic::Status;

use super::tls::TlsPeer;
use super::unix_peer::UnixPeer;

/// The rule, replaced as a whole on reload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
    /// Who may also call the methods that change state (besides root and jpd's user).
    pub admin_uids: Vec<u32>,
    pub admin_gids: Vec<u32>,
    /// Named in the denial message, e.g. "jp".
    pub group_name: Option<String>,
}

/// A caller's identity as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

impl Policy {
    /// Whether `peer`, whose supplementary groups are `groups`, may call.
    pub fn allows(&self, peer: &Peer, groups: &[u32]) -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let own_uid = unsafe { libc::geteuid() };
        peer.uid == 0
            || peer.uid == own_uid
            || self.uids.contains(&peer.uid)
            || self.gids.contains(&peer.gid)
            || groups.iter().any(|g| self.gids.contains(g))
    }

    /// Whether `peer` may also call the methods that change what every client sees.
    pub fn allows_admin(&self, peer: &Peer, groups: &[u32]) -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let own_uid = unsafe { libc::geteuid() };
        peer.uid == 0
            || peer.uid == own_uid
            || self.admin_uids.contains(&peer.uid)
            || self.admin_gids.contains(&peer.gid)
            || groups.iter().any(|g| self.admin_gids.contains(g))
    }

    fn admin_denial(peer: &Peer, path: &str) -> Status {
        let method = path.rsplit('/').next().unwrap_or(path);
        Status::permission_denied(format!(
            "jpd: uid {} (gid {}) may read but not call {method}, {}: run it as root, or list the user in server.admin_uids or its group in server.admin_gids of jpd's configuration",
            peer.uid, peer.gid, changes(method)
        ))
    }

    fn denial(&self, peer: &Peer) -> Status {
        let how = match &self.group_name {
            Some(g) => format!("add the user to group {g:?}, or list it in server.allow_uids"),
            None => "list the user in server.allow_uids or its group in server.allow_gids".into(),
        };
        Status::permission_denied(format!(
            "jpd: uid {} (gid {}) may not use this API: {how} of jpd's configuration",
            peer.uid, peer.gid
        ))
    }
}

/// The rule for callers over TCP (who passed the TLS handshake).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPolicy {
    /// `server.tls_client_names`: when not empty, the client certificate must name
    /// one of these (DNS SAN or CN, ASCII case ignored).
    pub client_names: Vec<String>,
}

/// The methods that only read: over TCP, a caller without a (verified) client
/// certificate may call these and nothing else, so that an open TLS port is
/// read-only. An allow-list, not a deny-list: a new RPC is refused to such callers
/// until it is classified here (the test `every_jp_rpc_is_classified` fails until
/// then).
const READ_ONLY_METHODS: &[&str] = &[
    "/jp.v1.Jp/GetStatus",
    "/jp.v1.Jp/GetKernelProfile",
    "/jp.v1.Jp/GetIrqStats",
    "/jp.v1.Jp/Watch",
    "/jp.v1.Jp/ListJvms",
    "/jp.v1.Jp/GetJvmProfile",
    "/jp.v1.Jp/GetJvmTop",
    "/jp.v1.Jp/ExportJvmProfile",
    "/jp.v1.Jp/ListJvmWindows",
    "/jp.v1.Jp/GetJvmWindow",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The methods that change what every client sees, or a JVM (for the classification
/// test and the error message; what is not read-only needs a certificate either way).
#[cfg(test)]
const WRITE_METHODS: &[&str] = &["/jp.v1.Jp/Reset", "/jp.v1.Jp/ProfileJvm"];

/// What a method that is not read-only changes, for the denial.
fn changes(method: &str) -> &'static str {
    match method {
        "ProfileJvm" => "which instruments a JVM's classes",
        _ => "which changes what every client sees",
    }
}

impl TlsPolicy {
    /// Whether `peer` may call the method at `path` (`/package.Service/Method`).
    pub fn check(&self, peer: &TlsPeer, path: &str) -> Result<(), Status> {
        if !peer.client_certificate && !READ_ONLY_METHODS.contains(&path) {
            let method = path.rsplit('/').next().unwrap_or(path);
            return Err(Status::permission_denied(format!(
                "jpd: over TCP, {method} needs a client certificate (set server.tls_client_ca in jpd's configuration); without one the API is read-only",
            )));
        }
        if self.client_names.is_empty() {
            return Ok(());
        }
        if !peer.client_certificate {
            return Err(Status::permission_denied(
                "jpd: server.tls_client_names is set: a client certificate is required",
            ));
        }
        let allowed = peer.client_names.iter().any(|n| {
            self.client_names
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(n))
        });
        if allowed {
            return Ok(());
        }
        log::debug!("denied a TLS request from {peer:?}");
        Err(Status::permission_denied(format!(
            "jpd: the client certificate (names: {}) is not in server.tls_client_names of jpd's configuration",
            if peer.client_names.is_empty() {
                "none".to_string()
            } else {
                peer.client_names.join(", ")
            }
        )))
    }
}

/// Shared by the layer and the reload path.
#[derive(Clone, Default)]
pub struct Authorizer {
    policy: Arc<RwLock<Arc<Policy>>>,
    tls: Arc<RwLock<Arc<TlsPolicy>>>,
}

impl Authorizer {
    pub fn new(policy: Policy) -> Authorizer {
        Authorizer {
            policy: Arc::new(RwLock::new(Arc::new(policy))),
            tls: Arc::default(),
        }
    }

    pub fn set_tls(&self, policy: TlsPolicy) {
        *crate::lock::write(&self.tls) = Arc::new(policy);
    }

    pub fn tls_policy(&self) -> Arc<TlsPolicy> {
        Arc::clone(&crate::lock::read(&self.tls))
    }

    pub fn set(&self, policy: Policy) {
        *crate::lock::write(&self.policy) = Arc::new(policy);
    }

    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&crate::lock::read(&self.policy))
    }

    /// The decision for one request, from the connection info tonic attached to it.
    pub fn check<B>(&self, req: &http::Request<B>) -> Result<(), Status> {
        let unix = req.extensions().get::<UnixPeer>();
        let tls = req.extensions().get::<TlsPeer>();
        match (unix, tls) {
            (Some(uds), None) => self.check_unix(uds, req.uri().path()),
            (None, Some(peer)) => self.tls_policy().check(peer, req.uri().path()),
            (Some(_), Some(_)) => Err(Status::permission_denied(
                "jpd: connection is both Unix and TLS, refused",
            )),
            // Plain TCP (tonic's TcpConnectInfo) lands here too: never served.
            (None, None) => Err(Status::permission_denied(
                "jpd: connection of unknown kind, refused",
            )),
        }
    }

    fn check_unix(&self, unix: &UnixPeer, path: &str) -> Result<(), Status> {
        let Some(cred) = unix.cred else {
            return Err(Status::permission_denied(
                "jpd: the caller's credentials could not be read from the socket",
            ));
        };
        let peer = Peer {
            uid: cred.uid,
            gid: cred.gid,
            pid: Some(cred.pid),
        };
        let policy = self.policy();
        if !policy.allows(&peer, &unix.groups) {
            log::debug!("denied a request from {peer:?}");
            return Err(policy.denial(&peer));
        }
        if READ_ONLY_METHODS.contains(&path) || policy.allows_admin(&peer, &unix.groups) {
            return Ok(());
        }
        log::debug!("denied {path} to {peer:?}: not an admin");
        Err(Policy::admin_denial(&peer, path))
    }
}

/// A group's id by name (`getgrnam_r`); `None` when there is no such group.
pub fn group_id(name: &str) -> Option<u32> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: group is plain data that getgrnam_r fills in.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: cname is NUL-terminated, buf is
    // writable for its length, grp and result are live locals.
    let rc = unsafe {
        libc::getgrnam_r(
            cname.as_ptr(),
            &mut grp,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some(grp.gr_gid)
}

/// Gives the socket file to `gid` (owner unchanged).
pub fn chgrp(path: &std::path::Path, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, None, Some(gid))
}

/// The tower layer the gRPC server wraps every service in.
#[derive(Clone)]
pub struct AuthLayer {
    auth: Authorizer,
}

impl AuthLayer {
    pub fn new(auth: Authorizer) -> AuthLayer {
        AuthLayer { auth }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = Auth<S>;
    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            auth: self.auth.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    auth: Authorizer,
}

impl<S, B, R> Service<http::Request<B>> for Auth<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match self.auth.check(&req) {
            Ok(()) => Box::pin(self.inner.call(req)),
            Err(status) => Box::pin(std::future::ready(Ok(status.into_http()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer {
            uid,
            gid,
            pid: None,
        }
    }

    #[test]
    fn root_and_listed_ids_and_groups_are_allowed() {
        let p = Policy {
            uids: vec![1000],
            gids: vec![500],
            group_name: Some("jp".into()),
            ..Policy::default()
        };
        assert!(p.allows(&peer(0, 0), &[]));
        assert!(p.allows(&peer(1000, 1000), &[]));
        assert!(p.allows(&peer(1001, 500), &[]));
        assert!(p.allows(&peer(1001, 1001), &[7, 500]));
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let stranger = if me == 4242 { 4343 } else { 4242 };
        assert!(!p.allows(&peer(stranger, 4242), &[7, 8]));
        assert!(p.allows(&peer(me, 4242), &[]), "jpd's own user");
    }

    fn unix_call(uid: u32, gid: u32, groups: &[u32], path: &'static str) -> http::Request<()> {
        let mut req = request_with(UnixPeer {
            cred: Some(super::super::unix_peer::Cred { uid, gid, pid: 1 }),
            groups: groups.to_vec(),
        });
        *req.uri_mut() = http::Uri::from_static(path);
        req
    }

    /// Being allowed to read is not being allowed to erase what every other client
    /// sees: Reset (and any method not classified read-only) is for admins.
    #[test]
    fn on_the_socket_readers_read_and_only_admins_reset() {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let (reader, admin) = if me == 4242 {
            (4343, 4444)
        } else {
            (4242, 4444)
        };
        let a = Authorizer::new(Policy {
            uids: vec![reader, admin],
            gids: vec![500],
            admin_uids: vec![admin],
            admin_gids: vec![600],
            group_name: Some("jp".into()),
        });
        let reset = "/jp.v1.Jp/Reset";
        let status = "/jp.v1.Jp/GetStatus";
        assert!(a.check(&unix_call(reader, reader, &[], status)).is_ok());
        let e = a.check(&unix_call(reader, reader, &[], reset)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            e.message(),
            format!("jpd: uid {reader} (gid {reader}) may read but not call Reset, which changes what every client sees: run it as root, or list the user in server.admin_uids or its group in server.admin_gids of jpd's configuration")
        );
        // A member of the socket's group reads, and resets only as an admin group's.
        assert!(a.check(&unix_call(5000, 500, &[], status)).is_ok());
        assert!(a.check(&unix_call(5000, 500, &[], reset)).is_err());
        assert!(a.check(&unix_call(5000, 500, &[600], reset)).is_ok());
        assert!(
            a.check(&unix_call(5000, 600, &[], reset)).is_err(),
            "not allowed to read at all"
        );
        assert!(a.check(&unix_call(admin, admin, &[], reset)).is_ok());
        assert!(a.check(&unix_call(0, 0, &[], reset)).is_ok(), "root");
        assert!(
            a.check(&unix_call(me, me, &[], reset)).is_ok(),
            "jpd's own user"
        );
        // A method nobody classified yet is an admin's too.
        let new = "/jp.v1.Jp/SomethingNew";
        assert!(a.check(&unix_call(reader, reader, &[], new)).is_err());
        assert!(a.check(&unix_call(admin, admin, &[], new)).is_ok());
    }

    /// Opening a window instruments a JVM: an admin's call on the socket, and over TCP
    /// only with a client certificate; the windows kept are read by any reader.
    #[test]
    fn profile_jvm_is_for_admins_and_client_certificates() {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let reader = if me == 4242 { 4343 } else { 4242 };
        let a = Authorizer::new(Policy {
            uids: vec![reader],
            admin_uids: vec![4444],
            ..Policy::default()
        });
        let profile = "/jp.v1.Jp/ProfileJvm";
        let e = a
            .check(&unix_call(reader, reader, &[], profile))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            e.message(),
            format!("jpd: uid {reader} (gid {reader}) may read but not call ProfileJvm, which instruments a JVM's classes: run it as root, or list the user in server.admin_uids or its group in server.admin_gids of jpd's configuration")
        );
        assert!(a.check(&unix_call(0, 0, &[], profile)).is_ok());
        for read in ["/jp.v1.Jp/ListJvmWindows", "/jp.v1.Jp/GetJvmWindow"] {
            assert!(
                a.check(&unix_call(reader, reader, &[], read)).is_ok(),
                "{read}"
            );
            let mut tcp = request_with(tls_peer(&[], false));
            *tcp.uri_mut() = http::Uri::from_static(read);
            assert!(a.check(&tcp).is_ok(), "{read} over TCP");
        }
        let mut anonymous = request_with(tls_peer(&[], false));
        *anonymous.uri_mut() = http::Uri::from_static(profile);
        assert_eq!(
            a.check(&anonymous).unwrap_err().message(),
            "jpd: over TCP, ProfileJvm needs a client certificate (set server.tls_client_ca in jpd's configuration); without one the API is read-only"
        );
        let mut certified = request_with(tls_peer(&["ops"], true));
        *certified.uri_mut() = http::Uri::from_static(profile);
        assert!(a.check(&certified).is_ok());
    }

    #[test]
    fn denial_says_how_to_get_access() {
        let p = Policy {
            group_name: Some("jp".into()),
            ..Policy::default()
        };
        let s = p.denial(&peer(1234, 1234));
        assert_eq!(s.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            s.message(),
            "jpd: uid 1234 (gid 1234) may not use this API: add the user to group \"jp\", or list it in server.allow_uids of jpd's configuration"
        );
    }

    #[test]
    fn group_lookup() {
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-jp-test"), None);
        assert_eq!(group_id("bad\0name"), None);
    }

    fn tls_peer(names: &[&str], cert: bool) -> TlsPeer {
        TlsPeer {
            remote: "127.0.0.1:4000".parse().unwrap(),
            client_names: names.iter().map(|n| n.to_string()).collect(),
            client_certificate: cert,
        }
    }

    fn request_with<T: Clone + Send + Sync + 'static>(info: T) -> http::Request<()> {
        let mut req = http::Request::new(());
        req.extensions_mut().insert(info);
        req
    }

    /// Every RPC of jp.v1 (read from the .proto the server is built from) is either
    /// read-only or a write method: a new one fails here until it is classified.
    #[test]
    fn every_jp_rpc_is_classified() {
        let proto = include_str!("../../../proto/jp/v1/jp.proto");
        let rpcs: Vec<String> = proto
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .filter_map(|l| l.split('(').next())
            .map(|name| format!("/jp.v1.Jp/{}", name.trim()))
            .collect();
        assert!(rpcs.len() >= 9, "{rpcs:?}");
        for rpc in &rpcs {
            let read = READ_ONLY_METHODS.contains(&rpc.as_str());
            let write = WRITE_METHODS.contains(&rpc.as_str());
            assert!(
                read ^ write,
                "{rpc}: classify it in READ_ONLY_METHODS or WRITE_METHODS"
            );
        }
        for m in READ_ONLY_METHODS
            .iter()
            .filter(|m| m.starts_with("/jp.v1."))
        {
            assert!(rpcs.iter().any(|r| r == m), "{m} is not an RPC of jp.v1");
        }
    }

    #[test]
    fn unknown_methods_need_a_certificate_over_tcp() {
        let a = Authorizer::new(Policy::default());
        let mut unknown = request_with(tls_peer(&[], false));
        *unknown.uri_mut() = http::Uri::from_static("/jp.v1.Jp/SomethingNew");
        let e = a.check(&unknown).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e
            .message()
            .contains("SomethingNew needs a client certificate"));
        let mut read = request_with(tls_peer(&[], false));
        *read.uri_mut() = http::Uri::from_static("/jp.v1.Jp/GetStatus");
        assert!(a.check(&read).is_ok());
        let mut health = request_with(tls_peer(&[], false));
        *health.uri_mut() = http::Uri::from_static("/grpc.health.v1.Health/Check");
        assert!(a.check(&health).is_ok());
        let mut unknown = request_with(tls_peer(&["ci"], true));
        *unknown.uri_mut() = http::Uri::from_static("/jp.v1.Jp/SomethingNew");
        assert!(
            a.check(&unknown).is_ok(),
            "a client certificate may call anything"
        );
    }

    #[test]
    fn tls_requests_follow_the_tls_policy_only() {
        // The Unix policy allows everybody it can name; TLS callers never get it.
        let a = Authorizer::new(Policy {
            uids: (0..100).collect(),
            gids: (0..100).collect(),
            ..Policy::default()
        });
        let mut anonymous = request_with(tls_peer(&[], false));
        *anonymous.uri_mut() = http::Uri::from_static("/jp.v1.Jp/GetStatus");
        assert!(a.check(&anonymous).is_ok(), "no allowlist: any TLS client");
        // ... but read-only without a client certificate.
        let mut reset = request_with(tls_peer(&[], false));
        *reset.uri_mut() = http::Uri::from_static("/jp.v1.Jp/Reset");
        assert!(a
            .check(&reset)
            .unwrap_err()
            .message()
            .starts_with("jpd: over TCP, Reset needs a client certificate"));
        let mut reset = request_with(tls_peer(&["ci"], true));
        *reset.uri_mut() = http::Uri::from_static("/jp.v1.Jp/Reset");
        assert!(a.check(&reset).is_ok());
        a.set_tls(TlsPolicy {
            client_names: vec!["Ops.Example".into()],
        });
        let e = a.check(&anonymous).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            e.message(),
            "jpd: server.tls_client_names is set: a client certificate is required"
        );
        assert!(a
            .check(&request_with(tls_peer(&["x", "ops.example"], true)))
            .is_ok());
        let e = a
            .check(&request_with(tls_peer(&["dev.example", "dev"], true)))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "jpd: the client certificate (names: dev.example, dev) is not in server.tls_client_names of jpd's configuration"
        );
    }

    #[test]
    fn plain_tcp_and_mixed_connection_info_are_refused() {
        let a = Authorizer::new(Policy::default());
        let plain = request_with(tonic::transport::server::TcpConnectInfo {
            local_addr: None,
            remote_addr: None,
        });
        assert_eq!(
            a.check(&plain).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        // A TLS tag next to Unix credentials (root's, as it happens) is refused,
        // not judged by the Unix rules.
        let mut both = request_with(tls_peer(&[], false));
        both.extensions_mut().insert(UnixPeer {
            cred: None,
            groups: vec![],
        });
        assert_eq!(
            a.check(&both).unwrap_err().message(),
            "jpd: connection is both Unix and TLS, refused"
        );
    }

    #[test]
    fn requests_without_connection_info_are_refused() {
        let a = Authorizer::new(Policy::default());
        let req = http::Request::new(());
        let e = a.check(&req).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    }
}
