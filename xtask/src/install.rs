//! `cargo xtask install [--prefix P] [--destdir D]`: the deliverables of `build` and
//! the service files, laid out as a package would:
//!
//! | what | where |
//! | --- | --- |
//! | `jpd`, `jpctl` | `P/bin/` |
//! | `libjpagent.so`, `jp-agent.jar` (side by side: the jar loads the library next to it) | `P/lib/jp/` |
//! | `jpd.service` (paths rewritten to `P`) | `P/lib/systemd/system/` |
//! | the Grafana dashboard, the README | `P/share/jp/grafana/jp.json`, `P/share/doc/jp/README.md` |
//! | the default configuration, commented | `E/jp/jpd.toml`, never overwritten |
//!
//! `E` (`--sysconfdir`) is `/etc` whatever the prefix, because jpd looks there.
//! Everything goes under `D` when given (staging for a package).
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::build::Deliverables;
use crate::cmd::root;

pub const DEFAULT_PREFIX: &str = "/usr/local";
/// The prefix the unit file in the repository is written for.
const UNIT_PREFIX: &str = "/usr/local";

#[derive(Debug)]
pub struct Options {
    pub prefix: PathBuf,
    pub sysconfdir: PathBuf,
    pub destdir: Option<PathBuf>,
}

/// Sources of what is installed besides the binaries: repository files.
pub struct Sources {
    pub unit: PathBuf,
    pub config: PathBuf,
    pub dashboard: PathBuf,
    pub readme: PathBuf,
}

impl Sources {
    pub fn from_repo() -> Sources {
        let r = root();
        Sources {
            unit: r.join("deploy/systemd/jpd.service"),
            config: r.join("jp-daemon/jpd.toml"),
            dashboard: r.join("deploy/grafana/jp.json"),
            readme: r.join("README.md"),
        }
    }
}

/// `path` (absolute) under the destdir, if any.
fn staged(destdir: Option<&Path>, path: &Path) -> PathBuf {
    match destdir {
        Some(d) => d.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_path_buf(),
    }
}

fn put(from: &Path, to: &Path, mode: u32) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Through a temporary name: a running jpd keeps executing its old inode.
    let tmp = to.with_extension("xtask-tmp");
    std::fs::copy(from, &tmp)
        .with_context(|| format!("cannot copy {} to {}", from.display(), tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("cannot install {}", to.display()))?;
    eprintln!("xtask: installed {}", to.display());
    Ok(())
}

fn write(to: &Path, text: &str, mode: u32) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(to, text).with_context(|| format!("cannot write {}", to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", to.display()))?;
    eprintln!("xtask: installed {}", to.display());
    Ok(())
}

/// The unit with `/usr/local` and `/etc/jp` replaced by `prefix` and
/// `sysconfdir/jp` in every path it names.
pub fn unit_for(unit: &str, prefix: &Path, sysconfdir: &Path) -> String {
    let p = prefix.to_string_lossy();
    let e = sysconfdir.to_string_lossy();
    unit.replace(
        &format!("{UNIT_PREFIX}/"),
        &format!("{}/", p.trim_end_matches('/')),
    )
    .replace("/etc/jp/", &format!("{}/jp/", e.trim_end_matches('/')))
}

/// Installs `d` and the repository files; returns every path written.
pub fn install(d: &Deliverables, src: &Sources, opts: &Options) -> Result<Vec<PathBuf>> {
    for (flag, p) in [
        ("--prefix", &opts.prefix),
        ("--sysconfdir", &opts.sysconfdir),
    ] {
        if !p.is_absolute() {
            bail!("{flag} must be absolute, not {}", p.display());
        }
    }
    let dest = opts.destdir.as_deref();
    let at = |p: PathBuf| staged(dest, &p);
    let prefix = &opts.prefix;
    let mut done = Vec::new();

    for (from, to, mode) in [
        (&d.jpd, prefix.join("bin/jpd"), 0o755),
        (&d.jpctl, prefix.join("bin/jpctl"), 0o755),
        (&d.agent_lib, prefix.join("lib/jp/libjpagent.so"), 0o755),
        (&d.agent_jar, prefix.join("lib/jp/jp-agent.jar"), 0o644),
        (
            &src.dashboard,
            prefix.join("share/jp/grafana/jp.json"),
            0o644,
        ),
        (&src.readme, prefix.join("share/doc/jp/README.md"), 0o644),
    ] {
        let to = at(to);
        put(from, &to, mode)?;
        done.push(to);
    }

    let unit = std::fs::read_to_string(&src.unit)
        .with_context(|| format!("cannot read {}", src.unit.display()))?;
    let to = at(prefix.join("lib/systemd/system/jpd.service"));
    write(&to, &unit_for(&unit, prefix, &opts.sysconfdir), 0o644)?;
    done.push(to);

    let config = at(opts.sysconfdir.join("jp/jpd.toml"));
    if config.exists() {
        eprintln!(
            "xtask: kept the existing {} (the default is {})",
            config.display(),
            src.config.display()
        );
    } else {
        put(&src.config, &config, 0o644)?;
        done.push(config);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_deliverables(dir: &Path) -> Deliverables {
        let f = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        Deliverables {
            dir: dir.to_path_buf(),
            jpd: f("jpd", "#!/bin/sh\necho jpd\n"),
            jpctl: f("jpctl", "#!/bin/sh\necho jpctl\n"),
            agent_lib: f("libjpagent.so", "ELF"),
            agent_jar: f("jp-agent.jar", "PK"),
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn installs_the_tree_into_a_destdir_and_keeps_an_existing_config() {
        let build = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let d = fake_deliverables(build.path());
        let src = Sources::from_repo();
        let opts = Options {
            prefix: PathBuf::from("/opt/jp"),
            sysconfdir: PathBuf::from("/etc"),
            destdir: Some(dest.path().to_path_buf()),
        };
        let done = install(&d, &src, &opts).unwrap();
        let rel: Vec<String> = done
            .iter()
            .map(|p| p.strip_prefix(dest.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "opt/jp/bin/jpd",
                "opt/jp/bin/jpctl",
                "opt/jp/lib/jp/libjpagent.so",
                "opt/jp/lib/jp/jp-agent.jar",
                "opt/jp/share/jp/grafana/jp.json",
                "opt/jp/share/doc/jp/README.md",
                "opt/jp/lib/systemd/system/jpd.service",
                "etc/jp/jpd.toml",
            ]
        );
        let root = dest.path();
        assert_eq!(mode(&root.join("opt/jp/bin/jpd")), 0o755);
        assert_eq!(mode(&root.join("opt/jp/lib/jp/jp-agent.jar")), 0o644);
        assert_eq!(mode(&root.join("etc/jp/jpd.toml")), 0o644);
        assert_eq!(
            std::fs::read_to_string(root.join("opt/jp/bin/jpctl")).unwrap(),
            "#!/bin/sh\necho jpctl\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("etc/jp/jpd.toml")).unwrap(),
            std::fs::read_to_string(&src.config).unwrap()
        );
        let unit =
            std::fs::read_to_string(root.join("opt/jp/lib/systemd/system/jpd.service")).unwrap();
        assert!(unit.contains("\nExecStart=/opt/jp/bin/jpd --config /etc/jp/jpd.toml\n"));
        assert!(
            !unit.contains("/usr/local/"),
            "every path follows the prefix"
        );
        // No stray temporary files.
        assert!(!walk(root).iter().any(|p| p.ends_with(".xtask-tmp")));

        // A second install keeps the operator's configuration.
        std::fs::write(root.join("etc/jp/jpd.toml"), "[kernel]\nshift = 2\n").unwrap();
        let done = install(&d, &src, &opts).unwrap();
        assert_eq!(done.len(), 7, "the configuration is not rewritten");
        assert_eq!(
            std::fs::read_to_string(root.join("etc/jp/jpd.toml")).unwrap(),
            "[kernel]\nshift = 2\n"
        );
    }

    fn walk(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p.display().to_string());
            }
        }
        out
    }

    #[test]
    fn relative_prefix_is_refused() {
        let build = tempfile::tempdir().unwrap();
        let d = fake_deliverables(build.path());
        let e = install(
            &d,
            &Sources::from_repo(),
            &Options {
                prefix: PathBuf::from("usr"),
                sysconfdir: PathBuf::from("/etc"),
                destdir: None,
            },
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "--prefix must be absolute, not usr");
    }

    #[test]
    fn unit_paths_follow_the_prefix() {
        let u = "ExecStart=/usr/local/bin/jpd --config /etc/jp/jpd.toml\nDocumentation=file:///usr/local/share/doc\n";
        assert_eq!(
            unit_for(u, Path::new("/usr/"), Path::new("/etc")),
            "ExecStart=/usr/bin/jpd --config /etc/jp/jpd.toml\nDocumentation=file:///usr/share/doc\n"
        );
        assert_eq!(
            unit_for(u, Path::new("/opt/x"), Path::new("/opt/x/etc/")),
            "ExecStart=/opt/x/bin/jpd --config /opt/x/etc/jp/jpd.toml\nDocumentation=file:///opt/x/share/doc\n"
        );
    }

    /// systemd's own checker accepts the unit as installed: every command it runs
    /// exists and is executable, every directive is known.
    #[test]
    fn systemd_analyze_verify_accepts_the_installed_unit() {
        let build = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let d = fake_deliverables(build.path());
        let prefix = dest.path().join("usr");
        let opts = Options {
            prefix: prefix.clone(),
            sysconfdir: dest.path().join("etc"),
            destdir: None,
        };
        install(&d, &Sources::from_repo(), &opts).unwrap();
        let unit = prefix.join("lib/systemd/system/jpd.service");
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run systemd-analyze ({e}): install Debian's systemd (cargo xtask setup)")
            });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "systemd-analyze verify {}: {}\n{stderr}",
            unit.display(),
            out.status
        );
    }
}
