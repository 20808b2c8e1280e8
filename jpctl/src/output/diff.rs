//! What `jpctl diff` prints: the text report and the differential flame graph page (its
//! `--json` is the comparison serialized, [`crate::diff`]'s types).

use std::fmt::Write as _;

use jp_mct::FlameTree;

use crate::diff::jvm::JvmDiff;
use crate::diff::kernel::{KernelDiff, KernelFunction};
use crate::diff::{change, growth_percent, DiffOptions, Gate, Pair};
use crate::output::kernel::flame;
use crate::output::text::printable;

fn signed(d: i128) -> String {
    if d > 0 {
        format!("+{d}")
    } else {
        d.to_string()
    }
}

fn ratio(p: Pair) -> String {
    if p[0] == 0 {
        "new".into()
    } else {
        format!("{:.4}", p[1] as f64 / p[0] as f64)
    }
}

pub fn jvm_text(d: &JvmDiff, o: &DiffOptions) -> String {
    let mut s = String::new();
    let t = &d.total;
    let _ = writeln!(
        s,
        "jp diff (bba={}): calls {} -> {} ({}), bytecodes {} -> {} ({}{})",
        printable(&d.bba),
        t.calls[0],
        t.calls[1],
        signed(change(t.calls)),
        t.bytecodes[0],
        t.bytecodes[1],
        signed(change(t.bytecodes)),
        growth_percent(t.bytecodes).map_or(String::new(), |g| format!(", {g:+.3}%"))
    );
    let take = |n: usize| if o.limit == 0 { n } else { n.min(o.limit) };
    let _ = writeln!(
        s,
        "\nmethods changed: {} ({} unchanged), by change of inclusive bytecodes",
        d.methods.len(),
        d.unchanged.methods
    );
    if !d.methods.is_empty() {
        let _ = writeln!(
            s,
            "  {:>14} {:>14} {:>12} {:>8} {:>21} {:>25}  method",
            "inclusive", "(new)", "change", "ratio", "calls", "exclusive bytecodes"
        );
    }
    for m in &d.methods[..take(d.methods.len())] {
        let _ = writeln!(
            s,
            "  {:>14} {:>14} {:>12} {:>8} {:>21} {:>25}  {}",
            m.inclusive[0],
            m.inclusive[1],
            signed(change(m.inclusive)),
            ratio(m.inclusive),
            format!("{} -> {}", m.calls[0], m.calls[1]),
            format!("{} -> {}", m.bytecodes[0], m.bytecodes[1]),
            printable(&m.method)
        );
    }
    let added = d.contexts.iter().filter(|c| c.status == "added").count();
    let removed = d.contexts.iter().filter(|c| c.status == "removed").count();
    let _ = writeln!(
        s,
        "\ncontexts changed: {} ({added} added, {removed} removed; {} unchanged)",
        d.contexts.len(),
        d.unchanged.contexts
    );
    for c in &d.contexts[..take(d.contexts.len())] {
        let _ = writeln!(
            s,
            "  {:<8} inclusive {} -> {} ({}), calls {} -> {}, exclusive {} -> {}\n           {}",
            c.status,
            c.inclusive[0],
            c.inclusive[1],
            signed(change(c.inclusive)),
            c.calls[0],
            c.calls[1],
            c.bytecodes[0],
            c.bytecodes[1],
            printable(&c.path.join(" > "))
        );
    }
    let shown =
        take(d.methods.len()) < d.methods.len() || take(d.contexts.len()) < d.contexts.len();
    if shown {
        let _ = writeln!(
            s,
            "  (first {} rows of each; --limit 0 shows all, --json has all)",
            o.limit
        );
    }
    gate_text(&mut s, &d.gate, o);
    s
}

fn gate_text(s: &mut String, g: &Gate, o: &DiffOptions) {
    if o.fail_above.is_none() && !o.fail_on_new {
        return;
    }
    if g.passed {
        let _ = writeln!(s, "\ngate: PASS");
    } else {
        let _ = writeln!(s, "\ngate: FAIL");
        for c in &g.causes {
            let _ = writeln!(s, "FAIL: {}", printable(c));
        }
    }
}

pub fn kernel_text(d: &KernelDiff, o: &DiffOptions) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "jp kernel diff by share: {} -> {} samples in functions",
        d.total.samples[0], d.total.samples[1]
    );
    let _ = writeln!(
        s,
        "  {:>9} {:>9} {:>9}  {:>17}  function",
        "share", "(new)", "change", "samples"
    );
    let take = if o.limit == 0 {
        d.functions.len()
    } else {
        d.functions.len().min(o.limit)
    };
    for f in &d.functions[..take] {
        let name = match &f.module {
            Some(m) => format!("{} [{m}]", f.function),
            None => f.function.clone(),
        };
        let _ = writeln!(
            s,
            "  {:>8.3}% {:>8.3}% {:>+9.3}  {:>17}  {}",
            f.share[0],
            f.share[1],
            f.share[1] - f.share[0],
            format!("{} -> {}", f.samples[0], f.samples[1]),
            printable(&name)
        );
    }
    gate_text(&mut s, &d.gate, o);
    s
}

pub fn kernel_flame_diff(
    base: &[KernelFunction],
    new: &[KernelFunction],
    o: &DiffOptions,
) -> FlameTree {
    let keep = |fs: &[KernelFunction]| -> Vec<KernelFunction> {
        fs.iter()
            .filter(|f| !o.ignore.as_ref().is_some_and(|re| re.is_match(&f.name)))
            .cloned()
            .collect()
    };
    flame::diff_tree(&keep(base), &keep(new))
}

/// A flame graph as its self-contained HTML page.
pub fn html(t: &FlameTree, min_share: f64) -> anyhow::Result<String> {
    let mut v = Vec::new();
    jp_mct::write_flame_html(t, min_share, &mut v)?;
    Ok(String::from_utf8_lossy(&v).into_owned())
}
