//! Files jpd puts where a JVM sees them, in the JVM's `/tmp` reached through
//! `/proc/PID/root/tmp` (its own `/tmp` in a container or a private-tmp service): the
//! agent library to load, and the directory a window writes its result into.
//!
//! The JVM's user can write in its `/tmp` and could plant a link or a file under the
//! names jpd uses, to have root write or chown something else: every step goes through
//! directory descriptors (`openat`, `mkdirat`, `renameat`) with `O_NOFOLLOW`, checks what
//! it opened by `fstat`, and moves aside anything it did not make itself.
use std::ffi::CString;
use std::fs;
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::error::AttachError;
use super::listener::{open_dir, tmp_dir};
use crate::windows::hotspot::{HotspotJvm, AGENT_LIBRARY};

/// The directory of staged agent libraries in a JVM's `/tmp`: root's, 0755.
const LIBRARY_DIR: &str = "jp-agent-lib";

/// A window's result directory: where the JVM writes, where jpd reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowDir {
    /// From jpd (through `/proc/PID/root`).
    pub host: PathBuf,
    /// As the JVM sees it.
    pub in_ns: String,
}

/// The agent library path to `load` into `jvm`: its own if it maps jp's agent (loading
/// another file would start a second agent), else a copy of `our_lib` in the JVM's
/// `/tmp`, `jp-agent-lib/HASH/libjpagent.so` (named by content, so a JVM that loaded
/// one version keeps it; the file keeps the library's name, by which jpd's USDT
/// discovery knows it).
pub fn stage_library(jvm: &HotspotJvm, our_lib: &Path) -> Result<String, AttachError> {
    let pid = jvm.pid;
    if let Some(path) = &jvm.agent_path {
        return own_library(jvm, path);
    }
    let bytes = fs::read(our_lib).map_err(|e| AttachError::Io {
        pid,
        what: format!("read the agent library {}", our_lib.display()),
        source: e,
    })?;
    let hash = format!("{:016x}", fnv1a(&bytes));
    let tmp = open_tmp(jvm)?;
    let top = owned_dir(jvm, tmp.as_fd_ref(), LIBRARY_DIR, 0, 0, 0o755)?;
    let dir = owned_dir(jvm, top.as_fd_ref(), &hash, 0, 0, 0o755)?;
    let in_ns = format!("/tmp/{LIBRARY_DIR}/{hash}/{AGENT_LIBRARY}");
    if staged_copy_fits(&dir, bytes.len()) {
        return Ok(in_ns);
    }
    write_file(jvm, &dir, AGENT_LIBRARY, &bytes, 0o644)?;
    Ok(in_ns)
}

/// The JVM's own agent library, unless the file it maps was replaced since: then the
/// same path would load the new file beside the running one.
fn own_library(jvm: &HotspotJvm, path: &str) -> Result<String, AttachError> {
    let text = crate::usdt::maps::read_maps(jvm.pid)
        .map_err(|e| AttachError::io(jvm.pid, "read its maps", e))?;
    let replaced = crate::usdt::maps::parse_maps(&text)
        .iter()
        .any(|f| f.path == path && f.deleted);
    if replaced {
        return Err(AttachError::AgentReplaced {
            pid: jvm.pid,
            path: path.to_string(),
        });
    }
    Ok(path.to_string())
}

/// The directory a window of `jvm` writes into: `/tmp/jp-windows-UID`, the JVM user's,
/// 0700.
pub fn window_dir(jvm: &HotspotJvm) -> Result<WindowDir, AttachError> {
    let name = format!("jp-windows-{}", jvm.uid);
    let tmp = open_tmp(jvm)?;
    owned_dir(jvm, tmp.as_fd_ref(), &name, jvm.uid, jvm.gid, 0o700)?;
    Ok(WindowDir {
        host: tmp_dir(jvm).join(&name),
        in_ns: format!("/tmp/{name}"),
    })
}

/// A borrowed view of an owned descriptor.
trait AsFdRef {
    fn as_fd_ref(&self) -> BorrowedFd<'_>;
}

impl AsFdRef for OwnedFd {
    fn as_fd_ref(&self) -> BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

fn open_tmp(jvm: &HotspotJvm) -> Result<OwnedFd, AttachError> {
    let path = tmp_dir(jvm);
    open_dir(&path.display().to_string()).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) if super::error::process_exists(jvm.pid) => {
            AttachError::NoTmp {
                pid: jvm.pid,
                detail: format!("{}: {e}", path.display()),
            }
        }
        _ => AttachError::io(jvm.pid, format!("open {}", path.display()), e),
    })
}

/// `name` in `parent`: a directory owned by `uid`/`gid` with `mode`, made here if
/// needed. Anything else under that name (a link, a file, a directory of another owner
/// or mode others could write) is moved aside first.
fn owned_dir(
    jvm: &HotspotJvm,
    parent: BorrowedFd<'_>,
    name: &str,
    uid: u32,
    gid: u32,
    mode: u32,
) -> Result<OwnedFd, AttachError> {
    let what = || format!("create {name} in its /tmp");
    let c = CString::new(name).map_err(|e| AttachError::io(jvm.pid, what(), e.into()))?;
    for _ in 0..3 {
        // SAFETY: parent is an open directory, c a NUL-terminated name.
        if unsafe { libc::mkdirat(parent.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(AttachError::io(jvm.pid, what(), e));
            }
        }
        // SAFETY: as above; O_NOFOLLOW refuses a link, O_DIRECTORY anything else.
        let fd = unsafe {
            libc::openat(
                parent.as_raw_fd(),
                c.as_ptr(),
                libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            move_aside(jvm, parent, &c)?;
            continue;
        }
        // SAFETY: fd was just opened and is owned here alone.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        let file = fs::File::from(dir);
        let meta = file
            .metadata()
            .map_err(|e| AttachError::io(jvm.pid, what(), e))?;
        // Root's (jpd made it) or, for a directory of the JVM's user, that user's: what the
        // user could do in it, it can do anyway.
        if meta.uid() != 0 && meta.uid() != uid {
            drop(file);
            move_aside(jvm, parent, &c)?;
            continue;
        }
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
            .and_then(|()| file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)))
            .map_err(|e| AttachError::io(jvm.pid, what(), e))?;
        return Ok(OwnedFd::from(file));
    }
    Err(AttachError::Unsafe {
        pid: jvm.pid,
        path: format!("/tmp/{name}"),
        why: "replaced again each time jpd moved it aside",
    })
}

/// Renames `name` in `parent` to a name nobody uses.
fn move_aside(jvm: &HotspotJvm, parent: BorrowedFd<'_>, name: &CString) -> Result<(), AttachError> {
    let aside = CString::new(format!("{}.aside-{}", name.to_string_lossy(), unique()))
        .map_err(|e| AttachError::io(jvm.pid, "name a file to move aside", e.into()))?;
    // SAFETY: parent is an open directory; both names are NUL-terminated.
    let r = unsafe {
        libc::renameat(
            parent.as_raw_fd(),
            name.as_ptr(),
            parent.as_raw_fd(),
            aside.as_ptr(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(AttachError::io(
            jvm.pid,
            format!("move {} aside in its /tmp", name.to_string_lossy()),
            e,
        ));
    }
    log::warn!(
        "JVM {}: {} in its /tmp was not jpd's; moved aside to {}",
        jvm.pid,
        name.to_string_lossy(),
        aside.to_string_lossy()
    );
    Ok(())
}

/// Whether `dir` (root's, others cannot write) holds the staged library already: a
/// regular file of that size (its name is its content's hash).
fn staged_copy_fits(dir: &OwnedFd, len: usize) -> bool {
    let Ok(c) = CString::new(AGENT_LIBRARY) else {
        return false;
    };
    // SAFETY: dir is an open directory, c a NUL-terminated name; never follows a link.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd was just opened and is owned here alone.
    let file = fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.metadata()
        .is_ok_and(|m| m.is_file() && m.uid() == 0 && m.len() == len as u64)
}

/// Writes `bytes` to `name` in `dir`: to a new temporary file first, renamed over `name`
/// once whole, so the JVM never loads half a library.
fn write_file(
    jvm: &HotspotJvm,
    dir: &OwnedFd,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<(), AttachError> {
    let what = || format!("write {name} into its /tmp");
    let temp = CString::new(format!(".{name}.{}", unique()))
        .map_err(|e| AttachError::io(jvm.pid, what(), e.into()))?;
    let target = CString::new(name).map_err(|e| AttachError::io(jvm.pid, what(), e.into()))?;
    // SAFETY: dir is an open directory, temp a NUL-terminated name; a new file only.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            temp.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(AttachError::io(jvm.pid, what(), io::Error::last_os_error()));
    }
    // SAFETY: fd was just opened and is owned here alone.
    let mut file = fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let written = file
        .write_all(bytes)
        .and_then(|()| file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)))
        .and_then(|()| file.sync_all());
    // SAFETY: as above, both names NUL-terminated, in the same directory.
    let renamed = written.and_then(|()| {
        let r = unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                temp.as_ptr(),
                dir.as_raw_fd(),
                target.as_ptr(),
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    });
    if let Err(e) = renamed {
        // SAFETY: dir is an open directory, temp a NUL-terminated name.
        unsafe { libc::unlinkat(dir.as_raw_fd(), temp.as_ptr(), 0) };
        return Err(AttachError::io(jvm.pid, what(), e));
    }
    Ok(())
}

/// A name part no other call of this process or another jpd uses at the same time.
fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// FNV-1a, 64 bits: names a library by its content (not a defence: only root writes
/// the directory it names).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_names_are_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
