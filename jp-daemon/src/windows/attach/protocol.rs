//! HotSpot's attach protocol, version 1 (the one `jcmd` and jattach speak, understood by
//! every HotSpot since JDK 6): the request is NUL-terminated strings — the version, the
//! command, then exactly three arguments (missing ones empty) — and the reply is the
//! command's status on the first line, then its output, until the JVM closes the socket.
//! `load`'s output starts with `return code: N`, the agent's `Agent_OnAttach` result.

/// The protocol version jpd speaks.
const VERSION: &str = "1";
/// Arguments a version-1 request carries.
pub const ARGS: usize = 3;
/// HotSpot's limits for a version-1 request: command name and each argument, in bytes.
pub const MAX_NAME_BYTES: usize = 16;
pub const MAX_ARG_BYTES: usize = 1024;

/// What a request cannot carry.
#[derive(Debug, PartialEq, Eq)]
pub enum RequestError {
    TooManyArgs(usize),
    TooLong {
        what: String,
        bytes: usize,
        max: usize,
    },
    Nul(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::TooManyArgs(n) => write!(f, "{n} arguments (at most {ARGS})"),
            RequestError::TooLong { what, bytes, max } => {
                write!(f, "{what} is {bytes} bytes (at most {max})")
            }
            RequestError::Nul(what) => write!(f, "{what} contains a NUL byte"),
        }
    }
}

/// The bytes of a version-1 request for `command` with `args`.
pub fn request(command: &str, args: &[&str]) -> Result<Vec<u8>, RequestError> {
    if args.len() > ARGS {
        return Err(RequestError::TooManyArgs(args.len()));
    }
    check("the command", command, MAX_NAME_BYTES)?;
    for (i, arg) in args.iter().enumerate() {
        check(&format!("argument {}", i + 1), arg, MAX_ARG_BYTES)?;
    }
    let mut bytes = Vec::with_capacity(64 + args.iter().map(|a| a.len()).sum::<usize>());
    for part in [VERSION, command]
        .into_iter()
        .chain(args.iter().copied())
        .chain(std::iter::repeat_n("", ARGS - args.len()))
    {
        bytes.extend_from_slice(part.as_bytes());
        bytes.push(0);
    }
    Ok(bytes)
}

fn check(what: &str, s: &str, max: usize) -> Result<(), RequestError> {
    if s.len() > max {
        return Err(RequestError::TooLong {
            what: what.to_string(),
            bytes: s.len(),
            max,
        });
    }
    if s.contains('\0') {
        return Err(RequestError::Nul(what.to_string()));
    }
    Ok(())
}

/// A reply: the status line and the output after it.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: i32,
    pub output: String,
}

/// Parses a whole reply; `None` when its first line is not a number.
pub fn parse_reply(bytes: &[u8]) -> Option<Reply> {
    let text = String::from_utf8_lossy(bytes);
    let (first, output) = text.split_once('\n').unwrap_or((&text, ""));
    let status = first.trim().parse().ok()?;
    Some(Reply {
        status,
        output: output.to_string(),
    })
}

/// `Agent_OnAttach`'s return code from `load`'s output (`return code: N`, since JDK 9).
pub fn load_return_code(output: &str) -> Option<i32> {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("return code:"))
        .and_then(|n| n.trim().parse().ok())
}

/// A reply's output as one line for an error message: its lines joined, bounded.
pub fn one_line(output: &str) -> String {
    const MAX: usize = 400;
    let joined = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let text: String = joined
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > MAX {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    } else if text.is_empty() {
        "(no message)".to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_pad_to_three_arguments() {
        assert_eq!(
            request("load", &["/tmp/l.so", "true", "window=close,id=3"]).unwrap(),
            b"1\0load\0/tmp/l.so\0true\0window=close,id=3\0"
        );
        assert_eq!(
            request("properties", &[]).unwrap(),
            b"1\0properties\0\0\0\0"
        );
        assert_eq!(
            request("jcmd", &["VM.version"]).unwrap(),
            b"1\0jcmd\0VM.version\0\0\0"
        );
    }

    #[test]
    fn requests_refuse_what_hotspot_would() {
        assert_eq!(
            request("load", &["a", "b", "c", "d"]),
            Err(RequestError::TooManyArgs(4))
        );
        let long = "x".repeat(MAX_ARG_BYTES + 1);
        assert_eq!(
            request("load", &["a", "true", &long])
                .unwrap_err()
                .to_string(),
            "argument 3 is 1025 bytes (at most 1024)"
        );
        assert_eq!(
            request("load", &["a\0b"]).unwrap_err().to_string(),
            "argument 1 contains a NUL byte"
        );
        assert!(request("a_command_name_too_long", &[]).is_err());
    }

    #[test]
    fn replies_and_return_codes() {
        let r = parse_reply(b"0\nreturn code: 2\n").unwrap();
        assert_eq!(r.status, 0);
        assert_eq!(load_return_code(&r.output), Some(2));
        let r = parse_reply(b"-1\n/x.so was not loaded.\n/x.so: cannot open\n").unwrap();
        assert_eq!(r.status, -1);
        assert_eq!(load_return_code(&r.output), None);
        assert_eq!(
            one_line(&r.output),
            "/x.so was not loaded.; /x.so: cannot open"
        );
        assert_eq!(parse_reply(b"").map(|r| r.status), None);
        assert_eq!(parse_reply(b"garbage\n"), None);
        assert_eq!(parse_reply(b"0").unwrap().output, "");
        assert_eq!(one_line(""), "(no message)");
    }
}
