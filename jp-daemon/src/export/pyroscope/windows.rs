//! Each completed exact window, pushed once as a profile of its own: `__name__` is
//! `jvm_mct` (the trees' sample types), `service_name` the JVM's main class, and three
//! labels say what the window was — `window_scope` (its include/exclude patterns, or
//! `all` for the agent's default, all application classes), `window_seconds` (its
//! length) and `window_origin` (who asked: `request`, `rotation` or `http`) — so that
//! windows are never summed with each other's scope, nor read as a JVM's whole life,
//! and the rotation's sampled windows stay apart from the ones someone asked for. The
//! window's id is no label: it would make a new series for every window.
use jp_mct::{PprofOptions, TimeRange};

use super::collect::{nanos, series_with, service_name, unix_nanos, Baselines, Labeling};
use super::wire::RawProfileSeries;
use crate::export::label::label_value;
use crate::export::{mct_pprof, ExportState};
use crate::store::read::ReadWindows;
use crate::store::windows::WindowProfile;

pub const WINDOW_SCOPE_LABEL: &str = "window_scope";
pub const WINDOW_SECONDS_LABEL: &str = "window_seconds";
pub const WINDOW_ORIGIN_LABEL: &str = "window_origin";
/// The agent's name of its default scope; labelled `all`.
const DEFAULT_SCOPE: &str = "all application classes";

/// The windows stored since the last push, each a series.
pub fn collect(
    b: &mut Baselines,
    sources: &ExportState,
    l: &Labeling,
    out: &mut Vec<RawProfileSeries>,
) {
    let (new, seen) = sources.stores.windows.windows_since(b.windows_seen);
    b.windows_seen = seen;
    out.extend(new.iter().filter_map(|w| window_series(w, l)));
}

/// One window's series; `None` (logged) when its tree cannot be encoded.
fn window_series(w: &WindowProfile, l: &Labeling) -> Option<RawProfileSeries> {
    let options = PprofOptions {
        cpu: None,
        time: Some(TimeRange {
            time_nanos: unix_nanos(w.opened),
            duration_nanos: nanos(w.duration()),
        }),
    };
    let mut profile = Vec::new();
    if let Err(e) = mct_pprof::write_pprof(&w.tree, options, &mut profile) {
        log::warn!(
            "pyroscope: cannot encode window {} of JVM {}: {e}",
            w.id,
            w.pid
        );
        return None;
    }
    let scope = if w.scope == DEFAULT_SCOPE {
        "all".to_string()
    } else {
        label_value(&w.scope)
    };
    let seconds = w.seconds.to_string();
    let origin = label_value(w.origin.label());
    let extra = [
        (WINDOW_SCOPE_LABEL, scope.as_str()),
        (WINDOW_SECONDS_LABEL, seconds.as_str()),
        (WINDOW_ORIGIN_LABEL, origin.as_str()),
    ];
    Some(series_with(
        super::collect::JVM_PROFILE_NAME,
        &service_name(&w.main_class),
        l,
        &extra,
        profile,
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::store::windows::WindowOrigin;

    fn window(origin: WindowOrigin, scope: &str) -> WindowProfile {
        WindowProfile {
            id: 5,
            pid: 42,
            start_time: 1,
            main_class: "Paper".into(),
            scope: scope.into(),
            seconds: 10,
            origin,
            jdk_version: "17.0.15".into(),
            opened: UNIX_EPOCH + Duration::from_secs(100),
            closed: UNIX_EPOCH + Duration::from_secs(110),
            tree: jp_mct::Mct::new("default"),
            meta: BTreeMap::new(),
        }
    }

    fn labels(w: &WindowProfile) -> BTreeMap<String, String> {
        let l = Labeling {
            host: "h".into(),
            labels: BTreeMap::from([("team".into(), "a".into())]),
            kernel: false,
            jvms: true,
        };
        window_series(w, &l)
            .expect("a series")
            .labels
            .into_iter()
            .map(|p| (p.name, p.value))
            .collect()
    }

    /// A window's series says its scope, length and origin beside the usual labels.
    #[test]
    fn a_windows_series_names_its_scope_length_and_origin() {
        let got = labels(&window(WindowOrigin::Rotation, DEFAULT_SCOPE));
        let want: BTreeMap<String, String> = [
            ("__delta__", "false"),
            ("__name__", super::super::collect::JVM_PROFILE_NAME),
            ("host", "h"),
            ("service_name", "Paper"),
            ("team", "a"),
            ("window_origin", "rotation"),
            ("window_scope", "all"),
            ("window_seconds", "10"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
        for (origin, label) in [
            (WindowOrigin::Request, "request"),
            (WindowOrigin::Http, "http"),
        ] {
            let got = labels(&window(origin, "include=a.b.*"));
            assert_eq!(got["window_origin"], label);
            // Not a safe label value: sanitized and capped as every other.
            assert_eq!(got["window_scope"], label_value("include=a.b.*"));
        }
    }
}
