//! A window's result files, as the agent writes them in the window's directory:
//! `window-ID.json` (the merged tree, `jp-mct/1`), then `window-ID.done` (`key=value`
//! lines), or `window-ID.error` (one line) when it refused the command. The directory
//! belongs to the JVM's user, and so does what is in it: jpd opens nothing through a
//! symbolic link, reads only regular files, and only so many bytes and contexts.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use jp_mct::Mct;

/// Largest `.done` or `.error` file read (a few hundred bytes in practice).
pub const MAX_META_BYTES: u64 = 64 << 10;
/// Largest tree file read: about a million contexts.
pub const MAX_RESULT_BYTES: u64 = 128 << 20;
/// Most contexts a window's tree may hold.
pub const MAX_CONTEXTS: usize = 1_000_000;

/// The files of window `id` in `dir` (as jpd sees the directory).
#[derive(Clone, Debug)]
pub struct WindowFiles {
    dir: PathBuf,
    id: u64,
}

impl WindowFiles {
    pub fn new(dir: &Path, id: u64) -> WindowFiles {
        WindowFiles {
            dir: dir.to_path_buf(),
            id,
        }
    }

    fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("window-{}.{ext}", self.id))
    }

    pub fn tree(&self) -> PathBuf {
        self.path("json")
    }

    pub fn done(&self) -> PathBuf {
        self.path("done")
    }

    pub fn error(&self) -> PathBuf {
        self.path("error")
    }

    /// Whether the agent has finished writing the result.
    pub fn is_done(&self) -> bool {
        std::fs::symlink_metadata(self.done()).is_ok_and(|m| m.is_file())
    }

    /// The agent's one-line reason for refusing a command, if it wrote one.
    pub fn refusal(&self) -> Option<String> {
        let text = read_capped(&self.error(), MAX_META_BYTES).ok()?;
        let line = String::from_utf8_lossy(&text);
        let line = line.lines().next()?.trim();
        (!line.is_empty()).then(|| printable(line))
    }

    /// The `.done` lines and the tree. Errors are one line.
    pub fn read(&self) -> Result<(BTreeMap<String, String>, Mct), String> {
        let done = read_capped(&self.done(), MAX_META_BYTES)?;
        let meta = parse_done(&String::from_utf8_lossy(&done));
        let text = read_capped(&self.tree(), MAX_RESULT_BYTES)?;
        let tree = jp_mct::read_json(&text).map_err(|e| format!("window {}: {e}", self.id))?;
        let contexts = tree.nodes.len().saturating_sub(1);
        if contexts > MAX_CONTEXTS {
            return Err(format!(
                "window {}: {contexts} contexts, more than jpd keeps of a window ({MAX_CONTEXTS})",
                self.id
            ));
        }
        Ok((meta, tree))
    }

    /// Removes the window's files (those that exist).
    pub fn remove(&self) {
        for p in [self.tree(), self.done(), self.error()] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `path`'s bytes, when it is a regular file (not followed through a link) of at most
/// `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, String> {
    let name = path.display();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open {name}: {e}"))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{name} is not a regular file"));
    }
    if meta.len() > cap {
        return Err(format!(
            "{name} has {} bytes, more than jpd reads ({cap})",
            meta.len()
        ));
    }
    let mut out = Vec::new();
    // Bounded even if the file grows while read.
    File::take(f, cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if out.len() as u64 > cap {
        return Err(format!("{name} grew past {cap} bytes while read"));
    }
    Ok(out)
}

/// `key=value` lines; others are skipped. Values are kept printable.
pub fn parse_done(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (printable(k.trim()), printable(v.trim())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// `s` without control characters (it comes from another user's process and ends up
/// on terminals and in logs).
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_lines_are_read_as_keys_and_values() {
        let m = parse_done("id=7\nscope = a.b.*\nnonsense\nclosed_by=deadline\x1b[31m\n=x\n");
        assert_eq!(m.get("id").map(String::as_str), Some("7"));
        assert_eq!(m.get("scope").map(String::as_str), Some("a.b.*"));
        assert_eq!(
            m.get("closed_by").map(String::as_str),
            Some("deadline?[31m")
        );
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn links_fifos_and_big_files_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").unwrap();
        let link = dir.path().join("window-1.json");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let e = read_capped(&link, 100).unwrap_err();
        assert!(e.starts_with("cannot open "), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: c is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read_capped(&fifo, 100)
            .unwrap_err()
            .ends_with("is not a regular file"));
        std::fs::write(&secret, vec![b'x'; 101]).unwrap();
        assert!(read_capped(&secret, 100)
            .unwrap_err()
            .ends_with("has 101 bytes, more than jpd reads (100)"));
        assert_eq!(read_capped(&secret, 101).unwrap().len(), 101);
    }
}
