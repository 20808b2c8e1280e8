//! `cargo xtask`: the project's only entry points. `setup` installs what is missing,
//! `build` puts the deliverables in `target/jp/`, `test` does both and runs every
//! test (or one suite), `run` starts jpd in the foreground, `bench` measures and writes BENCHMARKS.md.
mod bench;
mod build;
mod cmd;
mod house;
mod install;
mod setup;
mod test;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "jp's build, test and benchmark tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install every missing prerequisite (Debian packages, rust-src, bpf-linker). Idempotent.
    Setup,
    /// Build everything in release mode into target/jp/.
    Build,
    /// setup, build, then run every test (eBPF and JVM tests need root); with --suite,
    /// build only what that suite runs and run only it.
    ///
    /// Without --suite: formatting check, the whole build, every test binary, the unit
    /// tests again in debug, clippy. Every test binary belongs to one suite.
    Test {
        /// Only this suite: its deliverables are built, its tests run (no fmt, no clippy).
        #[arg(long, value_enum)]
        suite: Option<test::Suite>,
        /// Extra arguments passed to `cargo test` after `--` (e.g. a test name filter);
        /// --suite goes before them.
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Build and start jpd in the foreground (extra arguments go to jpd).
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build, then install jpd, jpctl, the agent, the systemd unit and /etc/jp/jpd.toml.
    Install {
        /// Installation prefix (binaries in PREFIX/bin, the unit in PREFIX/lib/systemd/system).
        #[arg(long, default_value = install::DEFAULT_PREFIX)]
        prefix: std::path::PathBuf,
        /// Where jp/jpd.toml goes (never overwritten).
        #[arg(long, default_value = "/etc")]
        sysconfdir: std::path::PathBuf,
        /// Stage everything under this directory (for packaging).
        #[arg(long)]
        destdir: Option<std::path::PathBuf>,
    },
    /// Check the house rules (function and file lengths, argument lists, no tracker
    /// numbers outside docs/journal/); `cargo xtask test` checks them too.
    House,
    /// Measure and write the results to BENCHMARKS.md.
    Bench {
        #[command(subcommand)]
        which: bench::Which,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::run(),
        Task::Build => {
            setup::run()?;
            build::run().map(|_| ())
        }
        Task::Test { suite, args } => test::run(suite, &args),
        Task::Run { args } => {
            setup::run()?;
            let out = build::run()?;
            cmd::exec_replace(&out.jpd, &args)
        }
        Task::Install {
            prefix,
            sysconfdir,
            destdir,
        } => {
            setup::run()?;
            let out = build::run()?;
            let opts = install::Options {
                prefix,
                sysconfdir,
                destdir,
            };
            install::install(&out, &install::Sources::from_repo(), &opts)?;
            eprintln!("xtask: next: groupadd --system jp; systemctl daemon-reload; systemctl enable --now jpd");
            Ok(())
        }
        Task::House => house::run(),
        Task::Bench { which } => bench::run(which),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_passes_everything_after_the_separator_to_jpd() {
        let cli = Cli::try_parse_from(["xtask", "run", "--", "--socket", "/tmp/jp.sock"]).unwrap();
        match cli.task {
            Task::Run { args } => assert_eq!(args, ["--socket", "/tmp/jp.sock"]),
            _ => panic!("not the run task"),
        }
        let cli = Cli::try_parse_from(["xtask", "run", "--frequency", "99"]).unwrap();
        match cli.task {
            Task::Run { args } => assert_eq!(args, ["--frequency", "99"]),
            _ => panic!("not the run task"),
        }
    }

    #[test]
    fn test_takes_a_suite_and_a_filter() {
        let cli = Cli::try_parse_from(["xtask", "test", "--suite", "api", "limits"]).unwrap();
        match cli.task {
            Task::Test { suite, args } => {
                assert_eq!(suite, Some(test::Suite::Api));
                assert_eq!(args, ["limits"]);
            }
            _ => panic!("not the test task"),
        }
        let cli =
            Cli::try_parse_from(["xtask", "test", "--suite", "e2e", "--", "--nocapture"]).unwrap();
        match cli.task {
            Task::Test { suite, args } => {
                assert_eq!(suite, Some(test::Suite::E2e));
                assert_eq!(args, ["--nocapture"]);
            }
            _ => panic!("not the test task"),
        }
        let cli = Cli::try_parse_from(["xtask", "test", "limits"]).unwrap();
        match cli.task {
            Task::Test { suite, args } => {
                assert_eq!(suite, None);
                assert_eq!(args, ["limits"]);
            }
            _ => panic!("not the test task"),
        }
        assert!(Cli::try_parse_from(["xtask", "test", "--suite", "nope"]).is_err());
    }
}
