//! Faults a test injects into a real jpd, to show that the watchdog catches them:
//! `JPD_FAULT_INJECT=usdt_manager_stall` hangs the USDT manager thread at its first
//! scan after start (as an `open` blocked on a FIFO would), `ring_reader_exit` ends
//! the ring reader task at once (as a poll error would); a comma-separated list
//! injects both.
//!
//! An environment variable rather than a cargo feature: the systemd test runs the
//! very jpd that is installed, and a second build of it only for the test would
//! cost minutes and test another binary. The switch is read once, and [`announce`]
//! logs every fault loudly at start (and refuses an unknown name), so it cannot go
//! unnoticed in a journal; only who may set a root service's environment can set it,
//! and all it can do is get jpd restarted.

use std::sync::OnceLock;

/// The environment variable naming the faults to inject.
pub const ENV: &str = "JPD_FAULT_INJECT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The USDT manager thread hangs for good at its first scan after start.
    UsdtManagerStall,
    /// The ring reader task returns at once.
    RingReaderExit,
}

impl Fault {
    const ALL: [Fault; 2] = [Fault::UsdtManagerStall, Fault::RingReaderExit];

    pub fn name(self) -> &'static str {
        match self {
            Fault::UsdtManagerStall => "usdt_manager_stall",
            Fault::RingReaderExit => "ring_reader_exit",
        }
    }
}

/// The faults a value of [`ENV`] names; an error names the first unknown one.
pub fn parse(value: &str) -> Result<Vec<Fault>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            Fault::ALL
                .into_iter()
                .find(|f| f.name() == v)
                .ok_or_else(|| {
                    let known: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
                    format!("{ENV}: unknown fault {v:?} (known: {})", known.join(", "))
                })
        })
        .collect()
}

fn injected_faults() -> &'static Result<Vec<Fault>, String> {
    static FAULTS: OnceLock<Result<Vec<Fault>, String>> = OnceLock::new();
    FAULTS.get_or_init(|| match std::env::var(ENV) {
        Ok(v) => parse(&v),
        Err(_) => Ok(Vec::new()),
    })
}

/// Whether `fault` is to be injected (never when [`ENV`] is unset or invalid).
pub fn injected(fault: Fault) -> bool {
    injected_faults()
        .as_ref()
        .is_ok_and(|faults| faults.contains(&fault))
}

/// At start: logs each injected fault as an error (they are for tests only), and
/// fails on an unknown name, so that a mistyped test does not pass by injecting
/// nothing.
pub fn announce() -> anyhow::Result<()> {
    let faults = injected_faults().as_ref().map_err(anyhow::Error::msg)?;
    for f in faults {
        log::error!(target: "jpd",
            "{ENV}: injecting the fault {} — a test-only switch: this jpd will be restarted \
             by the watchdog",
            f.name()
        );
    }
    Ok(())
}

/// Hangs the calling thread for good (the injected stall).
pub fn stall_forever(what: &str) -> ! {
    log::error!(target: "jpd", "{ENV}: {what} stalls now, for good");
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_by_name_alone_or_listed_and_unknown_names_are_refused() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(
            parse("usdt_manager_stall"),
            Ok(vec![Fault::UsdtManagerStall])
        );
        assert_eq!(
            parse("ring_reader_exit, usdt_manager_stall"),
            Ok(vec![Fault::RingReaderExit, Fault::UsdtManagerStall])
        );
        assert_eq!(
            parse("ring_reader_stall"),
            Err(
                "JPD_FAULT_INJECT: unknown fault \"ring_reader_stall\" (known: \
                 usdt_manager_stall, ring_reader_exit)"
                    .to_string()
            )
        );
    }
}
