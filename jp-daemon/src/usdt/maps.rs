//! Which processes map a given library (`libjpagent.so`), and a path through which jpd
//! can open the very file a process maps, even in another mount namespace (containers).
//!
//! A uprobe belongs to an inode: one system-wide event per probe of a file covers every
//! process mapping that file, now or later, in any namespace. So jpd needs each distinct
//! file (device and inode) once, and a host path to it: `/proc/PID/root/PATH` resolves
//! PATH in the process's mount namespace; `/proc/PID/map_files/START-END` reaches the
//! mapped file even if it was deleted or replaced since. Both are checked against the
//! device and inode the process's maps name.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

/// `/proc/PID/maps` larger than this is refused (a JVM has a few thousand lines).
pub const MAX_MAPS_SIZE: u64 = 64 << 20;

/// A file mapped by a process, as `/proc/PID/maps` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// Path in the process's mount namespace, without the " (deleted)" mark.
    pub path: String,
    /// Device major and minor numbers.
    pub dev: (u32, u32),
    pub inode: u64,
    /// The file was deleted (or replaced) after it was mapped.
    pub deleted: bool,
    /// Range of the first mapping of the file (for `/proc/PID/map_files`).
    pub start: u64,
    pub end: u64,
}

/// Distinct files with file-backed mappings in a maps text, in order of first
/// mapping. Lines that do not parse (pseudo-files such as `[heap]`, anonymous
/// mappings, garbage) are skipped.
pub fn parse_maps(text: &str) -> Vec<MappedFile> {
    let mut files: Vec<MappedFile> = Vec::new();
    for line in text.lines() {
        let Some(file) = parse_line(line) else {
            continue;
        };
        if !files
            .iter()
            .any(|f| f.dev == file.dev && f.inode == file.inode)
        {
            files.push(file);
        }
    }
    files
}

/// One line of `/proc/PID/maps` for a file: where a part of the file is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
}

/// Every mapping of the file (`dev`, `inode`) in a maps text.
pub fn mappings_of(text: &str, dev: (u32, u32), inode: u64) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let (file, offset) = parse_line_with_offset(line)?;
            (file.dev == dev && file.inode == inode).then_some(Mapping {
                start: file.start,
                end: file.end,
                offset,
            })
        })
        .collect()
}

/// The maps text of process `pid` (bounded by [`MAX_MAPS_SIZE`]).
pub fn read_maps(pid: u32) -> io::Result<String> {
    let mut text = String::new();
    fs::File::open(format!("/proc/{pid}/maps"))?
        .take(MAX_MAPS_SIZE)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// `START-END PERMS OFFSET MAJOR:MINOR INODE   PATH`; the path may contain spaces.
fn parse_line(line: &str) -> Option<MappedFile> {
    parse_line_with_offset(line).map(|(file, _)| file)
}

fn parse_line_with_offset(line: &str) -> Option<(MappedFile, u64)> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start_matches(' ');
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (value, tail) = trimmed.split_at(end);
        rest = tail;
        value
    };
    let (range, _perms, offset, dev, inode) = (field(), field(), field(), field(), field());
    let offset = u64::from_str_radix(offset, 16).ok()?;
    let path = rest.trim_start_matches(' ');
    let (start, end) = range.split_once('-')?;
    let (start, end) = (
        u64::from_str_radix(start, 16).ok()?,
        u64::from_str_radix(end, 16).ok()?,
    );
    let (major, minor) = dev.split_once(':')?;
    let dev = (
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let inode = inode.parse::<u64>().ok()?;
    if inode == 0 || !path.starts_with('/') {
        return None;
    }
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (path, false),
    };
    Some((
        MappedFile {
            path: path.to_owned(),
            dev,
            inode,
            deleted,
            start,
            end,
        },
        offset,
    ))
}

/// The files process `pid` maps.
pub fn mapped_files(pid: u32) -> io::Result<Vec<MappedFile>> {
    Ok(parse_maps(&read_maps(pid)?))
}

/// Whether `path`'s file name is `name` (`/opt/jp/libjpagent.so` for `libjpagent.so`).
pub fn has_file_name(file: &MappedFile, name: &str) -> bool {
    Path::new(&file.path).file_name().is_some_and(|n| n == name)
}

/// Every process mapping a file called `name`, with that file. Processes that exit
/// or cannot be read during the scan are left out.
pub fn processes_mapping(name: &str) -> io::Result<Vec<(u32, MappedFile)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(files) = mapped_files(pid) else {
            continue;
        };
        found.extend(
            files
                .into_iter()
                .filter(|f| has_file_name(f, name))
                .map(|f| (pid, f)),
        );
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn maps_lines() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1311 /usr/bin/true
55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:01 1311 /usr/bin/true
7f00aa000000-7f00aa021000 rw-p 00000000 00:00 0 
7f00ab000000-7f00ab100000 r-xp 00000000 00:2a 99 /tmp/my dir/libjpagent.so (deleted)
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]
zzzz-1 r--p 0 fd:01 5 /bad
10-20 r--p 0 fd:01 notanumber /bad
10-20 r--p 0 fd01 5 /bad
";
        let files = parse_maps(text);
        assert_eq!(files.len(), 2, "{files:?}");
        assert_eq!(
            files[0],
            MappedFile {
                path: "/usr/bin/true".into(),
                dev: (0xfd, 1),
                inode: 1311,
                deleted: false,
                start: 0x55d0_c0a0_0000,
                end: 0x55d0_c0a0_1000,
            }
        );
        assert_eq!(files[1].path, "/tmp/my dir/libjpagent.so");
        assert_eq!(
            (files[1].dev, files[1].inode, files[1].deleted),
            ((0, 0x2a), 99, true)
        );
        assert!(has_file_name(&files[1], "libjpagent.so"));
        assert_eq!(
            mappings_of(text, (0xfd, 1), 1311),
            [
                Mapping {
                    start: 0x55d0_c0a0_0000,
                    end: 0x55d0_c0a0_1000,
                    offset: 0
                },
                Mapping {
                    start: 0x55d0_c0a0_1000,
                    end: 0x55d0_c0a0_5000,
                    offset: 0x1000
                }
            ]
        );
        assert!(!has_file_name(&files[0], "libjpagent.so"));
    }

    #[test]
    fn own_process_maps_its_executable() {
        let exe = fs::canonicalize("/proc/self/exe").unwrap();
        let files = mapped_files(std::process::id()).unwrap();
        let me = files.iter().find(|f| Path::new(&f.path) == exe).unwrap();
        assert_eq!(me.inode, fs::metadata(&exe).unwrap().ino());
    }
}
