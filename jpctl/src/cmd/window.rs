//! `jpctl jvm profile|windows|window`: exact windows — open one in a JVM and write its
//! tree, list the windows jpd keeps, write a kept one again.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use jp_proto::v1::{
    GetJvmWindowRequest, JvmWindow, JvmWindowProfile, ListJvmWindowsRequest, ProfileJvmRequest,
};
use tonic::Streaming;

use super::destination::Destination;
use super::export_format::ExportFormat;
use super::rpc;
use crate::client::Client;
use crate::output::{self, jvm as out};

/// `jpctl jvm profile`'s arguments.
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// The JVM's pid (any HotSpot JVM: its agent dormant, or none: jpd loads it).
    pub pid: u32,
    /// How long the window stays open.
    #[arg(long, value_name = "N")]
    pub seconds: u32,
    /// Classes in scope, by name prefix (e.g. com.example.); repeat for more.
    #[arg(long = "include", value_name = "P")]
    pub include: Vec<String>,
    /// Classes left out of the scope, by name prefix; repeat for more.
    #[arg(long = "exclude", value_name = "P")]
    pub exclude: Vec<String>,
    /// The basic-block algorithm; default: the JVM's agent's own setting.
    #[arg(long, value_enum)]
    pub bba: Option<BbaArg>,
    #[arg(long, value_enum, default_value_t = ExportFormat::Tree)]
    pub format: ExportFormat,
    /// Output file; `-` or absent for stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum BbaArg {
    Default,
    Precise,
}

/// `jpctl jvm profile`: waits for the window, then writes its tree with the window's
/// header line (on stdout with the tree text; on stderr when another format goes to
/// stdout, so that the file stays whole).
pub async fn profile(c: &mut Client, a: ProfileArgs) -> anyhow::Result<()> {
    let req = ProfileJvmRequest {
        pid: a.pid,
        seconds: a.seconds,
        include: a.include,
        exclude: a.exclude,
        bba: a
            .bba
            .map_or("", |b| match b {
                BbaArg::Default => "default",
                BbaArg::Precise => "precise",
            })
            .to_string(),
        format: Some(ExportFormat::requested(a.format) as i32),
    };
    let stream = c
        .profile_jvm(req)
        .await
        .map_err(window_failure)?
        .into_inner();
    write_window(
        stream,
        a.format,
        &Destination::from_flag(a.output.as_deref()),
    )
    .await
}

/// A refused or failed window is its one line; anything else as every RPC failure.
fn window_failure(s: tonic::Status) -> anyhow::Error {
    match s.code() {
        tonic::Code::FailedPrecondition | tonic::Code::Aborted => {
            anyhow::anyhow!("{}", output::text::printable(s.message()))
        }
        _ => rpc(s),
    }
}

/// The window's messages: its description, then the file's chunks.
async fn write_window(
    mut stream: Streaming<JvmWindowProfile>,
    format: ExportFormat,
    to: &Destination,
) -> anyhow::Result<()> {
    let mut window: Option<JvmWindow> = None;
    let mut data = Vec::new();
    let mut total = None;
    while let Some(m) = stream.message().await.map_err(window_failure)? {
        if let Some(w) = m.window {
            window = Some(w);
        }
        if let Some(chunk) = m.chunk {
            data.extend_from_slice(&chunk.data);
            if chunk.last {
                total = Some(chunk.total_bytes);
                break;
            }
        }
    }
    let Some(window) = window else {
        anyhow::bail!("jpd ended the answer before describing the window; nothing written");
    };
    match total {
        Some(t) if t == data.len() as u64 => {}
        Some(t) => anyhow::bail!(
            "jpd sent {} bytes of a {t}-byte profile; nothing written",
            data.len()
        ),
        None => anyhow::bail!("jpd ended the answer before its last chunk; nothing written"),
    }
    let header = out::window::header(&window);
    if format == ExportFormat::Html {
        data = out::export::flame_page(&data, window.pid)?;
    }
    match (to, format) {
        (Destination::Stdout, ExportFormat::Tree) => {
            let mut text = header.into_bytes();
            text.extend_from_slice(&data);
            to.write(&text, "")
        }
        (Destination::Stdout, _) => {
            eprint!("{header}");
            to.write(&data, "")
        }
        (Destination::File(_), _) => {
            Destination::Stdout.write(header.as_bytes(), "")?;
            let what = format!("({}) of window {}", format.describe(), window.id);
            to.write(&data, &what)
        }
    }
}

/// `jpctl jvm windows [PID]`.
pub async fn list(c: &mut Client, pid: Option<u32>, json: bool) -> anyhow::Result<()> {
    let l = c
        .list_jvm_windows(ListJvmWindowsRequest { pid })
        .await
        .map_err(rpc)?
        .into_inner();
    let text = if json {
        output::to_json(&out::window::list_json(&l))
    } else {
        out::window::list_text(&l)
    };
    Destination::Stdout.write(text.as_bytes(), "")
}

/// `jpctl jvm window PID ID`: a kept window's tree, as `jpctl jvm profile` wrote it.
pub async fn get(
    c: &mut Client,
    pid: u32,
    id: u64,
    format: ExportFormat,
    to: &Destination,
) -> anyhow::Result<()> {
    let req = GetJvmWindowRequest {
        pid,
        id,
        format: Some(ExportFormat::requested(format) as i32),
    };
    let stream = c.get_jvm_window(req).await.map_err(rpc)?.into_inner();
    write_window(stream, format, to).await
}
