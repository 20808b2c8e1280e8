//! The resources of jp's OTLP profiles: one for the kernel, one per JVM, with
//! OpenTelemetry's semantic-convention attributes. A pid is an attribute of the JVM's
//! resource (it tells two runs apart), never part of `service.name`, which stays the
//! sanitized main class so that a service keeps its name across restarts.

use std::collections::BTreeMap;

use jp_mct::otlp::proto::common::v1::KeyValue;
use jp_mct::otlp::{int_attribute, string_attribute};

use crate::export::pyroscope::collect::{service_name, KERNEL_SERVICE};
use crate::store::jvm::JvmSummary;

/// `process.runtime.name` of every JVM (the agent reports the VM's version, not the
/// runtime's vendor name).
pub const JVM_RUNTIME: &str = "java";

/// What a JVM's resource says of it: from the store's summary, or from a kept window
/// (which knows no JDK version: the attribute is then left out).
#[derive(Clone, Copy, Debug)]
pub struct JvmIdentity<'a> {
    pub pid: u32,
    pub main: &'a str,
    /// Empty when unknown.
    pub jdk_version: &'a str,
}

impl<'a> From<&'a JvmSummary> for JvmIdentity<'a> {
    fn from(s: &'a JvmSummary) -> Self {
        JvmIdentity {
            pid: s.pid,
            main: &s.main,
            jdk_version: &s.jdk_version,
        }
    }
}

/// A JVM's resource: `service.name` (the main class, sanitized), `process.pid`,
/// `process.runtime.name`/`version`, `host.name`, then the operator's `extra`.
pub fn jvm_resource(
    jvm: JvmIdentity<'_>,
    host: &str,
    extra: &BTreeMap<String, String>,
) -> Vec<KeyValue> {
    let mut attributes = vec![
        string_attribute("service.name", &service_name(jvm.main)),
        int_attribute("process.pid", i64::from(jvm.pid)),
        string_attribute("process.runtime.name", JVM_RUNTIME),
    ];
    if !jvm.jdk_version.is_empty() {
        attributes.push(string_attribute("process.runtime.version", jvm.jdk_version));
    }
    attributes.push(string_attribute("host.name", host));
    with_extra(attributes, extra)
}

/// The kernel's resource: `service.name` `jp-kernel`, `host.name`, `os.type`, then the
/// operator's `extra`.
pub fn kernel_resource(host: &str, extra: &BTreeMap<String, String>) -> Vec<KeyValue> {
    let attributes = vec![
        string_attribute("service.name", KERNEL_SERVICE),
        string_attribute("host.name", host),
        string_attribute("os.type", "linux"),
    ];
    with_extra(attributes, extra)
}

/// The operator's attributes after jp's; a key jp sets keeps jp's value (config
/// validation refuses those keys, so this only guards).
fn with_extra(mut attributes: Vec<KeyValue>, extra: &BTreeMap<String, String>) -> Vec<KeyValue> {
    for (k, v) in extra {
        if !attributes.iter().any(|a| &a.key == k) {
            attributes.push(string_attribute(k, v));
        }
    }
    attributes
}
