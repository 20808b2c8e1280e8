//! The kernel profile as a flame graph: module (`vmlinux` for the kernel image) → function,
//! widths in samples. Two levels only: jpd samples where the CPU is, not call stacks.

use std::collections::BTreeMap;
use std::sync::Arc;

use jp_mct::{FlameTree, FrameCounts};
use jp_proto::v1::KernelProfile;

use crate::diff::kernel::KernelFunction;

/// The name of the kernel image's "module".
const KERNEL_IMAGE: &str = "vmlinux";

pub fn functions(p: &KernelProfile) -> Vec<KernelFunction> {
    p.functions
        .iter()
        .map(|f| KernelFunction {
            name: f.name.clone(),
            module: f.module.clone(),
            samples: f.samples,
        })
        .collect()
}

/// module → function → samples of [base, new].
type Grouped = BTreeMap<String, BTreeMap<String, [u64; 2]>>;

fn group(sides: &[&[KernelFunction]]) -> Grouped {
    let mut g = Grouped::new();
    for (s, fs) in sides.iter().enumerate() {
        for f in fs.iter() {
            let module = f.module.clone().unwrap_or_else(|| KERNEL_IMAGE.to_string());
            g.entry(module)
                .or_default()
                .entry(f.name.clone())
                .or_default()[s] += f.samples;
        }
    }
    g
}

fn counts(samples: u64, exclusive: u64) -> FrameCounts {
    FrameCounts {
        calls: None,
        inclusive: samples,
        exclusive,
    }
}

fn build(g: &Grouped, title: &str, diff: bool) -> FlameTree {
    let mut t = FlameTree::new(title, "samples", diff);
    // Samples: two runs of different lengths compare by share, as `jpctl diff` does.
    t.by_share = diff;
    let mut functions = 0;
    for (module, fs) in g {
        let sum = |s: usize| fs.values().map(|v| v[s]).sum::<u64>();
        let side = |s: usize| counts(sum(s), 0);
        let (now, base) = if diff {
            (side(1), side(0))
        } else {
            (side(0), FrameCounts::default())
        };
        let m = t.add(0, Arc::from(module.as_str()), now, base);
        for (name, v) in fs {
            let (now, base) = if diff {
                (counts(v[1], v[1]), counts(v[0], v[0]))
            } else {
                (counts(v[0], v[0]), FrameCounts::default())
            };
            t.add(m, Arc::from(name.as_str()), now, base);
            functions += 1;
        }
    }
    t.subtitle = format!(
        "{} modules · {functions} functions · widths: samples",
        g.len()
    );
    if diff {
        t.subtitle
            .push_str(" · compared by share of each profile (BASE scaled to NEW's samples)");
    }
    t
}

pub fn tree(fs: &[KernelFunction]) -> FlameTree {
    build(
        &group(&[fs]),
        "jp kernel profile (module → function)",
        false,
    )
}

pub fn diff_tree(base: &[KernelFunction], new: &[KernelFunction]) -> FlameTree {
    build(
        &group(&[base, new]),
        "jp kernel profile diff (module → function)",
        true,
    )
}

/// `jpctl kernel --format html`.
pub fn html(p: &KernelProfile) -> anyhow::Result<String> {
    let mut v = Vec::new();
    jp_mct::write_flame_html(&tree(&functions(p)), jp_mct::DEFAULT_MIN_SHARE, &mut v)?;
    Ok(String::from_utf8_lossy(&v).into_owned())
}
