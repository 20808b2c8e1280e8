//! `jpctl kernel`: kernel functions by samples since the last reset, as a table,
//! readprofile's format, JSON or a flame graph page; to stdout or `-o FILE`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use jp_proto::v1::{GetKernelProfileRequest, KernelProfile, ProfileSource};

use super::destination::Destination;
use super::rpc;
use crate::client::Client;
use crate::output::{self, kernel};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Source {
    Timer,
    IrqEntry,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Format {
    Table,
    Readprofile,
    /// A flame graph page (module → function), self-contained HTML.
    Html,
    /// OTLP profiles (opentelemetry-proto v1.10.0): a ProfilesData message, as jpd's
    /// OTLP exporter sends it (timer source only).
    Otlp,
}

#[derive(Args, Debug)]
pub struct KernelArgs {
    /// Show only the N functions with the most samples.
    #[arg(long, value_name = "N")]
    pub top: Option<u32>,
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// timer: where the CPUs spend kernel time (cpu-clock samples);
    /// irq-entry: what kernel code hard IRQs interrupt.
    #[arg(long, value_enum, default_value_t = Source::Timer)]
    pub source: Source,
    /// Write to FILE (whole, or not at all) instead of stdout; `-` for stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub async fn run(c: &mut Client, a: KernelArgs) -> anyhow::Result<()> {
    let source = match a.source {
        Source::Timer => ProfileSource::Timer,
        Source::IrqEntry => ProfileSource::IrqEntry,
    };
    let req = GetKernelProfileRequest {
        top_n: a.top.unwrap_or(0),
        include_buckets: false,
        source: source as i32,
        otlp: req_otlp(&a),
    };
    let p = c.get_kernel_profile(req).await.map_err(rpc)?.into_inner();
    if req_otlp(&a) {
        return Destination::from_flag(a.output.as_deref()).write(&p.otlp, "(OTLP profiles)");
    }
    let (text, what) = render(&p, &a)?;
    Destination::from_flag(a.output.as_deref()).write(text.as_bytes(), what)
}

/// Whether the OTLP message is what is written.
fn req_otlp(a: &KernelArgs) -> bool {
    !a.json && a.format == Format::Otlp
}

/// The profile in the format asked for, and how `-o` names it.
fn render(p: &KernelProfile, a: &KernelArgs) -> anyhow::Result<(String, &'static str)> {
    Ok(if a.json {
        (
            output::to_json(&kernel::kernel_json(p)),
            "(kernel profile JSON)",
        )
    } else {
        match a.format {
            Format::Html => (kernel::flame::html(p)?, "(HTML flame graph)"),
            Format::Readprofile => (kernel::readprofile(p), "(readprofile format)"),
            Format::Table | Format::Otlp => (kernel::kernel_text(p), "(kernel profile table)"),
        }
    })
}
