//! The `jp.rt` runtime jar, embedded in the library and written to a private file so that it can
//! be appended to the bootstrap class path (every loader then sees the same `jp.rt` classes).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

static RT_JAR: &[u8] = include_bytes!(env!("JP_RT_JAR"));

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A directory only we can write: created 0700, or existing, ours, not a symlink, not
/// writable by group or others.
fn private_dir(base: &Path) -> Result<PathBuf, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = base.join(format!("jp-agent-{uid}"));
    match DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let md = fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !md.file_type().is_dir() || md.uid() != uid || md.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a private directory of uid {uid} (remove it or set TMPDIR)",
            dir.display()
        ));
    }
    Ok(dir)
}

/// Writes the runtime jar (once per content) and returns its path.
pub fn install() -> Result<PathBuf, String> {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let dir = private_dir(&base)?;
    let path = dir.join(format!("jp-rt-{:016x}.jar", fnv1a(RT_JAR)));
    if let Ok(existing) = fs::read(&path) {
        if existing == RT_JAR {
            return Ok(path);
        }
    }
    let tmp = dir.join(format!("jp-rt.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    f.write_all(RT_JAR)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, &path).map_err(|e| format!("cannot rename to {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_jar_is_a_zip_with_the_runtime() {
        assert_eq!(&RT_JAR[..4], b"PK\x03\x04");
        let has = |n: &[u8]| RT_JAR.windows(n.len()).any(|w| w == n);
        assert!(has(b"jp/rt/Rt.class"));
        assert!(has(b"jp/rt/Node.class"));
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("jp-bootjar-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn private_dir_is_created_0700() {
        let base = scratch("new");
        let d = private_dir(&base).unwrap();
        assert_eq!(
            fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(private_dir(&base).unwrap(), d); // existing and fine: reused
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn private_dir_refuses_shared_or_symlinked_dirs() {
        let base = scratch("bad");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let d = base.join(format!("jp-agent-{uid}"));
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&base).unwrap_err();
        assert!(e.contains("not a private directory"), "{e}");
        fs::remove_dir(&d).unwrap();
        std::os::unix::fs::symlink(&base, &d).unwrap();
        assert!(private_dir(&base).is_err());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn install_is_idempotent() {
        let a = install().unwrap();
        let b = install().unwrap();
        assert_eq!(a, b);
        assert_eq!(fs::read(&a).unwrap(), RT_JAR);
    }
}
