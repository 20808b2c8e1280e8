//! `cargo xtask bench windows [PART…]`: what exact windows cost. The agent starts dormant
//! (`-agentpath:libjpagent.so=mode=dormant`) or not at all; a window is opened through
//! HotSpot's dynamic attach (`load LIB 'window=open,id=…,seconds=…,dir=…'`, the request
//! `jcmd PID JVMTI.agent_load` sends) and read back from the agent's `window-ID.done`.
//!
//! Parts (all by default; each writes its own subsection of BENCHMARKS.md's windows section):
//! - `dormant`: a dormant agent against none, pairs of JVMs (`-Xbatch`) at steady state and
//!   whole runs;
//! - `switching`: opening and closing a window on a warm JVM: wall per 1000 classes, the
//!   safepoints (`-Xlog:safepoint`), the JIT's CPU after each switch, the rounds after the
//!   close; and the rounds inside the window against the agent's steady-state table (rhino
//!   also with a script-only scope);
//! - `repeats`: many open/close cycles on one JVM (rhino, jython): the last switch against
//!   the first, metaspace;
//! - `attach`: from the request to counting, on a dormant JVM and on one without the agent.
//!
//! `--quick`: rhino only, few rounds and cycles, short windows; it prints its tables instead
//! of writing BENCHMARKS.md (a smoke run that proves the bench works; it judges no timing).
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::ValueEnum;

use super::report::write_section_after;
use crate::bench::jvm::{self as jvm_bench, Jdk, Program};

mod attach;
mod dormant;
mod first_call;
mod jvm;
mod repeats;
mod safepoints;
mod switching;

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    Dormant,
    Switching,
    Repeats,
    Attach,
}

/// What every part needs: the agent, the scratch directory with the harnesses compiled,
/// the programs, the JDKs, and how much to run.
pub struct Bench {
    /// The agent library's absolute path (the JVMs see the same file system).
    pub lib: String,
    pub dir: PathBuf,
    pub programs: Vec<Program>,
    pub jdks: Vec<Jdk>,
    pub quick: bool,
}

impl Bench {
    /// `-agentpath:LIB=mode=dormant` plus the program's own options (javac's scope).
    pub fn dormant_arg(&self, program: &Program) -> String {
        format!(
            "-agentpath:{}=mode=dormant{}",
            self.lib, program.agent_options
        )
    }

    /// A size: `full` normally, `quick` with `--quick`; `JP_WIN_<NAME>` overrides either.
    pub fn size(&self, name: &str, full: u64, quick: u64) -> u64 {
        super::harness::env_num(
            &format!("JP_WIN_{name}"),
            if self.quick { quick } else { full },
        )
    }
}

/// The programs a part runs: `keys` of the jvm bench's (all when empty), rhino only when
/// quick; `JP_WIN_PROGRAMS=rhino,h2` keeps only those (to look at some again).
fn chosen<'a>(bench: &'a Bench, keys: &[&str]) -> Vec<&'a Program> {
    let only = std::env::var("JP_WIN_PROGRAMS").unwrap_or_default();
    let only: Vec<&str> = only.split(',').filter(|k| !k.is_empty()).collect();
    bench
        .programs
        .iter()
        .filter(|p| keys.is_empty() || keys.contains(&p.key))
        .filter(|p| only.is_empty() || only.contains(&p.key))
        .filter(|p| !bench.quick || p.key == "rhino")
        .collect()
}

pub fn run(agent_lib: &Path, parts: &[Part], only: &[u32], quick: bool) -> Result<()> {
    let parts: Vec<Part> = if parts.is_empty() {
        Part::value_variants().to_vec()
    } else {
        parts.to_vec()
    };
    let dir = jvm_bench::prepare()?;
    let mut notes = String::new();
    let lib = std::fs::canonicalize(agent_lib)
        .with_context(|| format!("no agent at {}", agent_lib.display()))?;
    let bench = Bench {
        lib: lib.display().to_string(),
        programs: jvm_bench::programs(&dir)?,
        jdks: jvm_bench::jdks(only, &mut notes),
        dir,
        quick,
    };
    let started = std::time::Instant::now();
    write(&bench, "windows", &intro(&notes))?;
    for part in parts {
        let t0 = std::time::Instant::now();
        let (name, body) = match part {
            Part::Dormant => ("windows-dormant", dormant::run(&bench)?),
            Part::Switching => ("windows-switching", switching::run(&bench)?),
            Part::Repeats => ("windows-repeats", repeats::run(&bench)?),
            Part::Attach => ("windows-attach", first_call::run(&bench)?),
        };
        let body = format!(
            "{body}\n\n_Measured {} (`date -u`); this part took {:.0} s._",
            utc_now(),
            t0.elapsed().as_secs_f64()
        );
        write(&bench, name, &body)?;
    }
    eprintln!(
        "xtask: bench windows took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The windows section's own text: what every run (of any part) writes between its
/// markers. Judgements of a run (its provenance, the goals met) are written by hand
/// below the section's end marker, where no run reaches them.
fn intro(notes: &str) -> String {
    format!(
        "## Exact windows (`cargo xtask bench windows`)\n\n\
The agent dormant (`-agentpath:libjpagent.so=mode=dormant`: no class rewritten, no class-file \
hook) or not loaded at all; an exact window opened on demand through HotSpot's dynamic attach \
(the `load` request `jcmd PID JVMTI.agent_load LIB 'window=open,id=…,seconds=…,dir=…'` sends, \
here sent by the bench itself so that no `jcmd` JVM starts beside the measured one), closed \
by the agent at its deadline or on `window=close`; the agent's figures of each window from \
its `window-ID.done`. The jvm bench's programs (`SteadyBench`, its warm-up), JDK 17 and \
JDK 25. Each subsection is written by its part (`cargo xtask bench windows \
dormant|switching|repeats|attach [--jdk 17|25]`, all by default). Cells are medians \
[min–max] over the JVMs, sets or windows measured; this shared 2-core machine runs other \
work too, so a range that holds the goal's limit cannot decide it.\n{notes}"
    )
}

/// BENCHMARKS.md's section `name`, or, in a quick run, stdout.
fn write(bench: &Bench, name: &str, body: &str) -> Result<()> {
    if bench.quick {
        println!("<!-- bench:{name} (quick run, not written) -->\n{body}\n");
        return Ok(());
    }
    let after = (name != "windows").then_some("windows");
    write_section_after(name, after, body)
}

fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// `1.004 [0.991–1.020]`.
fn ratio_cell(s: &super::report::Spread) -> String {
    format!("{:.3} [{:.3}–{:.3}]", s.median, s.min, s.max)
}

/// "met" / "**not met**", and whether the noise (the range) can decide it.
fn verdict(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**not met**"
    }
}

#[cfg(test)]
mod tests {
    /// BENCHMARKS.md's windows section is exactly what a run writes: text written by
    /// hand between its markers would be lost at the next run (of any part).
    #[test]
    fn the_windows_section_holds_only_what_a_run_writes() {
        let path = crate::cmd::root().join("BENCHMARKS.md");
        let text = std::fs::read_to_string(&path).expect("BENCHMARKS.md");
        let (begin, end) = ("<!-- bench:windows -->\n", "\n<!-- /bench:windows -->");
        let start = text.find(begin).expect("the windows section") + begin.len();
        let stop = start + text[start..].find(end).expect("its end marker");
        assert_eq!(&text[start..stop], super::intro("").trim_end());
    }
}
