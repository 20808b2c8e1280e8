//! gRPC over TCP with TLS, as an operator runs it: jpd (from `cargo xtask build`, as
//! root) with `server.tcp` on a free loopback port and certificates made here by
//! rcgen; jpctl `--connect https://…` as the client. Covers: the API over TLS, plain
//! text and untrusted servers refused, no Reset without a client certificate, mutual TLS (no certificate, another CA's,
//! a good one), `tls_client_names`, certificate rotation on SIGHUP (the served
//! certificate is compared byte for byte; a bad replacement keeps the old one), the
//! Unix socket working throughout, `--check-config` on the PEM files, and the cap on
//! TCP connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::jpd::{free_port, Jpd};
use crate::support::read_dev_zero;
use crate::support::tls::{served_certificate, try_tls_connection, write_atomically, Ca, Leaf};
use serde_json::Value;

/// jpd's TLS files, in their own directory (the test rewrites them).
struct Files {
    dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn new(ca: &Ca, server: &Leaf) -> Files {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_path = ca.write(dir.path(), "ca.pem");
        let (cert, key) = server.write(dir.path(), "jpd");
        Files {
            ca: ca_path,
            cert,
            key,
            dir,
        }
    }

    fn server_keys(&self, addr: SocketAddr, client_ca: bool, names: &[&str]) -> String {
        let mut s = format!(
            "tcp = \"{addr}\"\ntls_cert = {:?}\ntls_key = {:?}\n",
            self.cert.display().to_string(),
            self.key.display().to_string()
        );
        if client_ca {
            s += &format!("tls_client_ca = {:?}\n", self.ca.display().to_string());
        } else {
            s += "tcp_anonymous_reads = true\n";
        }
        if !names.is_empty() {
            s += &format!("tls_client_names = {names:?}\n");
        }
        s
    }
}

fn loopback() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().expect("addr")
}

/// jpctl over TLS to `addr`, trusting `ca`, with `extra` flags then `args`.
fn jpctl_tls(addr: SocketAddr, ca: &Path, extra: &[&str], args: &[&str]) -> Output {
    Command::new(jp_testkit::jpctl())
        .arg("--connect")
        .arg(format!("https://{addr}"))
        .arg("--ca")
        .arg(ca)
        .args(extra)
        .args(args)
        .env_remove("JP_SOCKET")
        .output()
        .expect("run jpctl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn ok_json(out: Output, what: &str) -> Value {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"))
}

/// jpctl failed, and its message says `why`.
fn refused(out: Output, why: &str) {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "expected a failure ({why})");
    assert!(err.contains(why), "expected {why:?} in:\n{err}");
}

fn status_over_tls(addr: SocketAddr, ca: &Path, client: &[&str]) -> Value {
    let s = ok_json(
        jpctl_tls(addr, ca, client, &["status", "--json"]),
        "jpctl status over TLS",
    );
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(s["kernel"]["attached"], true, "{s}");
    s
}

/// The Unix socket answers as before.
fn unix_status(jpd: &Jpd) {
    let s = ok_json(
        jpd.jpctl()
            .args(["status", "--json"])
            .output()
            .expect("jpctl"),
        "jpctl status on the Unix socket",
    );
    assert_eq!(s["kernel"]["attached"], true, "{s}");
}

/// Waits until `needle` occurs `n` times in jpd's log.
fn wait_log(jpd: &Jpd, needle: &str, n: usize) -> String {
    let t0 = Instant::now();
    loop {
        let log = jpd.log_text();
        if log.matches(needle).count() >= n {
            return log;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "jpd did not log {needle:?} ({n}×) within 15 s:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client_flags(files: &Path, client: &Leaf, name: &str) -> Vec<String> {
    let (cert, key) = client.write(files, name);
    vec![
        "--cert".into(),
        cert.display().to_string(),
        "--key".into(),
        key.display().to_string(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn tls_serves_the_api_and_refuses_plain_text_and_untrusted_clients() {
    let _one = crate::support::exclusive();
    let ca = Ca::new("jp test CA");
    let files = Files::new(&ca, &ca.server());
    let addr = loopback();
    let jpd = Jpd::start_with("", &[], &files.server_keys(addr, false, &[]));
    assert!(
        jpd.log_text().contains(&format!(
            "server.tcp = \"{addr}\" without server.tls_client_ca: any client that reaches this port over TLS may read the API (all but Reset)"
        )),
        "jpd warns about an open TCP port:\n{}",
        jpd.log_text()
    );

    // The API over TLS: status, and a real kernel profile.
    status_over_tls(addr, &files.ca, &[]);
    read_dev_zero(Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(300));
    let k = ok_json(
        jpctl_tls(addr, &files.ca, &[], &["kernel", "--json", "--top", "5"]),
        "jpctl kernel over TLS",
    );
    assert!(k["samples"]["total"].as_u64().unwrap_or(0) > 0, "{k}");
    let functions = k["functions"].as_array().expect("functions");
    assert!(!functions.is_empty() && functions.len() <= 5, "{k}");
    // Read-only without a client certificate.
    refused(
        jpctl_tls(addr, &files.ca, &[], &["reset"]),
        "jpd answered PermissionDenied: jpd: over TCP, Reset needs a client certificate (set server.tls_client_ca in jpd's configuration); without one the API is read-only",
    );
    // The same over localhost, the certificate's other name.
    ok_json(
        jpctl_tls(
            addr,
            &files.ca,
            &["--tls-server-name", "localhost"],
            &["status", "--json"],
        ),
        "jpctl status with --tls-server-name localhost",
    );

    // A plain-text HTTP/2 client: the connection preface is not a TLS record, so
    // jpd answers with nothing but (at most) a TLS alert, never HTTP/2 frames.
    let mut plain = TcpStream::connect(addr).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    plain
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .expect("send the HTTP/2 preface");
    let mut reply = Vec::new();
    let _ = plain.read_to_end(&mut reply);
    assert!(
        reply.is_empty() || reply[0] == 0x15,
        "jpd answered plain text with {reply:02x?}"
    );
    // And a real h2c gRPC client.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let h2c = rt.block_on(async {
        let mut c = jp_proto::v1::jp_client::JpClient::connect(format!("http://{addr}")).await?;
        c.get_status(jp_proto::v1::GetStatusRequest {})
            .await
            .map(|_| ())
            .map_err(anyhow::Error::from)
    });
    assert!(h2c.is_err(), "a plain-text gRPC call over TCP succeeded");
    refused(
        Command::new(jp_testkit::jpctl())
            .args(["--connect", &format!("http://{addr}"), "status"])
            .output()
            .expect("jpctl"),
        "jpd serves gRPC over TCP only with TLS: use https://HOST:PORT",
    );

    // Clients that must not trust this server.
    let other = Ca::new("another CA");
    let other_pem = other.write(files.dir.path(), "other-ca.pem");
    refused(
        jpctl_tls(addr, &other_pem, &[], &["status"]),
        &format!(
            "cannot connect to jpd at https://{addr}: jpd's certificate is not trusted: it is not signed by a CA in --ca {}",
            other_pem.display()
        ),
    );
    // Without --ca: the system's CAs (Debian's ca-certificates), which do not know ours.
    refused(
        Command::new(jp_testkit::jpctl())
            .args(["--connect", &format!("https://{addr}"), "status"])
            .output()
            .expect("jpctl"),
        "jpd's certificate is not trusted: it is not signed by a CA in the system's CAs (/etc/ssl/certs/ca-certificates.crt; pass --ca FILE for jpd's CA)",
    );
    refused(
        jpctl_tls(
            addr,
            &files.ca,
            &["--tls-server-name", "wrong.example"],
            &["status"],
        ),
        "jpd's certificate is not valid for \"wrong.example\"",
    );
    let log = jpd.log_text();
    assert!(
        log.contains("TLS handshake with 127.0.0.1:") && log.contains("failed"),
        "jpd logs refused handshakes:\n{log}"
    );

    unix_status(&jpd);
    // Clients that hold connections open must not hold up the shutdown: one that
    // finished the handshake and sent nothing, one that never started it.
    let _idle_tls = crate::support::tls::tls_connection(addr, &ca.pem, None);
    let _idle_tcp = TcpStream::connect(addr).expect("connect");
    jpd.stop();
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "the TCP port stays open after jpd stopped"
    );
}

#[test]
fn client_certificates_are_required_and_rotate_on_sighup() {
    let _one = crate::support::exclusive();
    let ca = Ca::new("jp test CA");
    let server1 = ca.server();
    let files = Files::new(&ca, &server1);
    let addr = loopback();
    let jpd = Jpd::start_with("", &[], &files.server_keys(addr, true, &[]));
    assert!(
        !jpd.log_text().contains("without server.tls_client_ca"),
        "{}",
        jpd.log_text()
    );
    let dir = files.dir.path();
    let ops = ca.client(&["ops.example"], "ops");
    let good = client_flags(dir, &ops, "ops");
    let stranger = client_flags(
        dir,
        &Ca::new("another CA").client(&["ops.example"], "ops"),
        "stranger",
    );

    refused(
        jpctl_tls(addr, &files.ca, &[], &["status"]),
        "jpd requires a client certificate: pass --cert FILE --key FILE (signed by the CA in jpd's server.tls_client_ca)",
    );
    refused(
        jpctl_tls(addr, &files.ca, &strs(&stranger), &["status"]),
        &format!(
            "jpd refused the client certificate {}/stranger.pem: it is not signed by the CA in jpd's server.tls_client_ca",
            dir.display()
        ),
    );
    status_over_tls(addr, &files.ca, &strs(&good));
    let reset = jpctl_tls(addr, &files.ca, &strs(&good), &["reset"]);
    assert!(reset.status.success(), "{}", text(&reset.stderr));
    assert_eq!(
        text(&reset.stdout),
        "counts reset: jpd counts from zero for every client\n"
    );
    assert_eq!(
        served_certificate(addr, &ca.pem, Some(&ops)),
        server1.der,
        "jpd serves tls_cert"
    );

    // Rotation: same paths, new certificate and key.
    let server2 = ca.server();
    server2.write(dir, "jpd");
    jpd.signal(libc::SIGHUP);
    wait_log(&jpd, "TLS certificates reloaded", 1);
    assert_eq!(
        served_certificate(addr, &ca.pem, Some(&ops)),
        server2.der,
        "new handshakes get the rotated certificate"
    );
    status_over_tls(addr, &files.ca, &strs(&good));
    unix_status(&jpd);

    // A broken certificate file: the previous certificate stays, and the log says why.
    write_atomically(&files.cert, b"not a certificate\n");
    jpd.signal(libc::SIGHUP);
    let log = wait_log(&jpd, "keeping the previous TLS certificates", 1);
    assert!(
        log.contains(&format!(
            "server.tls_cert = {:?}: no certificate in it",
            files.cert.display().to_string()
        )),
        "{log}"
    );
    assert_eq!(served_certificate(addr, &ca.pem, Some(&ops)), server2.der);
    // A certificate whose key is not the one in tls_key: the same.
    let server3 = ca.server();
    write_atomically(&files.cert, server3.cert_pem.as_bytes());
    jpd.signal(libc::SIGHUP);
    let log = wait_log(&jpd, "keeping the previous TLS certificates", 2);
    assert!(
        log.contains("this key does not belong to the certificate in server.tls_cert"),
        "{log}"
    );
    assert_eq!(served_certificate(addr, &ca.pem, Some(&ops)), server2.der);
    status_over_tls(addr, &files.ca, &strs(&good));
    // Both files replaced: served from now on.
    server3.write(dir, "jpd");
    jpd.signal(libc::SIGHUP);
    wait_log(&jpd, "TLS certificates reloaded", 2);
    assert_eq!(served_certificate(addr, &ca.pem, Some(&ops)), server3.der);
    status_over_tls(addr, &files.ca, &strs(&good));

    unix_status(&jpd);
    jpd.stop();
}

#[test]
fn client_names_narrow_who_may_call() {
    let _one = crate::support::exclusive();
    let ca = Ca::new("jp test CA");
    let files = Files::new(&ca, &ca.server());
    let addr = loopback();
    let jpd = Jpd::start_with(
        "",
        &[],
        &files.server_keys(addr, true, &["ops.example", "ci runner"]),
    );
    let dir = files.dir.path();
    let ops = client_flags(dir, &ca.client(&["ops.example"], "ops"), "ops");
    let ci = client_flags(dir, &ca.client(&[], "ci runner"), "ci");
    let dev = client_flags(dir, &ca.client(&["dev.example"], "dev"), "dev");

    status_over_tls(addr, &files.ca, &strs(&ops));
    // A common name counts when there is no DNS name.
    status_over_tls(addr, &files.ca, &strs(&ci));
    refused(
        jpctl_tls(addr, &files.ca, &strs(&dev), &["status"]),
        "jpd answered PermissionDenied: jpd: the client certificate (names: dev.example, dev) is not in server.tls_client_names of jpd's configuration",
    );

    // The list is reloaded on SIGHUP.
    let config = std::fs::read_to_string(&jpd.config).expect("config");
    let config = config.replace(
        "tls_client_names = [\"ops.example\", \"ci runner\"]",
        "tls_client_names = [\"ops.example\", \"dev.example\"]",
    );
    std::fs::write(&jpd.config, config).expect("rewrite config");
    jpd.signal(libc::SIGHUP);
    wait_log(&jpd, "TLS certificates reloaded", 1);
    status_over_tls(addr, &files.ca, &strs(&dev));
    refused(
        jpctl_tls(addr, &files.ca, &strs(&ci), &["status"]),
        "the client certificate (names: ci runner) is not in server.tls_client_names",
    );

    unix_status(&jpd);
    jpd.stop();
}

/// `jpd --check-config` on a configuration with TCP: (exit code, stdout, stderr).
fn check_config(dir: &Path, server: &str) -> (i32, String, String) {
    let path = dir.join("check.toml");
    // group = "": this host may have no group jp, which would add a warning.
    std::fs::write(&path, format!("[server]\ngroup = \"\"\n{server}")).expect("write config");
    let out = Command::new(jp_testkit::jpd())
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("run jpd --check-config");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn check_config_loads_the_tls_files() {
    let ca = Ca::new("jp test CA");
    let files = Files::new(&ca, &ca.server());
    let dir = files.dir.path();
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    let tcp = "tcp = \"127.0.0.1:9465\"\ntcp_anonymous_reads = true\n";
    let good = format!(
        "{tcp}tls_cert = {}\ntls_key = {}\n",
        q(&files.cert),
        q(&files.key)
    );

    let (code, out, err) = check_config(dir, &format!("{good}tls_client_ca = {}\n", q(&files.ca)));
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("check.toml: OK\n"), "{out}");
    assert_eq!(err, "");

    let (code, _, err) = check_config(dir, &good);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning:") && err.contains("without server.tls_client_ca: any client"),
        "{err}"
    );
    // Without the opt-in, TCP without a client CA is an error.
    let (code, _, err) = check_config(dir, &good.replace("tcp_anonymous_reads = true\n", ""));
    assert_eq!(code, 1);
    assert!(
        err.ends_with(": tcp without tls_client_ca lets anyone who reaches the port read the API: set tls_client_ca, or tcp_anonymous_reads = true to allow anonymous reads (command lines are then cut to the program's name)\n"),
        "{err}"
    );

    let check = dir.join("check.toml").display().to_string();
    let missing = dir.join("missing.pem");
    let (code, _, err) = check_config(
        dir,
        &format!(
            "{tcp}tls_cert = {}\ntls_key = {}\n",
            q(&missing),
            q(&files.key)
        ),
    );
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!(
            "jpd: invalid config {check}: server.tls_cert = {}: cannot read it: No such file or directory",
            q(&missing)
        )),
        "{err}"
    );

    let (other_cert, other_key) = ca.server().write(dir, "other");
    let (code, _, err) = check_config(
        dir,
        &format!(
            "{tcp}tls_cert = {}\ntls_key = {}\n",
            q(&files.cert),
            q(&other_key)
        ),
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "jpd: invalid config {check}: server.tls_key = {}: this key does not belong to the certificate in server.tls_cert ({})\n",
            q(&other_key),
            files.cert.display()
        )
    );

    let (code, _, err) = check_config(
        dir,
        &format!(
            "{tcp}tls_cert = {}\ntls_key = {}\n",
            q(&files.cert),
            q(&other_cert)
        ),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "server.tls_key = {}: no private key in it",
            q(&other_cert)
        )),
        "{err}"
    );

    // jpd itself refuses to start on the same file, before it attaches anything.
    let socket = dir.join("jpd.sock");
    std::fs::write(
        dir.join("start.toml"),
        format!(
            "[server]\ngroup = \"\"\nsocket = {}\n{tcp}tls_cert = {}\ntls_key = {}\n",
            q(&socket),
            q(&missing),
            q(&files.key)
        ),
    )
    .expect("write config");
    let out = Command::new(jp_testkit::jpd())
        .arg("--config")
        .arg(dir.join("start.toml"))
        .output()
        .expect("run jpd");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!(
            "jpd: server.tls_cert = {}: cannot read it: No such file or directory",
            q(&missing)
        )),
        "{}",
        text(&out.stderr)
    );
    assert!(!socket.exists(), "jpd left its socket behind");

    let junk = dir.join("junk.pem");
    std::fs::write(
        &junk,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let (code, _, err) = check_config(dir, &format!("{good}tls_client_ca = {}\n", q(&junk)));
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "server.tls_client_ca = {}: not a valid PEM file",
            q(&junk)
        )),
        "{err}"
    );
    let (code, _, err) = check_config(dir, &format!("{good}tls_client_ca = {}\n", q(&files.key)));
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "server.tls_client_ca = {}: no certificate in it",
            q(&files.key)
        )),
        "{err}"
    );
}

/// At `MAX_TCP_CONNECTIONS` open TLS connections the next client waits (its
/// handshake is not answered) until one of them leaves; the Unix socket still answers.
#[test]
fn tcp_connections_beyond_the_cap_wait_for_a_free_slot() {
    use jp_daemon::server::limits::MAX_TCP_CONNECTIONS;
    let _one = crate::support::exclusive();
    let ca = Ca::new("jp test CA");
    let files = Files::new(&ca, &ca.server());
    let addr = loopback();
    let jpd = Jpd::start_with("", &[], &files.server_keys(addr, false, &[]));
    let mut held: Vec<_> = (0..MAX_TCP_CONNECTIONS)
        .map(|i| {
            try_tls_connection(addr, &ca.pem, None, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("connection {} of {MAX_TCP_CONNECTIONS}: {e}", i + 1))
        })
        .collect();
    let over = try_tls_connection(addr, &ca.pem, None, Duration::from_secs(2));
    assert!(
        over.is_err(),
        "connection {} was served although {MAX_TCP_CONNECTIONS} were open",
        MAX_TCP_CONNECTIONS + 1
    );
    wait_log(
        &jpd,
        &format!("{MAX_TCP_CONNECTIONS} TCP clients connected: the next one waits"),
        1,
    );
    assert_eq!(
        crate::support::jpd::metric(
            &jpd.metrics(),
            "jp_refusals_total{subsystem=\"grpc\",reason=\"too_many_connections\"}"
        ),
        Some(1)
    );
    unix_status(&jpd);
    // One leaves: the next client is served.
    held.truncate(MAX_TCP_CONNECTIONS - 1);
    try_tls_connection(addr, &ca.pem, None, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("a client after one left: {e}"));
    drop(held);
}

/// TCP without a client CA and without `tcp_anonymous_reads`: jpd does not start,
/// and says which keys to set.
#[test]
fn tcp_without_a_client_ca_is_refused_at_start() {
    let ca = Ca::new("jp test CA");
    let files = Files::new(&ca, &ca.server());
    let addr = loopback();
    let config = files.dir.path().join("jpd.toml");
    let keys = files
        .server_keys(addr, false, &[])
        .replace("tcp_anonymous_reads = true\n", "");
    let socket = files.dir.path().join("jpd.sock");
    std::fs::write(
        &config,
        format!(
            "[server]\nsocket = {:?}\n{keys}",
            socket.display().to_string()
        ),
    )
    .expect("write config");
    let log = files.dir.path().join("jpd.log");
    let mut jpd = Command::new(jp_testkit::jpd())
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("run jpd");
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = jpd.try_wait().expect("wait jpd") {
            break Some(status);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = jpd.kill();
            let _ = jpd.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "jpd started:\n{err}"
    );
    assert!(
        err.contains("tcp without tls_client_ca lets anyone who reaches the port read the API: set tls_client_ca, or tcp_anonymous_reads = true"),
        "{err}"
    );
    assert!(!socket.exists(), "jpd did not start");
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}
