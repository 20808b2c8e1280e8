//! Label values a JVM chose, made bounded and safe before they leave jpd.
//!
//! Any local process can run jp's agent (or pose as it) and name its main class as it
//! likes; that name becomes the Prometheus `main` label and Pyroscope's `service_name`.
//! Unbounded or odd values would let a JVM pose as another service, bloat every series,
//! or get a whole push rejected by a server's own limits, so they pass through
//! [`label_value`] first.

/// Longest value, in bytes (the server's limits are far above: Pyroscope's default is
/// 2048). Main classes and jar paths are far shorter.
pub const MAX_LABEL_BYTES: usize = 128;

/// Separates a changed value's kept part from its hash. Outside [`safe`], so a value
/// holding it was necessarily changed by [`label_value`]: no JVM can name itself like
/// another's changed value.
const MARK: char = '~';

/// What a value keeps as is: what Java class names, module paths (`jdk.compiler/…`),
/// nested classes (`Outer$Main`) and jar paths (`/opt/app/app-1.2.jar`) are made of in
/// practice, and nothing a server, a query language (`"{}=,`) or a terminal treats
/// specially. No space, no quote, no control, no non-ASCII character (a lookalike
/// letter could pose as another service's name).
fn safe(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/' | '$')
}

/// `v` as a label value: unchanged when it is made of [`safe`] characters and fits in
/// [`MAX_LABEL_BYTES`] (every ordinary main class); else its unsafe characters replaced
/// by `_`, cut to fit, and `~` with a hash of the whole original appended. The hash
/// keeps apart two JVMs whose names differ only in what was replaced or cut (they would
/// otherwise add up silently in one series), and shows the value was changed.
pub fn label_value(v: &str) -> String {
    if v.len() <= MAX_LABEL_BYTES && v.chars().all(safe) {
        return v.to_string();
    }
    let suffix = format!("{MARK}{:08x}", fnv1a(v.as_bytes()) as u32);
    // Every character of `kept` is ASCII: cutting at any byte is on a char boundary.
    let kept: String = v
        .chars()
        .map(|c| if safe(c) { c } else { '_' })
        .take(MAX_LABEL_BYTES - suffix.len())
        .collect();
    kept + &suffix
}

/// FNV-1a (64 bits): stable across jpd versions and restarts, unlike std's hasher, so a
/// changed value names the same series every time.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_are_unchanged() {
        for v in [
            "Paper",
            "FleetPaper",
            "com.example.app.Main",
            "Outer$Main",
            "jdk.compiler/com.sun.tools.javac.Main",
            "/opt/app/app-1.2_3.jar",
            "unknown-jvm",
            "host:8080",
            &"x".repeat(MAX_LABEL_BYTES),
        ] {
            assert_eq!(label_value(v), v);
        }
    }

    #[test]
    fn long_values_are_cut_with_a_visible_hash() {
        let v = label_value(&"A".repeat(3000));
        assert_eq!(v.len(), MAX_LABEL_BYTES);
        assert!(v.starts_with(&"A".repeat(100)), "{v}");
        assert_eq!(v.as_bytes()[MAX_LABEL_BYTES - 9], b'~', "{v}");
        // Stable: the same name is the same series every time.
        assert_eq!(v, label_value(&"A".repeat(3000)));
        // Names alike in their first 119 bytes stay apart.
        assert_ne!(v, label_value(&"A".repeat(3001)));
    }

    #[test]
    fn unsafe_characters_become_underscores_with_a_hash() {
        let v = label_value("\x1b]0;pwned\x07Main");
        assert!(v.starts_with("__0_pwned_Main~"), "{v}");
        assert!(v.chars().all(|c| safe(c) || c == MARK), "{v}");
        let quoted = label_value("a\"b} c=\"d");
        assert!(quoted.starts_with("a_b__c__d~"), "{quoted}");
        // Multi-byte characters: one `_` each, the cut on a char boundary.
        let v = label_value(&"é".repeat(200));
        assert!(v.len() <= MAX_LABEL_BYTES && v.starts_with("__"), "{v}");
    }

    #[test]
    fn names_differing_only_in_dropped_characters_stay_apart() {
        // Both would be `Paper_` without the hash: one series for two services.
        assert_ne!(label_value("Paper\u{1b}"), label_value("Paper\u{7}"));
        assert_ne!(label_value("Paper "), label_value("Paper\t"));
        // Nor can a JVM name itself like another's changed value: `~` is not safe.
        let changed = label_value("Paper ");
        assert_ne!(label_value(&changed), changed);
    }
}
