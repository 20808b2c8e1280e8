//! Every way reaching a JVM can fail, each said in one line a user understands.
use std::io;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("process {pid} is not a HotSpot JVM (it maps no libjvm.so)")]
    NotHotspot { pid: u32 },
    #[error("process {pid} has exited")]
    Vanished { pid: u32 },
    #[error("JVM {pid} runs Java {version}: jp's agent needs Java 17 or later")]
    TooOld { pid: u32, version: String },
    #[error(
        "JVM {pid} was started with -XX:+DisableAttachMechanism ({origin}): nothing can attach \
         to it; restart it without that option"
    )]
    AttachDisabled { pid: u32, origin: String },
    #[error("JVM {pid} has no /tmp reachable from jpd ({detail})")]
    NoTmp { pid: u32, detail: String },
    #[error("no room to {what} for JVM {pid}: its file system is full")]
    NoRoom { pid: u32, what: String },
    #[error("JVM {pid} did not {what} within {:.1} s", after.as_secs_f64())]
    TimedOut {
        pid: u32,
        what: &'static str,
        after: Duration,
    },
    #[error("not permitted to {what} for JVM {pid}: jpd must run as root")]
    Permission { pid: u32, what: String },
    #[error(
        "JVM {pid} runs jp's agent from {path}, which was replaced on disk since: restart the \
         JVM to load the new one"
    )]
    AgentReplaced { pid: u32, path: String },
    #[error("{path} (for JVM {pid}) is {why}: jpd will not use it")]
    Unsafe {
        pid: u32,
        path: String,
        why: &'static str,
    },
    #[error("JVM {pid} refused {command:?}: {reply}")]
    Refused {
        pid: u32,
        command: String,
        reply: String,
    },
    #[error("JVM {pid} answered {command:?} with something jpd cannot read: {reply:?}")]
    Protocol {
        pid: u32,
        command: String,
        reply: String,
    },
    #[error("attach request to JVM {pid} is too long: {detail}")]
    TooLong { pid: u32, detail: String },
    #[error("cannot {what} for JVM {pid}: {source}")]
    Io {
        pid: u32,
        what: String,
        source: io::Error,
    },
}

impl AttachError {
    /// An I/O error while doing `what` for `pid`, sorted into what the user can act on:
    /// the process went away, jpd lacks a privilege, a file system is full.
    pub fn io(pid: u32, what: impl Into<String>, source: io::Error) -> AttachError {
        let what = what.into();
        match source.raw_os_error() {
            Some(libc::ESRCH) => AttachError::Vanished { pid },
            Some(libc::ENOENT) if !process_exists(pid) => AttachError::Vanished { pid },
            Some(libc::EPERM) | Some(libc::EACCES) => AttachError::Permission { pid, what },
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => AttachError::NoRoom { pid, what },
            _ => AttachError::Io { pid, what, source },
        }
    }
}

/// Whether `/proc/PID` is there (a zombie still is, until reaped).
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_is_one_line() {
        let errors = [
            AttachError::NotHotspot { pid: 1 },
            AttachError::TooOld {
                pid: 1,
                version: "11.0.2".into(),
            },
            AttachError::AttachDisabled {
                pid: 1,
                origin: "JAVA_TOOL_OPTIONS".into(),
            },
            AttachError::TimedOut {
                pid: 1,
                what: "start its attach listener",
                after: Duration::from_millis(5000),
            },
            AttachError::io(
                u32::MAX - 1,
                "create the trigger file",
                io::Error::from_raw_os_error(libc::ENOENT),
            ),
            AttachError::io(
                1,
                "create /tmp/x",
                io::Error::from_raw_os_error(libc::ENOSPC),
            ),
        ];
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "process 1 is not a HotSpot JVM (it maps no libjvm.so)",
                "JVM 1 runs Java 11.0.2: jp's agent needs Java 17 or later",
                "JVM 1 was started with -XX:+DisableAttachMechanism (JAVA_TOOL_OPTIONS): nothing \
                 can attach to it; restart it without that option",
                "JVM 1 did not start its attach listener within 5.0 s",
                "process 4294967294 has exited",
                "no room to create /tmp/x for JVM 1: its file system is full",
            ]
        );
    }
}
