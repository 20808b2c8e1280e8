//! Helpers shared by the rewriter's integration tests (`rewrite_*.rs`): JDKs, javac,
//! rewriting a directory tree of classes, and the Java verification harness.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use jpagent::classfile::{
    rewrite_class, rewrite_class_widening_all, Bba, ClassStats, MethodIds, RewriteOptions,
    Rewritten,
};

/// How a tree is rewritten in a test.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub name: &'static str,
    pub bba: Bba,
    /// Widen every branch (goto_w everywhere, an inferred frame after every conditional).
    pub widen_all: bool,
}

/// Both BBAs, and the default BBA with every branch widened.
pub const MODES: [Mode; 3] = [
    Mode {
        name: "default",
        bba: Bba::Default,
        widen_all: false,
    },
    Mode {
        name: "precise",
        bba: Bba::Precise,
        widen_all: false,
    },
    Mode {
        name: "widened",
        bba: Bba::Default,
        widen_all: true,
    },
];

pub const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
pub const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// Both JDKs; a missing one fails the test with what to install.
pub fn jdks() -> Vec<(&'static str, PathBuf)> {
    let mut v = Vec::new();
    for (name, home) in [("17", JDK17), ("25", JDK25)] {
        let java = Path::new(home).join("bin/java");
        assert!(
            java.exists(),
            "JDK {name} missing at {home}: install it (`cargo xtask setup` installs openjdk-17-jdk and Temurin 25)"
        );
        v.push((name, PathBuf::from(home)));
    }
    v
}

/// A fresh, empty scratch directory for one test, removed when dropped (also when the
/// test fails).
pub struct ScratchDir(PathBuf);

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn scratch(name: &str) -> ScratchDir {
    let d = std::env::temp_dir().join(format!("jp-rewrite-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    ScratchDir(d)
}

pub fn verify_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verify")
}

/// Runs a command, panicking with its output if it fails; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n{}\n{}",
            out.status,
            stdout.chars().take(4000).collect::<String>(),
            String::from_utf8_lossy(&out.stderr)
                .chars()
                .take(4000)
                .collect::<String>()
        );
    }
    stdout
}

/// javac 17 (`--release 17` unless `release` is given) of `files` into `out`.
pub fn javac(files: &[PathBuf], out: &Path, classpath: Option<&str>, release: &str) {
    let mut c = Command::new(Path::new(JDK17).join("bin/javac"));
    c.arg("-nowarn")
        .arg("--release")
        .arg(release)
        .arg("-d")
        .arg(out);
    if let Some(cp) = classpath {
        c.arg("-cp").arg(cp);
    }
    c.args(files);
    run(&mut c);
}

/// Compiles the harness, RunMain and the jp.rt stubs into `dir/h`; the stubs alone
/// into `dir/stubs`. Returns (harness dir, stubs dir).
pub fn compile_harness(dir: &Path) -> (PathBuf, PathBuf) {
    let v = verify_src();
    let h = dir.join("h");
    let stubs = dir.join("stubs");
    javac(
        &[
            v.join("VerifyHarness.java"),
            v.join("RunMain.java"),
            v.join("jp/rt/Rt.java"),
            v.join("jp/rt/Node.java"),
        ],
        &h,
        None,
        "17",
    );
    javac(
        &[v.join("jp/rt/Rt.java"), v.join("jp/rt/Node.java")],
        &stubs,
        None,
        "17",
    );
    (h, stubs)
}

pub struct Ids(pub u32);
impl MethodIds for Ids {
    fn method_id(&mut self, _: &str, _: &str, _: &str, _: Option<&str>) -> u32 {
        self.0 += 1;
        self.0
    }
}

/// One class rewritten as the agent rewrites a class being loaded (contexts passed), which
/// the test expects to change: its bytes and statistics.
pub fn rewrite_changed(input: &[u8], bba: Bba) -> (Vec<u8>, ClassStats) {
    let opts = RewriteOptions {
        bba,
        pass_context: true,
        out_of_line_entry: false,
    };
    match rewrite_class(input, &opts, &mut Ids(0)) {
        Ok(Rewritten::Changed { bytes, stats }) => (bytes, stats),
        Ok(Rewritten::Unchanged { reason }) => panic!("unchanged: {reason}"),
        Err(e) => panic!("rewrite failed: {e:?}"),
    }
}

/// What rewriting a tree of classes gave.
#[derive(Default, Debug)]
pub struct TreeStats {
    pub classes: u64,
    pub changed: u64,
    pub unchanged: u64,
    pub errors: Vec<(PathBuf, String)>,
    pub stats: ClassStats,
}

pub fn add_stats(a: &mut ClassStats, b: &ClassStats) {
    a.methods_instrumented += b.methods_instrumented;
    a.methods_too_large += b.methods_too_large;
    a.methods_unwidenable += b.methods_unwidenable;
    a.methods_empty_finalizers += b.methods_empty_finalizers;
    a.methods_without_catch_all += b.methods_without_catch_all;
    a.type_annotations_dropped += b.type_annotations_dropped;
    a.type_annotations_remapped += b.type_annotations_remapped;
    a.code_bytes_before += b.code_bytes_before;
    a.code_bytes_after += b.code_bytes_after;
}

pub fn class_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            class_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "class") {
            out.push(p);
        }
    }
}

/// Rewrites every class under `src` into the same path under `dst`; classes that are
/// unchanged, fail to rewrite or match `keep` are copied as they are.
pub fn rewrite_tree(src: &Path, dst: &Path, mode: Mode, keep: &dyn Fn(&Path) -> bool) -> TreeStats {
    let Mode { bba, widen_all, .. } = mode;
    let mut files = Vec::new();
    class_files(src, &mut files);
    let mut t = TreeStats::default();
    let mut ids = Ids(0);
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let out = dst.join(rel);
        std::fs::create_dir_all(out.parent().expect("parent")).expect("mkdir");
        let bytes = std::fs::read(&f).expect("read class");
        t.classes += 1;
        let new = if keep(rel) {
            t.unchanged += 1;
            bytes
        } else {
            // Either entry verifies the same (one descriptor); the agent's JVM runs pick it.
            let opts = RewriteOptions {
                bba,
                pass_context: true,
                out_of_line_entry: false,
            };
            let r = if widen_all {
                rewrite_class_widening_all(&bytes, &opts, &mut ids)
            } else {
                rewrite_class(&bytes, &opts, &mut ids)
            };
            match r {
                Ok(Rewritten::Changed { bytes, stats }) => {
                    t.changed += 1;
                    add_stats(&mut t.stats, &stats);
                    bytes
                }
                Ok(Rewritten::Unchanged { .. }) => {
                    t.unchanged += 1;
                    bytes
                }
                Err(e) => {
                    t.errors.push((rel.to_path_buf(), e.to_string()));
                    bytes
                }
            }
        };
        std::fs::write(&out, new).expect("write class");
    }
    t
}

/// Extracts the classes of a jar (needs `unzip`).
pub fn extract_jar(jar: &Path, dir: &Path) {
    assert!(
        jar.exists(),
        "{} missing: install the Debian package that provides it",
        jar.display()
    );
    std::fs::create_dir_all(dir).expect("mkdir");
    let st = Command::new("unzip")
        .arg("-q")
        .arg("-o")
        .arg(jar)
        .arg("*.class")
        .arg("-d")
        .arg(dir)
        .status()
        .expect("unzip missing: apt-get install unzip");
    assert!(st.success(), "unzip {} failed", jar.display());
    // Multi-release jars: keep only the base classes (one loader cannot hold both).
    let _ = std::fs::remove_dir_all(dir.join("META-INF"));
}

/// Results of one harness run: failures by (dir, class) -> throwable class, and
/// (classes, ok) per directory.
#[derive(Default, Debug)]
pub struct Linked {
    pub fails: BTreeMap<(String, String), (String, String)>,
    pub summary: BTreeMap<String, (u64, u64)>,
}

pub fn parse_harness(out: &str) -> Linked {
    let mut l = Linked::default();
    for line in out.lines() {
        let mut it = line.splitn(5, ' ');
        match it.next() {
            Some("FAIL") => {
                let dir = it.next().unwrap_or_default().to_string();
                let class = it.next().unwrap_or_default().to_string();
                let exc = it.next().unwrap_or_default().to_string();
                let msg = it.next().unwrap_or_default().to_string();
                l.fails.insert((dir, class), (exc, msg));
            }
            Some("SUMMARY") => {
                let dir = it.next().unwrap_or_default().to_string();
                let num = |s: Option<&str>| -> u64 {
                    s.and_then(|s| s.split('=').nth(1))
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0)
                };
                let classes = num(it.next());
                let ok = num(it.next());
                l.summary.insert(dir, (classes, ok));
            }
            _ => {}
        }
    }
    l
}

/// Failures of `new` that `base` (the same classes, not rewritten) does not have.
/// Keys are compared by class name and the last component of the directory.
pub fn new_failures(base: &Linked, new: &Linked) -> Vec<String> {
    let leaf = |d: &str| d.rsplit('/').next().unwrap_or(d).to_string();
    let base_by_class: BTreeMap<(String, &str), &str> = base
        .fails
        .iter()
        .map(|((d, c), (e, _))| ((leaf(d), c.as_str()), e.as_str()))
        .collect();
    let mut v = Vec::new();
    for ((dir, class), (exc, msg)) in &new.fails {
        if base_by_class.get(&(leaf(dir), class.as_str())) != Some(&exc.as_str()) {
            v.push(format!("{dir} {class}: {exc} {msg}"));
        }
    }
    v
}

/// A class `jp/rt/Broken` (version 52) whose method returns an int as an Object: the
/// verifier must reject it. Proves that a harness run really verifies.
pub fn broken_class() -> Vec<u8> {
    let mut b = vec![0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 52, 0, 8];
    for (tag, s) in [
        (1u8, "jp/rt/Broken"),
        (7, "#1"),
        (1, "java/lang/Object"),
        (7, "#3"),
    ] {
        push_cp(&mut b, tag, s);
    }
    for s in ["m", "()Ljava/lang/Object;", "Code"] {
        push_cp(&mut b, 1, s);
    }
    b.extend_from_slice(&[0x00, 0x21, 0x00, 0x02, 0x00, 0x04, 0, 0, 0, 0, 0, 1]);
    b.extend_from_slice(&[0x00, 0x09, 0x00, 0x05, 0x00, 0x06, 0x00, 0x01]);
    b.extend_from_slice(&[
        0x00, 0x07, 0, 0, 0, 14, 0, 1, 0, 0, 0, 0, 0, 2, 0x03, 0xb0, 0, 0, 0, 0,
    ]);
    b.extend_from_slice(&[0, 0]);
    b
}

fn push_cp(b: &mut Vec<u8>, tag: u8, s: &str) {
    b.push(tag);
    if tag == 7 {
        let idx: u16 = s[1..].parse().expect("index");
        b.extend_from_slice(&idx.to_be_bytes());
    } else {
        b.extend_from_slice(&(s.len() as u16).to_be_bytes());
        b.extend_from_slice(s.as_bytes());
    }
}

pub fn full_sweep() -> bool {
    std::env::var("JP_REWRITE_FULL").is_ok_and(|v| v == "1")
}
