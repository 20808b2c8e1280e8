//! Who may call the API: the socket's group and allow lists, and the TLS listener's
//! client certificates, as the configuration says them at start and after a reload.
use std::path::Path;

use crate::config::Config;
use crate::server::auth;

/// The warning for TCP without client certificates (also `--check-config`'s).
pub fn open_tcp_warning(config: &Config) -> String {
    format!(
        "server.tcp = {:?} without server.tls_client_ca: any client that reaches this port over TLS may read the API (all but Reset); set tls_client_ca to require client certificates",
        config.server.tcp
    )
}

/// The access rule from the configuration; the socket's group is one of the allowed
/// groups when it exists.
pub(super) fn policy(config: &Config) -> (auth::Policy, Option<u32>) {
    let s = &config.server;
    let gid = (!s.group.is_empty())
        .then(|| auth::group_id(&s.group))
        .flatten();
    let mut gids = s.allow_gids.clone();
    gids.extend(gid);
    let policy = auth::Policy {
        uids: s.allow_uids.clone(),
        gids,
        admin_uids: s.admin_uids.clone(),
        admin_gids: s.admin_gids.clone(),
        group_name: gid.map(|_| s.group.clone()),
    };
    (policy, gid)
}

pub(super) fn apply_group(config: &Config, socket: &Path, gid: Option<u32>) {
    let group = &config.server.group;
    match gid {
        Some(gid) => match auth::chgrp(socket, gid) {
            Ok(()) => log::debug!(target: "jpd", "socket group {group} ({gid})"),
            Err(e) => {
                log::warn!(target: "jpd", "cannot give {} to group {group}: {e}", socket.display())
            }
        },
        None if group.is_empty() => {}
        None => log::warn!(target: "jpd",
            "group {group:?} does not exist: only root may use {} (create it with `groupadd --system {group}`)",
            socket.display()
        ),
    }
}

pub(super) fn tls_policy(config: &Config) -> auth::TlsPolicy {
    auth::TlsPolicy {
        client_names: config.server.tls_client_names.clone(),
    }
}

pub(super) fn tls_summary(config: &Config) -> String {
    let s = &config.server;
    let clients = if s.tls_client_ca.as_os_str().is_empty() {
        "no client certificates asked for".to_string()
    } else if s.tls_client_names.is_empty() {
        format!(
            "client certificates signed by {}",
            s.tls_client_ca.display()
        )
    } else {
        format!(
            "client certificates signed by {} naming {}",
            s.tls_client_ca.display(),
            s.tls_client_names.join(", ")
        )
    };
    format!("certificate {}, {clients}", s.tls_cert.display())
}
