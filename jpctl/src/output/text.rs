//! Strings from JVMs and the host, made safe for a terminal.
//!
//! jpd reports what any local process chose: a JVM's main class, its method, class,
//! file and thread names, the paths of the libraries it maps. A control character in
//! such a string would reach the user's terminal raw (an `ESC ]…BEL` retitles it, a
//! CR or a bidi override hides or reorders what is printed), so every text renderer
//! prints these strings through [`printable`]. JSON outputs need none of this: serde
//! escapes control characters itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters that change how a terminal shows text rather than showing themselves:
/// C0 and C1 controls, DEL, and the Unicode bidi embeddings, overrides and isolates.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every unsafe character replaced by a visible escape (`\x1b`, `\u{202e}`);
/// borrowed unchanged when there is none, as for every ordinary name.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_unsafe(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_are_borrowed_unchanged() {
        for s in [
            "",
            "com.example.Main",
            "Loop.main([Ljava/lang/String;)V",
            "é 名前 ✓",
        ] {
            assert!(matches!(printable(s), Cow::Borrowed(b) if b == s));
        }
    }

    #[test]
    fn controls_become_visible_escapes() {
        assert_eq!(printable("\x1b]0;pwned\x07A"), "\\x1b]0;pwned\\x07A");
        assert_eq!(printable("a\rb\nc\td\x7f"), "a\\x0db\\x0ac\\x09d\\x7f");
        // C1 controls (U+0080–U+009F), e.g. the 8-bit CSI.
        assert_eq!(printable("x\u{9b}31m"), "x\\x9b31m");
    }

    #[test]
    fn bidi_overrides_and_isolates_become_visible_escapes() {
        assert_eq!(printable("evil\u{202e}gnp.exe"), "evil\\u{202e}gnp.exe");
        assert_eq!(
            printable("\u{202a}\u{202d}\u{2066}\u{2069}"),
            "\\u{202a}\\u{202d}\\u{2066}\\u{2069}"
        );
        let out = printable("\u{1b}[2J\u{2067}x");
        assert!(!out.chars().any(is_unsafe), "{out:?}");
    }
}
