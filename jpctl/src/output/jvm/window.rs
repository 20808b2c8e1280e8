//! `jpctl jvm profile|windows`: a window's header line, and the windows jpd keeps.

use std::fmt::Write as _;

use jp_proto::v1::{JvmWindow, JvmWindowList, JvmWindowOrigin};
use serde::Serialize;

use crate::output::text::printable;

/// What every window's tree says of its contexts with 0 calls.
pub const SEEDED_NOTE: &str = "contexts with 0 calls were running when the window opened: their own calls and bytecodes are not counted";

/// Who asked for the window: `request` (jpctl, gRPC), `rotation` (jpd's fleet
/// rotation), `http` (`/debug/pprof/jvm`); `?` from a jpd that does not say.
pub fn origin(w: &JvmWindow) -> &'static str {
    match w.origin() {
        JvmWindowOrigin::Request => "request",
        JvmWindowOrigin::Rotation => "rotation",
        JvmWindowOrigin::Http => "http",
        JvmWindowOrigin::Unspecified => "?",
    }
}

/// The line above a window's tree: which window, who asked for it, its scope and
/// length, and how to read its seeded contexts.
pub fn header(w: &JvmWindow) -> String {
    format!(
        "# window {} of JVM {} ({}), origin {}, scope {}, {} s, closed by {}: {SEEDED_NOTE}\n",
        w.id,
        w.pid,
        printable(&w.main),
        origin(w),
        printable(&w.scope),
        w.seconds,
        if w.closed_by.is_empty() {
            "?".into()
        } else {
            printable(&w.closed_by)
        },
    )
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// `jpctl jvm windows`: one line per window, by pid, oldest first.
pub fn list_text(l: &JvmWindowList) -> String {
    if l.windows.is_empty() {
        return "no windows: jpd keeps none (open one with `jpctl jvm profile PID --seconds N`)\n"
            .to_string();
    }
    let mut s = format!(
        "{:>7}  {:>16}  {:<8}  {:<20}  {:>7}  {:<19}  {:<9}  {:>8}  {:>12}  {:>14}  SCOPE\n",
        "PID",
        "WINDOW",
        "ORIGIN",
        "MAIN",
        "SECONDS",
        "OPENED (UTC)",
        "CLOSED BY",
        "CONTEXTS",
        "CALLS",
        "BYTECODES"
    );
    for w in &l.windows {
        let _ = writeln!(
            s,
            "{:>7}  {:>16}  {:<8}  {:<20}  {:>7}  {:<19}  {:<9}  {:>8}  {:>12}  {:>14}  {}",
            w.pid,
            w.id,
            origin(w),
            printable(&w.main),
            w.seconds,
            utc(w.opened_unix_ms),
            printable(&w.closed_by),
            w.contexts,
            w.calls,
            w.bytecodes,
            printable(&w.scope)
        );
    }
    s
}

#[derive(Serialize, Debug, PartialEq)]
pub struct WindowJson<'a> {
    pub id: u64,
    pub pid: u32,
    /// `request`, `rotation`, `http`, or `?` from a jpd that does not say.
    pub origin: &'static str,
    pub main: &'a str,
    /// The JVM's version; empty when unknown.
    pub jdk_version: &'a str,
    pub scope: &'a str,
    pub seconds: u32,
    pub opened_unix_ms: u64,
    pub closed_unix_ms: u64,
    pub closed_by: &'a str,
    pub bba: &'a str,
    pub contexts: u64,
    pub seeded_contexts: u64,
    pub calls: u64,
    pub bytecodes: u64,
    pub threads: u32,
    pub classes_transformed: u64,
    pub classes_skipped: u64,
    pub classes_loaded_in_window: u64,
    pub open_ms: u64,
    pub close_ms: u64,
    pub longest_retransform_ms: u64,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct WindowListJson<'a> {
    pub windows: Vec<WindowJson<'a>>,
}

pub fn list_json(l: &JvmWindowList) -> WindowListJson<'_> {
    WindowListJson {
        windows: l
            .windows
            .iter()
            .map(|w| WindowJson {
                id: w.id,
                pid: w.pid,
                origin: origin(w),
                main: &w.main,
                jdk_version: &w.jdk_version,
                scope: &w.scope,
                seconds: w.seconds,
                opened_unix_ms: w.opened_unix_ms,
                closed_unix_ms: w.closed_unix_ms,
                closed_by: &w.closed_by,
                bba: &w.bba,
                contexts: w.contexts,
                seeded_contexts: w.seeded_contexts,
                calls: w.calls,
                bytecodes: w.bytecodes,
                threads: w.threads,
                classes_transformed: w.classes_transformed,
                classes_skipped: w.classes_skipped,
                classes_loaded_in_window: w.classes_loaded_in_window,
                open_ms: w.open_ms,
                close_ms: w.close_ms,
                longest_retransform_ms: w.longest_retransform_ms,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window() -> JvmWindow {
        JvmWindow {
            id: 77,
            pid: 4242,
            main: "Tiny".into(),
            scope: "all application classes".into(),
            seconds: 5,
            opened_unix_ms: 1_796_588_043_000,
            closed_unix_ms: 1_796_588_048_000,
            closed_by: "deadline".into(),
            bba: "default".into(),
            contexts: 3,
            calls: 40,
            bytecodes: 400,
            origin: JvmWindowOrigin::Rotation as i32,
            jdk_version: "17.0.15+6".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_header_names_the_window_and_its_seeded_contexts() {
        assert_eq!(
            header(&window()),
            "# window 77 of JVM 4242 (Tiny), origin rotation, scope all application classes, 5 s, closed by deadline: contexts with 0 calls were running when the window opened: their own calls and bytecodes are not counted\n"
        );
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_796_588_043_999), "2026-12-06 20:14:03");
    }

    #[test]
    fn the_list_has_a_line_per_window() {
        let l = JvmWindowList {
            windows: vec![window()],
        };
        let text = list_text(&l);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[1],
            "   4242                77  rotation  Tiny                        5  2026-12-06 20:14:03  deadline          3            40             400  all application classes"
        );
        assert!(list_text(&JvmWindowList::default()).starts_with("no windows"));
        let json = &list_json(&l).windows[0];
        assert_eq!(
            (json.calls, json.origin, json.jdk_version),
            (40, "rotation", "17.0.15+6")
        );
        // A jpd that does not say who asked.
        let old = JvmWindow {
            origin: 0,
            ..window()
        };
        assert!(header(&old).contains("(Tiny), origin ?, scope"));
    }
}
