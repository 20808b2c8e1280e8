//! Exact windows in the exporters: their counters in `/metrics`, and
//! `/debug/pprof/jvm?pid=P&seconds=N` on a JVM whose agent is dormant (or absent),
//! which opens a window only when `export.open_windows` is on — HTTP carries no
//! credentials, and a window instruments the JVM.
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::prometheus::Family;
use crate::windows::{
    AgentPresence, WindowCounters, WindowCounts, WindowError, WindowOrigin, WindowRequest, Windows,
};

/// One family's value of an origin's counts.
type Value = fn(&WindowCounts) -> f64;

/// The windows' families, by origin.
pub fn render(out: &mut String, counters: &WindowCounters, open: usize) {
    let families: [(&str, &str, Value); 5] = [
        (
            "jp_jvm_windows_opened_total",
            "Exact windows a JVM's agent accepted, by who asked: request (jpctl, gRPC, HTTP) or rotation.",
            |c| c.opened as f64,
        ),
        (
            "jp_jvm_windows_completed_total",
            "Exact windows whose tree jpd read and keeps.",
            |c| c.completed as f64,
        ),
        (
            "jp_jvm_windows_failed_total",
            "Exact windows tried that delivered nothing (attach, agent, time-out, a result file refused).",
            |c| c.failed as f64,
        ),
        (
            "jp_jvm_windows_refused_total",
            "Exact windows not tried: a limit (windows.max_open, max_seconds, one per JVM) or a JVM that cannot have one.",
            |c| c.refused as f64,
        ),
        (
            "jp_jvm_window_seconds_total",
            "Seconds the completed exact windows were open.",
            |c| c.open_ms as f64 / 1000.0,
        ),
    ];
    for (name, help, value) in families {
        let mut f = Family::header(out, name, "counter", help);
        for o in WindowOrigin::ALL {
            f.sample(name, &[("origin", o.label())], value(&counters.get(o)));
        }
    }
    let name = "jp_jvm_windows_open";
    Family::header(out, name, "gauge", "Exact windows open now, host-wide.").sample(
        name,
        &[],
        open as f64,
    );
}

/// The answer for `pid` when it is a HotSpot JVM whose agent is dormant or absent;
/// `None` for the live path (a JVM profiled from start, or no HotSpot JVM at all).
pub async fn jvm_pprof(
    windows: &Windows,
    pid: u32,
    seconds: u64,
    open_windows: bool,
) -> Option<Response> {
    let jvm = windows.jvm(pid).await.ok()?;
    match jvm.agent {
        AgentPresence::Live | AgentPresence::Unknown => return None,
        AgentPresence::None | AgentPresence::Dormant | AgentPresence::WindowOpen(_) => {}
    }
    if !open_windows {
        return Some(
            (
                StatusCode::FORBIDDEN,
                format!("JVM {pid} is not profiled from start: a window over HTTP needs export.open_windows = true in jpd's configuration (or use `jpctl jvm profile {pid}`)\n"),
            )
                .into_response(),
        );
    }
    let req = WindowRequest {
        pid,
        seconds: u32::try_from(seconds).unwrap_or(u32::MAX),
        include: Vec::new(),
        exclude: Vec::new(),
        bba: None,
        origin: WindowOrigin::Http,
        load_agent: true,
    };
    let w = match windows.profile(req).await {
        Ok(w) => w,
        Err(e) => {
            let code = match e {
                WindowError::Refused(_) => StatusCode::CONFLICT,
                WindowError::Failed(_) => StatusCode::BAD_GATEWAY,
            };
            return Some((code, format!("{e}\n")).into_response());
        }
    };
    Some(
        super::blocking::off_runtime(move || {
            let nanos = |t: SystemTime| {
                t.duration_since(UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            };
            let options = jp_mct::PprofOptions {
                cpu: None,
                time: Some(jp_mct::TimeRange {
                    time_nanos: nanos(w.opened),
                    duration_nanos: i64::try_from(w.duration().as_nanos()).unwrap_or(i64::MAX),
                }),
            };
            let mut out = Vec::new();
            let written = super::mct_pprof::write_pprof(&w.tree, options, &mut out).map(|()| out);
            super::gzipped_profile(written, &format!("jvm-{pid}-window-{}.pb.gz", w.id))
        })
        .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_family_by_origin() {
        let c = WindowCounters::default();
        c.opened(WindowOrigin::Request);
        c.completed(WindowOrigin::Request, Duration::from_millis(2500));
        c.refused(WindowOrigin::Rotation);
        c.failed(WindowOrigin::Rotation);
        c.opened(WindowOrigin::Http);
        let mut out = String::new();
        render(&mut out, &c, 1);
        for line in [
            "jp_jvm_windows_opened_total{origin=\"request\"} 1",
            "jp_jvm_windows_opened_total{origin=\"rotation\"} 0",
            "jp_jvm_windows_completed_total{origin=\"request\"} 1",
            "jp_jvm_windows_failed_total{origin=\"rotation\"} 1",
            "jp_jvm_windows_refused_total{origin=\"rotation\"} 1",
            "jp_jvm_windows_refused_total{origin=\"request\"} 0",
            "jp_jvm_windows_opened_total{origin=\"http\"} 1",
            "jp_jvm_windows_completed_total{origin=\"http\"} 0",
            "jp_jvm_window_seconds_total{origin=\"request\"} 2.5",
            "jp_jvm_windows_open 1",
            "# TYPE jp_jvm_windows_refused_total counter",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
    }
}
