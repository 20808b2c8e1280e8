//! The configuration keys a reload cannot apply. Each section of `jpd.toml` declares
//! its own, beside its fields (`restart_needed(&self, new)`: `[server]`, `[kernel]`,
//! `[log]`, `[usdt]`); the configuration gathers them, and on SIGHUP the daemon warns
//! about each changed one and keeps running with the value it started with.

/// A key whose new value only a restart applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartNeeded {
    /// `section.key` as the operator writes it, or `section` for a whole section.
    pub key: &'static str,
    /// The running value, as the warning shows it.
    pub was: String,
    /// The value the reloaded file asks for.
    pub now: String,
}

/// Those of `keys`, each `(key, was, now)`, whose value changed, in their order.
pub fn changed<const N: usize>(keys: [(&'static str, String, String); N]) -> Vec<RestartNeeded> {
    keys.into_iter()
        .filter(|(_, was, now)| was != now)
        .map(|(key, was, now)| RestartNeeded { key, was, now })
        .collect()
}
