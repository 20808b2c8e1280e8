//! The commands `Agent_OnAttach` takes (HotSpot's `load` of the library with an option
//! string): open or close an exact window. Comma-separated `key=value`, like the start
//! options; the window's scope and BBA default to the start options.

use crate::classfile::Bba;
use crate::options::{prefixes, Options};

/// `Agent_OnAttach`'s return codes, which HotSpot hands back to the attacher.
pub mod code {
    pub const ACCEPTED: i32 = 0;
    pub const BAD_COMMAND: i32 = 1;
    pub const WINDOW_OPEN: i32 = 2;
    /// The JVM is profiled from start (`mode=live`): its live tree is already exact.
    pub const PROFILED_FROM_START: i32 = 3;
    pub const JVMTI_REFUSED: i32 = 4;
    pub const NO_SUCH_WINDOW: i32 = 5;
}

/// Longest window a command may ask for, in seconds.
pub const MAX_SECONDS: u32 = 3600;

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Empty options: load the agent (dormant) and do nothing else.
    Load,
    Open(OpenWindow),
    Close {
        id: u64,
        dir: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpenWindow {
    pub id: u64,
    pub seconds: u32,
    /// Where the result goes, as the JVM sees it (absolute).
    pub dir: String,
    pub include: Option<Vec<String>>,
    pub exclude: Option<Vec<String>>,
    pub bba: Option<Bba>,
    pub jdk: Option<bool>,
    /// The scope as asked (`include=…;exclude=…`), for the result's `scope` line.
    pub scope_text: String,
}

/// A command that cannot be run: the reason, and where to write it if the command said.
#[derive(Debug, PartialEq, Eq)]
pub struct CommandError {
    pub id: Option<u64>,
    pub dir: Option<String>,
    pub reason: String,
}

impl OpenWindow {
    /// The options the window's rewrites and filter use: the start options with the
    /// command's scope and BBA.
    pub fn options(&self, start: &Options) -> Options {
        let mut o = start.clone();
        if let Some(i) = &self.include {
            o.include = i.clone();
        }
        if let Some(e) = &self.exclude {
            o.exclude = e.clone();
        }
        if let Some(b) = self.bba {
            o.bba = b;
        }
        if let Some(j) = self.jdk {
            o.jdk = j;
        }
        o
    }
}

impl Command {
    pub fn parse(s: &str) -> Result<Command, CommandError> {
        let mut kv = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((k, v)) = item.split_once('=') else {
                return Err(CommandError {
                    id: None,
                    dir: None,
                    reason: format!("'{item}': expected key=value"),
                });
            };
            kv.push((k.trim(), v.trim()));
        }
        if kv.is_empty() {
            return Ok(Command::Load);
        }
        let get = |key: &str| kv.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let id = get("id").and_then(|v| v.parse::<u64>().ok());
        let dir = get("dir")
            .filter(|d| d.starts_with('/'))
            .map(str::to_string);
        let fail = |reason: String| CommandError {
            id,
            dir: dir.clone(),
            reason,
        };
        for (k, _) in &kv {
            if !matches!(
                *k,
                "window" | "id" | "seconds" | "dir" | "include" | "exclude" | "bba" | "jdk"
            ) {
                return Err(fail(format!(
                    "unknown key '{k}' (known: window, id, seconds, dir, include, exclude, bba, jdk)"
                )));
            }
        }
        let id = id.ok_or_else(|| fail("id=ID (an unsigned 64-bit number) is required".into()))?;
        match get("window") {
            Some("close") => Ok(Command::Close { id, dir }),
            Some("open") => Self::parse_open(id, dir.clone(), &get).map_err(fail),
            _ => Err(fail("expected window=open or window=close".into())),
        }
    }

    fn parse_open<'a>(
        id: u64,
        dir: Option<String>,
        get: &dyn Fn(&str) -> Option<&'a str>,
    ) -> Result<Command, String> {
        let seconds = get("seconds")
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|s| (1..=MAX_SECONDS).contains(s))
            .ok_or(format!("seconds=S from 1 to {MAX_SECONDS} is required"))?;
        let dir = dir.ok_or("dir=DIR (an absolute directory) is required")?;
        let bba = match get("bba") {
            None => None,
            Some("default") => Some(Bba::Default),
            Some("precise") => Some(Bba::Precise),
            Some(v) => return Err(format!("bba={v}: expected default or precise")),
        };
        let jdk = match get("jdk") {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(v) => return Err(format!("jdk={v}: expected true or false")),
        };
        let include = get("include").map(prefixes);
        let exclude = get("exclude").map(prefixes);
        let mut scope = Vec::new();
        if let Some(i) = get("include") {
            scope.push(format!("include={i}"));
        }
        if let Some(e) = get("exclude") {
            scope.push(format!("exclude={e}"));
        }
        let scope_text = if scope.is_empty() {
            "all application classes".to_string()
        } else {
            scope.join(" ")
        };
        Ok(Command::Open(OpenWindow {
            id,
            seconds,
            dir,
            include,
            exclude,
            bba,
            jdk,
            scope_text,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_a_load() {
        assert_eq!(Command::parse(""), Ok(Command::Load));
        assert_eq!(Command::parse(" , "), Ok(Command::Load));
    }

    #[test]
    fn open_with_every_key() {
        let c = Command::parse(
            "window=open,id=7,seconds=30,dir=/tmp/w,include=com.a;org/b,exclude=com.a.Gen,bba=precise,jdk=false",
        )
        .unwrap();
        let Command::Open(w) = c else { panic!("{c:?}") };
        assert_eq!((w.id, w.seconds, w.dir.as_str()), (7, 30, "/tmp/w"));
        assert_eq!(w.include, Some(vec!["com/a".into(), "org/b".into()]));
        assert_eq!(w.exclude, Some(vec!["com/a/Gen".into()]));
        assert_eq!((w.bba, w.jdk), (Some(Bba::Precise), Some(false)));
        assert_eq!(w.scope_text, "include=com.a;org/b exclude=com.a.Gen");
        let start = Options::parse("bba=default,include=x,jdk=true").unwrap();
        let o = w.options(&start);
        assert_eq!((o.bba, o.jdk), (Bba::Precise, false));
        assert_eq!(o.include, vec!["com/a".to_string(), "org/b".to_string()]);
    }

    #[test]
    fn open_defaults_to_the_start_options() {
        let Ok(Command::Open(w)) = Command::parse("window=open,id=1,seconds=2,dir=/d") else {
            panic!()
        };
        assert_eq!(w.scope_text, "all application classes");
        let start = Options::parse("bba=precise,exclude=a.B").unwrap();
        assert_eq!(w.options(&start), start);
    }

    #[test]
    fn close() {
        assert_eq!(
            Command::parse("window=close,id=3"),
            Ok(Command::Close { id: 3, dir: None })
        );
    }

    #[test]
    fn bad_commands_say_why_and_keep_where_to_write_it() {
        for (s, id, has_dir, why) in [
            (
                "window=open,id=1,seconds=0,dir=/d",
                Some(1),
                true,
                "seconds",
            ),
            (
                "window=open,id=1,seconds=3601,dir=/d",
                Some(1),
                true,
                "seconds",
            ),
            ("window=open,id=1,seconds=5", Some(1), false, "dir"),
            ("window=open,id=1,seconds=5,dir=rel", Some(1), false, "dir"),
            ("window=open,seconds=5,dir=/d", None, true, "id"),
            ("window=open,id=x,seconds=5,dir=/d", None, true, "id"),
            ("window=shut,id=1,dir=/d", Some(1), true, "window=open"),
            (
                "window=open,id=1,seconds=5,dir=/d,bba=fast",
                Some(1),
                true,
                "bba",
            ),
            (
                "window=open,id=1,seconds=5,dir=/d,colour=red",
                Some(1),
                true,
                "colour",
            ),
            ("window", None, false, "key=value"),
        ] {
            let e = Command::parse(s).unwrap_err();
            assert_eq!(e.id, id, "{s}");
            assert_eq!(e.dir.is_some(), has_dir, "{s}");
            assert!(e.reason.contains(why), "{s}: {}", e.reason);
        }
    }
}
