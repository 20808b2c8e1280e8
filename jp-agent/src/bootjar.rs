//! The `jp.rt` runtime jar, embedded in the library. Profiled from start, it is written to a
//! private file and appended to the bootstrap class path (every loader then sees the same
//! `jp.rt` classes). For windows its classes are defined into the boot loader one by one
//! ([`runtime_classes`]): appending to the boot class path in the live phase makes HotSpot
//! print a warning on stderr and stop sharing (CDS) the classes of the other loaders.

use crate::classfile::name_and_supertypes;
use std::collections::BTreeMap;
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

/// One class of the runtime jar: its internal name and its class file.
pub struct RuntimeClass {
    pub name: String,
    pub bytes: &'static [u8],
}

/// The classes of the runtime jar, each after its superclass and interfaces, so that the
/// boot loader finds every supertype by name among those already defined.
pub fn runtime_classes() -> Result<Vec<RuntimeClass>, String> {
    let mut by_name = BTreeMap::new();
    for bytes in stored_class_entries(RT_JAR)? {
        let (name, supertypes) =
            name_and_supertypes(bytes).map_err(|e| format!("runtime jar: {e}"))?;
        by_name.insert(name, (bytes, supertypes));
    }
    let mut ordered = Vec::with_capacity(by_name.len());
    let mut placed = BTreeMap::new();
    for name in by_name.keys() {
        place(name, &by_name, &mut placed, &mut ordered)?;
    }
    Ok(ordered)
}

type Classes = BTreeMap<String, (&'static [u8], Vec<String>)>;

/// Puts `name` after its supertypes of the jar (depth first; `placed`: false while its
/// supertypes are being placed, which only a circular hierarchy meets again).
fn place(
    name: &str,
    by_name: &Classes,
    placed: &mut BTreeMap<String, bool>,
    ordered: &mut Vec<RuntimeClass>,
) -> Result<(), String> {
    match placed.get(name) {
        Some(true) => return Ok(()),
        Some(false) => return Err(format!("runtime jar: {name} is its own supertype")),
        None => {}
    }
    let Some((bytes, supertypes)) = by_name.get(name) else {
        return Ok(()); // a JDK class
    };
    placed.insert(name.to_string(), false);
    for s in supertypes {
        place(s, by_name, placed, ordered)?;
    }
    placed.insert(name.to_string(), true);
    ordered.push(RuntimeClass {
        name: name.to_string(),
        bytes,
    });
    Ok(())
}

fn le16(b: &[u8], at: usize) -> Option<usize> {
    Some(usize::from(u16::from_le_bytes(
        b.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le32(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?)).ok()
}

/// The `.class` entries of a zip whose entries are stored (the build packs the runtime jar
/// with `--no-compress`), read through its central directory.
fn stored_class_entries(zip: &'static [u8]) -> Result<Vec<&'static [u8]>, String> {
    const END: &[u8] = b"PK\x05\x06";
    const CENTRAL: &[u8] = b"PK\x01\x02";
    const LOCAL: &[u8] = b"PK\x03\x04";
    let bad = |what: &str| format!("runtime jar: {what}");
    let end = (0..zip.len().saturating_sub(21))
        .rev()
        .find(|&i| zip[i..].starts_with(END))
        .ok_or_else(|| bad("no end of central directory"))?;
    let count = le16(zip, end + 10).ok_or_else(|| bad("truncated"))?;
    let mut at = le32(zip, end + 16).ok_or_else(|| bad("truncated"))?;
    let mut classes = Vec::new();
    for _ in 0..count {
        let header = zip
            .get(at..at + 46)
            .ok_or_else(|| bad("truncated directory"))?;
        if !header.starts_with(CENTRAL) {
            return Err(bad("bad central directory entry"));
        }
        let field = |off: usize, wide: bool| {
            if wide {
                le32(header, off)
            } else {
                le16(header, off)
            }
            .ok_or_else(|| bad("truncated"))
        };
        let (method, size) = (field(10, false)?, field(20, true)?);
        let (name_len, extra_len, comment_len) =
            (field(28, false)?, field(30, false)?, field(32, false)?);
        let local = field(42, true)?;
        let name = zip
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| bad("truncated"))?;
        at += 46 + name_len + extra_len + comment_len;
        if !name.ends_with(b".class") {
            continue;
        }
        if method != 0 {
            return Err(bad("a class entry is compressed (the build stores them)"));
        }
        if !zip.get(local..).is_some_and(|l| l.starts_with(LOCAL)) {
            return Err(bad("bad local header"));
        }
        let data = local
            + 30
            + le16(zip, local + 26).ok_or_else(|| bad("truncated"))?
            + le16(zip, local + 28).ok_or_else(|| bad("truncated"))?;
        classes.push(
            zip.get(data..data + size)
                .ok_or_else(|| bad("truncated entry"))?,
        );
    }
    Ok(classes)
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

    #[test]
    fn runtime_classes_come_after_their_supertypes() {
        let classes = runtime_classes().unwrap();
        let at = |n: &str| classes.iter().position(|c| c.name == n);
        for c in &classes {
            assert_eq!(&c.bytes[..4], b"\xCA\xFE\xBA\xBE", "{}", c.name);
            let (name, supertypes) = name_and_supertypes(c.bytes).unwrap();
            assert_eq!(name, c.name);
            for s in supertypes.iter().filter(|s| s.starts_with("jp/")) {
                assert!(at(s) < at(&c.name), "{s} must come before {}", c.name);
            }
        }
        let mut names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), classes.len(), "a class twice");
        for n in [
            "jp/rt/Rt",
            "jp/rt/Rt$Pacer",
            "jp/rt/Node",
            "jp/rt/Seeding",
            "jp/rt/ThreadState",
        ] {
            assert!(at(n).is_some(), "{n} missing");
        }
        assert!(at("jp/rt/Profiler") < at("jp/rt/UsdtProfiler"));
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
