//! What the agent prints: to stderr, never panicking, each line prefixed `jp-agent:` by its
//! caller. Shared by the JVMTI side and the USDT side.
use std::sync::atomic::{AtomicBool, Ordering};

/// Prints a line to stderr; never panics (unlike `eprintln!` on a closed stderr).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use say;

/// Prints `msg` the first time only (for conditions that would repeat per record).
pub(crate) fn warn_once(msg: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        say!("jp-agent: warning: {msg}");
    }
}
