//! `--format` of the commands that write a JVM's tree (`jvm export`, `jvm profile`,
//! `jvm window`), and what jpd is asked for to write it.
use clap::ValueEnum;
use jp_proto::v1::JvmExportFormat;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ExportFormat {
    /// jp-mct/1, exactly as the agent's out= file.
    Json,
    /// Gzipped pprof (go tool pprof, Speedscope, ...).
    Pprof,
    /// OTLP profiles (opentelemetry-proto v1.10.0): a ProfilesData message, as jpd's
    /// OTLP exporter sends it.
    Otlp,
    /// Folded stacks for flame graphs.
    Folded,
    /// Indented text tree.
    Tree,
    /// A flame graph page (self-contained HTML), drawn here from the json export.
    Html,
}

impl ExportFormat {
    pub fn describe(self) -> &'static str {
        match self {
            ExportFormat::Json => "jp-mct/1 JSON",
            ExportFormat::Pprof => "gzipped pprof",
            ExportFormat::Otlp => "OTLP profiles",
            ExportFormat::Folded => "folded stacks",
            ExportFormat::Tree => "text tree",
            ExportFormat::Html => "HTML flame graph",
        }
    }

    /// What jpd is asked for: a flame graph page is drawn here from the JSON.
    pub fn requested(self) -> JvmExportFormat {
        match self {
            ExportFormat::Json | ExportFormat::Html => JvmExportFormat::Json,
            ExportFormat::Pprof => JvmExportFormat::Pprof,
            ExportFormat::Otlp => JvmExportFormat::Otlp,
            ExportFormat::Folded => JvmExportFormat::Folded,
            ExportFormat::Tree => JvmExportFormat::Tree,
        }
    }
}
