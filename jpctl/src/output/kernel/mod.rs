//! `jpctl kernel`: the table, `--json`, readprofile's format; the flame graph page in
//! [`flame`].

pub mod flame;

use std::fmt::Write as _;

use jp_proto::v1::{KernelFunction, KernelProfile};
use serde::Serialize;

use super::text::printable;
use super::{finite, modes_line, percent, samples_json, SamplesJson};

// --- JSON shapes (stable: scripts and tests rely on them) -------------------------

#[derive(Serialize, Debug, PartialEq)]
pub struct FunctionJson<'a> {
    pub name: &'a str,
    pub module: Option<&'a str>,
    pub samples: u64,
    pub load: f64,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct KernelJson<'a> {
    pub samples: SamplesJson,
    pub shift: u32,
    pub functions: Vec<FunctionJson<'a>>,
}

/// Functions sorted by samples (descending, then name), as `jpctl kernel --json`
/// promises regardless of the order jpd sent them in.
pub fn kernel_json(p: &KernelProfile) -> KernelJson<'_> {
    let mut functions: Vec<&KernelFunction> = p.functions.iter().collect();
    functions.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
    KernelJson {
        samples: samples_json(p.samples.as_ref()),
        shift: p.shift,
        functions: functions
            .into_iter()
            .map(|f| FunctionJson {
                name: &f.name,
                module: f.module.as_deref(),
                samples: f.samples,
                load: finite(f.load),
            })
            .collect(),
    }
}

// --- readprofile ------------------------------------------------------------------

/// What util-linux `readprofile` prints: one `ticks function load` line per
/// function with samples, in address order (`%6u %-40s %8.4f`), then a
/// `*unknown*` line and a `total` line whose load is total / text size.
///
/// Differences, because jp knows more: module functions are listed as
/// `name [module]` (readprofile counted them in `*unknown*`), and `*unknown*` is
/// what no symbol covers. As in readprofile, `total` sums the listed functions.
pub fn readprofile(p: &KernelProfile) -> String {
    let mut functions: Vec<&KernelFunction> =
        p.functions.iter().filter(|f| f.samples > 0).collect();
    functions.sort_by_key(|f| f.address);
    let mut out = String::new();
    let mut total = 0u64;
    for f in functions {
        total += f.samples;
        let name = match &f.module {
            Some(m) => format!("{} [{m}]", f.name),
            None => f.name.clone(),
        };
        let name = printable(&name);
        let _ = writeln!(out, "{:>6} {:<40} {:>8.4}", f.samples, name, finite(f.load));
    }
    let _ = writeln!(out, "{:>6} *unknown*", p.unknown_samples);
    let text = p.text_end.saturating_sub(p.text_start);
    let load = if text == 0 {
        0.0
    } else {
        total as f64 / text as f64
    };
    let _ = writeln!(out, "{:>6} {:<40} {:>8.4}", total, "total", load);
    out
}

/// Functions by samples, with their share of non-idle samples and load.
pub fn kernel_text(p: &KernelProfile) -> String {
    let m = p.samples.unwrap_or_default();
    let busy = m.kernel + m.user;
    let mut out = format!("samples {}, shift {}\n", modes_line(&m), p.shift);
    let _ = writeln!(
        out,
        "{:>9} {:>6} {:>9}  function",
        "samples", "share", "load"
    );
    for f in kernel_json(p).functions {
        let name = match f.module {
            Some(m) => format!("{} [{m}]", f.name),
            None => f.name.to_string(),
        };
        let _ = writeln!(
            out,
            "{:>9} {:>5.1}% {:>9.4}  {}",
            f.samples,
            percent(f.samples, busy),
            f.load,
            printable(&name)
        );
    }
    if p.unknown_samples > 0 {
        let _ = writeln!(
            out,
            "{:>9} {:>5.1}% {:>9}  *unknown*",
            p.unknown_samples,
            percent(p.unknown_samples, busy),
            "-"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::to_json;
    use jp_proto::v1::ModeSamples;

    fn profile() -> KernelProfile {
        KernelProfile {
            samples: Some(ModeSamples {
                total: 1000,
                kernel: 300,
                user: 100,
                idle: 600,
            }),
            shift: 4,
            text_start: 0xffff_ffff_8100_0000,
            text_end: 0xffff_ffff_8100_0000 + 0x10_0000,
            functions: vec![
                KernelFunction {
                    name: "clear_user_rep_good".into(),
                    module: None,
                    address: 0xffff_ffff_8100_2000,
                    size: 64,
                    samples: 200,
                    load: 200.0 / 64.0,
                },
                KernelFunction {
                    name: "read_iter_zero".into(),
                    module: None,
                    address: 0xffff_ffff_8100_1000,
                    size: 256,
                    samples: 80,
                    load: 80.0 / 256.0,
                },
                KernelFunction {
                    name: "vring_interrupt".into(),
                    module: Some("virtio_ring".into()),
                    address: 0xffff_ffff_c000_1000,
                    size: 512,
                    samples: 15,
                    load: 15.0 / 512.0,
                },
            ],
            unknown_samples: 5,
            ..Default::default()
        }
    }

    #[test]
    fn kernel_json_has_exactly_the_documented_shape() {
        let v: serde_json::Value =
            serde_json::from_str(&to_json(&kernel_json(&profile()))).unwrap();
        let expected = serde_json::json!({
            "samples": {"total": 1000, "kernel": 300, "user": 100, "idle": 600},
            "shift": 4,
            "functions": [
                {"name": "clear_user_rep_good", "module": null, "samples": 200, "load": 3.125},
                {"name": "read_iter_zero", "module": null, "samples": 80, "load": 0.3125},
                {"name": "vring_interrupt", "module": "virtio_ring", "samples": 15, "load": 0.029296875},
            ],
        });
        assert_eq!(v, expected);
        // Key order as documented, too.
        let s = serde_json::to_string(&kernel_json(&profile())).unwrap();
        assert!(s.starts_with(r#"{"samples":{"total":1000,"kernel":300,"user":100,"idle":600},"shift":4,"functions":[{"name":"clear_user_rep_good","module":null,"samples":200,"load":3.125}"#), "{s}");
    }

    #[test]
    fn kernel_json_sorts_by_samples_whatever_the_input_order() {
        let mut p = profile();
        p.functions.reverse();
        let names: Vec<_> = kernel_json(&p).functions.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            ["clear_user_rep_good", "read_iter_zero", "vring_interrupt"]
        );
    }

    #[test]
    fn readprofile_format_is_exact() {
        let expected = concat!(
            "    80 read_iter_zero                             0.3125\n",
            "   200 clear_user_rep_good                        3.1250\n",
            "    15 vring_interrupt [virtio_ring]              0.0293\n",
            "     5 *unknown*\n",
            "   295 total                                      0.0003\n",
        );
        assert_eq!(readprofile(&profile()), expected);
    }

    #[test]
    fn readprofile_of_nothing_is_just_the_trailer() {
        let p = KernelProfile::default();
        assert_eq!(
            readprofile(&p),
            "     0 *unknown*\n     0 total                                      0.0000\n"
        );
    }

    #[test]
    fn kernel_text_shows_share_of_non_idle_samples() {
        let t = kernel_text(&profile());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "samples 1000 (kernel 30.0%, user 10.0%, idle 60.0%), shift 4"
        );
        assert_eq!(lines[1], "  samples  share      load  function");
        assert_eq!(lines[2], "      200  50.0%    3.1250  clear_user_rep_good");
        assert_eq!(
            lines[4],
            "       15   3.8%    0.0293  vring_interrupt [virtio_ring]"
        );
        assert_eq!(lines[5], "        5   1.2%         -  *unknown*");
    }
}
