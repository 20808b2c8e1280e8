//! `cargo xtask bench jvm`: the agent's slowdown on real programs from Debian
//! packages, instrumented against uninstrumented, side by side in one run, on both
//! JDKs and both BBAs; and how fast classes are rewritten at start-up.
//!
//! Each round runs every program in every mode (no agent, bba=default,
//! bba=precise) in rotating order, so that drifts of a shared machine hit all
//! modes alike; the table holds medians over rounds and their ratios.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::report::{median, write_section};
use crate::build::Deliverables;
use crate::cmd::root;
use crate::setup::{JDK17, JDK25};

const ROUNDS: usize = 5;
const SHARE: &str = "/usr/share/java";
const MODES: [Mode; 3] = [Mode::Off, Mode::Default, Mode::Precise];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Mode {
    Off,
    Default,
    Precise,
}

struct Program {
    name: &'static str,
    /// Agent options beyond bba/stats/out (javac is JDK code: it must be included).
    agent_options: &'static str,
    args: Vec<String>,
}

/// Start-up rewriting, as the agent's `stats=true` line reports it.
#[derive(Default, Clone)]
struct RewriteStats {
    classes: f64,
    rewrite_ms: f64,
    classes_per_s: f64,
}

#[derive(Default)]
struct Cell {
    seconds: Vec<f64>,
    /// CPU time of the JVM process (all threads: JIT compilers and GC included).
    cpu_seconds: Vec<f64>,
    rewrites: Vec<RewriteStats>,
}

pub fn run(out: &Deliverables) -> Result<()> {
    let dir = prepare()?;
    let programs = programs(&dir)?;
    let mut sections = String::new();
    for (label, jdk) in [("JDK 17", JDK17), ("JDK 25", JDK25)] {
        let java = Path::new(jdk).join("bin/java");
        if !java.exists() {
            sections.push_str(&format!(
                "\n**{label} is missing ({jdk}): not measured.**\n"
            ));
            eprintln!("xtask: WARNING: {label} missing at {jdk}: its benchmark is NOT run");
            continue;
        }
        let mut cells: BTreeMap<(usize, Mode), Cell> = BTreeMap::new();
        for round in 0..ROUNDS {
            for (p, program) in programs.iter().enumerate() {
                for i in 0..MODES.len() {
                    let mode = MODES[(i + round + p) % MODES.len()];
                    let (secs, cpu, stats) = run_once(&java, out, &dir, program, mode)?;
                    let cell = cells.entry((p, mode)).or_default();
                    cell.seconds.push(secs);
                    cell.cpu_seconds.push(cpu);
                    cell.rewrites.extend(stats);
                }
            }
            eprintln!(
                "xtask: bench jvm {label}: round {}/{ROUNDS} done",
                round + 1
            );
        }
        sections.push_str(&table(label, &programs, &mut cells));
    }
    let body = format!(
        "## JVM agent overhead (`cargo xtask bench jvm`)\n\n\
Real programs from Debian packages (inputs in `xtask/bench-inputs/jvm/`), each run without \
the agent and with `-agentpath:libjpagent.so=bba=…,stats=true` writing a JSON profile at exit (javac is JDK code, so its run adds \
`include=com.sun.tools.javac`); \
{ROUNDS} rounds, modes in rotating order within a round; wall time and CPU time (all the \
JVM's threads, JIT compilers and GC included) of the whole JVM run (start-up, class \
rewriting, the run, writing the profile), medians over rounds. Slowdown = median with the \
agent / median without; CPU time is the steadier of the two on a shared machine. Goal: geometric mean ≤ 1.5× with bba=default and \
≤ 2.5× with bba=precise.\n{sections}"
    );
    write_section("jvm", &body)
}

fn table(label: &str, programs: &[Program], cells: &mut BTreeMap<(usize, Mode), Cell>) -> String {
    let mut s = format!(
        "\n### {label}\n\n| program | wall no agent (s) | wall default | wall precise | CPU no agent (s) | CPU default | CPU precise | classes rewritten | rewrite at start-up (ms) | classes/s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    // Sums of log slowdowns: wall default, wall precise, CPU default, CPU precise.
    let mut logs = [0.0f64; 4];
    for (p, program) in programs.iter().enumerate() {
        let mut med = |m: Mode, cpu: bool| {
            cells
                .get_mut(&(p, m))
                .map(|c| {
                    median(if cpu {
                        &mut c.cpu_seconds
                    } else {
                        &mut c.seconds
                    })
                })
                .unwrap_or(f64::NAN)
        };
        let (off, d, pr) = (
            med(Mode::Off, false),
            med(Mode::Default, false),
            med(Mode::Precise, false),
        );
        let (coff, cd, cpr) = (
            med(Mode::Off, true),
            med(Mode::Default, true),
            med(Mode::Precise, true),
        );
        let rw = cells
            .get(&(p, Mode::Default))
            .map(|c| c.rewrites.clone())
            .unwrap_or_default();
        let mut classes: Vec<f64> = rw.iter().map(|r| r.classes).collect();
        let mut ms: Vec<f64> = rw.iter().map(|r| r.rewrite_ms).collect();
        let mut cps: Vec<f64> = rw.iter().map(|r| r.classes_per_s).collect();
        for (i, r) in [d / off, pr / off, cd / coff, cpr / coff]
            .into_iter()
            .enumerate()
        {
            logs[i] += r.ln();
        }
        s.push_str(&format!(
            "| {} | {off:.2} | {:.2}× | {:.2}× | {coff:.2} | {:.2}× | {:.2}× | {:.0} | {:.0} | {:.0} |\n",
            program.name,
            d / off,
            pr / off,
            cd / coff,
            cpr / coff,
            median(&mut classes),
            median(&mut ms),
            median(&mut cps),
        ));
    }
    let g = |i: usize| (logs[i] / programs.len() as f64).exp();
    s.push_str(&format!(
        "| **geometric mean** | | **{:.2}×** | **{:.2}×** | | **{:.2}×** | **{:.2}×** | | | |\n",
        g(0),
        g(1),
        g(2),
        g(3)
    ));
    s
}

/// CPU time (user + system) of all children this process has waited for.
pub(super) fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid `who`.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn run_once(
    java: &Path,
    out: &Deliverables,
    dir: &Path,
    p: &Program,
    mode: Mode,
) -> Result<(f64, f64, Option<RewriteStats>)> {
    let mut c = Command::new(java);
    c.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let bba = match mode {
        Mode::Off => None,
        Mode::Default => Some("default"),
        Mode::Precise => Some("precise"),
    };
    if let Some(bba) = bba {
        let profile = dir.join(format!("{}-{bba}.json", p.name));
        c.arg(format!(
            "-agentpath:{}=bba={bba},stats=true,out={}{}",
            out.agent_lib.display(),
            profile.display(),
            p.agent_options
        ));
    }
    c.args(&p.args);
    let cpu0 = children_cpu_seconds();
    let t0 = Instant::now();
    let o = c
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", java.display()))?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = children_cpu_seconds() - cpu0;
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        bail!("{} ({mode:?}) failed with {}:\n{stderr}", p.name, o.status);
    }
    Ok((secs, cpu, bba.and_then(|_| parse_stats(&stderr))))
}

fn parse_stats(stderr: &str) -> Option<RewriteStats> {
    let line = stderr.lines().find(|l| l.contains("rewrite_ms="))?;
    let get = |k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse::<f64>().ok())
    };
    Some(RewriteStats {
        classes: get("classes_rewritten")?,
        rewrite_ms: get("rewrite_ms")?,
        classes_per_s: get("classes_per_s")?,
    })
}

fn jar(name: &str) -> Result<String> {
    let p = Path::new(SHARE).join(name);
    if !p.exists() {
        bail!("{} is missing: run `cargo xtask setup`", p.display());
    }
    Ok(p.display().to_string())
}

/// A scratch directory with the inputs, a generated XML document and LuceneBench compiled.
fn prepare() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("jp-bench-jvm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let inputs = root().join("xtask/bench-inputs/jvm");
    for e in
        std::fs::read_dir(&inputs).with_context(|| format!("cannot read {}", inputs.display()))?
    {
        let e = e?;
        std::fs::copy(e.path(), dir.join(e.file_name()))?;
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
    crate::cmd::run(Command::new(javac).current_dir(&dir).args([
        "--release",
        "17",
        "-cp",
        &lucene_cp()?,
        "-d",
        ".",
        "LuceneBench.java",
    ]))?;
    Ok(dir)
}

fn lucene_cp() -> Result<String> {
    Ok([
        jar("lucene-core-8.7.0.jar")?,
        jar("lucene-analyzers-common-8.7.0.jar")?,
    ]
    .join(":"))
}

fn programs(dir: &Path) -> Result<Vec<Program>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut javac_sources: Vec<String> = Vec::new();
    for sub in ["jp-agent/tests/programs", "xtask/bench-inputs/jvm"] {
        for e in std::fs::read_dir(root().join(sub))? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "java") && !p.ends_with("LuceneBench.java") {
                javac_sources.push(p.display().to_string());
            }
        }
    }
    javac_sources.sort();
    let mut javac = s(&[
        "-m",
        "jdk.compiler/com.sun.tools.javac.Main",
        "--release",
        "17",
        "-d",
    ]);
    javac.push(dir.join("javac-out").display().to_string());
    javac.extend(javac_sources);
    Ok(vec![
        Program {
            agent_options: "",
            name: "rhino (JavaScript)",
            args: s(&[
                "-cp",
                &jar("rhino.jar")?,
                "org.mozilla.javascript.tools.shell.Main",
                "work.js",
            ]),
        },
        Program {
            agent_options: "",
            name: "jython (Python)",
            args: s(&[
                "-Dpython.cachedir.skip=true",
                "-cp",
                &jar("jython.jar")?,
                "org.python.util.jython",
                "work.py",
            ]),
        },
        Program {
            agent_options: "",
            name: "H2 (SQL)",
            args: s(&[
                "-cp",
                &jar("h2.jar")?,
                "org.h2.tools.RunScript",
                "-url",
                "jdbc:h2:mem:bench",
                "-script",
                "work.sql",
            ]),
        },
        Program {
            agent_options: "",
            name: "Xalan (XSLT)",
            args: s(&[
                "-cp",
                &format!("{}:{}", jar("xalan2.jar")?, jar("serializer.jar")?),
                "org.apache.xalan.xslt.Process",
                "-IN",
                "items.xml",
                "-XSL",
                "sort.xsl",
            ]),
        },
        Program {
            agent_options: "",
            name: "Lucene (index + search)",
            args: s(&["-cp", &format!("{}:.", lucene_cp()?), "LuceneBench"]),
        },
        Program {
            agent_options: ",include=com.sun.tools.javac",
            name: "javac (compile)",
            args: javac,
        },
    ])
}
