//! The agent's option string: comma-separated `key=value` (see notes/agent-contract.md).

use crate::classfile::Bba;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Pprof,
    Folded,
    Tree,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Pprof => "pprof",
            Format::Folded => "folded",
            Format::Tree => "tree",
        }
    }
    fn default_file(self) -> &'static str {
        match self {
            Format::Json => "jp-profile.json",
            Format::Pprof => "jp-profile.pb.gz",
            Format::Folded => "jp-profile.folded",
            Format::Tree => "jp-profile.txt",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub bba: Bba,
    pub granularity: i32,
    /// `file` (built-in) or a class name.
    pub profiler: String,
    /// Explicit `out=`; see [`Options::out_path`].
    pub out: Option<String>,
    pub format: Format,
    /// Internal class name prefixes (slashes).
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub jdk: bool,
    /// Print agent statistics at VM death.
    pub stats: bool,
    /// Print a line per class that could not be rewritten (default on).
    pub warn: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bba: Bba::Default,
            granularity: 10_000_000,
            profiler: "file".into(),
            out: None,
            format: Format::Json,
            include: Vec::new(),
            exclude: Vec::new(),
            jdk: false,
            stats: false,
            warn: true,
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

fn prefixes(v: &str) -> Vec<String> {
    v.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.replace('.', "/"))
        .collect()
}

impl Options {
    pub fn parse(s: &str) -> Result<Options, OptionError> {
        let mut o = Options::default();
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
                        Ok(g) if (1..=i64::from(i32::MAX)).contains(&g) => g as i32,
                        _ => return Err(bad("expected an integer from 1 to 2147483647")),
                    }
                }
                "profiler" => {
                    let ok = !value.is_empty()
                        && value
                            .split('.')
                            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$'));
                    if !ok {
                        return Err(bad("expected 'file' or a Java class name"));
                    }
                    o.profiler = value.to_string();
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
                        "tree" => Format::Tree,
                        _ => return Err(bad("expected json, pprof, folded or tree")),
                    }
                }
                "include" => o.include.extend(prefixes(value)),
                "exclude" => o.exclude.extend(prefixes(value)),
                "jdk" => o.jdk = bool_value(value).ok_or_else(|| bad("expected true or false"))?,
                "stats" => o.stats = bool_value(value).ok_or_else(|| bad("expected true or false"))?,
                "warn" => o.warn = bool_value(value).ok_or_else(|| bad("expected true or false"))?,
                _ => {
                    return Err(bad(
                        "unknown key (known: bba, granularity, profiler, out, format, include, exclude, jdk, stats, warn)",
                    ))
                }
            }
        }
        Ok(o)
    }

    /// Where the built-in `file` profiler writes: `out=` or a default file in the cwd.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let o = Options::parse("").unwrap();
        assert_eq!(o, Options::default());
        assert_eq!(o.out_path(), "jp-profile.json");
        assert_eq!(o.granularity, 10_000_000);
        assert_eq!(o.profiler, "file");
    }

    #[test]
    fn all_keys() {
        let o = Options::parse(
            "bba=precise,granularity=5000,profiler=com.x.P,out=/tmp/p.txt,format=tree,\
             include=a.b;c/d,exclude=e.F,jdk=true,stats=true,warn=false",
        )
        .unwrap();
        assert_eq!(o.bba, Bba::Precise);
        assert_eq!(o.granularity, 5000);
        assert_eq!(o.profiler, "com.x.P");
        assert_eq!(o.out_path(), "/tmp/p.txt");
        assert_eq!(o.format, Format::Tree);
        assert_eq!(o.include, vec!["a/b".to_string(), "c/d".to_string()]);
        assert_eq!(o.exclude, vec!["e/F".to_string()]);
        assert!(o.jdk && o.stats && !o.warn);
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
        ] {
            let e = Options::parse(s).unwrap_err();
            assert_eq!(e.option, opt, "for {s}");
            assert!(e.to_string().starts_with(&format!("bad option '{opt}': ")));
        }
    }
}
