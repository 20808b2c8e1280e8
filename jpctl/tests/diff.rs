//! `jpctl diff` on profiles the real agent wrote: the same program twice, and a variant
//! with one extra call per loop iteration; the gate's exit codes; bad input. The profiles
//! are made on JDK 17 and on JDK 25 (the deterministic-diff tests run on both).
//!
//! Needs the agent and jpctl (`cargo xtask build`; $JP_AGENT_LIB, $JPCTL, else target/jp/) and both JDKs
//! ($JP_JDK17, $JP_JDK25); fails, never skips, when they are missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use jp_testkit::jdk::Jdk;

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    out
}

/// The profiles of one JDK, made once: `base` twice (a, b), `variant` once, `base` with
/// bba=precise, `base` as the agent's flame graph page.
struct Profiles {
    dir: tempfile::TempDir,
}

impl Profiles {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn profiles(jdk: Jdk) -> &'static Profiles {
    static J17: OnceLock<Profiles> = OnceLock::new();
    static J25: OnceLock<Profiles> = OnceLock::new();
    let cell = match jdk {
        Jdk::J17 => &J17,
        Jdk::J25 => &J25,
    };
    cell.get_or_init(|| make_profiles(jdk))
}

fn make_profiles(jdk: Jdk) -> Profiles {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let home = jdk.home();
    let agent = jp_testkit::agent_lib();
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/diff_programs");
    for version in ["base", "variant"] {
        let classes = dir.path().join(version);
        let out = run(Command::new(home.join("bin/javac"))
            .arg("-d")
            .arg(&classes)
            .arg(sources.join(version).join("Loop.java")));
        assert!(
            out.status.success(),
            "javac ({jdk:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (version, file, bba) in [
        ("base", "a.json", "default"),
        ("base", "b.json", "default"),
        ("variant", "v.json", "default"),
        ("base", "precise.json", "precise"),
        ("base", "a.html", "default"),
    ] {
        let out_file = dir.path().join(file);
        let format = if file.ends_with(".html") {
            "html"
        } else {
            "json"
        };
        let out = run(Command::new(home.join("bin/java"))
            .arg(format!(
                "-agentpath:{}=bba={bba},format={format},out={}",
                agent.display(),
                out_file.display()
            ))
            .arg("-cp")
            .arg(dir.path().join(version))
            .arg("Loop"));
        assert!(
            out.status.success() && out_file.exists(),
            "java {version} under the agent ({jdk:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Profiles { dir }
}

fn jpctl(args: &[&str]) -> Output {
    run(Command::new(jp_testkit::jpctl()).args(args))
}

fn diff(args: &[&str]) -> (i32, String, String) {
    let mut a = vec!["diff"];
    a.extend_from_slice(args);
    let out = jpctl(&a);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> (i32, serde_json::Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let (code, out, err) = diff(&a);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, v)
}

/// A profile of JDK 17's (the tests that do not depend on the JDK).
fn p(name: &str) -> String {
    p_of(Jdk::J17, name)
}

fn p_of(jdk: Jdk, name: &str) -> String {
    profiles(jdk).path(name).display().to_string()
}

/// Two `#[test]`s of `check`, `name::jdk17` and `name::jdk25`.
macro_rules! both_jdks {
    ($name:ident = $check:ident) => {
        mod $name {
            #[test]
            fn jdk17() {
                super::$check(super::Jdk::J17);
            }

            #[test]
            fn jdk25() {
                super::$check(super::Jdk::J25);
            }
        }
    };
}

both_jdks!(the_same_program_twice_changes_nothing_and_passes_even_at_zero = same_program_twice);

fn same_program_twice(jdk: Jdk) {
    let (a, b) = (p_of(jdk, "a.json"), p_of(jdk, "b.json"));
    let (code, v) = json(&[&a, &b, "--fail-above", "0", "--fail-on-new"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["methods"], serde_json::json!([]));
    assert_eq!(v["contexts"], serde_json::json!([]));
    // Loop.main, Loop.work, Loop.tick: all unchanged.
    assert_eq!(
        v["unchanged"],
        serde_json::json!({"methods": 3, "contexts": 3})
    );
    assert_eq!(v["total"]["bytecodes"][0], v["total"]["bytecodes"][1]);
    assert_eq!(v["gate"], serde_json::json!({"passed": true, "causes": []}));
    let (code, text, _) = diff(&[&a, &b, "--fail-above", "0"]);
    assert_eq!(code, 0);
    assert!(text.contains("gate: PASS"), "{text}");
}

both_jdks!(one_extra_call_per_iteration_changes_exactly_that = one_extra_call);

/// By hand: the variant runs `invokestatic tick` 1000 more times in main (main's exclusive
/// bytecodes +1000) and tick's body (`return`, 1 bytecode) 1000 more times (tick's calls
/// and bytecodes +1000). Nothing else changes.
fn one_extra_call(jdk: Jdk) {
    let (a, v) = (p_of(jdk, "a.json"), p_of(jdk, "v.json"));
    let (code, d) = json(&[&a, &v]);
    assert_eq!(code, 0, "no gate asked for: {d}");
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let main = &base["root"]["children"][0];
    assert_eq!(main["method"], "Loop.main([Ljava/lang/String;)V");
    let main_excl = main["bytecodes"].as_u64().unwrap();
    let total: u64 = main_excl + 1 + 6 * 1000; // + tick (return) + work (6 bytecodes) x 1000
    assert_eq!(
        d["total"]["bytecodes"],
        serde_json::json!([total, total + 2000])
    );
    assert_eq!(d["total"]["calls"], serde_json::json!([1002, 2002]));
    assert_eq!(
        d["methods"],
        serde_json::json!([
            {"method": "Loop.main([Ljava/lang/String;)V", "calls": [1, 1], "bytecodes": [main_excl, main_excl + 1000], "inclusive": [total, total + 2000]},
            {"method": "Loop.tick()V", "calls": [1, 1001], "bytecodes": [1, 1001], "inclusive": [1, 1001]},
        ])
    );
    assert_eq!(
        d["contexts"],
        serde_json::json!([
            {"path": ["Loop.main([Ljava/lang/String;)V"], "status": "changed", "calls": [1, 1], "bytecodes": [main_excl, main_excl + 1000], "inclusive": [total, total + 2000]},
            {"path": ["Loop.main([Ljava/lang/String;)V", "Loop.tick()V"], "status": "changed", "calls": [1, 1001], "bytecodes": [1, 1001], "inclusive": [1, 1001]},
        ])
    );
    assert_eq!(
        d["unchanged"],
        serde_json::json!({"methods": 1, "contexts": 1})
    );
}

both_jdks!(the_gate_fails_with_one_line_per_cause_and_passes_above_the_growth = gate_both_ways);

fn gate_both_ways(jdk: Jdk) {
    let (a, v) = (p_of(jdk, "a.json"), p_of(jdk, "v.json"));
    let (code, text, _) = diff(&[&a, &v, "--fail-above", "0"]);
    assert_eq!(code, 1, "{text}");
    let causes: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL: ")).collect();
    assert_eq!(causes.len(), 3, "{text}");
    assert!(
        causes[0].starts_with("FAIL: total bytecodes grew by"),
        "{text}"
    );
    assert!(
        causes[2].contains("Loop.tick()V: inclusive bytecodes grew by 100000.000% (1 -> 1001)"),
        "{text}"
    );
    // tick grew by 100000 %: a limit above it passes.
    let (code, text, _) = diff(&[&a, &v, "--fail-above", "100000"]);
    assert_eq!(code, 0, "{text}");
    // Scoped to work(), which did not change.
    let (code, text, _) = diff(&[&a, &v, "--fail-above", "0", "--method", r"Loop\.work"]);
    assert_eq!(code, 0, "{text}");
    // Scoped to tick() only: one cause.
    let (code, text, _) = diff(&[&a, &v, "--fail-above", "0", "--method", r"Loop\.tick"]);
    assert_eq!((code, text.matches("FAIL: ").count()), (1, 1), "{text}");
    // tick's contexts are under 1002 inclusive bytecodes on both sides: ignored.
    let (code, text, _) = diff(&[
        &a,
        &v,
        "--fail-above",
        "0",
        "--method",
        r"Loop\.tick",
        "--min-bytecodes",
        "1002",
    ]);
    assert_eq!(code, 0, "{text}");
    // Without tick's subtree, main still runs 1000 more invokestatics.
    let (code, d) = json(&[&a, &v, "--ignore", r"Loop\.tick"]);
    assert_eq!(code, 0);
    assert_eq!(d["methods"].as_array().map(Vec::len), Some(1), "{d}");
    assert_eq!(
        d["methods"][0]["bytecodes"][1].as_u64(),
        d["methods"][0]["bytecodes"][0].as_u64().map(|b| b + 1000)
    );
}

/// Hand-written inputs, in a directory of their own.
fn write(name: &str, text: &str) -> String {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn fail_on_new_names_the_new_context() {
    let base = write("one.json", "{\"format\": \"jp-mct/1\", \"bba\": \"default\", \"root\": {\"children\": [\n{\"method\": \"A.main()V\", \"calls\": 1, \"bytecodes\": 10, \"children\": []}\n]}}\n");
    let new = write("two.json", "{\"format\": \"jp-mct/1\", \"bba\": \"default\", \"root\": {\"children\": [\n{\"method\": \"A.main()V\", \"calls\": 1, \"bytecodes\": 10, \"children\": [\n{\"method\": \"A.f()V\", \"calls\": 2, \"bytecodes\": 4, \"children\": []}]}\n]}}\n");
    let (code, text, _) = diff(&[&base, &new, "--fail-on-new"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "FAIL: new calling context A.main()V > A.f()V (2 calls, 4 inclusive bytecodes)"
        ),
        "{text}"
    );
    let (code, text, _) = diff(&[&new, &base, "--fail-on-new"]);
    assert_eq!(code, 0, "a removed context is not new: {text}");
    let (_, d) = json(&[&new, &base]);
    assert_eq!(d["contexts"][1]["status"], "removed", "{d}");
    assert_eq!(d["contexts"][1]["calls"], serde_json::json!([2, 0]));
}

#[test]
fn bad_input_is_refused_with_a_clear_message_and_exit_2() {
    let a = p("a.json");
    let text = std::fs::read_to_string(&a).unwrap();
    let truncated = write("truncated.json", &text[..text.len() / 2]);
    let foreign = write("foreign.json", "{\"name\": \"not a profile\"}");
    let empty = write(
        "empty.json",
        "{\"format\": \"jp-mct/1\", \"bba\": \"default\", \"root\": {\"children\": []}}\n",
    );
    let cases = [
        (truncated.as_str(), "truncated jp-mct/1 JSON"),
        (foreign.as_str(), "not a jp-mct/1 profile"),
        (empty.as_str(), "is an empty profile"),
        (
            &p("precise.json"),
            "NEW with bba=precise: their bytecode counts are not comparable",
        ),
        ("/nonexistent/x.json", "cannot read NEW"),
    ];
    for (new, message) in cases {
        let (code, out, err) = diff(&[&a, new, "--fail-above", "0"]);
        assert_eq!(code, 2, "{new}: {out}{err}");
        assert!(err.contains(message), "{new}: {err}");
        assert!(out.is_empty(), "{out}");
    }
    let kernel = write(
        "k.json",
        r#"{"samples": {"total": 10, "kernel": 10, "user": 0, "idle": 0}, "shift": 4, "functions": [{"name": "f", "module": null, "samples": 10, "load": 1.0}]}"#,
    );
    let (code, _, err) = diff(&[&a, &kernel]);
    assert_eq!(code, 2);
    assert!(err.contains("not the same kind of profile"), "{err}");
}

/// Two `jpctl kernel --json` snapshots: a 75 % -> 50 %, b (module m) 25 % -> 25 %, c new
/// at 25 %, with four times the samples in NEW.
fn kernel_pair() -> (String, String) {
    let base = write(
        "k1.json",
        r#"{"samples": {"total": 100, "kernel": 100, "user": 0, "idle": 0}, "shift": 4, "functions": [{"name": "a", "module": null, "samples": 75, "load": 1.0}, {"name": "b", "module": "m", "samples": 25, "load": 1.0}]}"#,
    );
    let new = write(
        "k2.json",
        r#"{"samples": {"total": 400, "kernel": 400, "user": 0, "idle": 0}, "shift": 4, "functions": [{"name": "a", "module": null, "samples": 200, "load": 1.0}, {"name": "b", "module": "m", "samples": 100, "load": 1.0}, {"name": "c", "module": null, "samples": 100, "load": 1.0}]}"#,
    );
    (base, new)
}

#[test]
fn kernel_profiles_compare_by_share() {
    let (base, new) = kernel_pair();
    let (code, d) = json(&[&base, &new]);
    assert_eq!(code, 0);
    // a: 75 % -> 50 %, c: 0 -> 25 %, b: 25 % -> 25 %.
    assert_eq!(
        d["functions"],
        serde_json::json!([
            {"function": "a", "module": null, "samples": [75, 200], "share": [75.0, 50.0]},
            {"function": "c", "module": null, "samples": [0, 100], "share": [0.0, 25.0]},
            {"function": "b", "module": "m", "samples": [25, 100], "share": [25.0, 25.0]},
        ])
    );
    let (code, text, _) = diff(&[&base, &new, "--fail-above", "20"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("FAIL: c: share grew by 25.000 percentage points"),
        "{text}"
    );
    let (code, _, _) = diff(&[&base, &new, "--fail-above", "25"]);
    assert_eq!(code, 0);
}

/// `-o FILE` writes what stdout would show, whole, in every format; stdout says what was
/// written; the exit codes are the gate's, and a failing gate's causes reach stderr since
/// the report does not reach the terminal.
#[test]
fn diff_writes_its_report_to_the_file_of_o() {
    let (base, new) = kernel_pair();
    let dir = tempfile::tempdir().unwrap();
    for (format, what) in [
        ("text", "(diff report)"),
        ("json", "(diff JSON)"),
        ("html", "(HTML differential flame graph)"),
    ] {
        let file = dir.path().join(format!("d.{format}"));
        let file_arg = file.display().to_string();
        let (code, expected, _) = diff(&[&base, &new, "--format", format]);
        assert_eq!(code, 0);
        let (code, out, err) = diff(&[&base, &new, "--format", format, "-o", &file_arg]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            expected,
            "{format}"
        );
        assert_eq!(
            out,
            format!("wrote {} bytes {what} to {file_arg}\n", expected.len())
        );
        assert!(err.is_empty(), "{err}");
        let (code, out, _) = diff(&[&base, &new, "--format", format, "-o", "-"]);
        assert_eq!((code, out), (0, expected), "-o - is stdout");
    }
    let file = dir.path().join("gate.txt");
    let file_arg = file.display().to_string();
    let (code, out, err) = diff(&[&base, &new, "--fail-above", "20", "-o", &file_arg]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.starts_with("FAIL: c: share grew by 25.000 percentage points"),
        "{err}"
    );
    let report = std::fs::read_to_string(&file).unwrap();
    assert!(report.contains("\ngate: FAIL\n"), "{report}");
    // A file that cannot be written is an unreadable-input kind of failure: exit 2, named.
    let bad = dir.path().join("no such dir").join("d.html");
    let bad_arg = bad.display().to_string();
    let (code, out, err) = diff(&[&base, &new, "--format", "html", "-o", &bad_arg]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.starts_with(&format!("jpctl diff: cannot write {bad_arg}: ")),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        4,
        "no temp file left"
    );
}

#[test]
fn the_agent_and_diff_write_flame_graph_pages() {
    let page = std::fs::read_to_string(p("a.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..100]);
    assert!(page.contains("\"Loop.tick()\""), "names are readable");
    let (code, html, err) = diff(&[&p("a.json"), &p("v.json"), "--format", "html"]);
    assert_eq!(code, 0, "{err}");
    assert!(html.contains("\"diff\":true"));
    // tick's frame: calls 1001 (new) and 1 (base).
    assert!(html.contains(",1001,1001,1001,1,1,1]"), "{html}");
}

#[path = "../../jp-mct/tests/browser/mod.rs"]
mod browser;

fn file_url(name: &str) -> String {
    browser::file_url(&profiles(Jdk::J17).path(name))
}

/// The agent's format=html page in Chromium: the frames, search, a click zooming in, the
/// tooltip's exact counts (by hand: work(int) runs 1000 times, 6 bytecodes each).
#[test]
fn the_agents_flame_graph_in_a_real_browser() {
    let r = browser::drive(serde_json::json!([
        {"do": "goto", "url": file_url("a.html")},
        {"do": "frames"},
        {"do": "hover", "frame": "Loop.work(int)"},
        {"do": "search", "text": "work"},
        {"do": "screenshot", "name": "flame-agent"},
        {"do": "click", "frame": "Loop.work(int)"},
        {"do": "reset"},
    ]));
    let main = "Loop.main(java.lang.String[])";
    // tick() is 1 bytecode of 16013: 1180 / 16013 = 0.07 pixels, under the half pixel drawn.
    assert_eq!(browser::labels(&r[1]), [main, "Loop.work(int)"]);
    // The page is 1200 pixels wide, the graph 1180: main spans it.
    assert_eq!(browser::width_of(&r[1], main), 1180);
    let tip = r[2]["tooltip"].as_str().unwrap_or_default();
    assert!(tip.starts_with("Loop.work(int)\ncalls: 1,000\ninclusive bytecodes: 6,000\nexclusive bytecodes: 6,000\nshare: "), "{tip}");
    assert_eq!(browser::flagged(&r[3], "match"), ["Loop.work(int)"]);
    assert!(
        r[3]["status"]
            .as_str()
            .unwrap_or_default()
            .starts_with("1 matching subtrees"),
        "{}",
        r[3]
    );
    // Zoomed: work spans the graph, main above it is drawn as an ancestor.
    assert_eq!(browser::labels(&r[5]), [main, "Loop.work(int)"]);
    assert_eq!(browser::flagged(&r[5], "ancestor"), [main]);
    assert_eq!(browser::width_of(&r[5], "Loop.work(int)"), 1180);
    assert_eq!(browser::labels(&r[6]), [main, "Loop.work(int)"]);
    assert_eq!(browser::flagged(&r[6], "ancestor"), Vec::<String>::new());
}

#[test]
fn the_diff_flame_graph_in_a_real_browser() {
    let (code, html, err) = diff(&[&p("a.json"), &p("v.json"), "--format", "html"]);
    assert_eq!(code, 0, "{err}");
    let r = browser::drive_page(
        &html,
        serde_json::json!([
            {"do": "frames"},
            {"do": "hover", "frame": "Loop.tick()"},
            {"do": "screenshot", "name": "flame-diff"},
            {"do": "eval", "js": COLOURS},
        ]),
    );
    assert_eq!(
        browser::labels(&r[1]),
        [
            "Loop.main(java.lang.String[])",
            "Loop.tick()",
            "Loop.work(int)"
        ]
    );
    let tip = r[2]["tooltip"].as_str().unwrap_or_default();
    assert!(
        tip.contains(
            "calls: 1 → 1,001 (+1,000)\ninclusive bytecodes: 1 → 1,001 (+1,000, 100000.00%)"
        ),
        "{tip}"
    );
    // main and tick grew (red: full red channel), work did not change (grey).
    let colours: Vec<&str> = r[4]["value"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(
        colours[0].starts_with("rgb(255,") && colours[1].starts_with("rgb(255,"),
        "{colours:?}"
    );
    assert_eq!(colours[2], "rgb(230, 230, 230)", "{colours:?}");
}

/// The frames' backgrounds, in the order drawn.
const COLOURS: &str = "[...document.querySelectorAll('#graph .f')].map(d => d.style.background)";

/// The kernel diff's page compares by share, as the text and JSON do: NEW has four times
/// the samples, yet only a (75 % -> 50 %, blue) and c (new, red) changed; b, its module m
/// and vmlinux (75 % -> 75 %) are grey. BASE's widths are scaled to NEW's total: a is as
/// wide as its larger side (75 % of 400 = 300 of the 500 drawn).
#[test]
fn the_kernel_diff_flame_graph_in_a_real_browser() {
    let (base, new) = kernel_pair();
    let (code, html, err) = diff(&[&base, &new, "--format", "html"]);
    assert_eq!(code, 0, "{err}");
    let r = browser::drive_page(
        &html,
        serde_json::json!([
            {"do": "frames"},
            {"do": "hover", "frame": "a"},
            {"do": "hover", "frame": "b"},
            {"do": "eval", "js": COLOURS},
            {"do": "screenshot", "name": "flame-kernel-diff"},
            {"do": "search", "text": "^[ac]$"},
        ]),
    );
    assert_eq!(browser::labels(&r[1]), ["m", "b", "vmlinux", "a", "c"]);
    let widths: Vec<i64> = ["m", "b", "vmlinux", "a", "c"]
        .iter()
        .map(|l| browser::width_of(&r[1], l))
        .collect();
    assert_eq!(widths, [236, 236, 944, 708, 236]);
    assert_eq!(
        browser::tooltip(&r[2]),
        "a\ninclusive samples: 75 → 200 (+125)\nexclusive samples: 75 → 200 (+125)\nshare: 75.000% → 50.000% (-25.000 points)"
    );
    assert_eq!(
        browser::tooltip(&r[3]),
        "b\ninclusive samples: 25 → 100 (+75)\nexclusive samples: 25 → 100 (+75)\nshare: 25.000% → 25.000% (unchanged)"
    );
    let grey = "rgb(230, 230, 230)";
    // a: (50 - 75) / 75 = -1/3 of its share: 230 * (1 - (1/3 * 1.5 + 0.1)) = 92.
    assert_eq!(
        r[4]["value"],
        serde_json::json!([grey, grey, grey, "rgb(92, 92, 255)", "rgb(220, 30, 30)"])
    );
    assert_eq!(browser::flagged(&r[6], "match"), ["a", "c"]);
    assert!(
        r[6]["status"]
            .as_str()
            .unwrap_or_default()
            .starts_with("2 matching subtrees, 75.000% of samples"),
        "{}",
        r[6]
    );
}

/// `path` if it is a .java file, else the .java files in the directory.
fn java_files(path: &Path) -> Vec<PathBuf> {
    if path.extension().is_some_and(|e| e == "java") {
        return vec![path.to_path_buf()];
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "java"))
        .collect();
    v.sort();
    v
}

/// Debian's junit5 (`cargo xtask setup` installs it), or $JP_JUNIT_CONSOLE: the console
/// launcher the README's CI recipe runs.
fn junit_console() -> PathBuf {
    let p = std::env::var_os("JP_JUNIT_CONSOLE").map_or_else(
        || PathBuf::from("/usr/share/java/junit-platform-console-standalone.jar"),
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "{} is missing: the README's CI recipe runs a JUnit 5 suite (apt-get install junit5, or `cargo xtask setup`)",
        p.display()
    );
    p
}

/// The README's "catch a regression in CI" recipe, command for command, on a JUnit 5 suite
/// (tests/fixtures/ci_recipe): two runs of the unchanged code pass the gate with a zero diff; the
/// change (6 more bytecodes in each of Price.of's 1003 calls) fails it, one line per cause.
#[test]
fn the_readmes_ci_recipe_passes_the_same_suite_and_fails_a_slower_change() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let home = Jdk::J17.home();
    let junit = junit_console();
    let agent = jp_testkit::agent_lib();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ci_recipe");
    let javac = |classes: &str, class_path: &str, source: &str| {
        let out = run(Command::new(home.join("bin/javac"))
            .current_dir(dir.path())
            .args(["-d", classes, "-cp", class_path])
            .args(java_files(&src.join(source))));
        assert!(
            out.status.success(),
            "javac {source}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // The change is one file: `changed` has its Price.class, then main's classes.
    javac("app", "", "app/com/example");
    javac("changed", "app", "changed/com/example/Price.java");
    javac(
        "tests",
        &format!("app:{}", junit.display()),
        "tests/com/example/PricesTest.java",
    );
    // java -agentpath:jp/libjpagent.so=out=OUT,include=com.example \
    //      -jar junit-platform-console-standalone.jar -cp APP:tests --select-package com.example
    let suite = |app: &str, out: &str| {
        let o = run(Command::new(home.join("bin/java"))
            .current_dir(dir.path())
            .arg(format!(
                "-agentpath:{}=out={out},include=com.example",
                agent.display()
            ))
            .arg("-jar")
            .arg(&junit)
            .args([
                "-cp",
                &format!("{app}:tests"),
                "--select-package",
                "com.example",
            ]));
        assert!(
            o.status.success(),
            "the suite under the agent: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        dir.path().join(out).display().to_string()
    };
    let gate = |base: &str, new: &str| {
        diff(&[
            base,
            new,
            "--fail-above",
            "2",
            "--min-bytecodes",
            "10000",
            "--ignore",
            r"com\.example\.Scheduler\.",
            "--format",
            "html",
        ])
    };
    let baseline = suite("app", "baseline.json");
    let new = suite("app", "new.json");
    let (code, html, err) = gate(&baseline, &new);
    assert_eq!(code, 0, "{err}");
    assert!(
        html.starts_with("<!DOCTYPE html>") && err.is_empty(),
        "{err}"
    );
    let (code, d) = json(&[&baseline, &new, "--fail-above", "0"]);
    assert_eq!(
        (code, &d["methods"], &d["contexts"]),
        (0, &serde_json::json!([]), &serde_json::json!([])),
        "{d}"
    );

    let slower = suite("changed:app", "slower.json");
    let (code, html, err) = gate(&baseline, &slower);
    assert_eq!(code, 1, "{err}");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(err.contains("FAIL: total bytecodes grew by"), "{err}");
    assert!(
        err.contains("FAIL: com.example.Price.of(I)J: inclusive bytecodes grew by 85.714% (7021 -> 13039), more than 2%"),
        "{err}"
    );
}
