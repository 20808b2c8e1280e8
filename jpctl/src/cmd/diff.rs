//! `jpctl diff`'s command line and exit codes: 0 when the gate passes (or no gate was
//! asked for), 1 when it fails, 2 when a profile cannot be read or compared.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use regex::Regex;

use super::destination::Destination;
use crate::diff::{self, DiffOptions, Profile};
use crate::output::{self, diff as out};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum DiffFormat {
    Text,
    Json,
    /// A differential flame graph (one self-contained HTML file).
    Html,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The baseline profile: jp-mct/1 JSON (agent out=, `jpctl jvm export --format json`)
    /// or a `jpctl kernel --json` snapshot.
    pub base: PathBuf,
    /// The profile to compare with BASE (of the same kind).
    pub new: PathBuf,
    #[arg(long, value_enum, default_value_t = DiffFormat::Text, conflicts_with = "json")]
    pub format: DiffFormat,
    /// Same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Gate: exit 1 when the whole tree's bytecodes or a method's inclusive bytecodes grew
    /// by more than PCT percent (kernel: a function's share, in percentage points).
    #[arg(long, value_name = "PCT", value_parser = parse_non_negative)]
    pub fail_above: Option<f64>,
    /// Gate only methods whose name (pkg.Class.name(DESC)) matches REGEX.
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    pub method: Option<Regex>,
    /// Ignore contexts and methods with fewer inclusive bytecodes on both sides.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub min_bytecodes: u64,
    /// Gate: exit 1 when NEW has calling contexts BASE has not.
    #[arg(long)]
    pub fail_on_new: bool,
    /// Leave out subtrees rooted at methods matching REGEX, on both sides (code whose
    /// counts differ between runs: thread pools, hash-order or time-dependent code).
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    pub ignore: Option<Regex>,
    /// Rows per table in the text report (0: all).
    #[arg(long, default_value_t = 30, value_name = "N")]
    pub limit: usize,
    /// HTML: merge frames narrower than P percent of the graph.
    #[arg(long, value_name = "P", default_value_t = jp_mct::DEFAULT_MIN_SHARE * 100.0)]
    pub min_frame: f64,
    /// Write the report or page to FILE (whole, or not at all) instead of stdout; `-` for
    /// stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

fn parse_regex(s: &str) -> Result<Regex, String> {
    Regex::new(s).map_err(|e| format!("not a regular expression: {e}"))
}

fn parse_non_negative(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a percentage (a number >= 0)")),
    }
}

pub fn run(a: DiffArgs) -> ExitCode {
    let to = Destination::from_flag(a.output.as_deref());
    let written = compare(&a, &to).and_then(|(report, passed)| {
        to.write(report.text.as_bytes(), report.what)?;
        Ok(passed)
    });
    match written {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("jpctl diff: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The rendered comparison, and how `-o` names it.
struct Report {
    text: String,
    what: &'static str,
}

impl Report {
    fn new(format: DiffFormat, text: String) -> Report {
        let what = match format {
            DiffFormat::Text => "(diff report)",
            DiffFormat::Json => "(diff JSON)",
            DiffFormat::Html => "(HTML differential flame graph)",
        };
        Report { text, what }
    }
}

/// The report and whether the gate passed.
fn compare(a: &DiffArgs, to: &Destination) -> anyhow::Result<(Report, bool)> {
    let o = DiffOptions {
        fail_above: a.fail_above,
        method: a.method.clone(),
        min_bytecodes: a.min_bytecodes,
        fail_on_new: a.fail_on_new,
        ignore: a.ignore.clone(),
        limit: a.limit,
    };
    let format = if a.json { DiffFormat::Json } else { a.format };
    let base = diff::read_profile(&a.base, "BASE")?;
    let new = diff::read_profile(&a.new, "NEW")?;
    let min_share = a.min_frame / 100.0;
    let (text, gate) = match (&base, &new) {
        (Profile::Jvm(b), Profile::Jvm(n)) => {
            diff::check_same_bba(b, n)?;
            let d = diff::jvm::diff_jvm(b, n, &o);
            let text = match format {
                DiffFormat::Text => out::jvm_text(&d, &o),
                DiffFormat::Json => output::to_json(&d),
                DiffFormat::Html => out::html(&diff::jvm::jvm_flame(b, n, &o, &title(a)), min_share)?,
            };
            (text, d.gate)
        }
        (Profile::Kernel(b), Profile::Kernel(n)) => {
            let d = diff::kernel::diff_kernel(b, n, &o);
            let text = match format {
                DiffFormat::Text => out::kernel_text(&d, &o),
                DiffFormat::Json => output::to_json(&d),
                DiffFormat::Html => out::html(&out::kernel_flame_diff(b, n, &o), min_share)?,
            };
            (text, d.gate)
        }
        _ => anyhow::bail!("BASE and NEW are not the same kind of profile (one is a JVM's jp-mct/1 tree, the other a kernel profile)"),
    };
    // The causes go to stderr too when the report does not reach the terminal, so that a
    // CI log shows them whatever the format.
    if format != DiffFormat::Text || to.is_file() {
        for c in &gate.causes {
            eprintln!("FAIL: {c}");
        }
    }
    Ok((Report::new(format, text), gate.passed))
}

fn title(a: &DiffArgs) -> String {
    format!("jp diff: {} → {}", file_name(&a.base), file_name(&a.new))
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
