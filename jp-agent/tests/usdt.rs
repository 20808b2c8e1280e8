//! `profiler=usdt`: what the agent fires at `jp:record` rebuilds, node for node, the tree
//! the agent writes with `out=` in the same run.
//!
//! Needs no root and no jpd: `usdt_tap=FILE` makes the agent behave as if a tracer were
//! attached (semaphore set, control generation 1) and append every record it fires to FILE.
//! The capture is decoded with jp-common's checked decoder and the protocol checked the way
//! jpd relies on it (see `common/tap.rs`): records ≤ MAX_RECORD, seq contiguous per stream,
//! every method and parent defined before use, every thread ended before JVM_END. The
//! resync test also writes new generations into the running JVM's `jp_usdt_control` through
//! `/proc/PID/mem`, as jpd does (needs root or ptrace rights over the child).
mod common;

use common::tap::Tap;
use common::*;
use jp_common::wire;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The tap and the JSON of one run, checked against each other.
struct Checked {
    tap: Tap,
    json: Mct,
    /// The program's standard output.
    stdout: String,
}

/// What one run was asked for.
struct Expect<'a> {
    what: &'a str,
    jdk: Jdk,
    main: &'a str,
    bba: &'a str,
    granularity: u64,
    /// Where threads publish their context: `publish=` false, slot, or true (the heap,
    /// under these tests' collector, G1).
    publish: &'a str,
}

/// What one run left behind.
struct Outputs<'a> {
    json_path: &'a Path,
    tap_path: &'a Path,
    /// When the JVM was spawned (Unix ms).
    started_ms: u64,
    stderr: &'a str,
}

/// Decodes the tap, checks the hello, and compares the rebuilt tree with the JSON exactly.
fn check_run(x: &Expect<'_>, o: &Outputs<'_>) -> Checked {
    let Expect {
        what,
        jdk,
        main,
        bba,
        granularity,
        publish,
    } = *x;
    let Outputs {
        json_path,
        tap_path,
        started_ms,
        stderr,
    } = *o;
    let text = std::fs::read_to_string(json_path)
        .unwrap_or_else(|e| panic!("{what}: no profile {}: {e}\n{stderr}", json_path.display()));
    let json = parse_agent(&text, bba, what);
    let bytes = std::fs::read(tap_path)
        .unwrap_or_else(|e| panic!("{what}: no tap {}: {e}\n{stderr}", tap_path.display()));
    let tap = Tap::decode(&bytes).unwrap_or_else(|e| panic!("{what}: bad tap capture: {e}"));
    let h = tap
        .hellos
        .first()
        .unwrap_or_else(|| panic!("{what}: no hello"));
    assert_eq!(h.granularity, granularity, "{what}: hello granularity");
    assert_eq!(h.bba, u64::from(bba == "precise"), "{what}: hello bba");
    assert!(
        h.main == main || h.main.starts_with(&format!("{main} ")),
        "{what}: hello main {:?}",
        h.main
    );
    assert_eq!(h.agent_version, env!("CARGO_PKG_VERSION"), "{what}");
    // Every platform thread that sent its tree announced where it publishes its context
    // (for jpd's CPU per context), with its kernel thread id: on the heap unless asked for
    // slots, except virtual threads' carriers (the default scheduler's workers), whose slot
    // the mounted virtual thread repoints; with publish=false none did.
    if publish != "false" {
        let heap = publish == "true";
        let names = tap.thread_names();
        let carrier = |stream: &u64| {
            names
                .get(stream)
                .is_some_and(|n| n.starts_with("ForkJoinPool-"))
        };
        assert!(
            !tap.context_slots.is_empty()
                && tap
                    .context_slots
                    .iter()
                    .all(|(stream, &(tid, _, on_heap))| {
                        tid > 0 && (on_heap == heap || (carrier(stream) && !on_heap))
                    }),
            "{what}: not every thread announced its context {}: {:?}",
            if heap { "on the heap" } else { "in a slot" },
            tap.context_slots
        );
    } else {
        assert!(
            tap.context_slots.is_empty(),
            "{what}: publish=false, yet threads announced context slots: {:?}",
            tap.context_slots
        );
    }
    let major = match jdk {
        Jdk::J17 => "17.",
        Jdk::J25 => "25",
    };
    assert!(
        h.jdk_version.starts_with(major),
        "{what}: hello jdk_version {:?}",
        h.jdk_version
    );
    // /proc start times have 10 ms ticks and a whole-second boot time.
    assert!(
        h.start_time_ms + 2000 >= started_ms && h.start_time_ms <= now_ms() + 1000,
        "{what}: JVM start {} not within the run (spawned at {started_ms})",
        h.start_time_ms
    );
    // The test programs are compiled with debug info: their methods carry a source file
    // (not the agent's pseudo-method of overflow nodes, which is in every method table).
    for (m, src) in &tap.sources {
        let jdk_class = ["java.", "jdk.", "sun.", "com.sun."]
            .iter()
            .any(|p| m.starts_with(p));
        if !jdk_class && !m.starts_with("jp.[") {
            let class = m.split('(').next().unwrap().rsplit_once('.').unwrap().0;
            let dir = class
                .rsplit_once('.')
                .map(|(pkg, _)| pkg.replace('.', "/") + "/");
            assert!(
                src.ends_with(".java") && src.starts_with(dir.as_deref().unwrap_or("")),
                "{what}: method {m} has source file {src:?}"
            );
        }
    }
    assert!(
        tap.thread_names().values().any(|n| n == "main"),
        "{what}: no stream named main: {:?}",
        tap.thread_names()
    );
    assert_eq!(
        tap.snapshots,
        tap.hellos.len(),
        "{what}: one ended-threads snapshot per generation answered"
    );
    let rebuilt = tap
        .merged(bba)
        .unwrap_or_else(|e| panic!("{what}: cannot rebuild the tree: {e}"));
    let diffs = compare(&json, &rebuilt, Rule::Exact);
    if !diffs.is_empty() {
        panic!(
            "\n{what}: {} difference(s) between the out= file and the USDT records:\n  {}\n\n--- file ---\n{}\n--- usdt ---\n{}",
            diffs.len(),
            diffs[..diffs.len().min(40)].join("\n  "),
            json.render(),
            rebuilt.render()
        );
    }
    assert!(!json.nodes.is_empty(), "{what}: empty profile");
    Checked {
        tap,
        json,
        stdout: String::new(),
    }
}

/// Runs `main` from `cp` with `out=` and `usdt_tap=` and checks the two against each other.
/// The JVM loads a copy of the library that no jpd on the host can find (see
/// [`untraced_agent`]), so the tap is the only tracer and the runs are deterministic.
/// A Java program: class path, main class, arguments; and the way the agent comes in.
#[derive(Clone, Copy)]
struct Program<'a> {
    cp: &'a Path,
    main: &'a str,
    args: &'a [&'a str],
    /// `-javaagent:jp-agent.jar` instead of `-agentpath:`.
    javaagent: bool,
    /// More options for the JVM (e.g. its collector).
    jvm_flags: &'a [&'a str],
}

fn run_checked(
    jdk: Jdk,
    program: Program<'_>,
    bba: &str,
    granularity: Option<u64>,
    dir: &Path,
    extra: &str,
) -> Checked {
    let Program { cp, main, args, .. } = program;
    // File names must not contain the option separators.
    let tag =
        format!("{main}-{}-{bba}-{granularity:?}{extra}", jdk.name()).replace([',', '='], "_");
    let json_path = dir.join(format!("{tag}.json"));
    let tap_path = dir.join(format!("{tag}.tap"));
    let opts = agent_opts(
        bba,
        granularity,
        &json_path,
        // verbose: the start line below says which profiler the options chose.
        &format!("usdt_tap={},verbose=true{extra}", tap_path.display()),
    );
    let lib = untraced_agent(dir);
    let agent = if program.javaagent {
        // -javaagent loads the library named by -Djp.agent.lib.
        format!("-javaagent:{}={opts}", agent_jar().display())
    } else {
        format!("-agentpath:{}={opts}", lib.display())
    };
    let mut jargs: Vec<String> = program.jvm_flags.iter().map(|f| f.to_string()).collect();
    jargs.extend([
        "-Xverify:all".to_string(),
        format!("-Djp.agent.lib={}", lib.display()),
        agent,
        "-cp".to_string(),
        cp.display().to_string(),
        main.to_string(),
    ]);
    jargs.extend(args.iter().map(|a| a.to_string()));
    let started = now_ms();
    let run = java(jdk, &jargs, dir, LIMIT);
    run.assert_ok();
    let what = format!(
        "{main} on {} bba={bba} granularity={granularity:?}",
        jdk.name()
    );
    assert!(
        run.stderr.contains("profiler=file+usdt"),
        "{what}: start line:\n{}",
        run.stderr
    );
    let checked = check_run(
        &Expect {
            what: &what,
            jdk,
            main,
            bba,
            granularity: granularity.unwrap_or(10_000_000),
            publish: match ["false", "slot"]
                .into_iter()
                .find(|p| extra.contains(&format!("publish={p}")))
            {
                Some(p) => p,
                // Collectors that move objects while threads run get slots.
                None if program
                    .jvm_flags
                    .iter()
                    .any(|f| *f == "-XX:+UseZGC" || *f == "-XX:+UseShenandoahGC") =>
                {
                    "slot"
                }
                None => "true",
            },
        },
        &Outputs {
            json_path: &json_path,
            tap_path: &tap_path,
            started_ms: started,
            stderr: &run.stderr,
        },
    );
    Checked {
        stdout: run.stdout.clone(),
        ..checked
    }
}

/// The Paper program, the usual way in (`-agentpath`), with `jvm_flags`.
fn paper_program<'a>(jvm_flags: &'a [&'a str]) -> Program<'a> {
    Program {
        cp: programs(),
        main: "Paper",
        args: &[],
        javaagent: false,
        jvm_flags,
    }
}

/// Where threads publish their context under each collector: on the heap where objects
/// move only while threads are stopped (Parallel, Serial; G1 in the other tests), in
/// slots under ZGC and Shenandoah, which move them while threads run (check_run checks
/// which, and the tap's counts against the file's).
fn collectors(jdk: Jdk) {
    let dir = scratch(&format!("usdt-collectors-{}", jdk.name()));
    for gc in [
        "-XX:+UseParallelGC",
        "-XX:+UseSerialGC",
        "-XX:+UseZGC",
        "-XX:+UseShenandoahGC",
    ] {
        let c = run_checked(jdk, paper_program(&[gc]), "default", Some(1000), &dir, "");
        assert_eq!(c.tap.hellos.len(), 1, "{gc}");
    }
}

fn paper(jdk: Jdk) {
    let dir = scratch(&format!("usdt-paper-{}", jdk.name()));
    for bba in ["default", "precise"] {
        // report_budget=100: every report sends (many small delta records); the default
        // budget (2 %) lets a report send only once the thread has run 49 times as long as
        // its last send took. Either way the tap's counts are the file's (check_run).
        let paper = |gran, extra| {
            let c = run_checked(jdk, paper_program(&[]), bba, gran, &dir, extra);
            assert_eq!(c.tap.hellos.len(), 1);
            c
        };
        for gran in [None, Some(1000)] {
            paper(gran, "");
        }
        let every = paper(Some(7), ",report_budget=100");
        assert!(
            every.tap.delta_records > 10,
            "granularity=7, report_budget=100 should give many delta records, got {}",
            every.tap.delta_records
        );
        // Without publishing, or publishing in slots, the tree and its counts reach the
        // tracer just the same.
        paper(Some(1000), ",publish=false");
        paper(Some(1000), ",publish=slot");
        let budgeted = paper(Some(7), "");
        assert!(
            budgeted.tap.delta_records < every.tap.delta_records,
            "granularity=7: the default report budget should send fewer delta records than \
             report_budget=100: {} against {}",
            budgeted.tap.delta_records,
            every.tap.delta_records
        );
    }
    // The -javaagent way in: the same natives, probe and tap.
    let c = run_checked(
        jdk,
        Program {
            cp: programs(),
            main: "Paper",
            args: &[],
            javaagent: true,
            jvm_flags: &[],
        },
        "precise",
        Some(1000),
        &dir,
        "",
    );
    assert_eq!(c.tap.hellos.len(), 1);
}

#[test]
fn paper_jdk17() {
    paper(Jdk::J17);
}

#[test]
fn paper_jdk25() {
    paper(Jdk::J25);
}

#[test]
fn collectors_jdk17() {
    collectors(Jdk::J17);
}

#[test]
fn collectors_jdk25() {
    collectors(Jdk::J25);
}

/// Threads (merging, early ends, a pool), exceptions, recursion, lambdas.
fn programs_(jdk: Jdk) {
    let dir = scratch(&format!("usdt-programs-{}", jdk.name()));
    // Not Overflow: its tens of thousands of levels make path maps quadratic in memory.
    for main in [
        "Threads",
        "Exceptions",
        "Fib",
        "Lambdas",
        "Sync",
        "Reflect",
        "VirtualThreads",
    ] {
        // With granularity 1000 every report sends (report_budget=100), so that the delta
        // sends' walk, which descends only where a node was entered since the last send or
        // was on the stack then, runs many times over recursion, throws and threads.
        for (gran, extra) in [(None, ""), (Some(1000), ",report_budget=100")] {
            let c = run_checked(
                jdk,
                Program {
                    cp: programs(),
                    main,
                    args: &[],
                    javaagent: false,
                    jvm_flags: &[],
                },
                "precise",
                gran,
                &dir,
                extra,
            );
            if main == "Threads" {
                assert!(
                    c.tap.resyncs.len() >= 5,
                    "Threads: expected main + 4 workers + pool threads, got streams {:?}",
                    c.tap.thread_names()
                );
            }
        }
    }
    // JDK classes too: the runtime's own JDK calls (buffers, strings) run into the sink.
    run_checked(
        jdk,
        Program {
            cp: programs(),
            main: "Threads",
            args: &[],
            javaagent: false,
            jvm_flags: &[],
        },
        "default",
        Some(10_000),
        &dir,
        ",jdk=true",
    );
    // A context limit: the overflow nodes go out on the live view like any context (their
    // pseudo-method in the method table), with the file's counts. Every report sends: the
    // lower overflow node is its own child, which the delta walk must get through.
    run_checked(
        jdk,
        Program {
            cp: programs(),
            main: "Branching",
            args: &[],
            javaagent: false,
            jvm_flags: &[],
        },
        "precise",
        Some(1000),
        &dir,
        ",max_thread_contexts=1000,report_budget=100",
    );
}

/// Virtual threads' time off their carriers (JDK 25; JDK 17 has no virtual threads, so
/// there is no such test for it): 200 virtual threads on 2 carriers each sleep 5 times in
/// d() and yield 5 times in c(). The agent's `KIND_UNMOUNTED` records name d() with the
/// sleep reason once per sleep, for the time the threads measured themselves in d() less
/// what d() ran on a carrier (its calls to nanoTime and sleep, and the wait for the CPU
/// after its mount: bounded here by 5 % of the total on this loaded machine); and c() with
/// the yield reason once per yield. (The first virtual thread's sleep and yield, in warm(),
/// run the JDK's class initializers, where a virtual thread is pinned.)
#[test]
fn virtual_threads_time_off_their_carriers_jdk25() {
    let dir = scratch("usdt-vsleeps-jdk25");
    let c = run_checked(
        Jdk::J25,
        Program {
            cp: programs(),
            main: "VirtualSleeps",
            args: &[],
            javaagent: false,
            jvm_flags: &["-Djdk.virtualThreadScheduler.parallelism=2"],
        },
        "default",
        None,
        &dir,
        "",
    );
    let words: Vec<&str> = c.stdout.split_whitespace().collect();
    let (slept, sleeps, yields) = match words[..] {
        ["slept", ns, "sleeps", n, "yields", y] => (
            ns.parse::<u64>().unwrap(),
            n.parse::<u64>().unwrap(),
            y.parse::<u64>().unwrap(),
        ),
        _ => panic!("output: {}", c.stdout),
    };
    let got = |method: &str, why: u64| {
        c.tap
            .unmounted
            .get(&(method.to_string(), why as u8))
            .copied()
            .unwrap_or_else(|| panic!("no {method} {why}: {:?}", c.tap.unmounted))
    };
    let (d_ns, d_periods) = got("VirtualSleeps.d()V", wire::unmounted::SLEEP);
    assert_eq!(
        d_periods, sleeps,
        "one period per sleep: {:?}",
        c.tap.unmounted
    );
    assert!(
        d_ns <= slept && d_ns >= slept - slept / 20,
        "d() off carriers {d_ns} ns against {slept} ns measured by the threads"
    );
    let (_, c_periods) = got("VirtualSleeps.c()V", wire::unmounted::YIELD);
    assert_eq!(c_periods, yields, "one period per yield");
    let others: Vec<_> = c
        .tap
        .unmounted
        .keys()
        .filter(|(m, w)| {
            !matches!(
                (m.as_str(), u64::from(*w)),
                ("VirtualSleeps.d()V", wire::unmounted::SLEEP)
                    | ("VirtualSleeps.c()V", wire::unmounted::YIELD)
                    | ("VirtualSleeps.warm()V", _)
            )
        })
        .collect();
    assert!(others.is_empty(), "other time off carriers: {others:?}");
}

#[test]
fn programs_jdk17() {
    programs_(Jdk::J17);
}

#[test]
fn programs_jdk25() {
    programs_(Jdk::J25);
}

/// `tests/fixtures/usdt/Bushy.java` compiled once per test process.
fn bushy_classes() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let out = scratch("usdt-bushy-classes");
        let st = Command::new(Jdk::J17.home().join("bin/javac"))
            .args(["--release", "17", "-d"])
            .arg(&out)
            .arg(crate_dir().join("tests/fixtures/usdt/Bushy.java"))
            .status()
            .expect("javac");
        assert!(
            st.success(),
            "javac of tests/fixtures/usdt/Bushy.java failed"
        );
        out
    })
}

/// A tree too big for one record: full trees span many records, each self-contained.
fn big_tree(jdk: Jdk) {
    let dir = scratch(&format!("usdt-bushy-{}", jdk.name()));
    for gran in [None, Some(100_000)] {
        // Without a granularity, reports are paced by time: once a minute here, so that no
        // thread reports before its end and every tree goes out whole.
        let extra = if gran.is_none() {
            ",report_interval_ms=60000"
        } else {
            ""
        };
        let c = run_checked(
            jdk,
            Program {
                cp: bushy_classes(),
                main: "Bushy",
                args: &["2", "1"],
                javaagent: false,
                jvm_flags: &[],
            },
            "default",
            gran,
            &dir,
            extra,
        );
        assert!(
            c.json.nodes.len() > 70_000,
            "Bushy should have ~75k contexts, has {}",
            c.json.nodes.len()
        );
        if gran.is_none() {
            // No report before thread end: each thread's tree goes out whole, at its end.
            assert!(
                c.tap.absolute_continuations >= 20,
                "full trees of ~75k nodes need many records; continuations: {}",
                c.tap.absolute_continuations
            );
        } else {
            // New nodes travel as definitions inside delta records, which split too.
            assert!(
                c.tap.delta_records >= 20,
                "granularity=100000: delta records {}",
                c.tap.delta_records
            );
        }
        eprintln!(
            "Bushy {} granularity={gran:?}: {} records, {} bytes, {} tree entries, {} continuation records, {} delta records",
            jdk.name(),
            c.tap.records,
            c.tap.bytes,
            c.tap.tree_entries,
            c.tap.absolute_continuations,
            c.tap.delta_records
        );
    }
}

#[test]
fn big_tree_jdk17() {
    big_tree(Jdk::J17);
}

#[test]
fn big_tree_jdk25() {
    big_tree(Jdk::J25);
}

// ---------------------------------------------------------------- resync

/// A copy of the agent library under another file name. jpd finds JVMs by the file name
/// `libjpagent.so` in their maps (and attaches by inode), so a JVM that loads this copy is
/// never traced by a jpd running on the host: the tests that need to be the only tracer, or
/// none, use it.
fn untraced_agent(dir: &Path) -> PathBuf {
    let copy = dir.join("libjp-untraced.so");
    if !copy.exists() {
        std::fs::copy(agent_lib(), &copy).expect("copy the agent library");
    }
    copy
}

/// The address of `jp_usdt_control` in process `pid`: the library's load bias (its mapping
/// at file offset 0) plus the symbol's value.
fn control_address(pid: u32, lib: &Path) -> u64 {
    let data = std::fs::read(lib).expect("read libjpagent.so");
    let file = object::File::parse(&*data).expect("parse libjpagent.so");
    let sym = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok("jp_usdt_control"))
        .expect("jp_usdt_control in .dynsym");
    // The library is loaded from `lib` itself (maps show that path).
    let canon = std::fs::canonicalize(lib).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let base = maps
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[2] == "00000000" && Path::new(f[5]) == canon)
                .then(|| u64::from_str_radix(f[0].split('-').next().unwrap(), 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{} not mapped in {pid}:\n{maps}", canon.display()));
    base + sym.address()
}

fn write_generation(pid: u32, control: u64, g: u64) {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .unwrap_or_else(|e| {
            panic!("open /proc/{pid}/mem: {e} — this test writes the control block as jpd does: run it as root")
        });
    let mut magic = [0u8; 8];
    mem.read_exact_at(&mut magic, control)
        .expect("read control");
    assert_eq!(
        u64::from_le_bytes(magic),
        jp_common::wire::CONTROL_MAGIC,
        "no control magic at {control:#x}"
    );
    mem.write_all_at(&g.to_le_bytes(), control + 8)
        .expect("write generation");
}

/// Whether the capture at `tap` holds the HELLO answering `generation` yet.
fn answered(tap: &Path, generation: u64) -> bool {
    let buf = std::fs::read(tap).unwrap_or_default();
    common::tap::hello_generations(&buf).contains(&generation)
}

/// A tracer that (re)attaches mid-run: two new generations written while Bushy runs give a
/// hello, the whole method table and every live thread's full tree again each time, and the
/// rebuilt tree still equals the file.
fn resync(jdk: Jdk) {
    let dir = scratch(&format!("usdt-resync-{}", jdk.name()));
    let json_path = dir.join("resync.json");
    let tap_path = dir.join("resync.tap");
    let lib = untraced_agent(&dir);
    let opts = agent_opts(
        "precise",
        Some(200_000),
        &json_path,
        &format!("usdt_tap={}", tap_path.display()),
    );
    let started = now_ms();
    let mut child = Command::new(jdk.java())
        .args([
            "-Xverify:all",
            &format!("-agentpath:{}={opts}", lib.display()),
        ])
        .arg("-cp")
        .arg(bushy_classes())
        .args(["Bushy", "60", "2"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("resync.stderr")).unwrap())
        .spawn()
        .expect("start java");
    let pid = child.id();
    // main prints "round N" after each of its rounds: by round 3 every thread has reported
    // (a round is ~2.6 M bytecodes, granularity 200 000), so generation 1 was answered.
    // The second generation is written once the first is answered: the agent answers a
    // new generation within its report budget, and two generations written before it
    // answers are rightly answered once (seen: no answer in the 12 rounds up to round 15).
    const FIRST: u64 = 0x5eed_0000_0000_0002;
    const SECOND: u64 = 7;
    let mut written = Vec::new();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    for line in stdout.lines() {
        let line = line.unwrap();
        let g = match (line.as_str(), written.as_slice()) {
            ("round 3", []) => FIRST,
            (_, [FIRST]) if answered(&tap_path, FIRST) => SECOND,
            _ => continue,
        };
        // The library is mapped by now (the agent printed rounds).
        write_generation(pid, control_address(pid, &lib), g);
        written.push(g);
    }
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(dir.join("resync.stderr")).unwrap_or_default();
    assert!(status.success(), "Bushy failed: {status}\n{stderr}");
    assert_eq!(
        written.len(),
        2,
        "Bushy printed no round 3, or ended before its first new generation was answered"
    );
    let what = format!("resync on {}", jdk.name());
    let c = check_run(
        &Expect {
            what: &what,
            jdk,
            main: "Bushy",
            bba: "precise",
            granularity: 200_000,
            publish: "true",
        },
        &Outputs {
            json_path: &json_path,
            tap_path: &tap_path,
            started_ms: started,
            stderr: &stderr,
        },
    );
    assert_eq!(c.tap.pid, pid, "{what}: the records' pid");
    assert_eq!(
        c.tap.snapshots, 3,
        "{what}: ended-threads snapshots, one per generation"
    );
    // A jpd that attached (or restarted) when each generation was written sees nothing
    // before that generation's hello: the threads that ended earlier (early-0, early-1 end
    // before main's first round) reach it only through the ended-threads snapshot, and its
    // tree must still equal the file exactly.
    let bytes = std::fs::read(&tap_path).unwrap();
    for g in &written {
        let late = Tap::decode_from(&bytes, Some(*g))
            .unwrap_or_else(|e| panic!("{what}: as seen from generation {g:#x}: {e}"));
        assert!(
            late.skipped > 0,
            "{what}: nothing before generation {g:#x}?"
        );
        let names = late.thread_names();
        assert!(
            !names.values().any(|n| n.starts_with("early-")),
            "{what}: early threads still sending after generation {g:#x}: {names:?}"
        );
        let rebuilt = late.merged("precise").unwrap();
        let diffs = compare(&c.json, &rebuilt, Rule::Exact);
        assert!(
            diffs.is_empty(),
            "{what}: a tracer attached at generation {g:#x} holds a different tree:\n  {}",
            diffs[..diffs.len().min(30)].join("\n  ")
        );
    }
    // The library copy is invisible to any jpd on the host: ours are the only generations.
    let gens: Vec<u64> = c.tap.hellos.iter().map(|h| h.generation).collect();
    assert_eq!(
        gens,
        [1, written[0], written[1]],
        "{what}: hello generations"
    );
    // main prints the rounds, so it is alive at both writes: it answers the first
    // generation and the one of round 3 with a full tree. The second one waits for
    // its report budget like any send: after a full send of its ~75 000 contexts (a few
    // ms), main may run to its end within the 49 times as long that P = 2 % asks, and
    // is then answered by its end. The workers may end before the second write
    // (scheduling decides: CI saw bushy-0 end before it on JDK 25); then the
    // ended-threads snapshot carries them. Either way the rebuilt trees above are exact.
    let names = c.tap.thread_names();
    for name in ["main", "bushy-0", "bushy-1"] {
        let (stream, _) = names
            .iter()
            .find(|(_, n)| *n == name)
            .unwrap_or_else(|| panic!("{what}: no stream {name}: {names:?}"));
        let full = c.tap.resyncs[stream];
        if name == "main" {
            assert!(
                (2..=3).contains(&full),
                "{what}: {name}'s full trees: {full}"
            );
        } else {
            assert!(
                (1..=3).contains(&full),
                "{what}: {name}'s full trees: {full}"
            );
        }
    }
}

#[test]
fn resync_jdk17() {
    resync(Jdk::J17);
}

/// A tracer that writes new generations without pause (as a jpd would, answering losses
/// that another process's flood caused, were it not for its backoff) does not make the
/// threads send at every report: a re-send waits for the report budget like any other
/// send, and the JVM stream's hello and method table go out only with a send that is due.
/// Counted, not timed: with a new generation before nearly every report, sends that
/// ignored the budget would number about as many as the reports.
#[test]
fn a_generation_storm_keeps_the_report_budget_jdk17() {
    generation_storm(Jdk::J17);
}

#[test]
fn a_generation_storm_keeps_the_report_budget_jdk25() {
    generation_storm(Jdk::J25);
}

fn generation_storm(jdk: Jdk) {
    let dir = scratch(&format!("usdt-generation-storm-{}", jdk.name()));
    let json_path = dir.join("storm.json");
    let tap_path = dir.join("storm.tap");
    let lib = untraced_agent(&dir);
    // Small reports (every 10 000 bytecodes): many report points between generations.
    let opts = agent_opts(
        "default",
        Some(10_000),
        &json_path,
        &format!("usdt_tap={},stats=true", tap_path.display()),
    );
    let mut child = Command::new(jdk.java())
        .arg(format!("-agentpath:{}={opts}", lib.display()))
        .arg("-cp")
        .arg(bushy_classes())
        .args(["Bushy", "30", "2"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("storm.stderr")).unwrap())
        .spawn()
        .expect("start java");
    let pid = child.id();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut writer = None;
    for line in stdout.lines() {
        if line.unwrap() == "round 3" && writer.is_none() {
            let control = control_address(pid, &lib);
            writer = Some(std::thread::spawn(move || storm(pid, control)));
        }
    }
    let status = child.wait().unwrap();
    let written = writer.expect("Bushy printed no round 3").join().unwrap();
    let stderr = std::fs::read_to_string(dir.join("storm.stderr")).unwrap_or_default();
    assert!(status.success(), "Bushy failed: {status}\n{stderr}");
    let reports: u64 = stderr
        .split_whitespace()
        .find_map(|w| w.strip_prefix("reports="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no reports= in the agent's stats:\n{stderr}"));
    let tap = Tap::decode(&std::fs::read(&tap_path).unwrap()).unwrap();
    let sends = (tap.tree_records - tap.absolute_continuations) as u64;
    let hellos = tap.hellos.len() as u64;
    println!(
        "{written} generations written: {reports} reports, {sends} tree sends, {hellos} hellos"
    );
    assert!(
        written > reports,
        "the storm was too slow: {written} generations, {reports} reports"
    );
    assert!(
        sends * 4 <= reports,
        "{sends} tree sends for {reports} reports: re-sends ignored the report budget"
    );
    assert!(
        hellos * 4 <= reports,
        "{hellos} hellos for {reports} reports: the JVM stream answered every generation"
    );
}

/// Writes generation after generation into `pid`'s control block until it exits;
/// returns how many were written.
fn storm(pid: u32, control: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let Ok(mem) = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))
    else {
        return 0;
    };
    let mut g = 0x5707_0000_0000_0000u64;
    while mem.write_all_at(&g.to_le_bytes(), control + 8).is_ok() {
        g += 1;
    }
    g - 0x5707_0000_0000_0000
}

#[test]
fn resync_jdk25() {
    resync(Jdk::J25);
}

// ---------------------------------------------------------------- the library

/// No load segment but the semaphore's own maps the semaphore's file page. The kernel raises
/// the semaphore of a process that maps the library after a tracer attached at the first
/// writable mapping of its file offset; the RELRO segment's last page is also the data
/// segment's first file page, and a semaphore there was raised in the RELRO copy (every JVM
/// started after jpd then sent nothing: e2e `jpd_started_before_the_jvm…`).
fn semaphore_page_is_its_own(file: &object::File<'_>, sem: u64) {
    const PAGE: u64 = 4096;
    let loads: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| {
            let (off, filesz) = s.file_range();
            (s.address(), off, filesz)
        })
        .collect();
    let own = loads
        .iter()
        .find(|(addr, _, filesz)| (*addr..*addr + *filesz).contains(&sem))
        .unwrap_or_else(|| panic!("semaphore {sem:#x} in no segment's file-backed part"));
    let sem_off = own.1 + (sem - own.0);
    for (addr, off, filesz) in &loads {
        if (addr, off) == (&own.0, &own.1) || *filesz == 0 {
            continue;
        }
        let pages = (off & !(PAGE - 1))..(off + filesz).div_ceil(PAGE) * PAGE;
        assert!(
            !pages.contains(&sem_off),
            "the semaphore's file offset {sem_off:#x} is also mapped by the segment at \
             {addr:#x} (file pages {pages:#x?}): a process started after jpd attached would \
             have the wrong copy raised"
        );
    }
}

/// The probe note, the semaphore and the control block as jpd finds them.
#[test]
fn library_has_the_probe_semaphore_and_control() {
    let lib = agent_lib();
    let out = Command::new("readelf")
        .arg("-n")
        .arg(&lib)
        .output()
        .expect("readelf (Debian package binutils) is needed");
    assert!(out.status.success());
    let notes = String::from_utf8_lossy(&out.stdout);
    let at = notes
        .find("Provider: jp")
        .unwrap_or_else(|| panic!("no jp provider in the notes:\n{notes}"));
    let probe: Vec<&str> = notes[at..].lines().take(4).map(str::trim).collect();
    assert_eq!(probe[1], "Name: record", "{notes}");
    let sem_text = probe[2]
        .rsplit("Semaphore: ")
        .next()
        .unwrap()
        .trim_start_matches("0x");
    let sem = u64::from_str_radix(sem_text, 16).unwrap();
    assert_ne!(sem, 0, "the probe needs a semaphore: {}", probe[2]);
    let args = probe[3].strip_prefix("Arguments: ").unwrap();
    let specs: Vec<&str> = args.split(' ').collect();
    assert_eq!(specs.len(), 2, "{args}");
    for s in specs {
        assert!(
            s.starts_with("8@%r") && s.len() <= 7,
            "argument spec {s}: expected 8@<64-bit register>"
        );
    }
    assert_eq!(notes.matches("Provider: jp").count(), 1, "one probe site");

    let nm = Command::new("nm")
        .arg("-D")
        .arg(&lib)
        .output()
        .expect("nm (binutils)");
    let nm = String::from_utf8_lossy(&nm.stdout);
    assert!(
        nm.lines().any(|l| l.ends_with(" D jp_usdt_control")),
        "jp_usdt_control not an exported data symbol:\n{nm}"
    );

    let data = std::fs::read(&lib).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sym = |name: &str| {
        file.dynamic_symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} not in .dynsym"))
    };
    let semaphore = sym("jp_record_semaphore");
    assert_eq!(
        semaphore.address(),
        sem,
        "the note's semaphore is jp_record_semaphore"
    );
    semaphore_page_is_its_own(&file, sem);
    // How probe.rs makes sure of that: a u16 at the start of a page of its own.
    assert_eq!(semaphore.size(), 4096);
    assert_eq!(sem % 4096, 0, "semaphore alignment");
    let probes = file.section_by_name(".probes").expect(".probes section");
    assert!(
        (probes.address()..probes.address() + probes.size()).contains(&sem),
        "semaphore outside .probes"
    );
    match probes.flags() {
        object::SectionFlags::Elf { sh_flags } => {
            assert_ne!(
                sh_flags & u64::from(object::elf::SHF_WRITE),
                0,
                ".probes not writable"
            )
        }
        f => panic!("{f:?}"),
    }
    assert_eq!(
        probes.kind(),
        object::SectionKind::Data,
        ".probes must be file-backed data (PROGBITS), not bss"
    );
    let control = sym("jp_usdt_control");
    assert_eq!(control.size(), 64);
    assert_eq!(control.address() % 8, 0);
    let section = file
        .section_by_index(control.section_index().unwrap())
        .unwrap();
    let bytes = section.data().unwrap();
    let off = (control.address() - section.address()) as usize;
    assert_eq!(
        &bytes[off..off + 16],
        &[
            &jp_common::wire::CONTROL_MAGIC.to_le_bytes()[..],
            &[0u8; 8][..]
        ]
        .concat()[..],
        "control block: magic then generation 0"
    );
    assert_eq!(
        section.kind(),
        object::SectionKind::Data,
        "control in writable data"
    );
}

// ---------------------------------------------------------------- cost

/// Runs `tests/fixtures/usdt/jp/rt/UsdtBench.java` (the runtime's report path: Rt.tick with the
/// counter run out → activate → report) under `opts`; returns (listening, min ns, median ns).
fn bench(jdk: Jdk, dir: &Path, opts: &str, args: &[&str]) -> (bool, f64, f64) {
    static CLASSES: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let classes = CLASSES.get_or_init(|| {
        let out = scratch("usdt-bench-classes");
        let st = Command::new(Jdk::J17.home().join("bin/javac"))
            .args(["--release", "17", "-cp"])
            .arg(agent_jar())
            .arg("-d")
            .arg(&out)
            .arg(crate_dir().join("tests/fixtures/usdt/jp/rt/UsdtBench.java"))
            .status()
            .expect("javac");
        assert!(st.success(), "javac of UsdtBench failed");
        out
    });
    let mut jargs = vec![
        format!("-Xbootclasspath/a:{}", classes.display()),
        format!("-agentpath:{}={opts}", untraced_agent(dir).display()),
        "jp.rt.UsdtBench".to_string(),
    ];
    jargs.extend(args.iter().map(|a| a.to_string()));
    let run = java(jdk, &jargs, dir, LIMIT);
    run.assert_ok();
    let line = run.stdout.lines().last().unwrap_or_default().to_string();
    assert_ne!(
        line, "batches=0",
        "every batch saw the probe's semaphore change (a tracer attaching or leaving): rerun"
    );
    let field = |k: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {line:?}\n{}", run.stderr))
            .to_string()
    };
    (
        field("listening=") == "true",
        field("min_ns_per_report=").parse().unwrap(),
        field("median_ns_per_report=").parse().unwrap(),
    )
}

/// Cost of a report point: the goal is < 50 ns without a tracer. Also prints the cost per
/// record with the tap on (a record of 10 changed nodes per report).
fn report_cost(jdk: Jdk) {
    let dir = scratch(&format!("usdt-cost-{}", jdk.name()));
    let (_, file_min, file_med) = bench(
        jdk,
        &dir,
        "profiler=file,out=x.json",
        &["0", "2000000", "15"],
    );
    let (listening, usdt_min, usdt_med) =
        bench(jdk, &dir, "profiler=usdt", &["0", "2000000", "15"]);
    assert!(
        !listening,
        "the semaphore of an untraced library copy was set: who traces it?"
    );
    // jdk=true: the buffer classes the report point reads with must stay uninstrumented.
    let (_, jdk_min, jdk_med) = bench(jdk, &dir, "profiler=usdt,jdk=true", &["0", "2000000", "15"]);
    let tap = dir.join("bench.tap");
    let (_, tap_min, tap_med) = bench(
        jdk,
        &dir,
        // Every report sends (the default budget would skip most of these back-to-back ones).
        &format!("usdt_tap={},report_budget=100", tap.display()),
        &["10", "100000", "10"],
    );
    let bytes = std::fs::read(&tap).unwrap();
    let (mut records, mut at) = (0usize, 0usize);
    while at + 4 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 4 + len;
        records += 1;
    }
    eprintln!(
        "report point on {}: file profiler min {file_min} ns (median {file_med}); usdt, no tracer: min {usdt_min} ns (median {usdt_med}), with jdk=true min {jdk_min} ns (median {jdk_med}); usdt_tap, 10 changed nodes: min {tap_min} ns (median {tap_med}) per report = {:.0} records/s, {} records, {:.1} bytes/record",
        jdk.name(),
        1e9 / tap_min,
        records,
        (bytes.len() - 4 * records) as f64 / records as f64
    );
    for (min, how) in [(usdt_min, ""), (jdk_min, " with jdk=true")] {
        assert!(
            min < 50.0,
            "{}: a report point without a tracer costs {min} ns{how} (goal < 50 ns)",
            jdk.name()
        );
    }
}

#[test]
fn report_cost_jdk17() {
    report_cost(Jdk::J17);
}

#[test]
fn report_cost_jdk25() {
    report_cost(Jdk::J25);
}

// ---------------------------------------------------------------- options

/// Without `out=` the agent writes no file (live view only); `profiler=file` alone writes the
/// default file and fires nothing. The two runs of the deterministic Paper agree exactly.
fn defaults(jdk: Jdk) {
    let dir = scratch(&format!("usdt-defaults-{}", jdk.name()));
    let tap_path = dir.join("paper.tap");
    let run = |opts: &str| {
        let args = vec![
            "-Xverify:all".to_string(),
            format!("-agentpath:{}={opts}", agent_lib().display()),
            "-cp".to_string(),
            programs().display().to_string(),
            "Paper".to_string(),
        ];
        let r = java(jdk, &args, &dir, LIMIT);
        r.assert_ok();
        r
    };
    let r = run(&format!("usdt_tap={},verbose=true", tap_path.display()));
    assert!(
        r.stderr.contains("profiler=usdt fires USDT jp:record"),
        "{}",
        r.stderr
    );
    // The entry C2 must not inline on JDK 17, the inlinable one on 25 (docs/agent-design.md,
    // "The runtime's helpers"); the counts below are the same either way.
    let entry = match jdk {
        Jdk::J17 => "entry=enterOutOfLine ",
        Jdk::J25 => "entry=enter ",
    };
    assert!(r.stderr.contains(entry), "{}: {}", jdk.name(), r.stderr);
    assert!(!r.stderr.contains("wrote"), "{}", r.stderr);
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with("run") && n != "paper.tap")
        .collect();
    assert!(files.is_empty(), "profiler=usdt wrote files: {files:?}");
    let tap = Tap::decode(&std::fs::read(&tap_path).unwrap()).unwrap();
    let usdt = tap.merged("default").unwrap();

    let r = run("profiler=file,verbose=true");
    assert!(
        r.stderr
            .contains("profiler=file writes json to jp-profile.json at exit")
            && !r.stderr.contains("USDT"),
        "{}",
        r.stderr
    );
    let text = std::fs::read_to_string(dir.join("jp-profile.json")).unwrap();
    let file = parse_agent(&text, "default", "profiler=file");
    let diffs = compare(&file, &usdt, Rule::Exact);
    assert!(diffs.is_empty(), "{}: {diffs:#?}", jdk.name());
    assert!(file.get(&["Paper.main([Ljava/lang/String;)V"]).is_some());

    // Quiet unless asked: no banner, no "wrote" line, yet the same profile is written.
    std::fs::remove_file(dir.join("jp-profile.json")).unwrap();
    let r = run("profiler=file");
    assert!(
        !r.stderr.contains("jp-agent"),
        "without verbose=true the agent printed:\n{}",
        r.stderr
    );
    let text = std::fs::read_to_string(dir.join("jp-profile.json")).unwrap();
    let quiet = parse_agent(&text, "default", "profiler=file (quiet)");
    let diffs = compare(&quiet, &usdt, Rule::Exact);
    assert!(diffs.is_empty(), "{} quiet: {diffs:#?}", jdk.name());
}

#[test]
fn defaults_jdk17() {
    defaults(Jdk::J17);
}

#[test]
fn defaults_jdk25() {
    defaults(Jdk::J25);
}
