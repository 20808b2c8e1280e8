//! `ListJvms` with `all`: every HotSpot JVM on the host, with or without jp's agent,
//! each with the agent's state, beside the JVMs the store holds profiles of.
use jp_proto::v1 as pb;

use crate::windows::hotspot::{AgentPresence, HotspotJvm};

/// The store's JVMs (`held`, as `ListJvms` answers them) merged with the host's
/// HotSpot JVMs: a running JVM the store profiles keeps its summary and gains its
/// state; a JVM without a profile is its pid, main class, Java version and state; an
/// exited JVM the store still keeps stays as it is. Sorted by pid.
pub fn list_all(held: pb::JvmList, hotspot: &[HotspotJvm]) -> pb::JvmList {
    let mut jvms = held.jvms;
    for h in hotspot {
        let running = jvms
            .iter_mut()
            .find(|j| j.pid == h.pid && j.exited_unix_ms == 0);
        match running {
            Some(j) => with_state(j, h),
            None => {
                let mut j = pb::JvmSummary {
                    pid: h.pid,
                    ns_pid: (h.nspid != h.pid).then_some(h.nspid),
                    main: h.main_class.clone(),
                    jdk_version: h.java_version.clone().unwrap_or_default(),
                    // Nothing reported, so nothing missing.
                    complete: true,
                    ..pb::JvmSummary::default()
                };
                with_state(&mut j, h);
                jvms.push(j);
            }
        }
    }
    jvms.sort_by_key(|j| (j.pid, j.exited_unix_ms == 0));
    pb::JvmList { jvms }
}

fn with_state(j: &mut pb::JvmSummary, h: &HotspotJvm) {
    // Only a live agent tells the store its main class and JDK (its HELLO); for a dormant
    // one the store knows just the command line, and the host's listing knows better.
    if h.agent != AgentPresence::Live {
        j.main = h.main_class.clone();
        if let Some(v) = &h.java_version {
            j.jdk_version = v.clone();
        }
    }
    let (state, window) = match h.agent {
        AgentPresence::None => (pb::JvmAgentState::None, 0),
        AgentPresence::Live => (pb::JvmAgentState::Live, 0),
        AgentPresence::Dormant => (pb::JvmAgentState::Dormant, 0),
        AgentPresence::WindowOpen(id) => (pb::JvmAgentState::WindowOpen, id),
        AgentPresence::Unknown => (pb::JvmAgentState::Unknown, 0),
    };
    j.agent_state = state as i32;
    j.window_id = window;
    j.uid = Some(h.uid);
    j.attach_disabled = h.attach_disabled;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hotspot(pid: u32, agent: AgentPresence) -> HotspotJvm {
        HotspotJvm {
            pid,
            start_time: 1,
            uid: 1000,
            gid: 1000,
            nspid: if pid == 30 { 1 } else { pid },
            main_class: format!("Main{pid}"),
            java_version: Some("17.0.15".into()),
            agent,
            agent_path: None,
            attach_disabled: pid == 40,
        }
    }

    /// pid, main, ns_pid, agent_state, window_id, uid, attach_disabled, calls.
    type Row<'a> = (u32, &'a str, Option<u32>, i32, u64, Option<u32>, bool, u64);

    #[test]
    fn the_store_s_jvms_gain_their_state_and_the_others_join_them() {
        let held = pb::JvmList {
            jvms: vec![
                pb::JvmSummary {
                    pid: 20,
                    main: "Profiled".into(),
                    calls: 7,
                    ..Default::default()
                },
                pb::JvmSummary {
                    pid: 30,
                    main: "Gone".into(),
                    exited_unix_ms: 5,
                    ..Default::default()
                },
            ],
        };
        let host = [
            hotspot(40, AgentPresence::None),
            hotspot(20, AgentPresence::Live),
            hotspot(30, AgentPresence::WindowOpen(9)),
        ];
        let all = list_all(held, &host);
        let rows: Vec<Row<'_>> = all
            .jvms
            .iter()
            .map(|j| {
                (
                    j.pid,
                    j.main.as_str(),
                    j.ns_pid,
                    j.agent_state,
                    j.window_id,
                    j.uid,
                    j.attach_disabled,
                    j.calls,
                )
            })
            .collect();
        use pb::JvmAgentState as S;
        assert_eq!(
            rows,
            [
                (
                    20,
                    "Profiled",
                    None,
                    S::Live as i32,
                    0,
                    Some(1000),
                    false,
                    7
                ),
                (30, "Gone", None, S::Unspecified as i32, 0, None, false, 0),
                (
                    30,
                    "Main30",
                    Some(1),
                    S::WindowOpen as i32,
                    9,
                    Some(1000),
                    false,
                    0
                ),
                (40, "Main40", None, S::None as i32, 0, Some(1000), true, 0),
            ]
        );
    }
}
