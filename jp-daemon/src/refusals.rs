//! What jpd refused to take, and why: one count per (subsystem, reason), for every
//! input that jpd bounds on a shared host — records over a budget, processes over
//! their rate, connections over a cap, files that are not what they claim to be.
//!
//! The set of keys is fixed by the code (both parts are `&'static str`), so the table
//! stays small whatever the input. It is process-wide, like a metrics registry: the
//! places that refuse sit in every pipeline stage, and the ones that report (`jpctl
//! status`, `/metrics`) read it without being wired to each of them. Counts only grow;
//! a `jpctl reset` does not clear them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::lock::lock;

/// One kind of refusal: the subsystem that refused (`usdt`, `store`, `exporter`, …)
/// and a reason in snake case (`rate_limited`, `over_budget`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    pub subsystem: &'static str,
    pub reason: &'static str,
}

impl Refusal {
    pub const fn new(subsystem: &'static str, reason: &'static str) -> Refusal {
        Refusal { subsystem, reason }
    }
}

static COUNTS: Mutex<BTreeMap<Refusal, u64>> = Mutex::new(BTreeMap::new());

/// Counts `n` refusals of kind `what`.
pub fn count(what: Refusal, n: u64) {
    if n == 0 {
        return;
    }
    let mut counts = lock(&COUNTS);
    let c = counts.entry(what).or_insert(0);
    *c = c.saturating_add(n);
}

/// Every kind refused so far with its count, sorted by subsystem then reason.
pub fn snapshot() -> Vec<(Refusal, u64)> {
    lock(&COUNTS).iter().map(|(k, v)| (*k, *v)).collect()
}

/// The count of one kind (0 if never refused).
pub fn get(what: Refusal) -> u64 {
    lock(&COUNTS).get(&what).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_kind_and_list_sorted() {
        // Kinds of this test's own: other tests in the process count theirs.
        let a = Refusal::new("test_refusals", "a_reason");
        let b = Refusal::new("test_refusals", "b_reason");
        count(b, 2);
        count(a, 1);
        count(a, 0);
        count(a, 3);
        assert_eq!(get(a), 4);
        assert_eq!(get(b), 2);
        let mine: Vec<_> = snapshot()
            .into_iter()
            .filter(|(k, _)| k.subsystem == "test_refusals")
            .collect();
        assert_eq!(mine, vec![(a, 4), (b, 2)]);
        assert_eq!(get(Refusal::new("test_refusals", "never")), 0);
    }
}
