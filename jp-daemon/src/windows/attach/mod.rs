//! HotSpot dynamic attach, done as jattach does it (the protocol `jcmd` speaks), from
//! jpd as root to a JVM of any user in any namespace: [`load_agent`] loads jp's agent
//! with a command for its `Agent_OnAttach`, [`execute`] runs any attach command
//! (`properties`, `jcmd VM.version`, ...); [`stage_library`] and [`window_dir`] put the
//! agent library and a window's result directory where the JVM sees them. Every call
//! blocks (jpd makes them from its blocking pool); every failure is an [`AttachError`]
//! that says in one line what happened.
pub mod error;
mod files;
mod listener;
pub mod process;
pub mod protocol;

use std::time::Duration;

pub use error::AttachError;
pub use files::{stage_library, window_dir, WindowDir};

use crate::windows::hotspot::{self, HotspotJvm};

/// The oldest Java jp's agent runs on.
pub const MIN_JAVA: u32 = 17;

/// Runs `command` with up to three `args` in `jvm` and returns its output, once the JVM
/// answered with status 0.
pub fn execute(
    jvm: &HotspotJvm,
    command: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<String, AttachError> {
    refuse_if_disabled(jvm)?;
    let reply = send(jvm, command, args, timeout)?;
    if reply.status != 0 {
        return Err(AttachError::Refused {
            pid: jvm.pid,
            command: command.to_string(),
            reply: protocol::one_line(&reply.output),
        });
    }
    Ok(reply.output)
}

/// Loads the agent library `lib_in_ns` (a path as the JVM sees it, see
/// [`stage_library`]) into `jvm` with `command` as its options, and returns
/// `Agent_OnAttach`'s return code. HotSpot calls `Agent_OnAttach` on every load; a
/// library it loaded before is not loaded again.
pub fn load_agent(
    jvm: &HotspotJvm,
    lib_in_ns: &str,
    command: &str,
    timeout: Duration,
) -> Result<i32, AttachError> {
    refuse_if_disabled(jvm)?;
    refuse_if_too_old(jvm, timeout)?;
    let reply = send(jvm, "load", &[lib_in_ns, "true", command], timeout)?;
    let described = || format!("load {lib_in_ns}={command}");
    if reply.status != 0 {
        return Err(AttachError::Refused {
            pid: jvm.pid,
            command: described(),
            reply: protocol::one_line(&reply.output),
        });
    }
    protocol::load_return_code(&reply.output).ok_or_else(|| AttachError::Protocol {
        pid: jvm.pid,
        command: described(),
        reply: protocol::one_line(&reply.output),
    })
}

/// A JVM started with `-XX:+DisableAttachMechanism` gets nothing, no SIGQUIT above all:
/// without a listener to start, it would print a thread dump into its output.
fn refuse_if_disabled(jvm: &HotspotJvm) -> Result<(), AttachError> {
    if !jvm.attach_disabled {
        return Ok(());
    }
    Err(AttachError::AttachDisabled {
        pid: jvm.pid,
        origin: hotspot::attach_disabled_by(jvm.pid).unwrap_or_else(|| "its options".into()),
    })
}

/// The agent needs Java 17: known from the JDK's `release` file, else asked of the JVM
/// (`java.vm.specification.version`, which every HotSpot answers through `properties`).
fn refuse_if_too_old(jvm: &HotspotJvm, timeout: Duration) -> Result<(), AttachError> {
    let version = match &jvm.java_version {
        Some(v) => v.clone(),
        None => {
            let props = execute(jvm, "properties", &[], timeout)?;
            process::property(&props, "java.vm.specification.version").ok_or_else(|| {
                AttachError::Protocol {
                    pid: jvm.pid,
                    command: "properties".into(),
                    reply: "no java.vm.specification.version".into(),
                }
            })?
        }
    };
    match process::feature_version(&version) {
        Some(feature) if feature < MIN_JAVA => Err(AttachError::TooOld {
            pid: jvm.pid,
            version,
        }),
        _ => Ok(()),
    }
}

fn send(
    jvm: &HotspotJvm,
    command: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<protocol::Reply, AttachError> {
    let request = protocol::request(command, args).map_err(|e| AttachError::TooLong {
        pid: jvm.pid,
        detail: e.to_string(),
    })?;
    let bytes = listener::exchange(jvm, &request, timeout)?;
    if bytes.is_empty() {
        // HotSpot closes a connection from a peer it does not accept without a word.
        return Err(AttachError::Refused {
            pid: jvm.pid,
            command: command.to_string(),
            reply: "it closed the connection without an answer (a caller it does not accept)"
                .into(),
        });
    }
    protocol::parse_reply(&bytes).ok_or_else(|| AttachError::Protocol {
        pid: jvm.pid,
        command: command.to_string(),
        reply: protocol::one_line(&String::from_utf8_lossy(&bytes)),
    })
}
