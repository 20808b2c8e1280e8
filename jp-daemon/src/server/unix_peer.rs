//! A Unix-socket connection with its caller's credentials, read once at accept time
//! from the socket itself: SO_PEERCRED (uid, gid, pid) and SO_PEERGROUPS (the
//! supplementary groups). Reading the groups from the socket rather than from
//! `/proc/PID/status` per request means no race with the PID being reused by another
//! process, and no file read per call.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use tokio::net::UnixStream;
#[cfg(test)]
use tonic::transport::server::Connected;

use super::conn::Tagged;

/// Who is on the other end of a Unix connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixPeer {
    /// SO_PEERCRED; `None` when the kernel would not say.
    pub cred: Option<Cred>,
    /// SO_PEERGROUPS: the peer's supplementary groups when it connected.
    pub groups: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
}

impl UnixPeer {
    fn of(fd: RawFd) -> UnixPeer {
        let cred = peer_cred(fd)
            .map_err(|e| log::debug!("SO_PEERCRED: {e}"))
            .ok();
        let groups = peer_groups(fd).unwrap_or_else(|e| {
            log::debug!("SO_PEERGROUPS: {e}");
            Vec::new()
        });
        UnixPeer { cred, groups }
    }
}

fn peer_cred(fd: RawFd) -> io::Result<Cred> {
    // SAFETY: ucred is plain data that getsockopt fills in.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: c and len are live locals of the sizes passed; fd is a socket we own
    // for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Cred {
        uid: c.uid,
        gid: c.gid,
        pid: c.pid,
    })
}

/// The peer's supplementary groups; the kernel says how big the list is when the
/// buffer was too small (ERANGE), so at most two calls.
fn peer_groups(fd: RawFd) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    for _ in 0..2 {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: groups is writable for len bytes; len is a live local; fd is a
        // socket we own for the duration of the call.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() {
            return Err(e);
        }
        groups.resize(n, 0);
    }
    Err(io::Error::other("the peer's group list kept growing"))
}

/// One accepted Unix connection, tagged with its [`UnixPeer`] for the auth layer.
pub type UnixConn = Tagged<UnixStream, UnixPeer>;

/// Reads the peer's credentials of a just-accepted stream into its tag.
pub fn tag(stream: UnixStream) -> UnixConn {
    let peer = UnixPeer::of(stream.as_raw_fd());
    Tagged::new(stream, peer, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over a real socket pair, our own credentials and groups come back: the same
    /// uid, gid and pid as the process, and the same groups as getgroups(2).
    #[tokio::test]
    async fn credentials_and_groups_of_a_real_peer() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let peer = tag(a).connect_info();
        // SAFETY: getuid/getgid/getpid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!(
            peer.cred,
            Some(Cred {
                uid,
                gid,
                pid: std::process::id() as i32
            })
        );
        // SAFETY: a null list with size 0 asks for the count only.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut mine = vec![0 as libc::gid_t; n as usize];
        // SAFETY: mine is writable for n entries.
        let n = unsafe { libc::getgroups(n, mine.as_mut_ptr()) };
        mine.truncate(n as usize);
        let (mut got, mut want) = (peer.groups.clone(), mine);
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
    }
}
