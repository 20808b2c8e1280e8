//! The CPU-controller layout a fleet host gives the processes `bench fleet` runs: under
//! systemd every service and every login session is its own cgroup, and CPU time is shared
//! between those groups by weight before it is shared between their threads. jpd
//! (jpd.service), the JVMs (the workload's services) and the operator's tools (jpctl, the
//! Prometheus scraper: another service or a session) are siblings with equal weights.
//!
//! Without this the bench measured one flat group, where jpd's few threads compete with
//! a thousand runnable JVM threads one by one — a machine no systemd host is.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Where the CPU controller lives, as mounted on this host.
enum Hierarchy {
    /// cgroup v1: `cpu` mounted on its own; equal `cpu.shares` by default.
    V1(PathBuf),
    /// cgroup v2 with `cpu` enabled below the root; equal `cpu.weight` by default.
    V2(PathBuf),
}

/// Three sibling groups; everything moved back to the parent and the groups removed on drop.
pub struct FleetGroups {
    parent: PathBuf,
    pub workload: PathBuf,
    pub jpd: PathBuf,
    pub client: PathBuf,
}

impl FleetGroups {
    pub fn create() -> Result<FleetGroups> {
        let hierarchy = find()?;
        let (root, name) = match &hierarchy {
            Hierarchy::V1(root) | Hierarchy::V2(root) => (
                root.clone(),
                format!("jp-bench-fleet-{}", std::process::id()),
            ),
        };
        let parent = root.join(name);
        std::fs::create_dir(&parent)
            .with_context(|| format!("cannot create the cgroup {}", parent.display()))?;
        if let Hierarchy::V2(root) = &hierarchy {
            std::fs::write(root.join("cgroup.subtree_control"), "+cpu")
                .context("cannot enable the cpu controller below the root cgroup")?;
            std::fs::write(parent.join("cgroup.subtree_control"), "+cpu")
                .context("cannot enable the cpu controller below the bench's cgroup")?;
        }
        let groups = FleetGroups {
            workload: parent.join("workload"),
            jpd: parent.join("jpd"),
            client: parent.join("client"),
            parent,
        };
        for g in [&groups.workload, &groups.jpd, &groups.client] {
            std::fs::create_dir(g)
                .with_context(|| format!("cannot create the cgroup {}", g.display()))?;
        }
        Ok(groups)
    }

    /// Moves a whole process (all its threads) into `group`.
    pub fn enter(group: &Path, pid: u32) -> Result<()> {
        std::fs::write(group.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("cannot move pid {pid} into {}", group.display()))
    }
}

impl Drop for FleetGroups {
    fn drop(&mut self) {
        let Some(up) = self.parent.parent() else {
            return;
        };
        for g in [&self.workload, &self.jpd, &self.client] {
            // Whatever still lives here (this process, a JVM not yet reaped) goes back up;
            // a group with members cannot be removed.
            if let Ok(procs) = std::fs::read_to_string(g.join("cgroup.procs")) {
                for pid in procs.split_whitespace() {
                    let _ = std::fs::write(up.join("cgroup.procs"), pid);
                }
            }
            let _ = std::fs::remove_dir(g);
        }
        let _ = std::fs::remove_dir(&self.parent);
    }
}

fn find() -> Result<Hierarchy> {
    let v2 = Path::new("/sys/fs/cgroup");
    if let Ok(c) = std::fs::read_to_string(v2.join("cgroup.controllers")) {
        if c.split_whitespace().any(|x| x == "cpu") {
            return Ok(Hierarchy::V2(v2.to_path_buf()));
        }
    }
    let v1 = v2.join("cpu");
    if v1.join("cpu.shares").exists() {
        return Ok(Hierarchy::V1(v1));
    }
    bail!(
        "bench fleet needs the cgroup CPU controller (cgroup v2 with `cpu` in \
         /sys/fs/cgroup/cgroup.controllers, or v1 `cpu` mounted at /sys/fs/cgroup/cpu) and root \
         to place jpd, the JVMs and the clients as systemd would"
    )
}
