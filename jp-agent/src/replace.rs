//! Replacing a file whole: the agent's output (`out=`, a window's files) is written to a
//! temporary file beside it and renamed over it, so a reader never sees half a file.
//!
//! The output's directory may be shared with other users (`/tmp`), so the temporary
//! name cannot be one they can guess and prepare: it carries random bits, and it is
//! opened with `O_CREAT|O_EXCL|O_NOFOLLOW` (a file or symlink planted there makes the
//! open fail instead of being followed or overwritten). Its contents are synced before
//! the rename (a crash after the rename leaves the whole new file, not an empty one), and
//! it is removed on any error (a full disk leaves nothing behind).

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Names tried before giving up (each taken name is someone else's file).
const ATTEMPTS: u32 = 8;

/// Replaces `path` with `bytes`.
pub fn replace_file(path: &str, bytes: &[u8]) -> io::Result<()> {
    replace_file_with(path, |f| f.write_all(bytes))
}

/// Replaces `path` with what `write` writes to the temporary file.
pub fn replace_file_with(
    path: &str,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let (tmp, mut file) = create_temporary(Path::new(path))?;
    let written = write(&mut file)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    drop(file);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A new file `.NAME.PID.RANDOM.tmp` beside `path`, created by this call alone.
fn create_temporary(path: &Path) -> io::Result<(PathBuf, File)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut last = io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary name");
    for _ in 0..ATTEMPTS {
        let tmp = dir.join(format!(
            ".{}.{}.{:016x}.tmp",
            name.to_string_lossy(),
            std::process::id(),
            random_u64()
        ));
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o666)
            .open(&tmp);
        match opened {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// 64 random bits, from the standard library's per-process random hash keys (each
/// `RandomState` differs from the last).
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("jp-replace-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_symlink_at_the_predictable_name_is_not_followed() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let out = dir.join("p.json");
        // The name this file once went through: `PATH.PID.tmp`.
        let planted = dir.join(format!("p.json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        replace_file(out.to_str().unwrap(), b"profile").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&out).unwrap(), b"profile");
        let planted_name = format!("p.json.{}.tmp", std::process::id());
        assert_eq!(
            entries(&dir),
            vec!["p.json".into(), planted_name, "victim".into()]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_and_the_old_file_whole() {
        let dir = scratch("failed");
        let out = dir.join("p.json");
        std::fs::write(&out, b"old").unwrap();
        let failed = replace_file_with(out.to_str().unwrap(), |f| {
            f.write_all(b"half")?;
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        });
        assert_eq!(failed.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(entries(&dir), vec!["p.json".to_string()]);
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        // A rename that fails (a directory in the way) also removes the temporary.
        let blocked = dir.join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("inside"), b"x").unwrap();
        assert!(replace_file(blocked.to_str().unwrap(), b"new").is_err());
        assert_eq!(entries(&dir), vec!["blocked".to_string(), "p.json".into()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_temporary_name_is_new_each_time() {
        let a = create_temporary(Path::new("/nonexistent-dir/x"));
        assert!(a.is_err(), "no directory, no file");
        let dir = scratch("unique");
        let out = dir.join("x");
        let (t1, _f1) = create_temporary(&out).unwrap();
        let (t2, _f2) = create_temporary(&out).unwrap();
        assert_ne!(t1, t2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
