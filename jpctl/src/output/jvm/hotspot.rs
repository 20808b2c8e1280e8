//! `jpctl jvm list --all`: every HotSpot JVM on the host with jp's agent's state in it,
//! one line each, or `--json`.

use std::fmt::Write as _;

use jp_proto::v1::{JvmAgentState, JvmList, JvmSummary};
use serde::Serialize;

use crate::output::text::printable;

#[derive(Serialize, Debug, PartialEq)]
pub struct HotspotListJson<'a> {
    pub jvms: Vec<HotspotJson<'a>>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct HotspotJson<'a> {
    pub pid: u32,
    pub ns_pid: Option<u32>,
    pub uid: Option<u32>,
    pub main: &'a str,
    pub jdk_version: &'a str,
    /// none, live, dormant, window_open, unknown; exited for a JVM jpd still keeps.
    pub agent: &'static str,
    /// The open window's id (window_open only).
    pub window_id: Option<u64>,
    pub attach_disabled: bool,
    /// jpd holds a live profile of it (`jpctl jvm tree PID`).
    pub profiled: bool,
}

/// The state's word in JSON.
fn agent_key(j: &JvmSummary) -> &'static str {
    match j.agent_state() {
        JvmAgentState::None => "none",
        JvmAgentState::Live => "live",
        JvmAgentState::Dormant => "dormant",
        JvmAgentState::WindowOpen => "window_open",
        JvmAgentState::Unknown => "unknown",
        JvmAgentState::Unspecified if j.exited_unix_ms != 0 => "exited",
        JvmAgentState::Unspecified => "unknown",
    }
}

/// The state as the table says it.
fn agent_text(j: &JvmSummary) -> String {
    let state = match j.agent_state() {
        JvmAgentState::None => "no agent".to_string(),
        JvmAgentState::Live => "profiled from start".to_string(),
        JvmAgentState::Dormant => "dormant".to_string(),
        JvmAgentState::WindowOpen => format!("window {} open", j.window_id),
        JvmAgentState::Unspecified if j.exited_unix_ms != 0 => "exited".to_string(),
        JvmAgentState::Unknown | JvmAgentState::Unspecified => "agent state unknown".to_string(),
    };
    if j.attach_disabled {
        format!("{state}, attach disabled")
    } else {
        state
    }
}

fn profiled(j: &JvmSummary) -> bool {
    j.attached_since_unix_ms != 0
}

pub fn hotspot_list_json(l: &JvmList) -> HotspotListJson<'_> {
    HotspotListJson {
        jvms: l
            .jvms
            .iter()
            .map(|j| HotspotJson {
                pid: j.pid,
                ns_pid: j.ns_pid,
                uid: j.uid,
                main: &j.main,
                jdk_version: &j.jdk_version,
                agent: agent_key(j),
                window_id: (j.agent_state() == JvmAgentState::WindowOpen).then_some(j.window_id),
                attach_disabled: j.attach_disabled,
                profiled: profiled(j),
            })
            .collect(),
    }
}

/// One line per JVM: pid, user, JDK, the agent's state, whether jpd holds its live
/// profile, main class.
pub fn hotspot_list_text(l: &JvmList) -> String {
    if l.jvms.is_empty() {
        return "no HotSpot JVMs on this host\n".to_string();
    }
    let jdk_width = l
        .jvms
        .iter()
        .map(|j| printable(&j.jdk_version).chars().count())
        .max()
        .unwrap_or(0)
        .max(7);
    let agent_width = l
        .jvms
        .iter()
        .map(|j| agent_text(j).chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7}  {:>6}  {:<jdk_width$}  {:<agent_width$}  {:<8}  main",
        "pid", "uid", "jdk", "agent", "profile"
    );
    for j in &l.jvms {
        let main = match (j.main.as_str(), j.ns_pid) {
            ("", Some(n)) => format!("? [pid {n} in its namespace]"),
            ("", None) => "?".to_string(),
            (m, Some(n)) => format!("{} [pid {n} in its namespace]", printable(m)),
            (m, None) => printable(m).into_owned(),
        };
        let _ = writeln!(
            out,
            "{:>7}  {:>6}  {:<jdk_width$}  {:<agent_width$}  {:<8}  {main}",
            j.pid,
            j.uid.map_or_else(|| "?".to_string(), |u| u.to_string()),
            if j.jdk_version.is_empty() {
                "?".into()
            } else {
                printable(&j.jdk_version)
            },
            agent_text(j),
            if profiled(j) { "live" } else { "-" },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_jvm(pid: u32, state: JvmAgentState) -> JvmSummary {
        JvmSummary {
            pid,
            uid: Some(1000),
            main: "app.Main".into(),
            jdk_version: "17.0.15".into(),
            agent_state: state as i32,
            complete: true,
            ..Default::default()
        }
    }

    fn sample() -> JvmList {
        let mut window = host_jvm(12, JvmAgentState::WindowOpen);
        window.window_id = 42;
        window.ns_pid = Some(1);
        window.uid = Some(65534);
        let mut live = host_jvm(13, JvmAgentState::Live);
        live.attached_since_unix_ms = 1_000;
        live.jdk_version = "25+36-LTS".into();
        let mut disabled = host_jvm(14, JvmAgentState::None);
        disabled.attach_disabled = true;
        disabled.main = "evil\u{1b}[2J".into();
        let gone = JvmSummary {
            pid: 15,
            main: "Old".into(),
            exited_unix_ms: 5,
            attached_since_unix_ms: 1,
            ..Default::default()
        };
        JvmList {
            jvms: vec![
                host_jvm(11, JvmAgentState::Dormant),
                window,
                live,
                disabled,
                gone,
            ],
        }
    }

    #[test]
    fn every_state_in_one_table() {
        assert_eq!(
            hotspot_list_text(&sample()),
            concat!(
                "    pid     uid  jdk        agent                      profile   main\n",
                "     11    1000  17.0.15    dormant                    -         app.Main\n",
                "     12   65534  17.0.15    window 42 open             -         app.Main [pid 1 in its namespace]\n",
                "     13    1000  25+36-LTS  profiled from start        live      app.Main\n",
                "     14    1000  17.0.15    no agent, attach disabled  -         evil\\x1b[2J\n",
                "     15       ?  ?          exited                     live      Old\n",
            )
        );
        assert_eq!(
            hotspot_list_text(&JvmList::default()),
            "no HotSpot JVMs on this host\n"
        );
    }

    #[test]
    fn json_names_each_state() {
        let l = sample();
        let j = hotspot_list_json(&l);
        let states: Vec<(u32, &str, Option<u64>, bool, bool)> = j
            .jvms
            .iter()
            .map(|j| (j.pid, j.agent, j.window_id, j.attach_disabled, j.profiled))
            .collect();
        assert_eq!(
            states,
            [
                (11, "dormant", None, false, false),
                (12, "window_open", Some(42), false, false),
                (13, "live", None, false, true),
                (14, "none", None, true, false),
                (15, "exited", None, false, true),
            ]
        );
    }
}
