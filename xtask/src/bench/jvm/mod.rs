//! `cargo xtask bench jvm [PART…]`: the agent's cost on real programs from Debian
//! packages and on small programs that isolate one operation, instrumented against
//! uninstrumented, side by side in one run, on both JDKs and both BBAs.
//!
//! Parts (all by default; each writes its own subsection of BENCHMARKS.md's jvm section):
//! - `whole`: each program's whole JVM run (what a short-lived JVM pays);
//! - `steady`: each program's work in rounds inside one JVM, timed after warm-up (what a
//!   service pays), with C2's compile time and code size from the same JVMs;
//! - `cost`: nanoseconds per operation (calls, recursion, blocks, throws);
//! - `contexts`: bytes per calling context and the slowdown as contexts grow;
//! - `entry`: today's method entry against one handed the caller's context, by hand, side
//!   by side in one JVM (the design the hot path would move to).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use super::report::write_section_after;
use crate::build::Deliverables;
use crate::cmd::root;
use crate::setup::{JDK17, JDK25};

mod contexts;
mod entry;
// cost's operations and rounds' harness runner are shared with `bench cpu`.
pub(crate) mod cost;
pub(crate) mod rounds;
mod steady;
mod whole;

const SHARE: &str = "/usr/share/java";
const MODES: [Mode; 3] = [Mode::Off, Mode::Default, Mode::Precise];

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    Whole,
    Steady,
    Cost,
    Contexts,
    Entry,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Mode {
    Off,
    Default,
    Precise,
}

impl Mode {
    fn bba(self) -> Option<&'static str> {
        match self {
            Mode::Off => None,
            Mode::Default => Some("default"),
            Mode::Precise => Some("precise"),
        }
    }
}

/// A real program of the bench: how to run it whole, and its steady-state harness.
pub(crate) struct Program {
    pub(crate) name: &'static str,
    /// Short name: file names, and SteadyBench's program argument.
    pub(crate) key: &'static str,
    /// Agent options beyond bba/stats/out (javac is JDK code: it must be included).
    pub(crate) agent_options: &'static str,
    /// The whole run's java arguments.
    pub(crate) args: Vec<String>,
    /// Runs of the work per steady-state round (a round lasts ~0.05–0.5 s without the agent).
    pub(crate) steady_reps: u32,
    /// SteadyBench's arguments after its fixed ones (javac: the sources).
    pub(crate) steady_args: Vec<String>,
}

impl Program {
    /// A SteadyBench JVM's arguments: `jvm_options`, then the class path, the class, this
    /// program with its rounds' work and the harness's schedule.
    pub(crate) fn steady_command(&self, mut jvm_options: Vec<String>) -> Result<Vec<String>> {
        jvm_options.extend([
            "-cp".to_string(),
            format!(".:{}", harness_cp()?),
            "SteadyBench".to_string(),
            self.key.to_string(),
            self.steady_reps.to_string(),
        ]);
        jvm_options.extend(rounds::schedule());
        jvm_options.extend(self.steady_args.iter().cloned());
        Ok(jvm_options)
    }
}

/// A JDK to measure: its label and its `java`.
pub(crate) type Jdk = (&'static str, PathBuf);

/// `only`: JDK feature releases to measure (17, 25; both when empty).
pub fn run(out: &Deliverables, parts: &[Part], only: &[u32]) -> Result<()> {
    let parts: Vec<Part> = if parts.is_empty() {
        Part::value_variants().to_vec()
    } else {
        parts.to_vec()
    };
    let dir = prepare()?;
    let programs = programs(&dir)?;
    let started = std::time::Instant::now();
    let mut notes = String::new();
    if let Some(other) = only.iter().find(|r| ![17, 25].contains(*r)) {
        bail!("--jdk {other}: the bench measures JDK 17 and JDK 25");
    }
    let jdks = jdks(only, &mut notes);
    write_section_after(
        "jvm",
        None,
        &format!(
            "## JVM agent overhead (`cargo xtask bench jvm`)\n\n\
Real programs from Debian packages (inputs in `xtask/bench-inputs/jvm/`) and small programs \
that isolate one operation, each without the agent and with it (bba=default and \
bba=precise), side by side in one run, on JDK 17 and JDK 25. Each subsection is written by \
its part (`cargo xtask bench jvm whole|steady|cost|contexts|entry [--jdk 17|25]`, all parts and \
both JDKs by default).\n{notes}"
        ),
    )?;
    let mut steady_geomean: Option<steady::Geomeans> = None;
    for part in parts {
        let t0 = std::time::Instant::now();
        let (name, body) = match part {
            Part::Whole => ("jvm-whole", whole::run(out, &dir, &jdks, &programs)?),
            Part::Steady => {
                let (body, g) = steady::run(out, &dir, &jdks, &programs)?;
                steady_geomean = Some(g);
                ("jvm-steady", body)
            }
            Part::Cost => ("jvm-cost", cost::run(out, &dir, &jdks)?),
            Part::Entry => ("jvm-entry", entry::run(out, &dir, &jdks)?),
            Part::Contexts => {
                // Without the steady part in this run, its last recorded geometric means.
                let steady = steady_geomean
                    .clone()
                    .or_else(|| steady::recorded_geomeans(&jdks));
                (
                    "jvm-contexts",
                    contexts::run(out, &dir, &jdks, steady.as_ref())?,
                )
            }
        };
        let body = format!(
            "{body}\n\n_This part took {:.0} s of the bench._",
            t0.elapsed().as_secs_f64()
        );
        write_section_after(name, Some("jvm"), &body)?;
    }
    eprintln!(
        "xtask: bench jvm took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The JDKs to measure (those of `only`, or both); a missing one is said in `notes` and on
/// stderr.
pub(crate) fn jdks(only: &[u32], notes: &mut String) -> Vec<Jdk> {
    let mut found = Vec::new();
    for (release, label, jdk) in [(17, "JDK 17", JDK17), (25, "JDK 25", JDK25)] {
        if !only.is_empty() && !only.contains(&release) {
            notes.push_str(&format!(
                "\n**{label}: not measured in this run (`--jdk`).**\n"
            ));
            continue;
        }
        let java = Path::new(jdk).join("bin/java");
        if java.exists() {
            found.push((label, java));
        } else {
            notes.push_str(&format!(
                "\n**{label} is missing ({jdk}): not measured.**\n"
            ));
            eprintln!("xtask: WARNING: {label} missing at {jdk}: its benchmark is NOT run");
        }
    }
    found
}

/// `-agentpath:` writing a JSON profile to `profile` at exit, plus `extra` options.
fn agent_arg(out: &Deliverables, bba: &str, profile: &Path, extra: &str) -> String {
    format!(
        "-agentpath:{}=bba={bba},out={}{extra}",
        out.agent_lib.display(),
        profile.display()
    )
}

/// The three modes' results of item `i` (a program, an operation, a size), if all ran.
fn by_mode<T>(runs: &BTreeMap<(usize, Mode), T>, i: usize) -> Option<(&T, &T, &T)> {
    Some((
        runs.get(&(i, Mode::Off))?,
        runs.get(&(i, Mode::Default))?,
        runs.get(&(i, Mode::Precise))?,
    ))
}

/// Geometric mean of positive ratios (NaN if there are none).
fn geomean(ratios: &[f64]) -> f64 {
    if ratios.is_empty() {
        return f64::NAN;
    }
    (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp()
}

fn met(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**not met**"
    }
}

fn jar(name: &str) -> Result<String> {
    let p = Path::new(SHARE).join(name);
    if !p.exists() {
        bail!("{} is missing: run `cargo xtask setup`", p.display());
    }
    Ok(p.display().to_string())
}

/// Every jar the harnesses compile against (each run loads only its program's classes).
pub(crate) fn harness_cp() -> Result<String> {
    Ok([
        jar("rhino.jar")?,
        jar("jython.jar")?,
        jar("h2.jar")?,
        jar("xalan2.jar")?,
        jar("serializer.jar")?,
        lucene_cp()?,
    ]
    .join(":"))
}

/// A scratch directory with the inputs, a generated XML document and the harnesses compiled.
pub(crate) fn prepare() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("jp-bench-jvm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let inputs = root().join("xtask/bench-inputs/jvm");
    let mut sources = Vec::new();
    for e in
        std::fs::read_dir(&inputs).with_context(|| format!("cannot read {}", inputs.display()))?
    {
        let e = e?;
        std::fs::copy(e.path(), dir.join(e.file_name()))?;
        if e.path().extension().is_some_and(|x| x == "java") {
            sources.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    let mut xml = String::from("<?xml version=\"1.0\"?>\n<items>\n");
    for i in 0..20000u32 {
        xml.push_str(&format!(
            "<item price=\"{}\"><name>item{}</name><desc>{}</desc></item>\n",
            i * 7919 % 1009,
            i * 31 % 5003,
            "x".repeat((i % 17) as usize)
        ));
    }
    xml.push_str("</items>\n");
    std::fs::write(dir.join("items.xml"), xml)?;
    let javac = Path::new(JDK17).join("bin/javac");
    crate::cmd::run(
        Command::new(javac)
            .current_dir(&dir)
            .args(["--release", "17", "-cp", &harness_cp()?, "-d", "."])
            .args(&sources),
    )?;
    Ok(dir)
}

fn lucene_cp() -> Result<String> {
    Ok([
        jar("lucene-core-8.7.0.jar")?,
        jar("lucene-analyzers-common-8.7.0.jar")?,
    ]
    .join(":"))
}

pub(crate) fn programs(dir: &Path) -> Result<Vec<Program>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // javac compiles jp's own test programs (the bench's harnesses need the program jars).
    let mut javac_sources: Vec<String> = Vec::new();
    for e in std::fs::read_dir(root().join("jp-agent/tests/fixtures/programs"))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "java") {
            javac_sources.push(p.display().to_string());
        }
    }
    javac_sources.sort();
    let mut javac = s(&[
        "-m",
        "jdk.compiler/com.sun.tools.javac.Main",
        "--release",
        "17",
        "-proc:none",
        "-d",
    ]);
    javac.push(dir.join("javac-out").display().to_string());
    javac.extend(javac_sources.iter().cloned());
    let program = |name, key, args, steady_reps| Program {
        name,
        key,
        agent_options: "",
        args,
        steady_reps,
        steady_args: Vec::new(),
    };
    Ok(vec![
        program(
            "rhino (JavaScript)",
            "rhino",
            s(&[
                "-cp",
                &jar("rhino.jar")?,
                "org.mozilla.javascript.tools.shell.Main",
                "work.js",
            ]),
            2,
        ),
        program(
            "jython (Python)",
            "jython",
            s(&[
                "-Dpython.cachedir.skip=true",
                "-cp",
                &jar("jython.jar")?,
                "org.python.util.jython",
                "work.py",
            ]),
            2,
        ),
        program(
            "H2 (SQL)",
            "h2",
            s(&[
                "-cp",
                &jar("h2.jar")?,
                "org.h2.tools.RunScript",
                "-url",
                "jdbc:h2:mem:bench",
                "-script",
                "work.sql",
            ]),
            1,
        ),
        program(
            "Xalan (XSLT)",
            "xalan",
            s(&[
                "-cp",
                &format!("{}:{}", jar("xalan2.jar")?, jar("serializer.jar")?),
                "org.apache.xalan.xslt.Process",
                "-IN",
                "items.xml",
                "-XSL",
                "sort.xsl",
            ]),
            1,
        ),
        program(
            "Lucene (index + search)",
            "lucene",
            s(&["-cp", &format!("{}:.", lucene_cp()?), "LuceneBench"]),
            1,
        ),
        Program {
            agent_options: ",include=com.sun.tools.javac",
            steady_args: javac_sources,
            ..program("javac (compile)", "javac", javac, 1)
        },
    ])
}
