//! The `Host` allow-list of the HTTP exporters. A page in a browser can make the
//! browser talk to a loopback listener by DNS rebinding: its own name starts to
//! resolve to 127.0.0.1, and the browser's same-origin rule then lets the page read
//! jpd's answers. Such a request still names the attacker's host in `Host`, so jpd
//! answers only requests that name it: `localhost`, this machine's host name, the
//! names the operator lists (`export.allowed_hosts`), and any IP address (a browser
//! sends an address only when the page itself was loaded from that address).

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::refusals::{self, Refusal};

pub const HOST_NOT_ALLOWED: Refusal = Refusal::new("http", "host_not_allowed");

/// The names a request may give in `Host` (lower case), or any with `"*"`.
#[derive(Clone, Debug)]
pub struct AllowedHosts {
    names: Vec<String>,
    any: bool,
}

impl AllowedHosts {
    /// `configured` (`export.allowed_hosts`), `localhost`, and `hostname` when known.
    pub fn new(configured: &[String], hostname: Option<String>) -> AllowedHosts {
        let mut names: Vec<String> = configured.iter().map(|h| h.to_ascii_lowercase()).collect();
        names.push("localhost".into());
        names.extend(hostname.map(|h| h.trim().to_ascii_lowercase()));
        names.retain(|n| !n.is_empty());
        AllowedHosts {
            any: configured.iter().any(|h| h == "*"),
            names,
        }
    }

    /// From the configuration, with this machine's host name.
    pub fn of_machine(configured: &[String]) -> AllowedHosts {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
        AllowedHosts::new(configured, hostname)
    }

    /// Whether a request whose `Host` header is `host` may be answered.
    pub fn allows(&self, host: Option<&str>) -> bool {
        if self.any {
            return true;
        }
        let Some(name) = host.and_then(host_name) else {
            return false;
        };
        if name.parse::<IpAddr>().is_ok() {
            return true;
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.names.iter().any(|n| *n == name)
    }
}

/// The host part of a `Host` header value (`name`, `name:port`, `[v6]:port`).
fn host_name(value: &str) -> Option<&str> {
    if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return port_ok.then_some(inside);
    }
    match value.rsplit_once(':') {
        Some((name, port)) if is_port(port) && !name.contains(':') => Some(name),
        Some(_) => None,
        None => Some(value),
    }
    .filter(|n| !n.is_empty())
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// The middleware: 421 Misdirected Request for a host jpd does not answer for.
pub async fn check_host(
    State(allowed): State<std::sync::Arc<AllowedHosts>>,
    req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    if allowed.allows(host) {
        return next.run(req).await;
    }
    refusals::count(HOST_NOT_ALLOWED, 1);
    let shown: String = host
        .unwrap_or("")
        .chars()
        .take(64)
        .filter(|c| c.is_ascii_graphic())
        .collect();
    (
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "jpd: Host {shown:?} is not one this exporter answers for: add it to export.allowed_hosts\n"
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        let a = AllowedHosts::new(&["Prom.Example".into()], Some("node7\n".into()));
        for ok in [
            "localhost",
            "localhost:9464",
            "LOCALHOST.",
            "node7:9464",
            "prom.example",
            "127.0.0.1:9464",
            "10.1.2.3",
            "[::1]:9464",
            "[fe80::1]",
        ] {
            assert!(a.allows(Some(ok)), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:9464",
            "localhost.attacker.example",
            "",
            ":9464",
            "[::1",
            "[::1]x",
            "a:b:c",
            "node7:99999999",
        ] {
            assert!(!a.allows(Some(bad)), "{bad}");
        }
        assert!(!a.allows(None));
        let any = AllowedHosts::new(&["*".into()], None);
        assert!(any.allows(Some("attacker.example")) && any.allows(None));
    }
}
