//! systemd's notification protocol (`sd_notify(3)`), without libsystemd: one datagram
//! of `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET` — a path, or an
//! abstract name when it starts with `@`. Outside systemd (no variable) every call is
//! a no-op, so jpd runs the same in a terminal.
//!
//! jpd sends `READY=1` once its programs are attached and the API socket listens,
//! `RELOADING=1`/`READY=1` around a SIGHUP reload, `STOPPING=1` on shutdown, and
//! `WATCHDOG=1` at half of `$WATCHDOG_USEC` while every collector makes progress
//! (`daemon/watchdog.rs`).

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Where notifications go; `None` outside systemd.
#[derive(Debug)]
pub struct Notifier {
    target: Option<SocketAddr>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`. The variable is left in the environment: jpd starts no
    /// children that could inherit it by mistake.
    pub fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|v| {
            let v = v.to_string_lossy().into_owned();
            match address(&v) {
                Ok(a) => Some(a),
                Err(e) => {
                    log::warn!("NOTIFY_SOCKET={v:?} is unusable ({e}); not notifying systemd");
                    None
                }
            }
        });
        Notifier { target }
    }

    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines). Failures are logged once
    /// per call, never fatal: systemd will notice the missing message by itself.
    pub fn notify(&self, state: &str) {
        let Some(addr) = &self.target else { return };
        if let Err(e) = send(addr, state) {
            log::warn!("cannot notify systemd ({state:?}): {e}");
        }
    }
}

/// `@name` → abstract socket `\0name`; anything else must be an absolute path.
fn address(v: &str) -> io::Result<SocketAddr> {
    if let Some(name) = v.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes())
    } else if v.starts_with('/') {
        SocketAddr::from_pathname(v)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "neither an absolute path nor @abstract",
        ))
    }
}

fn send(addr: &SocketAddr, state: &str) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let n = sock.send_to_addr(state.as_bytes(), addr)?;
    if n != state.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short datagram write",
        ));
    }
    Ok(())
}

/// `RELOADING=1` with the `CLOCK_MONOTONIC` time the reload began, in microseconds:
/// systemd ≥ 253 needs `MONOTONIC_USEC` to tell this reload from an earlier one
/// (`Type=notify-reload`), older versions ignore it.
pub fn reloading() -> String {
    format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec())
}

fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call's duration, and
    // CLOCK_MONOTONIC always exists on Linux, so the call only writes `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64) * 1_000_000 + (now.tv_nsec as u64) / 1_000
}

/// The watchdog period systemd asked for (`$WATCHDOG_USEC`, for our pid when
/// `$WATCHDOG_PID` is set); `None` when there is no watchdog.
pub fn watchdog_timeout() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloading_carries_the_monotonic_clock() {
        let before = monotonic_usec();
        let message = reloading();
        let after = monotonic_usec();
        let usec = message
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("not RELOADING=1 with MONOTONIC_USEC: {message:?}"));
        assert!(
            before > 0 && (before..=after).contains(&usec),
            "{before} {usec} {after}"
        );
    }
    use std::os::linux::net::SocketAddrExt;

    #[test]
    fn path_socket_receives_the_datagram() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            target: Some(address(path.to_str().unwrap()).unwrap()),
        };
        n.notify("READY=1\nSTATUS=attached");
        let mut buf = [0u8; 64];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=attached");
    }

    #[test]
    fn abstract_socket_receives_the_datagram() {
        let name = format!("jp-notify-test-{}", std::process::id());
        let server =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let n = Notifier {
            target: Some(address(&format!("@{name}")).unwrap()),
        };
        assert!(n.enabled());
        n.notify("WATCHDOG=1");
        let mut buf = [0u8; 64];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"WATCHDOG=1");
    }

    #[test]
    fn relative_paths_are_refused_and_absent_target_is_silent() {
        assert!(address("notify.sock").is_err());
        let n = Notifier { target: None };
        assert!(!n.enabled());
        n.notify("READY=1");
    }
}
