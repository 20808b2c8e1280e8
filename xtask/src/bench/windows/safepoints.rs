//! The JVM's safepoints as `-Xlog:safepoint:file=…:timemillis` writes them, e.g.
//! `[1733512345678ms] Safepoint "RedefineClasses", Time since last: 1234 ns, Reaching
//! safepoint: 5678 ns, At safepoint: 91011 ns, Total: 96689 ns`.
use std::path::Path;

/// One safepoint: when it was logged (its end, ms since the epoch), its operation, and
/// its whole pause (reaching it included), ms.
#[derive(Clone, Debug, PartialEq)]
pub struct Safepoint {
    pub at_unix_ms: f64,
    pub operation: String,
    pub total_ms: f64,
}

/// The `-Xlog` option that writes `log` in the format [`read`] reads.
pub fn xlog_arg(log: &Path) -> String {
    format!("-Xlog:safepoint:file={}:timemillis", log.display())
}

pub fn read(log: &Path) -> Vec<Safepoint> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Safepoint> {
    let at = line.strip_prefix('[')?.split("ms]").next()?.parse().ok()?;
    let rest = line.split("Safepoint \"").nth(1)?;
    let (operation, rest) = rest.split_once('"')?;
    let total: f64 = rest
        .split("Total: ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(Safepoint {
        at_unix_ms: at,
        operation: operation.to_string(),
        total_ms: total / 1e6,
    })
}

/// The pauses that ended in [from, to] (ms since the epoch).
pub struct Pauses {
    pub count: usize,
    pub longest_ms: f64,
    pub total_ms: f64,
    /// The operations, each once, longest pause first.
    pub operations: Vec<String>,
    /// Those of the retransformation itself (`RedefineClasses`): count, longest, total (ms).
    pub redefine: (usize, f64, f64),
}

pub fn between(all: &[Safepoint], from: f64, to: f64) -> Pauses {
    let mut inside: Vec<&Safepoint> = all
        .iter()
        .filter(|s| s.at_unix_ms >= from && s.at_unix_ms <= to)
        .collect();
    inside.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
    let mut operations: Vec<String> = Vec::new();
    for s in &inside {
        if !operations.contains(&s.operation) {
            operations.push(s.operation.clone());
        }
    }
    let redefine: Vec<f64> = inside
        .iter()
        .filter(|s| s.operation == "RedefineClasses")
        .map(|s| s.total_ms)
        .collect();
    Pauses {
        redefine: (
            redefine.len(),
            redefine.first().copied().unwrap_or(0.0),
            redefine.iter().sum(),
        ),
        count: inside.len(),
        longest_ms: inside.first().map_or(0.0, |s| s.total_ms),
        total_ms: inside.iter().map(|s| s.total_ms).sum(),
        operations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_safepoint_line_gives_its_time_operation_and_whole_pause() {
        let line = "[1733512345678ms] Safepoint \"RedefineClasses\", Time since last: 1234 ns, Reaching safepoint: 5678 ns, Cleanup: 10 ns, At safepoint: 4000000 ns, Total: 4005688 ns";
        let s = parse_line(line).unwrap();
        assert_eq!(s.at_unix_ms, 1733512345678.0);
        assert_eq!(s.operation, "RedefineClasses");
        assert!((s.total_ms - 4.005688).abs() < 1e-9);
        assert_eq!(parse_line("[1733512345678ms] Using G1"), None);
        let all = [
            s.clone(),
            Safepoint {
                at_unix_ms: 1733512345700.0,
                operation: "G1CollectForAllocation".into(),
                total_ms: 9.0,
            },
        ];
        let p = between(&all, 1733512345600.0, 1733512345690.0);
        assert_eq!((p.count, p.operations.len()), (1, 1));
        let p = between(&all, 0.0, f64::MAX);
        assert_eq!(p.count, 2);
        assert_eq!(p.longest_ms, 9.0);
        assert_eq!(p.operations, ["G1CollectForAllocation", "RedefineClasses"]);
        assert_eq!(p.redefine.0, 1);
        assert!((p.redefine.1 - 4.005688).abs() < 1e-9);
    }
}
