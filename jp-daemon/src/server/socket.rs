//! The API's Unix socket: created with mode 0660 (parent directory made if
//! missing, a stale socket of a dead jpd replaced), removed when the guard drops.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use tokio::net::UnixListener;

pub const SOCKET_MODE: u32 = 0o660;

/// Removes the socket file when dropped.
#[derive(Debug)]
pub struct SocketGuard {
    path: PathBuf,
}

impl SocketGuard {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => log::debug!("removed {}", self.path.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("cannot remove socket {}: {e}", self.path.display()),
        }
    }
}

/// Binds `path` (inside a tokio runtime). Refuses to take over a socket another
/// process still answers on, or to delete anything that is not a socket.
pub fn bind(path: &Path) -> anyhow::Result<(UnixListener, SocketGuard)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the socket's directory {}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!(
                    "{} is in use: another jpd is running (stop it, or pass --socket)",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove the stale socket {}", path.display()))?;
            log::info!("replaced the stale socket {}", path.display());
        }
        Ok(_) => bail!(
            "{} exists and is not a socket; not touching it",
            path.display()
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))?;
    let guard = SocketGuard {
        path: path.to_path_buf(),
    };
    // Set explicitly rather than through the umask, which the service manager owns.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .with_context(|| format!("cannot set mode 0660 on {}", path.display()))?;
    Ok((listener, guard))
}
