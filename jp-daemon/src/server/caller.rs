//! Who made a call, as the connection's tag says it, and what follows from it for
//! the answer: whether it may see real kernel addresses, whether its JVM command
//! lines are redacted, and whose Watch-stream quota it draws on.

use std::net::IpAddr;

use jp_proto::v1 as pb;

use super::tls::TlsPeer;
use super::unix_peer::UnixPeer;

/// CAP_SYSLOG, the capability the kernel asks of a reader of `/proc/kallsyms`'
/// addresses (with `kernel.kptr_restrict` = 1, the distributions' default).
const CAP_SYSLOG: u32 = 34;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// On the Unix socket: the credentials SO_PEERCRED gave at connect time.
    Unix { uid: u32, pid: i32 },
    /// Over TCP: the client's address, and whether it presented a (verified)
    /// client certificate.
    Tls { ip: IpAddr, certified: bool },
    /// No tag (only in tests that call the service directly).
    Unknown,
}

/// Whose Watch streams count together: a user on the Unix socket, a client address
/// over TCP.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QuotaKey {
    Uid(u32),
    Ip(IpAddr),
    Unknown,
}

impl Caller {
    pub fn of<T>(req: &tonic::Request<T>) -> Caller {
        let ext = req.extensions();
        if let Some(UnixPeer {
            cred: Some(cred), ..
        }) = ext.get::<UnixPeer>()
        {
            return Caller::Unix {
                uid: cred.uid,
                pid: cred.pid,
            };
        }
        match ext.get::<TlsPeer>() {
            Some(p) => Caller::Tls {
                ip: p.remote.ip(),
                certified: p.client_certificate,
            },
            None => Caller::Unknown,
        }
    }

    /// Whether the caller could read the kernel's addresses itself, as the kernel
    /// decides it for `/proc/kallsyms` now: root; anyone when the host shows them to
    /// all (`kernel.kptr_restrict` = 0 and `kernel.perf_event_paranoid` ≤ 1); a process
    /// holding CAP_SYSLOG unless `kptr_restrict` = 2. Everyone else (TCP callers too:
    /// they have no credentials on this host) sees offsets from `_stext`.
    pub fn may_read_kernel_addresses(&self) -> bool {
        match *self {
            Caller::Unix { uid: 0, .. } => true,
            Caller::Unix { uid, pid } => {
                let host = HostKallsyms::read();
                host.shown_to_all()
                    || (host.shown_to_syslog_capable() && has_syslog_capability(uid, pid))
            }
            Caller::Tls { .. } | Caller::Unknown => false,
        }
    }

    /// Over TCP without a client certificate (`server.tcp_anonymous_reads`): command
    /// lines, which often carry secrets, are cut to the program's name.
    pub fn anonymous(&self) -> bool {
        matches!(
            self,
            Caller::Tls {
                certified: false,
                ..
            }
        )
    }

    pub fn quota_key(&self) -> QuotaKey {
        match *self {
            Caller::Unix { uid, .. } => QuotaKey::Uid(uid),
            Caller::Tls { ip, .. } => QuotaKey::Ip(ip),
            Caller::Unknown => QuotaKey::Unknown,
        }
    }
}

/// The two settings by which the kernel decides who sees `/proc/kallsyms`' values
/// (`kallsyms_show_value`). Read at each call: an operator may change them at any time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostKallsyms {
    pub kptr_restrict: i64,
    pub perf_event_paranoid: i64,
}

impl HostKallsyms {
    /// The host's settings; one that cannot be read counts as the strictest.
    pub fn read() -> HostKallsyms {
        let sysctl = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(i64::MAX)
        };
        HostKallsyms {
            kptr_restrict: sysctl("kptr_restrict"),
            perf_event_paranoid: sysctl("perf_event_paranoid"),
        }
    }

    /// `kptr_restrict` = 0 shows the values to every reader when perf events are
    /// open to users (`perf_event_paranoid` ≤ 1); otherwise it falls back to CAP_SYSLOG.
    pub fn shown_to_all(&self) -> bool {
        self.kptr_restrict == 0 && self.perf_event_paranoid <= 1
    }

    /// `kptr_restrict` 0 or 1: a reader with CAP_SYSLOG sees them; 2 hides them from all.
    pub fn shown_to_syslog_capable(&self) -> bool {
        (0..=1).contains(&self.kptr_restrict)
    }
}

/// Whether process `pid` still runs as `uid` (not a reused pid) and holds
/// CAP_SYSLOG in its effective set.
fn has_syslog_capability(uid: u32, pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let same_user = field("Uid:").is_some_and(|ids| {
        ids.split_whitespace()
            .all(|id| id.parse::<u32>().is_ok_and(|id| id == uid))
    });
    let cap_eff = field("CapEff:").and_then(|hex| u64::from_str_radix(hex, 16).ok());
    same_user && cap_eff.is_some_and(|caps| caps & (1 << CAP_SYSLOG) != 0)
}

/// A JVM's summary as an anonymous caller sees it: the command line cut to the
/// program's name, the main class or jar kept (its first word, should it be a
/// command line).
pub fn redact(jvm: &mut pb::JvmSummary) {
    jvm.cmdline = program_name(&jvm.cmdline).to_string();
    jvm.main = jvm.main.split_whitespace().next().unwrap_or("").to_string();
}

/// The program of a command line: its first word without the directories.
fn program_name(cmdline: &str) -> &str {
    let first = cmdline.split_whitespace().next().unwrap_or("");
    first.rsplit('/').next().unwrap_or(first)
}

/// Kernel addresses as offsets from `_stext` (`text_start`), for callers who may
/// not read the real ones. Address 0 (none) stays 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressView {
    base: u64,
}

impl AddressView {
    /// Real addresses for `caller` when it may read them, offsets from `text_start`
    /// otherwise.
    pub fn for_caller(caller: &Caller, text_start: u64) -> AddressView {
        AddressView {
            base: if caller.may_read_kernel_addresses() {
                0
            } else {
                text_start
            },
        }
    }

    pub fn address(&self, a: u64) -> u64 {
        if a == 0 {
            0
        } else {
            a.wrapping_sub(self.base)
        }
    }

    pub fn status(&self, s: &mut pb::Status) {
        if let Some(k) = &mut s.kernel {
            self.range(&mut k.text_start, &mut k.text_end);
        }
    }

    /// `_stext`..`_etext` become 0..length.
    fn range(&self, start: &mut u64, end: &mut u64) {
        if self.base != 0 {
            *end = end.wrapping_sub(self.base);
            *start = start.wrapping_sub(self.base);
        }
    }

    pub fn kernel_profile(&self, p: &mut pb::KernelProfile) {
        self.range(&mut p.text_start, &mut p.text_end);
        for f in &mut p.functions {
            f.address = self.address(f.address);
        }
        for o in &mut p.other_ips {
            o.address = self.address(o.address);
        }
    }

    pub fn irq_stats(&self, s: &mut pb::IrqStats) {
        for h in &mut s.irqs {
            h.function_address = self.address(h.function_address);
        }
    }

    pub fn watch_update(&self, u: &mut pb::WatchUpdate) {
        if let Some(k) = &mut u.kernel {
            for f in &mut k.new_functions {
                f.address = self.address(f.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_cut_to_the_program() {
        let mut j = pb::JvmSummary {
            cmdline: "/usr/lib/jvm/bin/java -Ddb.password=hunter2 -jar app.jar".into(),
            main: "app.jar --token=s3cr3t".into(),
            ..pb::JvmSummary::default()
        };
        redact(&mut j);
        assert_eq!((j.cmdline.as_str(), j.main.as_str()), ("java", "app.jar"));
        let mut empty = pb::JvmSummary::default();
        redact(&mut empty);
        assert_eq!((empty.cmdline.as_str(), empty.main.as_str()), ("", ""));
    }

    #[test]
    fn the_hosts_settings_decide_as_the_kernel_does() {
        let host = |kptr_restrict, perf_event_paranoid| HostKallsyms {
            kptr_restrict,
            perf_event_paranoid,
        };
        // (kptr_restrict, perf_event_paranoid) → (everyone, CAP_SYSLOG holders)
        for ((k, p), want) in [
            ((0, -1), (true, true)),
            ((0, 1), (true, true)),
            ((0, 2), (false, true)),
            ((1, 0), (false, true)),
            ((1, 2), (false, true)),
            ((2, -1), (false, false)),
            ((i64::MAX, i64::MAX), (false, false)),
        ] {
            let h = host(k, p);
            assert_eq!(
                (h.shown_to_all(), h.shown_to_syslog_capable()),
                want,
                "kptr_restrict {k}, perf_event_paranoid {p}"
            );
        }
    }

    #[test]
    fn who_sees_real_addresses() {
        let root = Caller::Unix { uid: 0, pid: 1 };
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let tls = Caller::Tls {
            ip,
            certified: true,
        };
        assert!(root.may_read_kernel_addresses());
        assert!(!tls.may_read_kernel_addresses());
        assert!(!Caller::Unknown.may_read_kernel_addresses());
        // This very process, under a uid it does not run as: not the same user, so
        // it sees real addresses only where the host shows them to everyone.
        let me = std::process::id() as i32;
        assert_eq!(
            Caller::Unix {
                uid: 12345,
                pid: me
            }
            .may_read_kernel_addresses(),
            HostKallsyms::read().shown_to_all()
        );
        assert!(!tls.anonymous());
        assert!(Caller::Tls {
            ip,
            certified: false
        }
        .anonymous());
        assert!(!root.anonymous());
        let stext = 0xffff_ffff_8100_0000;
        let v = AddressView::for_caller(&tls, stext);
        assert_eq!(v.address(stext + 0x40), 0x40);
        assert_eq!(v.address(0), 0);
        assert_eq!(v.address(0xffff_ffff_c000_2000), 0x3f00_2000);
        let mut s = pb::Status {
            kernel: Some(pb::KernelStatus {
                text_start: stext,
                text_end: stext + 0x200,
                ..pb::KernelStatus::default()
            }),
            ..pb::Status::default()
        };
        v.status(&mut s);
        let k = s.kernel.unwrap();
        assert_eq!((k.text_start, k.text_end), (0, 0x200));
        assert_eq!(AddressView::for_caller(&root, stext).address(stext), stext);
    }
}
