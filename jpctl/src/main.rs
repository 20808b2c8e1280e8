//! jpctl: query jpd over its Unix socket, or over TCP with TLS (`--connect`). Parses the
//! command line and hands each command to its module in `jpctl::cmd`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jpctl::client::{self, Client, DEFAULT_SOCKET};
use jpctl::cmd;

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
    Status(cmd::status::StatusArgs),
    /// Kernel functions by samples since the last reset (readprofile style).
    Kernel(cmd::kernel::KernelArgs),
    /// Hard-IRQ handler hits and softirqs since the last reset.
    Irq(cmd::irq::IrqArgs),
    /// Start counting from zero (for every client of jpd).
    Reset,
    /// Profiled JVMs: list them, their top methods, their call trees, export.
    Jvm {
        #[command(subcommand)]
        command: cmd::jvm::JvmCommand,
    },
    /// Compare two profile files (no jpd needed): per method and per calling context, with
    /// a CI gate on bytecode counts (exit 1 when it fails, 2 on unreadable input).
    Diff(cmd::diff::DiffArgs),
    /// Live full-screen view of kernel functions, IRQs, softirqs and JVM methods.
    Top(cmd::top::TopArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // diff reads files: it needs no jpd.
    if let Command::Diff(args) = cli.command {
        return cmd::diff::run(args);
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

/// jpd over the Unix socket, or over TCP with TLS when `--connect` is given.
async fn connect(cli: &Cli) -> anyhow::Result<Client> {
    Ok(match &cli.connect {
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
    })
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut c = connect(&cli).await?;
    match cli.command {
        Command::Status(a) => cmd::status::run(&mut c, a).await,
        Command::Kernel(a) => cmd::kernel::run(&mut c, a).await,
        Command::Irq(a) => cmd::irq::run(&mut c, a).await,
        Command::Reset => cmd::reset::run(&mut c).await,
        Command::Jvm { command } => cmd::jvm::run(&mut c, command).await,
        Command::Diff(_) => Ok(()), // handled in main, before connecting
        Command::Top(a) => cmd::top::run(c, a).await,
    }
}
