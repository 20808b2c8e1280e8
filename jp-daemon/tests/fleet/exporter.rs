//! The HTTP exporter of the real jpd against hostile local clients: thousands of
//! idle connections, hundreds of long profile requests at once, a page rebinding
//! its DNS name to the loopback listener. Every refusal is counted, and jpd's
//! memory stays bounded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::jpd::{http_get, metric, Jpd};
use jp_testkit::memory::{resident_kib, settled_resident_kib};
use serde_json::Value;

fn jpd_exporting(export_extra: &str) -> Jpd {
    Jpd::start_exporting("", &[], "", export_extra, &[])
}

/// `http/<reason>` as `jpctl status --json` says it, read over the Unix socket (a
/// read over HTTP would itself take a connection).
fn refused_http(jpd: &Jpd, reason: &str) -> u64 {
    let out = jpd
        .jpctl()
        .args(["status", "--json"])
        .output()
        .expect("jpctl status");
    let v: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    v["refusals"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["subsystem"] == "http" && r["reason"] == reason)
        .and_then(|r| r["count"].as_u64())
        .unwrap_or(0)
}

fn wait_refused(jpd: &Jpd, reason: &str, n: u64) {
    let t0 = Instant::now();
    while refused_http(jpd, reason) < n {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "http/{reason} never reached {n} (is {})",
            refused_http(jpd, reason)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(refused_http(jpd, reason), n, "http/{reason}");
}

/// The series of one refusal kind in a /metrics text.
fn refusal_series(reason: &str) -> String {
    format!("jp_refusals_total{{subsystem=\"http\",reason=\"{reason}\"}}")
}

/// The status line's code and the body of `GET path` with `Host: host`.
fn get_with_host(addr: SocketAddr, path: &str, host: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.get(9..12).unwrap_or("").to_string();
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

#[test]
fn two_thousand_idle_connections_do_not_stop_a_scrape() {
    let _one = crate::support::exclusive();
    // Timeouts far away: only the cap acts here.
    let jpd = jpd_exporting("header_timeout_seconds = 300\nidle_timeout_seconds = 3600\n");
    let rss_before = settled_resident_kib(jpd.pid() as u32);
    let idle: Vec<TcpStream> = (0..2000)
        .map(|i| TcpStream::connect(jpd.http).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    // The default cap is 64: each connection beyond it took the place of the idlest.
    wait_refused(&jpd, "too_many_connections", 2000 - 64);
    let (status, body) = http_get(jpd.http, "/metrics");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let text = String::from_utf8(body).expect("UTF-8");
    assert_eq!(
        metric(&text, &refusal_series("too_many_connections")),
        Some(2000 - 64 + 1),
        "the scrape's own connection took an idle one's place too"
    );
    let growth = resident_kib(jpd.pid() as u32).saturating_sub(rss_before);
    // Measured: 3.1–3.4 MiB with the cap of 64, 23 MiB with a cap of 4096.
    assert!(growth < 8 * 1024, "jpd grew by {growth} KiB");
    drop(idle);
    jpd.stop();
}

#[test]
fn two_hundred_long_profile_requests_are_bounded() {
    let _one = crate::support::exclusive();
    let jpd = jpd_exporting("max_connections = 512\nmax_inflight = 8\n");
    let rss_before = settled_resident_kib(jpd.pid() as u32);
    let http = jpd.http;
    let requests: Vec<_> = (0..200)
        .map(|_| {
            std::thread::spawn(move || {
                get_with_host(http, "/debug/pprof/profile?seconds=8", "localhost")
            })
        })
        .collect();
    let answers: Vec<(String, String)> = requests
        .into_iter()
        .map(|t| t.join().expect("request thread"))
        .collect();
    let served = answers.iter().filter(|(s, _)| s == "200").count();
    let busy = answers
        .iter()
        .filter(|(s, b)| {
            s == "503"
                && b == "jpd: 8 profile requests are in progress (export.max_inflight); try again later\n"
        })
        .count();
    assert_eq!((served, busy), (8, 192), "in flight never above the cap");
    assert_eq!(refused_http(&jpd, "too_many_requests"), 192);
    let growth = resident_kib(jpd.pid() as u32).saturating_sub(rss_before);
    assert!(growth < 32 * 1024, "jpd grew by {growth} KiB");
    // And the cap frees with the requests.
    assert_eq!(jpd.get("/debug/pprof/profile?seconds=0").0, 200);
    jpd.stop();
}

#[test]
fn a_foreign_host_header_is_refused() {
    let _one = crate::support::exclusive();
    let jpd = jpd_exporting("");
    for path in ["/metrics", "/debug/pprof/profile?seconds=0", "/flame"] {
        let (status, body) = get_with_host(jpd.http, path, "rebind.attacker.example:9464");
        assert_eq!(status, "421", "{path}: {body}");
    }
    assert_eq!(refused_http(&jpd, "host_not_allowed"), 3);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    for host in ["localhost:9464", hostname.trim(), "127.0.0.1", "[::1]:1"] {
        let (status, body) = get_with_host(jpd.http, "/metrics", host);
        assert_eq!(status, "200", "{host}: {body}");
    }
    assert_eq!(refused_http(&jpd, "host_not_allowed"), 3);
    jpd.stop();
}
