//! `jpctl jvm list|top|tree|export` (and `profile|windows|window`, in `window.rs`): the arguments, the RPCs, and where their answers go.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use jp_proto::v1::{
    ExportJvmProfileRequest, GetJvmProfileRequest, GetJvmTopRequest, JvmTopOrder, ListJvmsRequest,
};

use super::destination::Destination;
use super::export_format::ExportFormat;
use super::rpc;
use crate::client::{status_message, Client};
use crate::output::{self, jvm as out};

#[derive(Subcommand, Debug)]
pub enum JvmCommand {
    /// JVMs jpd profiles (running, and exited ones it still keeps).
    List {
        #[arg(long)]
        json: bool,
        /// Every HotSpot JVM on the host, also those without jp's agent, with the
        /// agent's state in each (none, dormant, window open, profiled from start).
        #[arg(long)]
        all: bool,
    },
    /// A JVM's methods by exclusive bytecodes, calls or inclusive bytecodes.
    Top {
        /// The JVM's pid (as `jpctl jvm list` shows it).
        pid: u32,
        #[arg(long, value_enum, default_value_t = TopBy::Bytecodes)]
        by: TopBy,
        /// Show only the first N methods (0 = all).
        #[arg(short = 'n', long = "limit", default_value_t = 20, value_name = "N")]
        n: u32,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        idle: IdleArgs,
    },
    /// A JVM's merged method call tree, cut by depth and share.
    Tree {
        pid: u32,
        /// Show calling contexts down to depth N (1 = top-level only; 0 = no limit).
        #[arg(long, default_value_t = 0, value_name = "N")]
        depth: u32,
        /// Leave out subtrees with less than P percent of the JVM's bytecodes.
        #[arg(long, default_value_t = 0.0, value_name = "P", value_parser = parse_percent)]
        min_share: f64,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        idle: IdleArgs,
    },
    /// Write a JVM's whole tree to a file: json (jp-mct/1, as the agent's out=),
    /// pprof, folded stacks or an indented tree.
    Export {
        pid: u32,
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Output file; `-` for stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        idle: IdleArgs,
    },
    /// Open an exact window in a JVM for N seconds and write its tree (a tree with a
    /// header line by default). The JVM's agent may be dormant, or absent: jpd loads it.
    Profile(super::window::ProfileArgs),
    /// The exact windows jpd keeps (of one JVM, or all).
    Windows {
        pid: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Write a kept window's tree again, as `jpctl jvm profile` wrote it.
    Window {
        pid: u32,
        /// The window's id (`jpctl jvm windows`).
        id: u64,
        #[arg(long, value_enum, default_value_t = ExportFormat::Tree)]
        format: ExportFormat,
        /// Output file; `-` or absent for stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

/// Which off-CPU time is idle (threads waiting for work), left out of the view.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleArgs {
    /// Show the off-CPU time of idle threads too (pool threads waiting for work:
    /// jpd's idle patterns, `kernel.offcpu_idle`), which is left out by default.
    #[arg(long)]
    pub all: bool,
    /// One more idle method for this view: `Class.method` (it and everything under
    /// it), a prefix ending in `*`, or `<root>`. Repeatable.
    #[arg(long = "idle", value_name = "PATTERN")]
    pub idle: Vec<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum TopBy {
    /// Exclusive bytecodes: where the JVM executes code.
    Bytecodes,
    Calls,
    /// Inclusive bytecodes (a method and what it calls).
    Inclusive,
    /// CPU time in the method's own contexts (jpd's kernel sampler).
    Cpu,
    /// Time off CPU in the method's own contexts (jpd's `kernel.offcpu`).
    Offcpu,
    /// Wall time in the method's own contexts: CPU + off CPU.
    Wall,
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

pub async fn run(c: &mut Client, command: JvmCommand) -> anyhow::Result<()> {
    let text = match command {
        JvmCommand::List { json, all } => list(c, json, all).await?,
        JvmCommand::Top {
            pid,
            by,
            n,
            json,
            idle,
        } => top(c, pid, by, n, json, idle).await?,
        JvmCommand::Tree {
            pid,
            depth,
            min_share,
            json,
            idle,
        } => tree(c, pid, depth, min_share / 100.0, json, idle).await?,
        JvmCommand::Export {
            pid,
            format,
            output,
            idle,
        } => {
            let to = Destination::from_flag(Some(&output));
            return export(c, pid, format, &to, idle).await;
        }
        JvmCommand::Profile(a) => return super::window::profile(c, a).await,
        JvmCommand::Windows { pid, json } => return super::window::list(c, pid, json).await,
        JvmCommand::Window {
            pid,
            id,
            format,
            output,
        } => {
            let to = Destination::from_flag(output.as_deref());
            return super::window::get(c, pid, id, format, &to).await;
        }
    };
    Destination::Stdout.write(text.as_bytes(), "")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

async fn list(c: &mut Client, json: bool, all: bool) -> anyhow::Result<String> {
    let l = c
        .list_jvms(ListJvmsRequest { all })
        .await
        .map_err(rpc)?
        .into_inner();
    Ok(match (all, json) {
        (false, true) => output::to_json(&out::list::jvm_list_json(&l)),
        (false, false) => out::list::jvm_list_text(&l, now_ms()),
        (true, true) => output::to_json(&out::hotspot::hotspot_list_json(&l)),
        (true, false) => out::hotspot::hotspot_list_text(&l),
    })
}

async fn top(
    c: &mut Client,
    pid: u32,
    by: TopBy,
    limit: u32,
    json: bool,
    idle: IdleArgs,
) -> anyhow::Result<String> {
    let order = match by {
        TopBy::Bytecodes => JvmTopOrder::Bytecodes,
        TopBy::Calls => JvmTopOrder::Calls,
        TopBy::Inclusive => JvmTopOrder::Inclusive,
        TopBy::Cpu => JvmTopOrder::Cpu,
        TopBy::Offcpu => JvmTopOrder::Offcpu,
        TopBy::Wall => JvmTopOrder::Wall,
    };
    let t = c
        .get_jvm_top(GetJvmTopRequest {
            pid,
            order: order as i32,
            limit,
            show_idle: idle.all,
            idle: idle.idle,
        })
        .await
        .map_err(rpc)?
        .into_inner();
    Ok(if json {
        output::to_json(&out::top::jvm_top_json(&t))
    } else {
        out::top::jvm_top_text(&t)
    })
}

/// `min_share` as a fraction (the flag's percentage / 100).
async fn tree(
    c: &mut Client,
    pid: u32,
    max_depth: u32,
    min_share: f64,
    json: bool,
    idle: IdleArgs,
) -> anyhow::Result<String> {
    let p = c
        .get_jvm_profile(GetJvmProfileRequest {
            pid,
            max_depth,
            min_share,
            show_idle: idle.all,
            idle: idle.idle,
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
        output::to_json(&out::tree::jvm_tree_json(&p))
    } else {
        out::tree::jvm_tree_text(&p)
    })
}

/// Streams the file to `to`. A failed or short transfer writes nothing.
async fn export(
    c: &mut Client,
    pid: u32,
    format: ExportFormat,
    to: &Destination,
    idle: IdleArgs,
) -> anyhow::Result<()> {
    let f = format.requested();
    let mut stream = c
        .export_jvm_profile(ExportJvmProfileRequest {
            pid,
            format: f as i32,
            show_idle: idle.all,
            idle: idle.idle,
        })
        .await
        .map_err(rpc)?
        .into_inner();
    let mut data = Vec::new();
    let mut total = None;
    let mut hidden = 0;
    while let Some(chunk) = stream.message().await.map_err(rpc)? {
        data.extend_from_slice(&chunk.data);
        if chunk.last {
            total = Some(chunk.total_bytes);
            hidden = chunk.offcpu_idle_hidden_ns;
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
        data = out::export::flame_page(&data, pid)?;
    }
    to.write(&data, &format!("({}) of pid {pid}", format.describe()))?;
    if hidden > 0 {
        eprintln!("{}", out::top::idle_note(hidden));
    }
    Ok(())
}
