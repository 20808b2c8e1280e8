//! A JVM's summary as every JVM view shows it: its JSON object, its name and state, and
//! the split of its CPU by kind of thread.

use jp_proto::v1::JvmSummary;
use serde::Serialize;

use crate::output::text::printable;

// --- JSON shapes (stable: scripts and tests rely on them) -------------------------

#[derive(Serialize, Debug, PartialEq)]
pub struct ThreadsJson {
    pub live: u32,
    pub total: u32,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct JvmJson<'a> {
    pub pid: u32,
    pub ns_pid: Option<u32>,
    pub main: &'a str,
    pub jdk_version: &'a str,
    pub bba: &'a str,
    pub threads: ThreadsJson,
    pub calls: u64,
    pub bytecodes: u64,
    pub nodes: u64,
    pub attached_since_unix_ms: u64,
    /// null while the JVM runs.
    pub exited_unix_ms: Option<u64>,
    pub complete: bool,
    /// null when complete.
    pub incomplete_reason: Option<&'a str>,
    pub records_lost: u64,
    pub records_malformed: u64,
    /// This JVM's own records the eBPF program refused: over its process's rate
    /// (`[usdt] records_per_second_per_process`), and lost to a full ring.
    pub records_rate_limited: u64,
    pub records_ring_full: u64,
    /// CPU from jpd's kernel sampler by kind of thread; absent when not joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuJson<'a>>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct CpuJson<'a> {
    pub total_ns: u64,
    pub kinds: Vec<CpuKindJson<'a>>,
    /// Of the app kind: under contexts not received yet, never received, unreadable slot.
    pub pending_ns: u64,
    pub unresolved_ns: u64,
    pub read_failed_ns: u64,
    /// Of the app kind: under the contexts received, what the views show per context.
    pub contexts_ns: u64,
    /// Live threads that publish their current context.
    pub publishing_threads: u32,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct CpuKindJson<'a> {
    pub kind: &'a str,
    pub user_ns: u64,
    pub kernel_ns: u64,
}

pub fn jvm_json(j: &JvmSummary) -> JvmJson<'_> {
    JvmJson {
        pid: j.pid,
        ns_pid: j.ns_pid,
        main: &j.main,
        jdk_version: &j.jdk_version,
        bba: &j.bba,
        threads: ThreadsJson {
            live: j.threads_live,
            total: j.threads_total,
        },
        calls: j.calls,
        bytecodes: j.bytecodes,
        nodes: j.nodes,
        attached_since_unix_ms: j.attached_since_unix_ms,
        exited_unix_ms: (j.exited_unix_ms != 0).then_some(j.exited_unix_ms),
        complete: j.complete,
        incomplete_reason: (!j.complete).then_some(j.incomplete_reason.as_str()),
        records_lost: j.records_lost,
        records_malformed: j.records_malformed,
        records_rate_limited: j.ring_rate_limited,
        records_ring_full: j.ring_full,
        cpu: (!j.cpu.is_empty()).then(|| CpuJson {
            total_ns: cpu_total(j),
            kinds: j
                .cpu
                .iter()
                .map(|k| CpuKindJson {
                    kind: &k.kind,
                    user_ns: k.user_ns,
                    kernel_ns: k.kernel_ns,
                })
                .collect(),
            pending_ns: j.cpu_pending_ns,
            unresolved_ns: j.cpu_unresolved_ns,
            read_failed_ns: j.cpu_read_failed_ns,
            contexts_ns: j.cpu_contexts_ns,
            publishing_threads: j.publishing_threads,
        }),
    }
}

pub(crate) fn cpu_total(j: &JvmSummary) -> u64 {
    j.cpu.iter().map(|k| k.user_ns + k.kernel_ns).sum()
}

/// `cpu 9.01 s: app 96.8 % (on contexts 96.5 %), gc 0.4 %, jit 2.7 %` (kinds with CPU),
/// or None when the kernel sampler is not joined to the JVM. The app's part on contexts
/// is what the per-context columns add up to; when it is none, the line says why if it
/// can: no live thread publishes its context (the agent's `publish=false`, or no report
/// yet).
pub fn cpu_split(j: &JvmSummary) -> Option<String> {
    let total = cpu_total(j);
    if j.cpu.is_empty() {
        return None;
    }
    let pct = |ns: u64| 100.0 * ns as f64 / total.max(1) as f64;
    let parts: Vec<String> = j
        .cpu
        .iter()
        .filter(|k| k.user_ns + k.kernel_ns > 0)
        .map(|k| {
            let share = format!("{} {:.1} %", k.kind, pct(k.user_ns + k.kernel_ns));
            if k.kind != "app" {
                share
            } else if j.cpu_contexts_ns == 0 && j.publishing_threads == 0 && j.threads_live > 0 {
                format!("{share} (none on contexts: no thread publishes its context)")
            } else {
                format!("{share} (on contexts {:.1} %)", pct(j.cpu_contexts_ns))
            }
        })
        .collect();
    Some(format!(
        "cpu {:.2} s: {}",
        total as f64 / 1e9,
        if parts.is_empty() {
            "none sampled yet".to_string()
        } else {
            parts.join(", ")
        }
    ))
}

/// True when jpd's kernel sampler is joined to the JVM: its CPU fields mean something.
pub(crate) fn joined(j: Option<&JvmSummary>) -> bool {
    j.is_some_and(|j| !j.cpu.is_empty())
}

/// "Main (pid 123)" or "pid 123" when the main class is not known yet.
pub(crate) fn jvm_name(j: &JvmSummary) -> String {
    let ns = match j.ns_pid {
        Some(n) => format!(", pid {n} in its namespace"),
        None => String::new(),
    };
    if j.main.is_empty() {
        format!("pid {}{ns}", j.pid)
    } else {
        format!("pid {} {}{ns}", j.pid, printable(&j.main))
    }
}

/// What went missing, for a JVM whose profile is not complete; empty when complete.
pub(crate) fn incomplete(j: &JvmSummary) -> String {
    if j.complete {
        return String::new();
    }
    let reason = if j.incomplete_reason.is_empty() {
        "reason unknown".into()
    } else {
        printable(&j.incomplete_reason)
    };
    let own = if j.ring_rate_limited + j.ring_full > 0 {
        format!(
            "; of its own records {} were over its rate, {} lost to a full ring",
            j.ring_rate_limited, j.ring_full
        )
    } else {
        String::new()
    };
    format!(
        "incomplete: {reason} ({} records lost, {} malformed{own})",
        j.records_lost, j.records_malformed
    )
}

/// JVM summaries the views' tests share.
#[cfg(test)]
pub(crate) mod fixtures {
    use jp_proto::v1::JvmSummary;

    pub fn jvm(pid: u32, jdk: &str) -> JvmSummary {
        JvmSummary {
            pid,
            main: "Loop".into(),
            jdk_version: jdk.into(),
            bba: "precise".into(),
            threads_live: 1,
            threads_total: 1,
            calls: 10,
            bytecodes: 100,
            nodes: 3,
            attached_since_unix_ms: 1_000,
            complete: true,
            ..Default::default()
        }
    }

    pub fn joined_jvm() -> JvmSummary {
        let kind = |kind: &str, user_ns, kernel_ns| jp_proto::v1::JvmCpuKind {
            kind: kind.into(),
            user_ns,
            kernel_ns,
        };
        JvmSummary {
            cpu: vec![kind("app", 12_000_000, 300_000), kind("gc", 700_000, 0)],
            cpu_contexts_ns: 12_000_000,
            publishing_threads: 1,
            ..jvm(1, "17")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::joined_jvm;
    use super::*;

    #[test]
    fn the_cpu_split_says_when_no_thread_publishes_its_context() {
        let publishing = cpu_split(&joined_jvm());
        assert_eq!(
            publishing.as_deref(),
            Some("cpu 0.01 s: app 94.6 % (on contexts 92.3 %), gc 5.4 %")
        );
        let silent = JvmSummary {
            cpu_contexts_ns: 0,
            publishing_threads: 0,
            threads_live: 2,
            ..joined_jvm()
        };
        assert_eq!(
            cpu_split(&silent).as_deref(),
            Some("cpu 0.01 s: app 94.6 % (none on contexts: no thread publishes its context), gc 5.4 %")
        );
        // Its threads ended: the CPU they had on contexts is still shown as such.
        let ended = JvmSummary {
            publishing_threads: 0,
            threads_live: 0,
            ..joined_jvm()
        };
        assert_eq!(cpu_split(&ended), publishing);
    }
}
