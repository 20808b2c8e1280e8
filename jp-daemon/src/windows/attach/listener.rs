//! Reaching a JVM's attach listener, as jattach does: the socket `.java_pidNSPID` in the
//! JVM's `/tmp` (seen from the host through `/proc/PID/root/tmp`); when it is not there,
//! a trigger file `.attach_pidNSPID` in the JVM's working directory (else its `/tmp`),
//! owned by the JVM's user, and a SIGQUIT, on which HotSpot starts the listener instead of
//! printing a thread dump. Then one request per connection. HotSpot accepts a peer with
//! its own uid and gid, or root (`SO_PEERCRED`), so jpd connects as itself.
use std::ffi::CString;
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::error::AttachError;
use crate::usdt::discovery;
use crate::windows::hotspot::HotspotJvm;

/// Longest reply kept (a `properties` or `jcmd` output; `load`'s is a line).
const MAX_REPLY: u64 = 16 << 20;
/// How long the listener may take to start after the SIGQUIT (jattach waits about 6 s).
const LISTENER_START: Duration = Duration::from_secs(5);

/// The JVM's `/tmp` from the host.
pub fn tmp_dir(jvm: &HotspotJvm) -> PathBuf {
    PathBuf::from(format!("/proc/{}/root/tmp", jvm.pid))
}

fn socket_path(jvm: &HotspotJvm) -> PathBuf {
    tmp_dir(jvm).join(format!(".java_pid{}", jvm.nspid))
}

/// Sends `request` and reads the whole reply, starting the listener first if needed.
/// `timeout` bounds the exchange; the listener's start has its own bound.
pub fn exchange(
    jvm: &HotspotJvm,
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, AttachError> {
    check_same_process(jvm)?;
    let pid = jvm.pid;
    let tmp = tmp_dir(jvm);
    match fs::metadata(&tmp) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(no_tmp(jvm, "it is not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound && process_alive(jvm) => {
            return Err(no_tmp(jvm, "there is none"))
        }
        Err(e) => return Err(AttachError::io(pid, "look at its /tmp", e)),
    }
    if !listener_socket_ready(jvm)? {
        start_listener(jvm)?;
    }
    let mut stream = UnixStream::connect(socket_path(jvm))
        .map_err(|e| AttachError::io(pid, "connect to its attach socket", e))?;
    let bounded = |e: io::Error, what: &'static str| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => AttachError::TimedOut {
            pid,
            what,
            after: timeout,
        },
        _ => AttachError::io(pid, what, e),
    };
    stream
        .set_write_timeout(Some(timeout))
        .and_then(|()| stream.set_read_timeout(Some(timeout)))
        .map_err(|e| AttachError::io(pid, "set the socket's timeouts", e))?;
    stream
        .write_all(request)
        .map_err(|e| bounded(e, "take the request"))?;
    let mut reply = Vec::new();
    let deadline = Instant::now() + timeout;
    let mut limited = (&mut stream).take(MAX_REPLY);
    let mut buf = [0u8; 8192];
    loop {
        match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(bounded(e, "answer")),
        }
        if Instant::now() > deadline {
            return Err(AttachError::TimedOut {
                pid,
                what: "answer",
                after: timeout,
            });
        }
    }
    Ok(reply)
}

fn no_tmp(jvm: &HotspotJvm, detail: &str) -> AttachError {
    AttachError::NoTmp {
        pid: jvm.pid,
        detail: format!("{}: {detail}", tmp_dir(jvm).display()),
    }
}

/// Whether the listener's socket is there, and is the JVM's: a socket owned by the JVM's
/// user (its user could have put anything else under that name).
fn listener_socket_ready(jvm: &HotspotJvm) -> Result<bool, AttachError> {
    let path = socket_path(jvm);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_socket() && m.uid() == jvm.uid => Ok(true),
        Ok(_) => Err(AttachError::Unsafe {
            pid: jvm.pid,
            path: path.display().to_string(),
            why: "not a socket of the JVM's user",
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(AttachError::io(jvm.pid, "look for its attach socket", e)),
    }
}

/// Trigger file, SIGQUIT, and a bounded wait for the socket; the trigger file is removed
/// whatever happens.
fn start_listener(jvm: &HotspotJvm) -> Result<(), AttachError> {
    let trigger = Trigger::create(jvm)?;
    signal_quit(jvm)?;
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(10);
    let result = loop {
        std::thread::sleep(pause);
        if listener_socket_ready(jvm)? {
            break Ok(());
        }
        if !process_alive(jvm) {
            break Err(AttachError::Vanished { pid: jvm.pid });
        }
        if t0.elapsed() >= LISTENER_START {
            break Err(AttachError::TimedOut {
                pid: jvm.pid,
                what: "start its attach listener",
                after: LISTENER_START,
            });
        }
        pause = (pause * 2).min(Duration::from_millis(200));
    };
    drop(trigger);
    result
}

/// `.attach_pidNSPID`, created where the JVM looks for it and removed on drop.
struct Trigger {
    dir: OwnedFd,
    name: CString,
}

impl Trigger {
    /// In the JVM's working directory, else in its `/tmp`: created afresh (never through
    /// a link), then given to the JVM's user; a file system that does not keep that owner
    /// (HotSpot ignores a trigger of another user) sends it to the next place.
    fn create(jvm: &HotspotJvm) -> Result<Trigger, AttachError> {
        let name = CString::new(format!(".attach_pid{}", jvm.nspid))
            .map_err(|e| AttachError::io(jvm.pid, "name the trigger file", e.into()))?;
        let places = [
            format!("/proc/{}/cwd", jvm.pid),
            tmp_dir(jvm).display().to_string(),
        ];
        let mut last = None;
        for place in places {
            match Trigger::create_in(jvm, &place, &name) {
                Ok(t) => return Ok(t),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(AttachError::NoTmp {
            pid: jvm.pid,
            detail: "no place for the trigger file".into(),
        }))
    }

    fn create_in(jvm: &HotspotJvm, dir: &str, name: &CString) -> Result<Trigger, AttachError> {
        let what_dir = dir;
        let what = || format!("create the attach trigger in {dir}");
        let dir = open_dir(dir).map_err(|e| AttachError::io(jvm.pid, what(), e))?;
        // A stale trigger may belong to anyone: replace it.
        // SAFETY: dir is an open directory, name a NUL-terminated string.
        unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
        // SAFETY: as above; the flags create a new file and never follow a link.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(AttachError::io(jvm.pid, what(), io::Error::last_os_error()));
        }
        // SAFETY: fd was just opened and is owned here alone.
        let file = fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let trigger = Trigger {
            dir,
            name: name.clone(),
        };
        std::os::unix::fs::fchown(&file, Some(jvm.uid), Some(jvm.gid))
            .map_err(|e| AttachError::io(jvm.pid, what(), e))?;
        let owner = file
            .metadata()
            .map_err(|e| AttachError::io(jvm.pid, what(), e))?
            .uid();
        if owner != jvm.uid {
            return Err(AttachError::Unsafe {
                pid: jvm.pid,
                path: format!("{what_dir}/{}", name.to_string_lossy()),
                why: "on a file system that does not keep a file's owner",
            });
        }
        Ok(trigger)
    }
}

impl Drop for Trigger {
    fn drop(&mut self) {
        // SAFETY: dir is an open directory, name a NUL-terminated string.
        unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) };
    }
}

/// A directory, opened to create and remove entries in it by name.
pub fn open_dir(path: &str) -> io::Result<OwnedFd> {
    let c = CString::new(path)?;
    // SAFETY: c is NUL-terminated; O_DIRECTORY fails on anything but a directory.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned here alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// SIGQUIT to the JVM through a pidfd, checked to be the JVM still: a pid reused by
/// another process since the JVM was listed gets no signal.
fn signal_quit(jvm: &HotspotJvm) -> Result<(), AttachError> {
    let pid = jvm.pid;
    let raw = libc::pid_t::try_from(pid).map_err(|_| AttachError::Vanished { pid })?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
    if fd < 0 {
        return Err(AttachError::io(
            pid,
            "signal it",
            io::Error::last_os_error(),
        ));
    }
    let fd = i32::try_from(fd).map_err(|_| AttachError::Vanished { pid })?;
    // SAFETY: fd was just returned by pidfd_open and is owned here alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
    // The pidfd names the process that had the pid when it was opened.
    check_same_process(jvm)?;
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGQUIT,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if sent < 0 {
        return Err(AttachError::io(
            pid,
            "signal it",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The pid still names the JVM that was listed (same start time).
fn check_same_process(jvm: &HotspotJvm) -> Result<(), AttachError> {
    if process_alive(jvm) {
        Ok(())
    } else {
        Err(AttachError::Vanished { pid: jvm.pid })
    }
}

fn process_alive(jvm: &HotspotJvm) -> bool {
    discovery::start_time(jvm.pid).is_ok_and(|t| t == jvm.start_time)
}
