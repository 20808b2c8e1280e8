//! `jpctl jvm list|top|tree|export`: the RPCs, and where their answers go.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use clap::ValueEnum;
use jp_proto::v1::{
    ExportJvmProfileRequest, GetJvmProfileRequest, GetJvmTopRequest, JvmExportFormat, JvmTopOrder,
    ListJvmsRequest,
};

use crate::client::{status_message, Client};
use crate::output::{self, jvm as out};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum TopBy {
    /// Exclusive bytecodes: where the JVM executes code.
    Bytecodes,
    Calls,
    /// Inclusive bytecodes (a method and what it calls).
    Inclusive,
    /// CPU time in the method's own contexts (jpd's kernel sampler).
    Cpu,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ExportFormat {
    /// jp-mct/1, exactly as the agent's out= file.
    Json,
    /// Gzipped pprof (go tool pprof, Speedscope, ...).
    Pprof,
    /// Folded stacks for flame graphs.
    Folded,
    /// Indented text tree.
    Tree,
    /// A flame graph page (self-contained HTML), drawn here from the json export.
    Html,
}

impl ExportFormat {
    fn describe(self) -> &'static str {
        match self {
            ExportFormat::Json => "jp-mct/1 JSON",
            ExportFormat::Pprof => "gzipped pprof",
            ExportFormat::Folded => "folded stacks",
            ExportFormat::Tree => "text tree",
            ExportFormat::Html => "HTML flame graph",
        }
    }
}

/// `--min-share P`: a percentage in [0, 100] (a trailing `%` is allowed).
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    let p: f64 = t
        .parse()
        .map_err(|_| format!("{s:?} is not a number (a percentage, e.g. 0.5)"))?;
    if (0.0..=100.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{s} is not a percentage between 0 and 100"))
    }
}

fn rpc(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!(status_message(&s))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub async fn list(c: &mut Client, json: bool) -> anyhow::Result<String> {
    let l = c
        .list_jvms(ListJvmsRequest {})
        .await
        .map_err(rpc)?
        .into_inner();
    Ok(if json {
        output::to_json(&out::jvm_list_json(&l))
    } else {
        out::jvm_list_text(&l, now_ms())
    })
}

pub async fn top(
    c: &mut Client,
    pid: u32,
    by: TopBy,
    limit: u32,
    json: bool,
) -> anyhow::Result<String> {
    let order = match by {
        TopBy::Bytecodes => JvmTopOrder::Bytecodes,
        TopBy::Calls => JvmTopOrder::Calls,
        TopBy::Inclusive => JvmTopOrder::Inclusive,
        TopBy::Cpu => JvmTopOrder::Cpu,
    };
    let t = c
        .get_jvm_top(GetJvmTopRequest {
            pid,
            order: order as i32,
            limit,
        })
        .await
        .map_err(rpc)?
        .into_inner();
    Ok(if json {
        output::to_json(&out::jvm_top_json(&t))
    } else {
        out::jvm_top_text(&t)
    })
}

/// `min_share` as a fraction (the flag's percentage / 100).
pub async fn tree(
    c: &mut Client,
    pid: u32,
    max_depth: u32,
    min_share: f64,
    json: bool,
) -> anyhow::Result<String> {
    let p = c
        .get_jvm_profile(GetJvmProfileRequest {
            pid,
            max_depth,
            min_share,
        })
        .await
        .map_err(|e| {
            if e.message().contains("message length too large") {
                anyhow::anyhow!(
                    "{} (the tree is too big for one answer: cut it with --depth or --min-share, or use `jpctl jvm export`)",
                    status_message(&e)
                )
            } else {
                rpc(e)
            }
        })?
        .into_inner();
    Ok(if json {
        output::to_json(&out::jvm_tree_json(&p))
    } else {
        out::jvm_tree_text(&p)
    })
}

/// Streams the file into `path` (`-`: stdout). A failed or short transfer leaves
/// no file behind.
pub async fn export(
    c: &mut Client,
    pid: u32,
    format: ExportFormat,
    path: &Path,
) -> anyhow::Result<String> {
    let f = match format {
        ExportFormat::Json => JvmExportFormat::Json,
        ExportFormat::Pprof => JvmExportFormat::Pprof,
        ExportFormat::Folded => JvmExportFormat::Folded,
        ExportFormat::Tree => JvmExportFormat::Tree,
        ExportFormat::Html => JvmExportFormat::Json,
    };
    let mut stream = c
        .export_jvm_profile(ExportJvmProfileRequest {
            pid,
            format: f as i32,
        })
        .await
        .map_err(rpc)?
        .into_inner();
    let mut data = Vec::new();
    let mut total = None;
    while let Some(chunk) = stream.message().await.map_err(rpc)? {
        data.extend_from_slice(&chunk.data);
        if chunk.last {
            total = Some(chunk.total_bytes);
            break;
        }
    }
    match total {
        Some(t) if t == data.len() as u64 => {}
        Some(t) => anyhow::bail!(
            "jpd sent {} bytes of a {t}-byte profile; nothing written",
            data.len()
        ),
        None => anyhow::bail!("jpd ended the export before its last chunk; nothing written"),
    }
    if format == ExportFormat::Html {
        data = flame_page(&data, pid)?;
    }
    if path == Path::new("-") {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(&data)
            .and_then(|()| stdout.flush())
            .context("cannot write to stdout")?;
        return Ok(String::new());
    }
    write_file(path, &data)?;
    Ok(format!(
        "wrote {} bytes ({}) of pid {pid} to {}\n",
        data.len(),
        format.describe(),
        path.display()
    ))
}

/// The flame graph of a jp-mct/1 export.
fn flame_page(json: &[u8], pid: u32) -> anyhow::Result<Vec<u8>> {
    let t = jp_mct::read_json(json).context("jpd's json export")?;
    let mut g = jp_mct::FlameTree::from_mct(&t, &format!("jp method call tree of pid {pid}"));
    g.subtitle.push_str(" · from jpd");
    let mut page = Vec::new();
    jp_mct::write_flame_html(&g, jp_mct::DEFAULT_MIN_SHARE, &mut page)?;
    Ok(page)
}

/// Writes through a temporary file in the same directory, renamed into place.
fn write_file(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".jpctl-tmp");
    let tmp = path.with_file_name(tmp_name);
    let written = std::fs::write(&tmp, data).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}
