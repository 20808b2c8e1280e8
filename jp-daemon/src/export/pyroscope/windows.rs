//! Each completed exact window, pushed once as a profile of its own: `__name__` is
//! `jvm_mct` (the trees' sample types), `service_name` the JVM's main class, and two
//! labels say what the window was — `window_scope` (its include/exclude patterns, or
//! `all` for the agent's default, all application classes) and `window_seconds` (its length) — so that windows are
//! never summed with each other's scope, nor read as a JVM's whole life. The window's
//! id is no label: it would make a new series for every window.
use jp_mct::{PprofOptions, TimeRange};

use super::collect::{nanos, series_with, service_name, unix_nanos, Baselines, Labeling};
use super::wire::RawProfileSeries;
use crate::export::label::label_value;
use crate::export::{mct_pprof, ExportState};
use crate::store::read::ReadWindows;

pub const WINDOW_SCOPE_LABEL: &str = "window_scope";
pub const WINDOW_SECONDS_LABEL: &str = "window_seconds";
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
    for w in new {
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
            continue;
        }
        let scope = if w.scope == DEFAULT_SCOPE {
            "all".to_string()
        } else {
            label_value(&w.scope)
        };
        let seconds = w.seconds.to_string();
        let extra = [
            (WINDOW_SCOPE_LABEL, scope.as_str()),
            (WINDOW_SECONDS_LABEL, seconds.as_str()),
        ];
        out.push(series_with(
            super::collect::JVM_PROFILE_NAME,
            &service_name(&w.main_class),
            l,
            &extra,
            profile,
        ));
    }
}
