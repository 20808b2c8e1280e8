//! The agent's option string: comma-separated `key=value` (the table: docs/agent-design.md,
//! "Options").

use crate::classfile::Bba;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Pprof,
    Folded,
    /// A self-contained flame graph page.
    Html,
    Tree,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Pprof => "pprof",
            Format::Folded => "folded",
            Format::Html => "html",
            Format::Tree => "tree",
        }
    }
    fn default_file(self) -> &'static str {
        match self {
            Format::Json => "jp-profile.json",
            Format::Pprof => "jp-profile.pb.gz",
            Format::Folded => "jp-profile.folded",
            Format::Html => "jp-profile.html",
            Format::Tree => "jp-profile.txt",
        }
    }
}

/// Which profiler the runtime runs, resolved from `profiler=` and `out=` together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Profiling {
    /// The built-in file writer alone (`profiler=file`).
    File,
    /// The built-in live view for jpd alone (the default without `out=`): no file.
    Usdt,
    /// Both: `out=FILE` without `profiler=`, or `profiler=usdt,out=FILE`.
    FileAndUsdt,
    /// A `jp.rt.Profiler` class.
    Custom(String),
}

impl Profiling {
    /// The name `jp.rt.Rt.init` understands.
    pub fn java_name(&self) -> &str {
        match self {
            Profiling::File => "file",
            Profiling::Usdt => "usdt",
            Profiling::FileAndUsdt => "file+usdt",
            Profiling::Custom(c) => c,
        }
    }

    pub fn writes_file(&self) -> bool {
        matches!(self, Profiling::File | Profiling::FileAndUsdt)
    }

    pub fn usdt(&self) -> bool {
        matches!(self, Profiling::Usdt | Profiling::FileAndUsdt)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub bba: Bba,
    /// `granularity=N`: given, threads report every N bytecodes (JP's pacing) unless
    /// `report_interval_ms=` is given too; see [`Options::granularity`].
    pub granularity: Option<i32>,
    /// Resolved from `profiler=` and `out=` (see [`Profiling`]).
    pub profiler: Profiling,
    /// Explicit `out=`; see [`Options::out_path`].
    pub out: Option<String>,
    /// `usdt_tap=FILE`: act as if a tracer were attached and append every record fired to
    /// FILE (each behind its `u32` little-endian length). A debugging and testing aid.
    pub usdt_tap: Option<String>,
    pub format: Format,
    /// Internal class name prefixes (slashes).
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub jdk: bool,
    /// Print agent statistics at VM death.
    pub stats: bool,
    /// Print a line per class that could not be rewritten (default on).
    pub warn: bool,
    /// Print the start-up banner and the "wrote FILE" line at exit. Off by default:
    /// services often parse their stderr, and an always-on profiler must not add to it.
    /// Errors and warnings are printed either way.
    pub verbose: bool,
    /// `max_contexts=N`: calling contexts the live threads' trees may hold together, and
    /// each merged tree of ended threads. Past it, new contexts fold into an overflow node
    /// under their parent, counted. `None`: a sixteenth of the heap's limit at 64 bytes a
    /// context; `Some(0)`: no limit.
    pub max_contexts: Option<u64>,
    /// `max_thread_contexts=N`: the same for one thread's tree (0: only the JVM's limit).
    pub max_thread_contexts: u64,
    /// `report_budget=PERCENT`: the share of a thread's time the live view's sends may take.
    /// A report sends only once the thread has run (100 - P)/P times as long as its last
    /// send took (a delta send visits what changed, a resync the whole tree); skipped
    /// reports lose nothing, the next send carries the counts since. 100 sends at every
    /// report.
    pub report_budget: u8,
    /// `publish=`: where threads publish their current context for jpd's sampler.
    pub publish: Publish,
    /// `report_interval_ms=MS`: how often each thread reports to the profiler, paced by time:
    /// a timer marks the threads due and each reports at its next entry or loop head. A
    /// per-call countdown of bytecodes cost real programs 7-14 %
    /// (docs/journal/activation-counter-and-pacing.md), a flag read costs nothing measurable.
    /// None: not given (10 ms, unless `granularity=` alone asks for bytecodes).
    pub report_interval_ms: Option<u32>,
    /// `mode=`: profiled from start (`live`, the default) or only in exact windows
    /// (`dormant`: the agent instruments nothing until a window opens).
    pub mode: Mode,
}

/// `mode=`: how the agent starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Profiled from start: every class is rewritten as it loads; windows are refused.
    Live,
    /// Loaded, instrumenting nothing: exact windows instrument a scope for a while.
    Dormant,
}

/// Where a thread publishes its current context for jpd's sampler (usdt profiler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    /// `false`: nowhere, so jpd's sampler counts this JVM's CPU by thread kind only (no
    /// CPU per context), and calls and returns store nothing.
    Off,
    /// `slot`: in a native context slot, stored into at every context change.
    Slot,
    /// `true`: on the heap, in the field the agent keeps its current context in anyway,
    /// where the JVM's collector allows it (not ZGC, not Shenandoah, which move objects
    /// while threads run); else in a slot.
    Heap,
}

impl Publish {
    /// The value `Rt.init` takes (`Rt.PUBLISH_*`).
    pub fn java_value(self) -> i32 {
        match self {
            Publish::Off => 0,
            Publish::Slot => 1,
            Publish::Heap => 2,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bba: Bba::Default,
            granularity: None,
            profiler: Profiling::Usdt,
            out: None,
            usdt_tap: None,
            format: Format::Json,
            include: Vec::new(),
            exclude: Vec::new(),
            jdk: false,
            stats: false,
            warn: true,
            verbose: false,
            max_contexts: None,
            max_thread_contexts: 0,
            report_budget: 2,
            publish: Publish::Heap,
            report_interval_ms: None,
            mode: Mode::Live,
        }
    }
}

/// A bad option: printed as `jp-agent: bad option 'KEY=VALUE': REASON`.
#[derive(Debug, PartialEq, Eq)]
pub struct OptionError {
    pub option: String,
    pub reason: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad option '{}': {}", self.option, self.reason)
    }
}

impl std::error::Error for OptionError {}

fn bool_value(v: &str) -> Option<bool> {
    match v {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// Bytecodes between two reports paced by bytecodes when `granularity=` is not given.
const DEFAULT_GRANULARITY: i32 = 10_000_000;

const COUNT: &str = "expected a number of contexts (0: no limit), such as 2000000";

/// A context count; at most 2^62, so that the runtime's arithmetic on it never overflows.
fn context_count(v: &str) -> Option<u64> {
    v.parse::<u64>().ok().filter(|&n| n <= 1 << 62)
}

/// `;`-separated class-name prefixes, dots or slashes, as internal names' prefixes.
pub(crate) fn prefixes(v: &str) -> Vec<String> {
    v.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.replace('.', "/"))
        .collect()
}

impl Options {
    pub fn parse(s: &str) -> Result<Options, OptionError> {
        let mut o = Options::default();
        let mut profiler: Option<String> = None;
        let mut tap_item = String::new();
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let bad = |reason: &str| OptionError {
                option: item.to_string(),
                reason: reason.to_string(),
            };
            let Some((key, value)) = item.split_once('=') else {
                return Err(bad("expected key=value"));
            };
            match key.trim() {
                "bba" => {
                    o.bba = match value {
                        "default" => Bba::Default,
                        "precise" => Bba::Precise,
                        _ => return Err(bad("expected default or precise")),
                    }
                }
                "granularity" => {
                    o.granularity = match value.parse::<i64>() {
                        Ok(g) if (1..=i64::from(i32::MAX)).contains(&g) => Some(g as i32),
                        _ => return Err(bad("expected an integer from 1 to 2147483647")),
                    };
                }
                "report_interval_ms" => {
                    o.report_interval_ms = match value.parse::<u32>() {
                        Ok(ms) if (1..=60_000).contains(&ms) => Some(ms),
                        _ => return Err(bad("expected milliseconds from 1 to 60000")),
                    };
                }
                "profiler" => {
                    let ok = !value.is_empty()
                        && value
                            .split('.')
                            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$'));
                    if !ok {
                        return Err(bad("expected 'file', 'usdt' or a Java class name"));
                    }
                    profiler = Some(value.to_string());
                }
                "usdt_tap" => {
                    if value.is_empty() {
                        return Err(bad("expected a file path"));
                    }
                    o.usdt_tap = Some(value.to_string());
                    tap_item = item.to_string();
                }
                "out" => {
                    if value.is_empty() {
                        return Err(bad("expected a file path"));
                    }
                    o.out = Some(value.to_string());
                }
                "format" => {
                    o.format = match value {
                        "json" => Format::Json,
                        "pprof" => Format::Pprof,
                        "folded" => Format::Folded,
                        "html" => Format::Html,
                        "tree" => Format::Tree,
                        _ => return Err(bad("expected json, pprof, folded, tree or html")),
                    }
                }
                "include" => o.include.extend(prefixes(value)),
                "exclude" => o.exclude.extend(prefixes(value)),
                "jdk" => o.jdk = bool_value(value).ok_or_else(|| bad("expected true or false"))?,
                "stats" => o.stats = bool_value(value).ok_or_else(|| bad("expected true or false"))?,
                "warn" => o.warn = bool_value(value).ok_or_else(|| bad("expected true or false"))?,
                "verbose" => {
                    o.verbose = bool_value(value).ok_or_else(|| bad("expected true or false"))?
                }
                "max_contexts" => {
                    o.max_contexts = Some(context_count(value).ok_or_else(|| bad(COUNT))?)
                }
                "max_thread_contexts" => {
                    o.max_thread_contexts = context_count(value).ok_or_else(|| bad(COUNT))?
                }
                "publish" => {
                    o.publish = match value {
                        "slot" => Publish::Slot,
                        v => match bool_value(v) {
                            Some(true) => Publish::Heap,
                            Some(false) => Publish::Off,
                            None => return Err(bad("expected true, false or slot")),
                        },
                    }
                }
                "mode" => {
                    o.mode = match value {
                        "live" => Mode::Live,
                        "dormant" => Mode::Dormant,
                        _ => return Err(bad("expected live or dormant")),
                    }
                }
                "report_budget" => {
                    o.report_budget = match value.parse::<u8>() {
                        Ok(p) if (1..=100).contains(&p) => p,
                        _ => return Err(bad("expected a percentage from 1 to 100")),
                    }
                }
                _ => {
                    return Err(bad(
                        "unknown key (known: bba, granularity, profiler, out, format, include, exclude, jdk, stats, warn, verbose, usdt_tap, max_contexts, max_thread_contexts, report_budget, publish, report_interval_ms, mode)",
                    ))
                }
            }
        }
        o.profiler = match profiler.as_deref() {
            None if o.out.is_some() => Profiling::FileAndUsdt,
            None => Profiling::Usdt,
            Some("file") => Profiling::File,
            Some("usdt") if o.out.is_some() => Profiling::FileAndUsdt,
            Some("usdt") => Profiling::Usdt,
            Some(class) => Profiling::Custom(class.to_string()),
        };
        if o.usdt_tap.is_some() && !o.profiler.usdt() {
            return Err(OptionError {
                option: tap_item,
                reason: format!(
                    "needs the usdt profiler (profiler={} does not fire probes)",
                    o.profiler.java_name()
                ),
            });
        }
        Ok(o)
    }

    /// Where the built-in `file` profiler (and `Rt.writeProfile`) writes: `out=` or a
    /// default file in the cwd.
    pub fn out_path(&self) -> String {
        self.out
            .clone()
            .unwrap_or_else(|| self.format.default_file().to_string())
    }

    pub fn bba_name(&self) -> &'static str {
        match self.bba {
            Bba::Default => "default",
            Bba::Precise => "precise",
        }
    }

    /// Bytecodes between two reports when they are paced by bytecodes (JP's default when
    /// `granularity=` is not given).
    pub fn granularity(&self) -> i32 {
        self.granularity.unwrap_or(DEFAULT_GRANULARITY)
    }

    /// The interval at which threads report, in ms; 0: every `granularity` bytecodes
    /// (when `granularity=` was given without `report_interval_ms=`).
    pub fn report_pace_ms(&self) -> i32 {
        match self.report_interval_ms {
            Some(ms) => i32::try_from(ms).unwrap_or(i32::MAX),
            None if self.granularity.is_some() => 0,
            None => 10,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_paced_by_time_unless_only_a_granularity_is_given() {
        assert_eq!(Options::parse("").unwrap().report_pace_ms(), 10);
        assert_eq!(
            Options::parse("report_interval_ms=250")
                .unwrap()
                .report_pace_ms(),
            250
        );
        assert_eq!(
            Options::parse("granularity=5000").unwrap().report_pace_ms(),
            0
        );
        let both = Options::parse("granularity=5000,report_interval_ms=3").unwrap();
        assert_eq!((both.granularity(), both.report_pace_ms()), (5000, 3));
    }

    #[test]
    fn defaults() {
        let o = Options::parse("").unwrap();
        assert_eq!(o, Options::default());
        assert_eq!(o.out_path(), "jp-profile.json");
        assert_eq!(o.granularity(), 10_000_000);
        // Without out= the agent writes no file: the live view only.
        assert_eq!(o.profiler, Profiling::Usdt);
        assert!(!o.profiler.writes_file() && o.profiler.usdt());
        assert_eq!(o.usdt_tap, None);
    }

    #[test]
    fn profiler_and_out_combine() {
        for (s, want) in [
            ("out=p.json", Profiling::FileAndUsdt),
            ("profiler=file", Profiling::File),
            ("profiler=file,out=p.json", Profiling::File),
            ("profiler=usdt", Profiling::Usdt),
            ("profiler=usdt,out=p.json", Profiling::FileAndUsdt),
            ("out=p.json,profiler=usdt", Profiling::FileAndUsdt),
            ("profiler=a.B", Profiling::Custom("a.B".into())),
            ("profiler=a.B,out=p.json", Profiling::Custom("a.B".into())),
        ] {
            assert_eq!(Options::parse(s).unwrap().profiler, want, "for {s}");
        }
        assert_eq!(Profiling::FileAndUsdt.java_name(), "file+usdt");
        assert!(Profiling::FileAndUsdt.writes_file() && Profiling::FileAndUsdt.usdt());
        assert!(Profiling::File.writes_file() && !Profiling::File.usdt());
        let c = Profiling::Custom("a.B".into());
        assert!(!c.writes_file() && !c.usdt());
        assert_eq!(c.java_name(), "a.B");
    }

    #[test]
    fn usdt_tap_needs_usdt() {
        let o = Options::parse("usdt_tap=/tmp/t.bin").unwrap();
        assert_eq!(o.usdt_tap.as_deref(), Some("/tmp/t.bin"));
        assert_eq!(o.profiler, Profiling::Usdt);
        let o = Options::parse("out=a.json,usdt_tap=t").unwrap();
        assert_eq!(o.profiler, Profiling::FileAndUsdt);
        for s in ["profiler=file,usdt_tap=t", "usdt_tap=t,profiler=a.B"] {
            let e = Options::parse(s).unwrap_err();
            assert_eq!(e.option, "usdt_tap=t", "for {s}");
            assert!(e.reason.contains("usdt"), "{e}");
        }
    }

    #[test]
    fn all_keys() {
        let o = Options::parse(
            "bba=precise,granularity=5000,profiler=com.x.P,out=/tmp/p.txt,format=tree,\
             include=a.b;c/d,exclude=e.F,jdk=true,stats=true,warn=false,verbose=true,\
             max_contexts=2000000,max_thread_contexts=100000,report_budget=100,publish=false",
        )
        .unwrap();
        assert_eq!(o.bba, Bba::Precise);
        assert_eq!(o.granularity(), 5000);
        assert_eq!(o.profiler, Profiling::Custom("com.x.P".into()));
        assert_eq!(o.out_path(), "/tmp/p.txt");
        assert_eq!(o.format, Format::Tree);
        assert_eq!(o.include, vec!["a/b".to_string(), "c/d".to_string()]);
        assert_eq!(o.exclude, vec!["e/F".to_string()]);
        assert!(o.jdk && o.stats && !o.warn && o.verbose);
        assert!(!Options::default().verbose, "quiet unless asked");
        assert_eq!(o.max_contexts, Some(2_000_000));
        assert_eq!(o.max_thread_contexts, 100_000);
        let d = Options::default();
        assert_eq!((d.max_contexts, d.max_thread_contexts), (None, 0));
        assert_eq!((o.report_budget, d.report_budget), (100, 2));
        assert_eq!((o.publish, d.publish), (Publish::Off, Publish::Heap));
        assert_eq!(d.mode, Mode::Live, "profiled from start unless asked");
        assert_eq!(Options::parse("mode=dormant").unwrap().mode, Mode::Dormant);
        assert_eq!(
            Options::parse("publish=slot").unwrap().publish,
            Publish::Slot
        );
        assert_eq!(
            Options::parse("max_contexts=0").unwrap().max_contexts,
            Some(0)
        );
    }

    #[test]
    fn default_out_follows_format() {
        assert_eq!(
            Options::parse("format=pprof").unwrap().out_path(),
            "jp-profile.pb.gz"
        );
        assert_eq!(
            Options::parse("format=folded").unwrap().out_path(),
            "jp-profile.folded"
        );
    }

    #[test]
    fn bad_options_name_the_option() {
        for (s, opt) in [
            ("bba=fast", "bba=fast"),
            ("granularity=0", "granularity=0"),
            ("granularity=3000000000", "granularity=3000000000"),
            ("format=xml", "format=xml"),
            ("jdk=maybe", "jdk=maybe"),
            ("colour=blue", "colour=blue"),
            ("bba=default,nokey", "nokey"),
            ("profiler=a..b", "profiler=a..b"),
            ("out=", "out="),
            ("usdt_tap=", "usdt_tap="),
            ("max_contexts=-1", "max_contexts=-1"),
            ("report_budget=0", "report_budget=0"),
            ("report_interval_ms=0", "report_interval_ms=0"),
            ("report_interval_ms=60001", "report_interval_ms=60001"),
            ("report_budget=101", "report_budget=101"),
            ("report_budget=5%", "report_budget=5%"),
            ("publish=sometimes", "publish=sometimes"),
            ("mode=asleep", "mode=asleep"),
            ("max_contexts=lots", "max_contexts=lots"),
            (
                "max_thread_contexts=99999999999999999999",
                "max_thread_contexts=99999999999999999999",
            ),
        ] {
            let e = Options::parse(s).unwrap_err();
            assert_eq!(e.option, opt, "for {s}");
            assert!(e.to_string().starts_with(&format!("bad option '{opt}': ")));
        }
    }
}
