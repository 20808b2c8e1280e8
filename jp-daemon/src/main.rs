//! jpd: loads the eBPF samplers, keeps their counts in the stores, serves them over
//! gRPC on a Unix socket (also on TCP with TLS when `server.tcp` is set; and, when
//! enabled, Prometheus metrics and pprof profiles over HTTP) until SIGINT/SIGTERM.
//! SIGHUP reloads the configuration. The daemon's life is [`jp_daemon::daemon`];
//! this binary parses the flags and checks configuration files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use jp_daemon::config::Config;
use jp_daemon::daemon::{self, Overrides};
use jp_daemon::export;
use jp_daemon::server::{auth, tls};

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
    /// Validate FILE as a jpd configuration and exit: 0 if valid, 1 with the file,
    /// line and key of the first error otherwise.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "socket", "frequency", "shift"])]
    check_config: Option<PathBuf>,
}

impl Args {
    /// The flags that win over the file, also after a reload.
    fn overrides(&self) -> Overrides {
        Overrides {
            config: self.config.clone(),
            socket: self.socket.clone(),
            frequency: self.frequency,
            shift: self.shift,
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(file) = &args.check_config {
        return check_config(file);
    }
    let overrides = args.overrides();
    let (config, source) = match overrides.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jpd: {e}");
            return ExitCode::FAILURE;
        }
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(&config.log.level))
        .init();
    match daemon::run(&overrides, config, &source) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Also on stderr directly: the log level may hide errors.
            eprintln!("jpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--check-config FILE`: errors exit 1; facts of this host that would only make jpd
/// degrade (a missing group) are printed as warnings.
fn check_config(file: &Path) -> ExitCode {
    let config = match Config::load(Some(file)) {
        Ok((c, _)) => c,
        Err(e) => {
            eprintln!("jpd: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !config.server.tcp.is_empty() {
        if let Err(e) = tls::load(&config.server) {
            eprintln!("jpd: invalid config {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
        if config.server.tls_client_ca.as_os_str().is_empty() {
            eprintln!(
                "jpd: warning: {}: {}",
                file.display(),
                daemon::open_tcp_warning(&config)
            );
        }
    }
    let group = &config.server.group;
    if !group.is_empty() && auth::group_id(group).is_none() {
        eprintln!(
            "jpd: warning: {}: server.group {group:?} does not exist on this host: only root could use the socket",
            file.display()
        );
    }
    if config.pyroscope.enabled {
        // The secret files are read when the pusher starts: check them now.
        if let Err(e) = export::pyroscope::wire::Files::read(&config.pyroscope) {
            eprintln!("jpd: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    }
    println!("{}: OK", file.display());
    ExitCode::SUCCESS
}
