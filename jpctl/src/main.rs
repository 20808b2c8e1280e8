//! jpctl: query jpd over its Unix socket, or over TCP with TLS (`--connect`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use jp_proto::v1::{
    GetIrqStatsRequest, GetKernelProfileRequest, GetStatusRequest, ProfileSource, ResetRequest,
};
use jpctl::client::{self, Client, DEFAULT_SOCKET};
use jpctl::jvm::{self as jvmcmd, ExportFormat, TopBy};
use jpctl::output;

#[derive(Parser, Debug)]
#[command(name = "jpctl", version, about = "Query jpd, jp's profiling daemon")]
struct Cli {
    /// jpd's Unix socket.
    #[arg(long, global = true, env = "JP_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Talk to jpd over TCP with TLS, https://HOST:PORT (its server.tcp), instead of
    /// the Unix socket.
    #[arg(long, global = true, env = "JP_CONNECT", value_name = "URL")]
    connect: Option<String>,
    /// CA certificate(s) (PEM) that signed jpd's certificate [default: the system's CAs].
    #[arg(
        long,
        global = true,
        env = "JP_CA",
        value_name = "FILE",
        requires = "connect"
    )]
    ca: Option<PathBuf>,
    /// Client certificate (PEM) for a jpd with server.tls_client_ca.
    #[arg(long, global = true, env = "JP_CERT", value_name = "FILE", requires_all = ["connect", "key"])]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, global = true, env = "JP_KEY", value_name = "FILE", requires_all = ["connect", "cert"])]
    key: Option<PathBuf>,
    /// Name to verify jpd's certificate against [default: the host of --connect].
    #[arg(
        long,
        global = true,
        env = "JP_TLS_SERVER_NAME",
        value_name = "NAME",
        requires = "connect"
    )]
    tls_server_name: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// What jpd has attached, samples seen, events lost, eBPF run time.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Kernel functions by samples since the last reset (readprofile style).
    Kernel {
        /// Show only the N functions with the most samples.
        #[arg(long, value_name = "N")]
        top: Option<u32>,
        #[arg(long, conflicts_with = "format")]
        json: bool,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// timer: where the CPUs spend kernel time (cpu-clock samples);
        /// irq-entry: what kernel code hard IRQs interrupt.
        #[arg(long, value_enum, default_value_t = Source::Timer)]
        source: Source,
    },
    /// Hard-IRQ handler hits and softirqs since the last reset.
    Irq {
        #[arg(long)]
        json: bool,
    },
    /// Start counting from zero (for every client of jpd).
    Reset,
    /// Profiled JVMs: list them, their top methods, their call trees, export.
    Jvm {
        #[command(subcommand)]
        command: JvmCommand,
    },
    /// Compare two profile files (no jpd needed): per method and per calling context, with
    /// a CI gate on bytecode counts (exit 1 when it fails, 2 on unreadable input).
    Diff(jpctl::diff_cmd::DiffArgs),
    /// Live full-screen view of kernel functions, IRQs, softirqs and JVM methods.
    Top {
        /// Refresh interval in milliseconds.
        #[arg(long, default_value_t = 1000, value_name = "MS")]
        interval: u32,
    },
}

#[derive(Subcommand, Debug)]
enum JvmCommand {
    /// JVMs jpd profiles (running, and exited ones it still keeps).
    List {
        #[arg(long)]
        json: bool,
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
    },
    /// A JVM's merged method call tree, cut by depth and share.
    Tree {
        pid: u32,
        /// Show calling contexts down to depth N (1 = top-level only; 0 = no limit).
        #[arg(long, default_value_t = 0, value_name = "N")]
        depth: u32,
        /// Leave out subtrees with less than P percent of the JVM's bytecodes.
        #[arg(long, default_value_t = 0.0, value_name = "P", value_parser = jvmcmd::parse_percent)]
        min_share: f64,
        #[arg(long)]
        json: bool,
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
    },
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Source {
    Timer,
    IrqEntry,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Format {
    Table,
    Readprofile,
    /// A flame graph page (module → function), self-contained HTML.
    Html,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // diff reads files: it needs no jpd.
    if let Command::Diff(args) = cli.command {
        return jpctl::diff_cmd::run(args);
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jpctl: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jpctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut c = match &cli.connect {
        Some(url) => {
            let opts = jpctl::tls::TlsOptions {
                ca: cli.ca.clone(),
                cert: cli.cert.clone(),
                key: cli.key.clone(),
                server_name: cli.tls_server_name.clone(),
            };
            jpctl::tls::connect(url, &opts).await?
        }
        None => client::connect(&cli.socket).await?,
    };
    let rpc = |s: tonic::Status| anyhow::anyhow!(client::status_message(&s));
    let text = match cli.command {
        Command::Status { json } => {
            let s = c
                .get_status(GetStatusRequest {})
                .await
                .map_err(rpc)?
                .into_inner();
            if json {
                output::to_json(&output::status_json(&s))
            } else {
                output::status_text(&s)
            }
        }
        Command::Kernel {
            top,
            json,
            format,
            source,
        } => {
            let source = match source {
                Source::Timer => ProfileSource::Timer,
                Source::IrqEntry => ProfileSource::IrqEntry,
            };
            let req = GetKernelProfileRequest {
                top_n: top.unwrap_or(0),
                include_buckets: false,
                source: source as i32,
            };
            let p = c.get_kernel_profile(req).await.map_err(rpc)?.into_inner();
            if json {
                output::to_json(&output::kernel_json(&p))
            } else if format == Format::Html {
                jpctl::kernel_flame::html(&p)?
            } else if format == Format::Readprofile {
                output::readprofile(&p)
            } else {
                output::kernel_text(&p)
            }
        }
        Command::Irq { json } => {
            let s = c
                .get_irq_stats(GetIrqStatsRequest {})
                .await
                .map_err(rpc)?
                .into_inner();
            if json {
                output::to_json(&output::irq_json(&s))
            } else {
                output::irq_text(&s)
            }
        }
        Command::Reset => {
            c.reset(ResetRequest {}).await.map_err(rpc)?;
            "counts reset: jpd counts from zero for every client\n".to_string()
        }
        Command::Jvm { command } => jvm(&mut c, command).await?,
        Command::Diff(_) => String::new(), // handled in main, before connecting
        Command::Top { interval } => {
            jpctl::top::run(c, interval).await?;
            String::new()
        }
    };
    // A closed pipe (`jpctl kernel | head`) is not an error worth a message.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(())
}

async fn jvm(c: &mut Client, command: JvmCommand) -> anyhow::Result<String> {
    Ok(match command {
        JvmCommand::List { json } => jvmcmd::list(c, json).await?,
        JvmCommand::Top { pid, by, n, json } => jvmcmd::top(c, pid, by, n, json).await?,
        JvmCommand::Tree {
            pid,
            depth,
            min_share,
            json,
        } => jvmcmd::tree(c, pid, depth, min_share / 100.0, json).await?,
        JvmCommand::Export {
            pid,
            format,
            output,
        } => jvmcmd::export(c, pid, format, &output).await?,
    })
}
