//! Real programs from Debian packages, unchanged output: each runs without the
//! agent and then with it (bba=default and bba=precise, each with jdk=false and
//! jdk=true, always with -Xverify:all) on JDK 17 and JDK 25. With the agent, stdout (and for javac the
//! class files it writes) must be byte-identical, and the profile complete:
//! valid jp-mct/1 JSON, the program's main method among the root's children, and
//! methods whose call counts the input fixes exactly appear with exactly those
//! counts (summed over their calling contexts):
//!
//! - rhino runs `tests/fixtures/real/fib.js` (compiled to JVM classes by rhino's optimizer):
//!   the JS function fib is called Σ_{n=0..14} (2·F(n+1) − 1) = 2·(F(17) − 1) − 15
//!   = 3177 times, the forEach callback 9 times (9 words), the map callback 8 times
//!   (8 distinct words);
//! - jython runs `tests/fixtures/real/fact.py`: fact is called Σ_{i=0..9} max(i, 1) = 46 times;
//! - H2 (RunScript) runs `tests/fixtures/real/h2.sql`: our SQL function JpH2Fn.twice is
//!   called once per row of `WHERE ID <= 7`: 7 calls, 4 bytecodes each
//!   (iconst_2 iload_0 imul ireturn);
//! - Xalan (org.apache.xalan.xslt.Process) runs `tests/fixtures/real/items.xsl`: the Java
//!   extension JpXalanFn.shout is called once per <item>: 6 calls, 4 bytecodes each
//!   (aload_0 invokevirtual invokedynamic areturn);
//! - Lucene (8.7, our `tests/fixtures/real/LuceneDemo.java`) indexes 5 documents: our
//!   LowerFilter.incrementToken is called once per token (33) plus once per field
//!   value at its end (5) = 38 calls; from `javap -c`, a call at the end runs 6
//!   bytecodes, a call for a token of L chars 17 + 14·L; the documents have 140
//!   chars in 33 tokens: 5·6 + 33·17 + 14·140 = 2551 bytecodes;
//! - javac (module jdk.compiler) compiles `tests/fixtures/programs/*.java` with our
//!   annotation processor JpProcessor: process() is called once per round, 2 rounds
//!   (sources, then the final round); JpProcessor.<init> 1 call, 3 bytecodes. With
//!   jdk=false javac itself is JDK code: only the processor is in the profile.
//!
//! No exception crosses these methods, so the numbers hold under both BBAs.

mod common;

use common::tree::Doc;
use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

const SHARE: &str = "/usr/share/java";
const LUCENE_JARS: &[&str] = &["lucene-core-8.7.0.jar", "lucene-analyzers-common-8.7.0.jar"];

fn jar(name: &str, package: &str) -> String {
    let p = Path::new(SHARE).join(name);
    assert!(
        p.exists(),
        "\n\n*** {} is missing: install the Debian package `{package}` \
         (`apt-get install {package}`; `cargo xtask setup` does it). ***\n",
        p.display()
    );
    p.display().to_string()
}

/// `tests/fixtures/real/*.java` (our helper classes for H2, Xalan, Lucene and javac),
/// compiled once per test process by javac 17 `--release 17`.
fn helpers() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = scratch("real-helpers");
        let src = crate_dir().join("tests/fixtures/real");
        let files: Vec<String> = [
            "JpH2Fn.java",
            "JpXalanFn.java",
            "LuceneDemo.java",
            "JpProcessor.java",
        ]
        .iter()
        .map(|f| src.join(f).display().to_string())
        .collect();
        let cp: Vec<String> = LUCENE_JARS
            .iter()
            .map(|j| jar(j, "liblucene8-java"))
            .collect();
        let mut args = vec![
            "--release".into(),
            "17".into(),
            "-cp".into(),
            cp.join(":"),
            "-d".into(),
        ];
        args.push(out.display().to_string());
        args.extend(files);
        let javac = Jdk::J17.home().join("bin/javac");
        let run = run_program(&javac, &args, &out, LIMIT);
        run.assert_ok();
        out
    })
}

/// A known method: every context whose method name contains all of `parts`.
struct Known {
    parts: &'static [&'static str],
    calls: u64,
    bytecodes: Option<u64>,
}

struct Program {
    name: &'static str,
    /// JVM arguments after the agent (classpath, main class, program arguments).
    args: fn(&Path) -> Vec<String>,
    /// Files of `tests/fixtures/real` copied into the run directory (relative names in the output).
    files: &'static [&'static str],
    /// Must be a child of the root with jdk=false (None: the main method is JDK code).
    main: Option<&'static str>,
    /// Must be a child of the root with jdk=true.
    main_jdk: &'static str,
    known: &'static [Known],
    /// Directory (relative to the run directory) whose files must be identical.
    output_dir: Option<&'static str>,
}

fn rhino_args(_: &Path) -> Vec<String> {
    vec![
        "-cp".into(),
        jar("rhino.jar", "rhino"),
        "org.mozilla.javascript.tools.shell.Main".into(),
        "fib.js".into(),
    ]
}

fn jython_args(_: &Path) -> Vec<String> {
    vec![
        "-Dpython.cachedir.skip=true".into(),
        "-cp".into(),
        jar("jython.jar", "jython"),
        "org.python.util.jython".into(),
        "fact.py".into(),
    ]
}

fn h2_args(_: &Path) -> Vec<String> {
    vec![
        "-cp".into(),
        format!("{}:{}", jar("h2.jar", "libh2-java"), helpers().display()),
        "org.h2.tools.RunScript".into(),
        "-url".into(),
        "jdbc:h2:mem:jp".into(),
        "-script".into(),
        "h2.sql".into(),
        "-showResults".into(),
    ]
}

fn xalan_args(_: &Path) -> Vec<String> {
    vec![
        "-cp".into(),
        format!(
            "{}:{}:{}",
            jar("xalan2.jar", "libxalan2-java"),
            jar("serializer.jar", "libxalan2-java"),
            helpers().display()
        ),
        "org.apache.xalan.xslt.Process".into(),
        "-IN".into(),
        "items.xml".into(),
        "-XSL".into(),
        "items.xsl".into(),
    ]
}

fn lucene_args(_: &Path) -> Vec<String> {
    let mut cp: Vec<String> = LUCENE_JARS
        .iter()
        .map(|j| jar(j, "liblucene8-java"))
        .collect();
    cp.push(helpers().display().to_string());
    vec!["-cp".into(), cp.join(":"), "LuceneDemo".into()]
}

fn javac_args(dir: &Path) -> Vec<String> {
    let mut srcs: Vec<String> = std::fs::read_dir(crate_dir().join("tests/fixtures/programs"))
        .expect("tests/fixtures/programs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "java"))
        .map(|p| p.display().to_string())
        .collect();
    srcs.sort();
    let out = dir.join("javac-out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("javac-out");
    let mut a = vec![
        "-m".into(),
        "jdk.compiler/com.sun.tools.javac.Main".into(),
        "--release".into(),
        "17".into(),
        "-d".into(),
        "javac-out".into(),
        "-processorpath".into(),
        helpers().display().to_string(),
        "-processor".into(),
        "JpProcessor".into(),
    ];
    a.extend(srcs);
    a
}

const RHINO: Program = Program {
    name: "rhino",
    args: rhino_args,
    files: &["fib.js"],
    main: Some("org.mozilla.javascript.tools.shell.Main.main([Ljava/lang/String;)V"),
    main_jdk: "org.mozilla.javascript.tools.shell.Main.main([Ljava/lang/String;)V",
    known: &[
        Known {
            parts: &["org.mozilla.javascript.gen.fib_js_", "._c_fib_1("],
            calls: 3177,
            bytecodes: None,
        },
        Known {
            parts: &["org.mozilla.javascript.gen.fib_js_", "._c_anonymous_2("],
            calls: 9,
            bytecodes: None,
        },
        Known {
            parts: &["org.mozilla.javascript.gen.fib_js_", "._c_anonymous_3("],
            calls: 8,
            bytecodes: None,
        },
    ],
    output_dir: None,
};

const JYTHON: Program = Program {
    name: "jython",
    args: jython_args,
    files: &["fact.py"],
    main: Some("org.python.util.jython.main([Ljava/lang/String;)V"),
    main_jdk: "org.python.util.jython.main([Ljava/lang/String;)V",
    known: &[Known {
        parts: &[
            "org.python.pycode.",
            ".fact$1(Lorg/python/core/PyFrame;Lorg/python/core/ThreadState;)",
        ],
        calls: 46,
        bytecodes: None,
    }],
    output_dir: None,
};

const H2: Program = Program {
    name: "h2",
    args: h2_args,
    files: &["h2.sql"],
    main: Some("org.h2.tools.RunScript.main([Ljava/lang/String;)V"),
    main_jdk: "org.h2.tools.RunScript.main([Ljava/lang/String;)V",
    known: &[Known {
        parts: &["JpH2Fn.twice(I)I"],
        calls: 7,
        bytecodes: Some(28),
    }],
    output_dir: None,
};

const XALAN: Program = Program {
    name: "xalan",
    args: xalan_args,
    files: &["items.xml", "items.xsl"],
    main: Some("org.apache.xalan.xslt.Process.main([Ljava/lang/String;)V"),
    main_jdk: "org.apache.xalan.xslt.Process.main([Ljava/lang/String;)V",
    known: &[Known {
        parts: &["JpXalanFn.shout(Ljava/lang/String;)Ljava/lang/String;"],
        calls: 6,
        bytecodes: Some(24),
    }],
    output_dir: None,
};

const LUCENE: Program = Program {
    name: "lucene",
    args: lucene_args,
    files: &[],
    main: Some("LuceneDemo.main([Ljava/lang/String;)V"),
    main_jdk: "LuceneDemo.main([Ljava/lang/String;)V",
    known: &[Known {
        parts: &["LuceneDemo$LowerFilter.incrementToken()Z"],
        calls: 38,
        bytecodes: Some(2551),
    }],
    output_dir: None,
};

const JAVAC: Program = Program {
    name: "javac",
    args: javac_args,
    files: &[],
    main: None,
    main_jdk: "com.sun.tools.javac.Main.main([Ljava/lang/String;)V",
    known: &[
        Known {
            parts: &["JpProcessor.process(Ljava/util/Set;Ljavax/annotation/processing/RoundEnvironment;)Z"],
            calls: 2,
            bytecodes: None,
        },
        Known { parts: &["JpProcessor.<init>()V"], calls: 1, bytecodes: Some(3) },
    ],
    output_dir: Some("javac-out"),
};

/// The agent configurations: (options, expected "bba" in the profile).
const CONFIGS: &[(&str, &str)] = &[
    ("bba=default", "default"),
    ("bba=precise", "precise"),
    ("bba=default,jdk=true", "default"),
    ("bba=precise,jdk=true", "precise"),
];

fn read_tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read output dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).expect("prefix").to_path_buf();
                out.insert(rel, std::fs::read(&p).expect("read output file"));
            }
        }
    }
    out
}

/// Checks one profile; returns the problems found.
fn check_profile(prog: &Program, doc: &Doc, bba: &str, jdk_true: bool) -> Vec<String> {
    let mut errs = Vec::new();
    if doc.bba != bba {
        errs.push(format!("profile says bba={}, expected {bba}", doc.bba));
    }
    if doc.root.children.is_empty() {
        errs.push("the profile is empty".into());
    }
    let main = if jdk_true {
        Some(prog.main_jdk)
    } else {
        prog.main
    };
    if let Some(main) = main {
        if !doc.root.children.iter().any(|n| n.method == main) {
            let roots: Vec<&str> = doc
                .root
                .children
                .iter()
                .map(|n| n.method.as_str())
                .collect();
            errs.push(format!(
                "{main} is not a child of the root; root children: {roots:?}"
            ));
        }
    }
    let mut totals = vec![(0u64, 0u64, 0usize); prog.known.len()];
    let mut zero_calls = 0usize;
    doc.visit(|n, _| {
        if n.calls == 0 {
            zero_calls += 1;
        }
        for (k, t) in prog.known.iter().zip(totals.iter_mut()) {
            if k.parts.iter().all(|p| n.method.contains(p)) {
                t.0 += n.calls;
                t.1 += n.bytecodes;
                t.2 += 1;
            }
        }
    });
    if zero_calls > 0 {
        errs.push(format!("{zero_calls} node(s) with 0 calls"));
    }
    for (k, (calls, bytecodes, nodes)) in prog.known.iter().zip(totals) {
        if nodes == 0 {
            errs.push(format!("no context of a method matching {:?}", k.parts));
        } else if calls != k.calls || k.bytecodes.is_some_and(|b| b != bytecodes) {
            errs.push(format!(
                "method {:?}: expected calls={} bytecodes={}, got calls={calls} bytecodes={bytecodes} (over {nodes} contexts)",
                k.parts,
                k.calls,
                k.bytecodes.map_or("(not checked)".to_string(), |b| b.to_string())
            ));
        }
    }
    errs
}

fn run(prog: &Program, jdk: Jdk) {
    let dir = scratch(&format!("real-{}-{}", prog.name, jdk.name()));
    for f in prog.files {
        std::fs::copy(crate_dir().join("tests/fixtures/real").join(f), dir.join(f))
            .expect("copy input");
    }
    let limit = Duration::from_secs(300);
    let mut timings = Vec::new();
    // The JIT's messages go to stderr (stdout is compared): what it refuses to compile.
    let jit_log = ["-XX:+PrintCompilation", "-XX:+DisplayVMOutputToStderr"].map(String::from);
    let mut base_args = jit_log.to_vec();
    base_args.extend((prog.args)(&dir));
    let base = java(jdk, &base_args, &dir, limit);
    base.assert_ok();
    let base_refused = jit_refusals(&base.stderr);
    assert!(
        !base.stdout.is_empty() || prog.output_dir.is_some(),
        "{}: no output without the agent",
        prog.name
    );
    timings.push(format!("none {:.1}s", base.elapsed.as_secs_f64()));
    let base_files = prog.output_dir.map(|d| read_tree(&dir.join(d)));
    let mut failures = Vec::new();
    for (opts, bba) in CONFIGS {
        let what = format!("{} on {} with {opts}", prog.name, jdk.name());
        let out = dir.join(format!("{}.json", opts.replace([',', '='], "_")));
        // -Xverify:all: every rewritten class (the JDK's too with jdk=true) is verified.
        let mut args = jit_log.to_vec();
        args.extend([
            "-Xverify:all".to_string(),
            format!(
                "-agentpath:{}={opts},format=json,stats=true,out={}",
                agent_lib().display(),
                out.display()
            ),
        ]);
        args.extend((prog.args)(&dir));
        let r = java(jdk, &args, &dir, limit);
        timings.push(format!("{opts} {:.1}s", r.elapsed.as_secs_f64()));
        if !r.status.success() {
            failures.push(format!(
                "{what}: JVM failed ({})\n{}\n{}",
                r.status, r.cmdline, r.stderr
            ));
            continue;
        }
        // Every class the agent was given must have been rewritten or deliberately skipped.
        match r
            .stderr
            .lines()
            // Anywhere in a line: the JVM's own output on stderr may precede it unfinished.
            .find_map(|l| l.split_once("jp-agent: stats: ").map(|(_, stats)| stats))
        {
            None => failures.push(format!(
                "{what}: no `jp-agent: stats:` line on stderr\n{}",
                r.stderr
            )),
            Some(stats) => {
                if !stats.split_whitespace().any(|kv| kv == "classes_failed=0") {
                    let warnings: Vec<&str> = r
                        .stderr
                        .lines()
                        .filter(|l| l.contains("warning"))
                        .take(20)
                        .collect();
                    failures.push(format!(
                        "{what}: classes failed to rewrite: {stats}\n{}",
                        warnings.join("\n")
                    ));
                }
                let rewritten = stats
                    .split_whitespace()
                    .find(|kv| kv.starts_with("classes_rewritten="));
                timings.push(format!("  ({})", rewritten.unwrap_or("?")));
            }
        }
        // A rewritten method C1 or C2 refuses runs interpreted (rhino's and jython's
        // synchronized methods did, when their handlers covered the injected code).
        let refused: Vec<_> = jit_refusals(&r.stderr)
            .into_iter()
            .filter(|m| !base_refused.contains(m))
            .collect();
        if !refused.is_empty() {
            failures.push(format!(
                "{what}: the JIT refuses to compile methods it compiles without the agent:\n  {}",
                refused.join("\n  ")
            ));
        }
        if r.stdout != base.stdout {
            failures.push(format!(
                "{what}: stdout differs from the run without the agent\n--- without ---\n{}\n--- with ---\n{}",
                base.stdout, r.stdout
            ));
        }
        if let (Some(d), Some(base_files)) = (prog.output_dir, &base_files) {
            let files = read_tree(&dir.join(d));
            if &files != base_files {
                let differing: Vec<_> = base_files
                    .keys()
                    .chain(files.keys())
                    .filter(|k| base_files.get(*k) != files.get(*k))
                    .collect();
                failures.push(format!("{what}: output files differ: {differing:?}"));
            }
        }
        match Doc::read(&out) {
            Err(e) => failures.push(format!("{what}: {e}\n{}", r.stderr)),
            Ok(doc) => {
                let errs = check_profile(prog, &doc, bba, opts.contains("jdk=true"));
                if !errs.is_empty() {
                    failures.push(format!(
                        "{what}: incomplete profile {}:\n  {}",
                        out.display(),
                        errs.join("\n  ")
                    ));
                }
            }
        }
        // The jdk=true profiles are hundreds of MB: keep only those of failed runs.
        if failures.is_empty() {
            let _ = std::fs::remove_file(&out);
        }
    }
    eprintln!(
        "timing {} {}: {}",
        prog.name,
        jdk.name(),
        timings.join(", ")
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// Methods `-XX:+PrintCompilation` reports as skipped (`COMPILE SKIPPED: reason`), with
/// the reason, tier numbers aside: `org.Foo::bar: exception handler covers itself`.
fn jit_refusals(stderr: &str) -> std::collections::BTreeSet<String> {
    stderr
        .lines()
        .filter_map(|l| {
            let (head, reason) = l.split_once("COMPILE SKIPPED:")?;
            let method = head.split_whitespace().find(|w| w.contains("::"))?;
            let reason = reason.split(" (retry").next().unwrap_or(reason).trim();
            // The compiler tries again later (a class loaded under it): not a refusal.
            if reason == "concurrent class loading" {
                return None;
            }
            Some(format!("{method}: {reason}"))
        })
        .collect()
}

macro_rules! real {
    ($($prog:ident => $t17:ident, $t25:ident;)*) => {
        $(
            #[test]
            fn $t17() {
                run(&$prog, Jdk::J17);
            }
            #[test]
            fn $t25() {
                run(&$prog, Jdk::J25);
            }
        )*
    };
}

real! {
    RHINO => rhino_jdk17, rhino_jdk25;
    JYTHON => jython_jdk17, jython_jdk25;
    H2 => h2_jdk17, h2_jdk25;
    XALAN => xalan_jdk17, xalan_jdk25;
    LUCENE => lucene_jdk17, lucene_jdk25;
    JAVAC => javac_jdk17, javac_jdk25;
}
