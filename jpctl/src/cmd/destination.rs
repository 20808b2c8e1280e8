//! Where a command's output goes: standard output, or the file of `-o FILE` (`-o -` is
//! standard output too). Every command writes through [`Destination::write`], so a file
//! is always whole (written beside the target, then renamed into place) and a failed
//! write always names what failed.

use std::ffi::OsString;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

impl Destination {
    /// From `-o FILE`: absent or `-` is standard output.
    pub fn from_flag(output: Option<&Path>) -> Destination {
        match output {
            Some(p) if p != Path::new("-") => Destination::File(p.to_path_buf()),
            _ => Destination::Stdout,
        }
    }

    pub fn is_file(&self) -> bool {
        matches!(self, Destination::File(_))
    }

    /// Writes `data` whole. To a file, then says on stdout what it wrote:
    /// `wrote N bytes WHAT to FILE` (`what`: e.g. "(HTML flame graph)").
    pub fn write(&self, data: &[u8], what: &str) -> anyhow::Result<()> {
        match self {
            Destination::Stdout => write_stdout(data),
            Destination::File(path) => {
                write_file(path, data)?;
                let note = format!("wrote {} bytes {what} to {}\n", data.len(), path.display());
                write_stdout(note.as_bytes())
            }
        }
    }
}

/// A reader that went away (`jpctl kernel | head`) is not an error worth a message; a
/// full disk or a closed descriptor is.
fn write_stdout(data: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(data).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(()),
    }
}

/// Writes through a temporary file in the same directory, renamed into place: a failed
/// write leaves no file behind, and never half of one.
fn write_file(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file name", path.display()))?;
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".jpctl-tmp");
    let tmp = path.with_file_name(tmp_name);
    let written = std::fs::write(&tmp, data).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dash_and_nothing_are_stdout() {
        assert_eq!(Destination::from_flag(None), Destination::Stdout);
        assert_eq!(
            Destination::from_flag(Some(Path::new("-"))),
            Destination::Stdout
        );
        assert_eq!(
            Destination::from_flag(Some(Path::new("k.html"))),
            Destination::File(PathBuf::from("k.html"))
        );
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        std::fs::write(&path, "old contents, longer than the new").unwrap();
        write_file(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_unwritable_file_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no such dir").join("out.txt");
        let e = write_file(&path, b"x").unwrap_err();
        assert!(
            format!("{e:#}").starts_with(&format!("cannot write {}: ", path.display())),
            "{e:#}"
        );
        assert!(!path.exists());
    }
}
