//! Exact windows over gRPC: `ProfileJvm` asks the windows service for one, and
//! `ListJvmWindows`/`GetJvmWindow` read the window store (through `store::read`).
//! Pure conversions here; the handlers are in `service.rs`.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use jp_proto::v1 as pb;
use tonic::Status;

use super::jvm as jvmconv;
use crate::export::otlp::JvmIdentity;
use crate::windows::{Bba, WindowError, WindowOrigin, WindowProfile, WindowRequest};

/// The service's request and the answer's format from a `ProfileJvm` request. Explicit
/// requests may load the agent into a JVM started without it.
pub fn request(
    r: &pb::ProfileJvmRequest,
) -> Result<(WindowRequest, Option<pb::JvmExportFormat>), Status> {
    let bba = match r.bba.as_str() {
        "" => None,
        "default" => Some(Bba::Default),
        "precise" => Some(Bba::Precise),
        other => {
            return Err(Status::invalid_argument(format!(
                "bba {other:?} is not \"default\" or \"precise\""
            )))
        }
    };
    let req = WindowRequest {
        pid: r.pid,
        seconds: r.seconds,
        include: r.include.clone(),
        exclude: r.exclude.clone(),
        bba,
        origin: WindowOrigin::Request,
        load_agent: true,
    };
    Ok((req, format(r.format)?))
}

/// An optional format field.
pub fn format(f: Option<i32>) -> Result<Option<pb::JvmExportFormat>, Status> {
    f.map(|f| {
        pb::JvmExportFormat::try_from(f)
            .map_err(|_| Status::invalid_argument(format!("unknown format {f}")))
    })
    .transpose()
}

/// A refusal is the caller's to fix (FAILED_PRECONDITION), a failure is not (ABORTED);
/// both carry the service's one line.
pub fn status(e: WindowError) -> Status {
    match e {
        WindowError::Refused(m) => Status::failed_precondition(m),
        WindowError::Failed(m) => Status::aborted(m),
    }
}

pub fn not_found(pid: u32, id: u64) -> Status {
    Status::not_found(format!(
        "jpd keeps no window {id} of JVM {pid} (see `jpctl jvm windows {pid}`)"
    ))
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A window's own description. O(tree) (its totals).
pub fn window(w: &WindowProfile) -> pb::JvmWindow {
    let meta = |k: &str| w.meta.get(k).cloned().unwrap_or_default();
    let number = |k: &str| w.meta.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
    let (calls, bytecodes) = totals(w);
    pb::JvmWindow {
        id: w.id,
        pid: w.pid,
        main: w.main_class.clone(),
        scope: w.scope.clone(),
        seconds: w.seconds,
        opened_unix_ms: unix_ms(w.opened),
        closed_unix_ms: unix_ms(w.closed),
        closed_by: meta("closed_by"),
        bba: w.tree.bba.clone(),
        contexts: w.tree.nodes.len().saturating_sub(1) as u64,
        seeded_contexts: number("seeded_contexts"),
        calls,
        bytecodes,
        threads: u32::try_from(number("threads")).unwrap_or(u32::MAX),
        classes_transformed: number("classes_transformed"),
        classes_skipped: number("classes_skipped"),
        classes_loaded_in_window: number("classes_loaded_in_window"),
        open_ms: number("open_ms"),
        close_ms: number("close_ms"),
        longest_retransform_ms: number("longest_retransform_ms"),
        origin: origin(w.origin) as i32,
        jdk_version: w.jdk_version.clone(),
    }
}

fn origin(o: WindowOrigin) -> pb::JvmWindowOrigin {
    match o {
        WindowOrigin::Request => pb::JvmWindowOrigin::Request,
        WindowOrigin::Rotation => pb::JvmWindowOrigin::Rotation,
        WindowOrigin::Http => pb::JvmWindowOrigin::Http,
    }
}

fn totals(w: &WindowProfile) -> (u64, u64) {
    w.tree.nodes.iter().fold((0u64, 0u64), |(c, b), n| {
        (c.saturating_add(n.calls), b.saturating_add(n.bytecodes))
    })
}

/// The window's tree in GetJvmProfile's messages, uncut; its summary names the window.
fn profile(w: &WindowProfile) -> pb::JvmProfile {
    let (calls, bytecodes) = totals(w);
    let methods: std::collections::HashSet<&str> =
        w.tree.nodes.iter().skip(1).map(|n| &*n.method).collect();
    let summary = pb::JvmSummary {
        pid: w.pid,
        main: w.main_class.clone(),
        bba: w.tree.bba.clone(),
        calls,
        bytecodes,
        nodes: w.tree.nodes.len().saturating_sub(1) as u64,
        methods: methods.len() as u64,
        complete: true,
        jdk_version: w.jdk_version.clone(),
        threads_total: u32::try_from(
            w.meta
                .get("threads")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0),
        )
        .unwrap_or(u32::MAX),
        ..Default::default()
    };
    pb::JvmProfile {
        jvm: Some(summary),
        ..jvmconv::tree_profile(&w.tree, &jvmconv::NodeTimes::default(), 0, 0.0)
    }
}

/// The messages of one window's answer: the window (with its tree when no format
/// was asked), then the file's chunks. O(tree): call it on a blocking thread.
/// An OTLP file's resource is the JVM's, with the operator's `otlp_extra` attributes.
pub fn answer(
    w: &Arc<WindowProfile>,
    format: Option<pb::JvmExportFormat>,
    otlp_extra: &BTreeMap<String, String>,
) -> Result<Vec<pb::JvmWindowProfile>, Status> {
    let first = pb::JvmWindowProfile {
        window: Some(window(w)),
        profile: format.is_none().then(|| profile(w)),
        chunk: None,
    };
    let mut out = vec![first];
    if let Some(f) = format {
        let jvm = JvmIdentity {
            pid: w.pid,
            main: &w.main_class,
            jdk_version: &w.jdk_version,
        };
        let data = jvmconv::export(&w.tree, None, f, Some(jvm), otlp_extra)
            .map_err(|e| Status::internal(format!("cannot write the window's tree: {e}")))?;
        out.extend(
            jvmconv::chunks(&data)
                .into_iter()
                .map(|c| pb::JvmWindowProfile {
                    chunk: Some(c),
                    ..Default::default()
                }),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::WindowError;

    #[test]
    fn requests_are_checked_and_load_the_agent() {
        let r = pb::ProfileJvmRequest {
            pid: 7,
            seconds: 5,
            include: vec!["a.*".into()],
            exclude: vec![],
            bba: "precise".into(),
            format: Some(pb::JvmExportFormat::Pprof as i32),
        };
        let (req, f) = request(&r).unwrap();
        assert_eq!(
            req,
            WindowRequest {
                pid: 7,
                seconds: 5,
                include: vec!["a.*".into()],
                exclude: vec![],
                bba: Some(Bba::Precise),
                origin: WindowOrigin::Request,
                load_agent: true,
            }
        );
        assert_eq!(f, Some(pb::JvmExportFormat::Pprof));
        let bad = pb::ProfileJvmRequest {
            bba: "fast".into(),
            ..r.clone()
        };
        assert_eq!(
            request(&bad).unwrap_err().message(),
            "bba \"fast\" is not \"default\" or \"precise\""
        );
        let bad = pb::ProfileJvmRequest {
            format: Some(99),
            ..r
        };
        assert_eq!(request(&bad).unwrap_err().message(), "unknown format 99");
        assert_eq!(
            status(WindowError::Refused("no".into())).code(),
            tonic::Code::FailedPrecondition
        );
        assert_eq!(
            status(WindowError::Failed("no".into())).code(),
            tonic::Code::Aborted
        );
    }

    #[test]
    fn an_answer_is_the_window_then_its_file() {
        let mut tree = jp_mct::Mct::new("default");
        let m = tree.add(
            0,
            jp_mct::MethodInfo {
                name: Arc::from("T.main()V"),
                file: None,
            },
            0,
            0,
        );
        tree.add(
            m,
            jp_mct::MethodInfo {
                name: Arc::from("T.f()V"),
                file: None,
            },
            3,
            12,
        );
        let w = Arc::new(WindowProfile {
            id: 9,
            pid: 4,
            start_time: 1,
            main_class: "T".into(),
            scope: "all application classes".into(),
            seconds: 2,
            origin: WindowOrigin::Rotation,
            jdk_version: "25.0.3+9-LTS".into(),
            opened: UNIX_EPOCH + std::time::Duration::from_millis(1000),
            closed: UNIX_EPOCH + std::time::Duration::from_millis(3000),
            tree,
            meta: [("seeded_contexts", "1"), ("closed_by", "deadline")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        let a = answer(&w, None, &BTreeMap::new()).unwrap();
        assert_eq!(a.len(), 1);
        let win = a[0].window.clone().unwrap();
        assert_eq!(
            (
                win.id,
                win.contexts,
                win.seeded_contexts,
                win.calls,
                win.bytecodes
            ),
            (9, 2, 1, 3, 12)
        );
        assert_eq!((win.opened_unix_ms, win.closed_unix_ms), (1000, 3000));
        assert_eq!(win.closed_by, "deadline");
        assert_eq!(
            (win.origin(), win.jdk_version.as_str()),
            (pb::JvmWindowOrigin::Rotation, "25.0.3+9-LTS")
        );
        let p = a[0].profile.clone().unwrap();
        let nodes: Vec<(u32, u64, u64)> = p
            .nodes
            .iter()
            .map(|n| (n.depth, n.calls, n.bytecodes))
            .collect();
        assert_eq!(nodes, [(0, 0, 0), (1, 3, 12)]);
        let summary = p.jvm.unwrap();
        assert_eq!(summary.methods, 2);
        assert_eq!(summary.jdk_version, "25.0.3+9-LTS");
        let a = answer(&w, Some(pb::JvmExportFormat::Folded), &BTreeMap::new()).unwrap();
        assert_eq!(a.len(), 2);
        assert!(a[0].profile.is_none());
        let chunk = a[1].chunk.clone().unwrap();
        assert!(chunk.last);
        assert_eq!(
            String::from_utf8(chunk.data).unwrap(),
            "T.main();T.f() 12\n"
        );
        // An OTLP file of the window names its JVM, with the operator's attributes.
        let extra = BTreeMap::from([("deployment.environment.name".into(), "prod".into())]);
        let a = answer(&w, Some(pb::JvmExportFormat::Otlp), &extra).unwrap();
        let chunk = a[1].chunk.clone().unwrap();
        assert!(chunk.last);
        let data: jp_mct::otlp::proto::profiles::v1development::ProfilesData =
            prost::Message::decode(&chunk.data[..]).unwrap();
        let resource = data.resource_profiles[0].resource.clone().unwrap();
        let value = |key: &str| {
            resource
                .attributes
                .iter()
                .find(|a| a.key == key)
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
                .map(|v| format!("{v:?}"))
        };
        assert_eq!(value("service.name"), Some("StringValue(\"T\")".into()));
        assert_eq!(value("process.pid"), Some("IntValue(4)".into()));
        assert_eq!(
            value("deployment.environment.name"),
            Some("StringValue(\"prod\")".into())
        );
        // The JVM's version kept with the window, as a live JVM's resource has it.
        assert_eq!(
            value("process.runtime.version"),
            Some("StringValue(\"25.0.3+9-LTS\")".into())
        );
    }
}
