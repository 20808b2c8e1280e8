//! jpd's live flame graph pages on the HTTP exporter (read-only, on the exporter's
//! listener, so under its access rules: loopback unless `[export] listen` says otherwise):
//!
//! - `/flame`: the JVMs jpd holds and the kernel's hottest functions, with links;
//! - `/flame/jvm?pid=P`: P's whole Method Call Tree as a flame graph that reloads itself
//!   every [`REFRESH_SECONDS`] (not while zoomed or searching), drawn by any sample type
//!   jpd has for P (bytecodes; with the kernel sampler joined cpu; with the scheduler
//!   program offcpu and wall), switched in the page (`#type=offcpu`, or `type=offcpu` in
//!   the query for the first one drawn); idle threads' time off CPU is left out as in
//!   the other views, and the page says how much, unless `all=1`;
//! - `/flame/kernel`: the kernel profile since jpd started (module → function).
//!
//! Reads the stores only through their read side (`store::read::ReadJvm`'s list and
//! snapshot, `KernelStore::kernel_totals`), as the other exporters do.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use jp_mct::{FlameTree, FrameCounts, SampleType};

use super::ExportState;
use crate::store::kernel::profile;
use crate::store::read::ReadJvm;

/// How often the JVM page reloads.
pub const REFRESH_SECONDS: u32 = 5;
/// Kernel functions listed on the index page.
const KERNEL_HOTSPOTS: usize = 15;

/// The pages' routes, with their own state: merged into the exporter's router.
pub fn router(sources: ExportState) -> Router {
    Router::new()
        .route("/flame", get(index))
        .route("/flame/jvm", get(jvm_page))
        .route("/flame/kernel", get(kernel_page))
        .with_state(sources)
}

fn html(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// (module, function, samples) of the kernel profile since jpd started, hottest first.
fn kernel_functions(sources: &ExportState) -> Option<Vec<(String, String, u64)>> {
    let view = sources.stores.kernel.kernel_totals();
    let symbols = view.symbols.as_ref()?;
    let c = &view.counts;
    let p = profile::aggregate(&c.buckets, &c.other_ips, symbols, view.status.shift);
    let mut v: Vec<(String, String, u64)> = p
        .functions
        .iter()
        .map(|f| {
            (
                f.module.clone().unwrap_or_else(|| "vmlinux".into()),
                f.name.clone(),
                f.samples,
            )
        })
        .collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
    Some(v)
}

// Each page is built off the runtime: a tree's flame graph, the kernel's
// aggregation (see `blocking`).
async fn index(State(sources): State<ExportState>) -> Response {
    super::blocking::off_runtime(move || index_page(&sources)).await
}

fn index_page(sources: &ExportState) -> Response {
    let jvms = sources.stores.jvm.list();
    let mut s = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>jpd</title>\
         <meta http-equiv=\"refresh\" content=\"5\">\
         <style>body{font:13px system-ui,sans-serif;margin:10px}table{border-collapse:collapse}\
         td,th{padding:2px 10px;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}\
         tr:nth-child(even){background:#f4f4f4}</style></head><body>\n<h2>jpd: profiled JVMs</h2>\n",
    );
    if jvms.is_empty() {
        s.push_str("<p id=\"no-jvms\">jpd holds no JVM.</p>\n");
    } else {
        s.push_str("<table id=\"jvms\"><tr><th>pid</th><th>main</th><th>bba</th><th>calls</th><th>bytecodes</th><th>state</th></tr>\n");
        for j in &jvms {
            let state = if j.exited_at.is_some() {
                "exited"
            } else {
                "running"
            };
            let _ = writeln!(
                s,
                "<tr><td><a href=\"/flame/jvm?pid={pid}\">{pid}</a></td><td>{}</td><td>{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{state}</td></tr>",
                escape(&j.main),
                escape(&j.bba),
                j.calls,
                j.bytecodes,
                pid = j.pid
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str(
        "<h2>kernel hotspots since jpd started <a href=\"/flame/kernel\">(flame graph)</a></h2>\n",
    );
    match kernel_functions(sources) {
        None => s.push_str("<p id=\"no-kernel\">kernel symbols are not loaded (yet).</p>\n"),
        Some(fs) => {
            let total: u64 = fs.iter().map(|f| f.2).sum();
            s.push_str("<table id=\"kernel\"><tr><th>samples</th><th>share</th><th>function</th><th>module</th></tr>\n");
            for (module, name, samples) in fs.iter().take(KERNEL_HOTSPOTS) {
                let share = if total > 0 {
                    *samples as f64 * 100.0 / total as f64
                } else {
                    0.0
                };
                let _ = writeln!(
                    s,
                    "<tr><td class=\"n\">{samples}</td><td class=\"n\">{share:.2}%</td><td>{}</td><td>{}</td></tr>",
                    escape(name),
                    escape(module)
                );
            }
            s.push_str("</table>\n");
        }
    }
    s.push_str("</body></html>\n");
    html(s)
}

async fn jvm_page(State(sources): State<ExportState>, RawQuery(query): RawQuery) -> Response {
    super::blocking::off_runtime(move || jvm_page_for(&sources, query.as_deref())).await
}

fn jvm_page_for(sources: &ExportState, query: Option<&str>) -> Response {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m + "\n").into_response();
    let (pid, first, all) = match (
        super::query::pid(query),
        super::query::sample_type(query),
        super::query::flag(query, "all"),
    ) {
        (Ok(Some(pid)), Ok(first), Ok(all)) => (pid, first, all),
        (Ok(None), Ok(_), Ok(_)) => return bad("pid=P is required (see /flame)".into()),
        (Err(m), _, _) | (_, Err(m), _) | (_, _, Err(m)) => return bad(m),
    };
    // Idle threads' time off CPU is left out as in every other view, unless all=1.
    let idle = (!all).then(|| sources.stores.jvm.with_store(|s| s.offcpu_idle().clone()));
    // The snapshot is frozen (cheap to take); the tree and the page are built from it.
    let Ok((summary, mut snapshot)) = sources.stores.jvm.summary_and_snapshot(pid) else {
        return (
            StatusCode::NOT_FOUND,
            format!("jpd holds no JVM with pid {pid} (see /flame)\n"),
        )
            .into_response();
    };
    if let Some(patterns) = &idle {
        snapshot.hide_idle_offcpu(patterns);
    }
    let tree = snapshot.mct();
    let symbols = sources.stores.kernel.symbols();
    let cpu = snapshot.cpu().map(|c| c.mct_cpu(&tree, symbols.as_deref()));
    let graphs = jvm_graphs(pid, &summary.main, &tree, cpu.as_ref(), all);
    // The type asked for when the JVM has it; the tree's bytecodes otherwise.
    let first = first
        .filter(|ty| graphs.iter().any(|(g, _)| g == ty))
        .unwrap_or(SampleType::Bytecodes);
    let mut page = Vec::new();
    match jp_mct::write_flame_html_types(&graphs, first, jp_mct::DEFAULT_MIN_SHARE, &mut page) {
        Ok(()) => html(String::from_utf8_lossy(&page).into_owned()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// The graphs of JVM `pid`'s live page, one per sample type its data has (see
/// `jp_mct::SampleType::of`); `all`: idle threads' time off CPU is in them.
pub fn jvm_graphs(
    pid: u32,
    main: &str,
    tree: &jp_mct::Mct,
    cpu: Option<&jp_mct::MctCpu>,
    all: bool,
) -> Vec<(SampleType, FlameTree)> {
    let title = format!("JVM {pid}: {main}");
    let mut graphs = jp_mct::typed_graphs(tree, cpu, &title, "all=1 in the URL shows them");
    for (ty, g) in &mut graphs {
        g.refresh_seconds = REFRESH_SECONDS;
        if all && matches!(ty, SampleType::Offcpu | SampleType::Wall) {
            g.subtitle
                .push_str(" · idle threads (waiting for work) shown: all=1");
        }
    }
    graphs
}

async fn kernel_page(State(sources): State<ExportState>) -> Response {
    super::blocking::off_runtime(move || kernel_page_now(&sources)).await
}

fn kernel_page_now(sources: &ExportState) -> Response {
    let Some(fs) = kernel_functions(sources) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "kernel symbols are not loaded yet\n",
        )
            .into_response();
    };
    let mut by_module: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    for (module, name, samples) in fs {
        by_module.entry(module).or_default().push((name, samples));
    }
    let mut g = FlameTree::new(
        "jpd: kernel profile since start (module → function)",
        "samples",
        false,
    );
    g.refresh_seconds = REFRESH_SECONDS;
    for (module, fs) in &by_module {
        let sum = fs.iter().map(|f| f.1).sum();
        let count = |n: u64, own: u64| FrameCounts {
            calls: None,
            inclusive: n,
            exclusive: own,
        };
        let m = g.add(
            0,
            Arc::from(module.as_str()),
            count(sum, 0),
            FrameCounts::default(),
        );
        for (name, samples) in fs {
            g.add(
                m,
                Arc::from(name.as_str()),
                count(*samples, *samples),
                FrameCounts::default(),
            );
        }
    }
    let mut page = Vec::new();
    match jp_mct::write_flame_html(&g, jp_mct::DEFAULT_MIN_SHARE, &mut page) {
        Ok(()) => html(String::from_utf8_lossy(&page).into_owned()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ExportState, Exporter};
    use crate::export::config::ExportConfig;
    use crate::store::kernel::KernelStore;
    use crate::store::Sources;
    use std::time::SystemTime;

    #[tokio::test]
    async fn pages_on_the_exporter_answer_without_data_and_refuse_bad_pids() {
        let sources = ExportState::new(Sources::from(KernelStore::new()));
        let cfg = ExportConfig {
            enabled: true,
            listen: "127.0.0.1:0".into(),
            max_profile_seconds: 10,
            ..ExportConfig::default()
        };
        let e = Exporter::start(&cfg, sources, SystemTime::now())
            .await
            .unwrap();
        let addr = e.local_addr();
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let index = get("/flame").await;
        assert!(index.starts_with("HTTP/1.1 200 OK\r\n"), "{index}");
        assert!(
            index.contains("content-type: text/html; charset=utf-8\r\n"),
            "{index}"
        );
        assert!(
            index.contains("<p id=\"no-jvms\">jpd holds no JVM.</p>"),
            "{index}"
        );
        assert!(
            index.contains("<p id=\"no-kernel\">kernel symbols are not loaded (yet).</p>"),
            "{index}"
        );
        let p = get("/flame/jvm").await;
        assert!(p.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{p}");
        let p = get("/flame/jvm?pid=77").await;
        assert!(p.starts_with("HTTP/1.1 404 Not Found\r\n"), "{p}");
        assert!(
            p.ends_with("jpd holds no JVM with pid 77 (see /flame)\n"),
            "{p}"
        );
        let p = get("/flame/jvm?pid=77&type=flops").await;
        assert!(p.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{p}");
        assert!(
            p.ends_with("type=\"flops\" is not one of bytecodes, cpu, offcpu, wall\n"),
            "{p}"
        );
        let p = get("/flame/jvm?pid=77&all=maybe").await;
        assert!(p.ends_with("all=\"maybe\" is not 1 or 0\n"), "{p}");
        let p = get("/flame/kernel").await;
        assert!(p.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{p}");
        // Read-only: the pages answer GET only.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            b"POST /flame HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(
            out.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{out}"
        );
        e.stop().await;
    }

    /// A JVM with CPU and time off CPU (some of idle threads left out): four graphs, the
    /// off-CPU ones saying how much was left out and how to see it; with all=1, that it
    /// is shown. Every graph reloads itself.
    #[test]
    fn a_jvms_graphs_are_one_per_sample_type_and_say_what_idle_time_they_leave_out() {
        use jp_mct::{Mct, MctCpu, MethodInfo, OffcpuTime, SampleType};
        let mut t = Mct::new("default");
        let a = t.add(
            0,
            MethodInfo {
                name: "W.a()V".into(),
                file: None,
            },
            1,
            1,
        );
        let cpu = MctCpu {
            user_ns: vec![0, 7],
            offcpu: vec![OffcpuTime {
                node: a,
                kind: "sleep".into(),
                function: "do_nanosleep".into(),
                ns: 9,
            }],
            offcpu_idle_hidden_ns: 2_500_000_000,
            ..MctCpu::default()
        };
        let graphs = super::jvm_graphs(42, "W", &t, Some(&cpu), false);
        let subtitles: Vec<(SampleType, &str)> = graphs
            .iter()
            .map(|(ty, g)| (*ty, g.subtitle.as_str()))
            .collect();
        let hidden = "bba=default · 1 calling contexts · 2500.000 ms off CPU of idle threads (waiting for work) not shown; all=1 in the URL shows them";
        assert_eq!(
            subtitles,
            [
                (SampleType::Bytecodes, "bba=default · 1 calling contexts"),
                (SampleType::Cpu, "bba=default · 1 calling contexts"),
                (SampleType::Offcpu, hidden),
                (SampleType::Wall, hidden),
            ]
        );
        assert!(graphs
            .iter()
            .all(|(_, g)| g.refresh_seconds == super::REFRESH_SECONDS && g.title == "JVM 42: W"));
        let all = super::jvm_graphs(
            42,
            "W",
            &t,
            Some(&MctCpu {
                offcpu_idle_hidden_ns: 0,
                ..cpu
            }),
            true,
        );
        assert_eq!(
            all[2].1.subtitle,
            "bba=default · 1 calling contexts · idle threads (waiting for work) shown: all=1"
        );
        // Without the kernel sampler: the tree's bytecodes alone.
        let plain = super::jvm_graphs(42, "W", &t, None, false);
        assert_eq!(plain.len(), 1);
        assert_eq!(plain[0].0, SampleType::Bytecodes);
    }
}
