//! jpd: loads the eBPF samplers, keeps their counts in the store, serves them over
//! gRPC on a Unix socket until SIGINT/SIGTERM.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use jp_daemon::config::{Config, Source};
use jp_daemon::kernel::KernelCollector;
use jp_daemon::server;
use jp_daemon::store::Store;
use tokio::signal::unix::{signal, Signal, SignalKind};

#[derive(Parser, Debug)]
#[command(
    name = "jpd",
    version,
    about = "jp's host daemon: kernel hotspots over gRPC"
)]
struct Args {
    /// Configuration file [default: /etc/jp/jpd.toml when it exists, else built-in defaults].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Unix socket of the gRPC API [default: server.socket, /run/jp/jpd.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// cpu-clock sampling frequency per CPU [default: kernel.frequency_hz, 997].
    #[arg(long, value_name = "HZ")]
    frequency: Option<u64>,
    /// readprofile bucket size is 2^N bytes [default: kernel.shift, 4].
    #[arg(long, value_name = "N")]
    shift: Option<u32>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (mut config, source) = match Config::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jpd: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = config.override_with(args.socket, args.frequency, args.shift) {
        eprintln!("jpd: {e}");
        return ExitCode::FAILURE;
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(&config.log.level))
        .init();
    match run(&config, &source) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Also on stderr directly: the log level may hide errors.
            eprintln!("jpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// SIGINT and SIGTERM, registered before anything is attached so that a signal
/// during start-up still takes the one shutdown path.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    async fn wait(mut self) {
        let name = tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        };
        log::info!("{name}: shutting down");
    }
}

fn run(config: &Config, source: &Source) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("jpd-rt")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let _enter = rt.enter();
    let signals = Signals::install()?;

    let store = Store::new();
    let collector = KernelCollector::start(config.kernel.options(), store.clone())
        .context("cannot start the kernel collector")?;
    let socket = &config.server.socket;
    let (listener, socket_guard) = server::socket::bind(socket)?;

    let status = collector.status();
    let programs: Vec<&str> = status.programs.iter().map(|p| p.name.as_str()).collect();
    log::info!(
        "jpd {}: config from {source}; attached {} on {} CPUs (cpu-clock {} Hz, shift {}); listening on {}",
        env!("CARGO_PKG_VERSION"),
        if programs.is_empty() { "nothing".to_string() } else { programs.join(", ") },
        status.cpus.len(),
        config.kernel.frequency_hz,
        config.kernel.shift,
        socket.display()
    );
    announce_ready(socket);

    let served = rt.block_on(server::serve(listener, store, signals.wait()));
    // The one shutdown path, whatever ended the server: detach, then unlink.
    collector.shutdown();
    drop(socket_guard);
    log::info!("stopped");
    served
}

/// The readiness signal: one line on stdout, once the socket accepts connections.
/// (systemd `Type=notify` support, a later issue, sends READY=1 from here.)
fn announce_ready(socket: &std::path::Path) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {}", socket.display());
    let _ = out.flush();
}
