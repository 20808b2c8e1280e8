//! Two kernel profiles (`jpctl kernel --json` snapshots) compared by each function's share
//! of its profile's samples: two runs of different lengths sample different counts.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{DiffOptions, Gate, Pair};

/// A sampled kernel function, from jpd's answer or a `jpctl kernel --json` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFunction {
    pub name: String,
    pub module: Option<String>,
    pub samples: u64,
}

#[derive(Deserialize, Debug)]
pub(super) struct KernelFunctionIn {
    pub(super) name: String,
    pub(super) module: Option<String>,
    pub(super) samples: u64,
}

#[derive(Deserialize, Debug)]
pub(super) struct KernelProfileIn {
    pub(super) functions: Vec<KernelFunctionIn>,
}

#[derive(Serialize, Debug)]
pub struct FunctionDiff {
    pub function: String,
    pub module: Option<String>,
    pub samples: Pair,
    /// Percent of the profile's function samples.
    pub share: [f64; 2],
}

#[derive(Serialize, Debug)]
pub struct KernelDiff {
    pub functions: Vec<FunctionDiff>,
    pub total: KernelTotal,
    pub gate: Gate,
}

#[derive(Serialize, Debug)]
pub struct KernelTotal {
    pub samples: Pair,
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

pub fn diff_kernel(base: &[KernelFunction], new: &[KernelFunction], o: &DiffOptions) -> KernelDiff {
    let mut by_key: HashMap<(Option<String>, String), Pair> = HashMap::new();
    for (s, side) in [base, new].into_iter().enumerate() {
        for f in side {
            if o.ignore.as_ref().is_some_and(|re| re.is_match(&f.name)) {
                continue;
            }
            by_key
                .entry((f.module.clone(), f.name.clone()))
                .or_default()[s] += f.samples;
        }
    }
    let totals: Pair = [
        by_key.values().map(|p| p[0]).sum(),
        by_key.values().map(|p| p[1]).sum(),
    ];
    let mut functions: Vec<FunctionDiff> = by_key
        .into_iter()
        .map(|((module, function), samples)| FunctionDiff {
            function,
            module,
            samples,
            share: [share(samples[0], totals[0]), share(samples[1], totals[1])],
        })
        .collect();
    let delta = |f: &FunctionDiff| (f.share[1] - f.share[0]).abs();
    functions.sort_by(|a, b| {
        delta(b)
            .total_cmp(&delta(a))
            .then_with(|| a.function.cmp(&b.function))
    });
    let mut causes = Vec::new();
    let scoped = |name: &str| o.method.as_ref().is_none_or(|re| re.is_match(name));
    for f in functions.iter().filter(|f| scoped(&f.function)) {
        let grew = f.share[1] - f.share[0];
        if let Some(limit) = o.fail_above.filter(|&l| grew > l) {
            causes.push(format!(
                "{}: share grew by {grew:.3} percentage points ({:.3}% -> {:.3}%), more than {limit}",
                f.function, f.share[0], f.share[1]
            ));
        }
        if o.fail_on_new && f.samples[0] == 0 && f.samples[1] > 0 {
            causes.push(format!(
                "new function {} ({} samples)",
                f.function, f.samples[1]
            ));
        }
    }
    KernelDiff {
        functions,
        total: KernelTotal { samples: totals },
        gate: Gate {
            passed: causes.is_empty(),
            causes,
        },
    }
}
