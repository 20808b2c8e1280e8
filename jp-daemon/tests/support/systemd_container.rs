//! A throwaway container whose PID 1 is a real systemd, for running jpd.service as a
//! host would. The development VM and CI have no systemd as PID 1, so the tests boot
//! one: `systemd-nspawn --volatile=yes -D /` gives the container the host's /usr
//! (read-only; the JDKs, systemd itself) on an empty tmpfs root, jp's files are bound
//! in, and systemd boots to basic.target. Commands run inside through `nsenter`.
//!
//! Nothing stays on the host: nspawn runs in its own mount namespace with a private
//! tmpfs on /run (the host's /run is on disk, and nspawn keeps state there), in a
//! cgroup of its own that [`Container`]'s drop kills and removes, also when a test
//! fails half-way. That empty /run also lacks /run/systemd/inaccessible, which nspawn
//! would mount over the container's /proc/kallsyms (on a host jpd reads the real one).

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The cgroup hierarchies systemd needs in the container ("hybrid" layout, as the
/// host mounts them): nspawn gives the container a subtree of the one it runs in.
const HIERARCHIES: [&str; 2] = ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"];

/// Names of the test cgroups (and machines): PREFIX, the test's tag, the test's pid.
const PREFIX: &str = "jp-systemd-test-";

/// PATH inside the container: a clean one, not the test's.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A host directory or file seen at `inside` in the container.
pub struct Bind {
    pub host: PathBuf,
    pub inside: String,
    pub writable: bool,
}

impl Bind {
    pub fn ro(host: &Path, inside: &str) -> Bind {
        Bind {
            host: host.to_path_buf(),
            inside: inside.to_string(),
            writable: false,
        }
    }
    pub fn rw(host: &Path, inside: &str) -> Bind {
        Bind {
            writable: true,
            ..Bind::ro(host, inside)
        }
    }
}

pub struct Container {
    nspawn: Option<Child>,
    /// Host pid of the container's PID 1 (systemd).
    pub leader: u32,
    pub name: String,
    /// nspawn's output and the container's console.
    pub console: PathBuf,
}

fn tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not installed: apt-get install {package} (or run `cargo xtask setup`)"
            )
        })
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("no NUL in the path")
}

/// In the forked child, before exec: join the test cgroups, then a private mount
/// namespace with its own /run. Only system calls (no allocation) after fork.
fn prepare(procs: &[CString; 2]) -> std::io::Result<()> {
    // If the test process is killed before its drop runs, nspawn gets SIGTERM and
    // halts the container.
    // SAFETY: prctl with an integer argument.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    for p in procs {
        // SAFETY: `p` is a valid NUL-terminated path; the fd is closed below.
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: writes one byte from a static buffer to the fd opened above.
        let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        let err = std::io::Error::last_os_error();
        // SAFETY: closes the fd opened above, once.
        unsafe { libc::close(fd) };
        if n != 1 {
            return Err(err);
        }
    }
    // SAFETY: unshare and mount take only valid NUL-terminated strings or NULL.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if libc::mount(
            c"jp-test-run".as_ptr(),
            c"/run".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=0755".as_ptr().cast(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Container {
    /// Boots the container with `binds`, and waits until systemd has reached
    /// basic.target. `tag` names it (machine name, cgroup).
    pub fn boot(tag: &str, binds: &[Bind], console_dir: &Path) -> Container {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "booting a systemd container needs root"
        );
        let nspawn = tool("systemd-nspawn", "systemd-container");
        tool("nsenter", "util-linux");
        for h in HIERARCHIES {
            assert!(
                Path::new(h).join("cgroup.procs").exists(),
                "{h} is not a mounted cgroup hierarchy: systemd in the container needs the \
                 name=systemd (v1) and the unified (v2) hierarchies there"
            );
        }
        sweep_stale();
        let name = format!("{PREFIX}{tag}-{}", std::process::id());
        for h in HIERARCHIES {
            let dir = Path::new(h).join(&name);
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("cannot create cgroup {}: {e}", dir.display()));
        }
        let procs = HIERARCHIES.map(|h| cstring(&format!("{h}/{name}/cgroup.procs")));
        let console = console_dir.join(format!("{name}.console"));
        let log = std::fs::File::create(&console).expect("console file");

        let mut c = Command::new(nspawn);
        c.args([
            "--quiet",
            "--keep-unit",
            "--register=no",
            "--volatile=yes",
            "--directory=/",
            "--capability=all",
            "--console=read-only",
        ])
        .arg(format!("--machine={name}"));
        for b in binds {
            let flag = if b.writable { "--bind" } else { "--bind-ro" };
            c.arg(format!("{flag}={}:{}", b.host.display(), b.inside));
        }
        // nspawn's own seccomp filter (on the whole container, not the unit's) makes
        // bpf(2) fail to create maps: jpd would not start for a reason no host has.
        c.env("SYSTEMD_SECCOMP", "0");
        c.args([
            "--boot",
            "--",
            "systemd.unit=basic.target",
            "systemd.firstboot=off",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("console file"))
        .stderr(log);
        // SAFETY: `prepare` only makes system calls on strings built before the fork.
        unsafe {
            c.pre_exec(move || prepare(&procs));
        }
        let child = c.spawn().expect("start systemd-nspawn");
        let mut ct = Container {
            nspawn: Some(child),
            leader: 0,
            name,
            console,
        };
        ct.leader = ct.find_leader();
        ct.wait_booted();
        ct
    }

    fn nspawn_pid(&self) -> u32 {
        self.nspawn.as_ref().map_or(0, Child::id)
    }

    pub fn console_text(&self) -> String {
        std::fs::read_to_string(&self.console).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        if let Some(c) = self.nspawn.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!("systemd-nspawn exited ({status}):\n{}", self.console_text());
            }
        }
    }

    /// The child of nspawn that is pid 1 in its own pid namespace.
    fn find_leader(&mut self) -> u32 {
        let ns = self.nspawn_pid();
        let t0 = Instant::now();
        loop {
            self.assert_running();
            let children = std::fs::read_to_string(format!("/proc/{ns}/task/{ns}/children"))
                .unwrap_or_default();
            for pid in children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
            {
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"));
                if nspid.is_some_and(|l| l.split_whitespace().last() == Some("1")) {
                    return pid;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "systemd-nspawn started no container within 30 s:\n{}",
                self.console_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_booted(&mut self) {
        let t0 = Instant::now();
        loop {
            self.assert_running();
            let out = self.run(&["systemctl", "is-system-running", "--wait"]);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            match state.as_str() {
                "running" => return,
                "degraded" => panic!(
                    "the container booted degraded:\n{}\n{}",
                    self.sh("systemctl --failed --no-pager"),
                    self.console_text()
                ),
                _ => {}
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "systemd in the container did not finish booting within 60 s (state {state:?}):\n{}",
                self.console_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `args` inside the container (its mount, pid, uts, ipc and cgroup namespaces),
    /// with a clean environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--target={}", self.leader))
            .args(["--mount", "--pid", "--uts", "--ipc", "--cgroup", "--"])
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .env("LANG", "C.UTF-8")
            .env("SYSTEMD_COLORS", "0")
            .env("SYSTEMD_PAGER", "");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {args:?} in the container: {e}"))
    }

    /// `args` inside, which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} in the container failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A shell line inside, for diagnostics: stdout and stderr, whatever the status.
    pub fn sh(&self, line: &str) -> String {
        let out = self.run(&["sh", "-c", line]);
        format!(
            "$ {line}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// `systemctl show -P PROPERTY UNIT`.
    pub fn property(&self, unit: &str, property: &str) -> String {
        self.ok(&["systemctl", "show", "-P", property, unit])
            .trim()
            .to_string()
    }

    /// A path of the container's file system, seen from the host.
    pub fn host_path(&self, inside: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{inside}", self.leader))
    }

    /// Halts the container the way a host shuts down (SIGTERM to nspawn: systemd
    /// stops every unit), then SIGKILL after `grace`.
    fn halt(&mut self, grace: Duration) {
        let Some(mut child) = self.nspawn.take() else {
            return;
        };
        if let Ok(None) = child.try_wait() {
            // SAFETY: kill on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let t0 = Instant::now();
            while let Ok(None) = child.try_wait() {
                if t0.elapsed() > grace {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = child.wait();
    }
}

/// Every process left in `dir` (a cgroup v2 directory) and below: killed, then the
/// directories removed from the leaves up.
fn remove_cgroup(dir: &Path) {
    if !dir.exists() {
        return;
    }
    let kill = dir.join("cgroup.kill");
    if kill.exists() {
        let _ = std::fs::write(&kill, "1");
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if rmdir_tree(dir) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("could not remove cgroup {}", dir.display());
}

/// rmdir of `dir` and its subdirectories, deepest first; true when `dir` is gone.
fn rmdir_tree(dir: &Path) -> bool {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path());
            }
        }
    }
    std::fs::remove_dir(dir).is_ok() || !dir.exists()
}

/// The cgroups of test processes that died without their drop (killed).
fn sweep_stale() {
    for h in HIERARCHIES {
        let Ok(entries) = std::fs::read_dir(h) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix(PREFIX)
                .and_then(|r| r.rsplit('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                // v2 first: its cgroup.kill ends whatever is left.
                remove_cgroup(&Path::new(HIERARCHIES[1]).join(&name));
                remove_cgroup(&Path::new(HIERARCHIES[0]).join(&name));
            }
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.halt(Duration::from_secs(30));
        // The v2 tree holds every process of the container (systemd mirrors its
        // cgroups there in the hybrid layout): cgroup.kill leaves none behind.
        let [v1, v2] = HIERARCHIES.map(|h| Path::new(h).join(&self.name));
        remove_cgroup(&v2);
        remove_cgroup(&v1);
    }
}
