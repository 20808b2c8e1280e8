//! Probes in files jpd cannot see under their own path: a program in another mount
//! namespace (as in a container) and a program whose file was deleted after it
//! started. Found through /proc/PID/maps, opened and probed through /proc. Needs root,
//! gcc, systemtap-sdt-dev and unshare (util-linux).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::support::usdt::build_probe_program;
use jp_daemon::usdt::attach::{UprobeEvent, UprobePmu};
use jp_daemon::usdt::{maps, notes};

use crate::support::usdt::wait_semaphore;

fn proc_mem(pid: u32) -> std::fs::File {
    std::fs::File::open(format!("/proc/{pid}/mem")).unwrap()
}

/// Reads the program's first line: the run-time address of its tick semaphore.
fn semaphore_address(stdout: &mut BufReader<ChildStdout>) -> u64 {
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let printed = line
        .trim()
        .strip_prefix("semaphore 0x")
        .unwrap_or_else(|| panic!("{line:?}"));
    u64::from_str_radix(printed, 16).unwrap()
}

/// Finds `child`'s mapping of a file called `name`, a host path to it, attaches the
/// tick probe system-wide through that path and checks the semaphore and hits.
fn probe_through_proc(child: &mut Child, name: &str, sema: u64) -> String {
    let pid = child.id();
    let found: Vec<(u32, maps::MappedFile)> = maps::processes_mapping(name)
        .unwrap()
        .into_iter()
        .filter(|(p, _)| *p == pid)
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let file = &found[0].1;
    let path = host_path(pid, file).unwrap();
    let probes = notes::read_file(&path).unwrap();
    let tick = probes.iter().find(|p| p.name == "tick").unwrap();
    let pmu = UprobePmu::from_sysfs().unwrap();
    let cpus = std::thread::available_parallelism().unwrap().get() as i32;
    let events: Vec<UprobeEvent> = (0..cpus)
        .map(|cpu| {
            UprobeEvent::open(
                &pmu,
                &path,
                tick.file_offset,
                tick.semaphore_offset,
                None,
                cpu,
            )
            .unwrap()
        })
        .collect();
    wait_semaphore(&proc_mem(pid), sema, 1, "attached");
    std::thread::sleep(Duration::from_millis(100));
    let hits: u64 = events.iter().map(|e| e.count().unwrap()).sum();
    assert!(hits > 0, "no hits through {}", path.display());
    drop(events);
    wait_semaphore(&proc_mem(pid), sema, 0, "closed");
    child.kill().unwrap();
    child.wait().unwrap();
    format!(
        "{} seen as {} (deleted: {}), {hits} hits",
        file.path,
        path.display(),
        file.deleted
    )
}

#[test]
fn program_in_another_mount_namespace() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "mount namespaces and uprobes need root"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "jp_ns_probes", &["-O2"]);
    // An empty directory on the host; inside the namespace a tmpfs holds the program.
    let mount_point = dir.path().join("container");
    std::fs::create_dir(&mount_point).unwrap();
    let inner = mount_point.join("jp_ns_probes");
    let script = format!(
        "mount -t tmpfs jp-test {m} && cp {bin} {inner} && exec {inner} 4000",
        m = mount_point.display(),
        bin = bin.display(),
        inner = inner.display()
    );
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run unshare ({e}): install util-linux"));
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let sema = semaphore_address(&mut stdout);
    assert!(
        !Path::new(&inner).exists(),
        "the program must be invisible from the host"
    );
    let report = probe_through_proc(&mut child, "jp_ns_probes", sema);
    assert!(
        report.contains(&format!("/proc/{}/root", child.id())),
        "{report}"
    );
    println!("{report}");
}

#[test]
fn program_whose_file_was_deleted() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "uprobes need root");
    let dir = tempfile::tempdir().unwrap();
    let bin = build_probe_program(dir.path(), "jp_deleted_probes", &["-O2"]);
    let mut child = Command::new(&bin)
        .arg("4000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let sema = semaphore_address(&mut stdout);
    std::fs::remove_file(&bin).unwrap();
    let report = probe_through_proc(&mut child, "jp_deleted_probes", sema);
    assert!(
        report.contains("map_files") && report.contains("deleted: true"),
        "{report}"
    );
    println!("{report}");
}

/// A host path to the file `pid` maps (jpd itself opens mappings through
/// `map_files` only), checked to be that file (same device and inode):
/// through the process's root, else through its `map_files` entry.
fn host_path(pid: u32, file: &maps::MappedFile) -> std::io::Result<PathBuf> {
    let candidates = [
        PathBuf::from(format!("/proc/{pid}/root{}", file.path)),
        PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            file.start, file.end
        )),
    ];
    for path in candidates {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let dev = (libc::major(meta.dev()), libc::minor(meta.dev()));
        if dev == file.dev && meta.ino() == file.inode {
            return Ok(path);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "no path from this namespace to {} (dev {}:{}, inode {}) mapped by process {pid}",
            file.path, file.dev.0, file.dev.1, file.inode
        ),
    ))
}
