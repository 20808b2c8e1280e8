//! The rewriter's output, byte for byte, is the one recorded in
//! `fixtures/rewrite-hashes/hashes.txt.gz`: every class of the JDK modules (JDK 17 and
//! JDK 25) and of the Debian jars the other rewrite tests use (rhino, jython, H2, Xalan,
//! Xerces, Guava, ICU4J, ASM, Lucene) is rewritten under every option set the agent and
//! the tests use, and the hash of all the outcomes must be the recorded one. A
//! restructuring of the rewriter must leave this test passing without a new fixture.
//!
//! The fixture holds one line per distinct input class: `INPUT OUTCOMES`, the first 64
//! bits (16 hex digits) of the SHA-256 of the class file, and of the SHA-256 of its
//! outcomes under the [`MODES`] in order (each outcome: the rewritten bytes and the
//! class statistics, or "unchanged" and the reason, or the error's message; the block
//! descriptions of both BBAs last). Lines are sorted; `#` lines are comments.
//!
//! A missing JDK or jar fails the test, saying what to install. Classes that differ from
//! the recorded ones (another JDK build, another Debian version) are not compared, but
//! fewer than [`MIN_FOUND`] of the fixture's entries found fails the test: the fixture
//! is then to be regenerated on a commit whose rewriter is known good:
//! `cargo test --release -p jp-agent --test rewrite_hashes -- --ignored regenerate`.
//! `JP_REWRITE_HASHES_DETAIL=FILE` also writes one line per input and mode (input hash,
//! mode, outcome hash, path): two such files, from a good and a bad commit, diff to the
//! classes and modes that changed.
//! Needs: `jimage` of the JDKs (`$JP_JDK17`, `$JP_JDK25`), `unzip`, the Debian jars.

mod rewrite_common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use jpagent::classfile::{
    describe_blocks, rewrite_class, rewrite_class_widening_all, Bba, RewriteOptions, Rewritten,
};
use rewrite_common::{class_files, scratch, Ids, JDK17, JDK25};
use sha2::{Digest, Sha256};

/// The share of the fixture's entries that must be found on this machine.
const MIN_FOUND: f64 = 0.8;

const FIXTURE: &str = "tests/fixtures/rewrite-hashes/hashes.txt.gz";

/// The Debian jars of the rewrite and real-program tests.
const JARS: &[&str] = &[
    "js.jar",
    "h2.jar",
    "jython.jar",
    "xalan2.jar",
    "serializer.jar",
    "xercesImpl.jar",
    "guava.jar",
    "icu4j.jar",
    "asm-all.jar",
    "lucene-core-8.7.0.jar",
    "lucene-analyzers-common-8.7.0.jar",
];

/// One way of rewriting a class.
struct Mode {
    name: &'static str,
    bba: Bba,
    /// A class being loaded (second bodies), not a retransformation.
    pass_context: bool,
    out_of_line_entry: bool,
    /// `rewrite_class_widening_all`: every branch widened.
    widen_all: bool,
}

const fn mode(
    name: &'static str,
    bba: Bba,
    pass_context: bool,
    out_of_line_entry: bool,
    widen_all: bool,
) -> Mode {
    Mode {
        name,
        bba,
        pass_context,
        out_of_line_entry,
        widen_all,
    }
}

/// Retransformation and loading under both BBAs, every branch widened under both, and
/// the out-of-line entry.
const MODES: &[Mode] = &[
    mode("default", Bba::Default, false, false, false),
    mode("precise", Bba::Precise, false, false, false),
    mode("default+pass", Bba::Default, true, false, false),
    mode("precise+pass", Bba::Precise, true, false, false),
    mode("widened-default+pass", Bba::Default, true, false, true),
    mode("widened-precise+pass", Bba::Precise, true, false, true),
    mode("default+pass+out-of-line", Bba::Default, true, true, false),
];

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn hex64(h: &[u8; 32]) -> String {
    h[..8].iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Everything one rewrite gave, as bytes to hash.
fn outcome(input: &[u8], m: &Mode) -> Vec<u8> {
    let opts = RewriteOptions {
        bba: m.bba,
        pass_context: m.pass_context,
        out_of_line_entry: m.out_of_line_entry,
    };
    let r = if m.widen_all {
        rewrite_class_widening_all(input, &opts, &mut Ids(0))
    } else {
        rewrite_class(input, &opts, &mut Ids(0))
    };
    match r {
        Ok(Rewritten::Changed { bytes, stats }) => {
            let mut v = b"changed\n".to_vec();
            v.extend_from_slice(&bytes);
            let s = stats;
            for n in [
                s.methods_instrumented,
                s.methods_too_large,
                s.methods_unwidenable,
                s.methods_without_catch_all,
                s.methods_empty_finalizers,
                s.type_annotations_dropped,
                s.type_annotations_remapped,
                s.methods_passed,
                s.call_sites_passed,
            ] {
                v.extend_from_slice(&n.to_be_bytes());
            }
            v.extend_from_slice(&s.code_bytes_before.to_be_bytes());
            v.extend_from_slice(&s.code_bytes_after.to_be_bytes());
            v
        }
        Ok(Rewritten::Unchanged { reason }) => format!("unchanged: {reason}").into_bytes(),
        Err(e) => format!("error: {e}").into_bytes(),
    }
}

fn blocks_outcome(input: &[u8], bba: Bba) -> Vec<u8> {
    format!("{:?}", describe_blocks(input, bba)).into_bytes()
}

/// The hashes of one input's outcomes: one per mode, then the two block descriptions.
fn outcome_hashes(input: &[u8]) -> Vec<(&'static str, [u8; 32])> {
    let mut v: Vec<(&'static str, [u8; 32])> = MODES
        .iter()
        .map(|m| (m.name, sha256(&outcome(input, m))))
        .collect();
    v.push((
        "blocks-default",
        sha256(&blocks_outcome(input, Bba::Default)),
    ));
    v.push((
        "blocks-precise",
        sha256(&blocks_outcome(input, Bba::Precise)),
    ));
    v
}

fn combined(hashes: &[(&str, [u8; 32])]) -> [u8; 32] {
    let mut h = Sha256::new();
    for (_, o) in hashes {
        h.update(o);
    }
    h.finalize().into()
}

fn jdk_home(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// Extracts every class of this machine's inputs under `dir`; returns (label, root) of
/// each input tree and what was missing.
fn extract_inputs(dir: &Path) -> (Vec<(String, PathBuf)>, Vec<String>) {
    let mut trees = Vec::new();
    let mut missing = Vec::new();
    for (name, home) in [
        ("jdk17", jdk_home("JP_JDK17", JDK17)),
        ("jdk25", jdk_home("JP_JDK25", JDK25)),
    ] {
        let jimage = home.join("bin/jimage");
        if !jimage.exists() {
            missing.push(jimage.display().to_string());
            continue;
        }
        let out = dir.join(name);
        let st = Command::new(&jimage)
            .arg("extract")
            .arg(format!("--dir={}", out.display()))
            .arg(home.join("lib/modules"))
            .status()
            .expect("run jimage");
        assert!(st.success(), "{} extract failed", jimage.display());
        trees.push((name.to_string(), out));
    }
    for jar in JARS {
        let path = Path::new("/usr/share/java").join(jar);
        if !path.exists() {
            missing.push(path.display().to_string());
            continue;
        }
        let out = dir.join(jar);
        std::fs::create_dir_all(&out).expect("mkdir");
        let st = Command::new("unzip")
            .args(["-q", "-o"])
            .arg(&path)
            .arg("*.class")
            .arg("-d")
            .arg(&out)
            .status()
            .expect("unzip missing: apt-get install unzip");
        assert!(st.success(), "unzip {} failed", path.display());
        trees.push((jar.to_string(), out));
    }
    (trees, missing)
}

/// Input hash -> (outcomes hash, where the input was found), for every class of this
/// machine's inputs; writes the per-mode detail file if asked.
fn compute() -> BTreeMap<String, (String, String)> {
    let dir = scratch("hashes");
    let (trees, missing) = extract_inputs(&dir);
    // A missing JDK or jar is a machine not set up, not a test to pass with less:
    // `cargo xtask setup` installs the Debian jars, and both JDKs are required.
    assert!(
        missing.is_empty(),
        "inputs missing on this machine: {missing:?} (run `cargo xtask setup`; JDK 25 \
         comes with the machine image at {JDK25})"
    );
    let mut detail = std::env::var_os("JP_REWRITE_HASHES_DETAIL").map(|p| {
        std::io::BufWriter::new(std::fs::File::create(&p).expect("create the detail file"))
    });
    let mut out = BTreeMap::new();
    for (label, root) in &trees {
        let mut files = Vec::new();
        class_files(root, &mut files);
        for f in files {
            let input = std::fs::read(&f).expect("read class");
            let key = hex64(&sha256(&input));
            if out.contains_key(&key) {
                continue;
            }
            let rel = f.strip_prefix(root).expect("under root");
            let place = format!("{label}:{}", rel.display());
            let hashes = outcome_hashes(&input);
            if let Some(d) = detail.as_mut() {
                for (mode, h) in &hashes {
                    writeln!(d, "{key} {mode} {} {place}", hex64(h)).expect("write detail");
                }
            }
            out.insert(key, (hex64(&combined(&hashes)), place));
        }
    }
    out
}

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

fn read_fixture() -> BTreeMap<String, String> {
    let path = fixture_path();
    let file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: regenerate it (see this file's header)",
            path.display()
        )
    });
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .expect("the fixture is gzip'd text");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (input, outcomes) = l.split_once(' ').expect("fixture line: INPUT OUTCOMES");
            (input.to_string(), outcomes.to_string())
        })
        .collect()
}

#[test]
fn rewritten_bytes_are_the_recorded_ones() {
    let fixture = read_fixture();
    let now = compute();
    let mut found = 0usize;
    let mut differ = Vec::new();
    for (input, (outcomes, place)) in &now {
        if let Some(want) = fixture.get(input) {
            found += 1;
            if want != outcomes {
                differ.push(format!("{place} (input {input})"));
            }
        }
    }
    println!(
        "{} inputs here, {} fixture entries, {found} found, {} differ",
        now.len(),
        fixture.len(),
        differ.len()
    );
    assert!(
        differ.is_empty(),
        "{} classes are rewritten differently than recorded (JP_REWRITE_HASHES_DETAIL=FILE \
         on this and a good commit tells the modes), the first ones:\n{}",
        differ.len(),
        differ[..differ.len().min(20)].join("\n")
    );
    let share = found as f64 / fixture.len().max(1) as f64;
    assert!(
        share >= MIN_FOUND,
        "only {found} of the fixture's {} inputs are on this machine (another JDK or Debian \
         version?): regenerate {FIXTURE} on a commit whose rewriter is known good: \
         cargo test --release -p jp-agent --test rewrite_hashes -- --ignored regenerate",
        fixture.len()
    );
}

/// Writes the fixture from this machine's inputs and this commit's rewriter.
#[test]
#[ignore = "regenerates the fixture: run on a commit whose rewriter is known good"]
fn regenerate() {
    let now = compute();
    let mut text = String::from(
        "# jp-agent rewriter outcomes (tests/rewrite_hashes.rs): INPUT OUTCOMES, the first 64 \
         bits of the SHA-256 of the class and of its outcomes under the modes\n# modes:",
    );
    for m in MODES {
        let _ = write!(text, " {}", m.name);
    }
    text.push_str(" blocks-default blocks-precise\n");
    for (input, (outcomes, _)) in &now {
        let _ = writeln!(text, "{input} {outcomes}");
    }
    let path = fixture_path();
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let file = std::fs::File::create(&path).expect("create the fixture");
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::best());
    gz.write_all(text.as_bytes()).expect("write the fixture");
    gz.finish().expect("finish the fixture");
    println!("{} entries written to {}", now.len(), path.display());
}
