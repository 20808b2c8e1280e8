//! Edge cases outside the node-by-node suite: a StackOverflowError (depth is not
//! reproducible, so only the contexts around it are compared with the oracle),
//! granularity=1 (the profiler runs at every check), and the `-javaagent` way in
//! compared with the oracle, the context limits (new contexts folded into overflow
//! nodes, compared with the oracle), and bad options stopping the JVM.

mod common;

use common::mct::show_path;
use common::*;
use std::path::Path;

const MAIN: &str = "Overflow.main([Ljava/lang/String;)V";
const AFTER: &str = "Overflow.after(I)I";
const DOWN: &str = "Overflow.down(I)V";

/// What the Overflow checks need from a (possibly tens of thousands deep) profile.
#[derive(Debug, Default)]
struct Summary {
    bba: String,
    roots: Vec<String>,
    main: Option<(u64, u64)>,
    after: Option<(u64, u64)>,
    down_calls: Option<u64>,
    misplaced_after: Vec<usize>,
    odd: Vec<String>,
}

/// Reads the profile on a thread with a large stack (the parser recurses per level).
fn summarize(path: &Path) -> Summary {
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .stack_size(2 << 30)
        .spawn(move || {
            let doc = tree::Doc::read(&path).unwrap_or_else(|e| panic!("{e}"));
            let mut s = Summary {
                bba: doc.bba.clone(),
                ..Default::default()
            };
            s.roots = doc.root.children.iter().map(|n| n.method.clone()).collect();
            for m in doc.root.children.iter().filter(|n| n.method == MAIN) {
                s.main = Some((m.calls, m.bytecodes));
                for c in &m.children {
                    if c.method == AFTER {
                        s.after = Some((c.calls, c.bytecodes));
                    }
                    if c.method == DOWN {
                        s.down_calls = Some(c.calls);
                    }
                }
            }
            // Below main → down only down() may appear, never with more calls than its parent.
            let mut stack: Vec<(&tree::Node, usize, u64, bool)> = doc
                .root
                .children
                .iter()
                .map(|n| (n, 1, u64::MAX, false))
                .collect();
            while let Some((n, depth, parent_calls, in_down)) = stack.pop() {
                if n.method == AFTER && depth != 2 {
                    s.misplaced_after.push(depth);
                }
                if in_down && (n.method != DOWN || n.calls > parent_calls) && s.odd.len() < 5 {
                    s.odd
                        .push(format!("depth {depth}: {} calls={}", n.method, n.calls));
                }
                let down = in_down || (depth == 2 && n.method == DOWN);
                stack.extend(n.children.iter().map(|c| (c, depth + 1, n.calls, down)));
            }
            // Dropping the tree recurses per level too: keep it on this thread.
            drop(doc);
            s
        })
        .expect("spawn")
        .join()
        .expect("profile summary")
}

fn overflow(jdk: Jdk) {
    let dir = scratch(&format!("overflow-{}", jdk.name()));
    let (oracle_file, oracle_out) = run_oracle_file(jdk, "Overflow", &dir);
    let o = summarize(&oracle_file);
    let (o_main_calls, o_main_bc) = o.main.expect("oracle: main");
    assert_eq!(o_main_calls, 1);
    // after(x): iload_0 iconst_2 imul iconst_1 iadd ireturn, called for r = 0, 1, 2.
    assert_eq!(o.after, Some((3, 18)), "oracle main → after");
    assert_eq!(o.down_calls, Some(3), "oracle main → down");
    assert!(
        o.odd.is_empty() && o.misplaced_after.is_empty(),
        "oracle: {o:?}"
    );
    for bba in ["precise", "default"] {
        for gran in [None, Some(1)] {
            let out = dir.join(format!("overflow-{bba}-{gran:?}.json"));
            let (_, stdout) = run_agent(
                jdk,
                "Overflow",
                &agent_opts(bba, gran, &out, ""),
                &out,
                &dir,
            );
            let what = format!("Overflow on {} bba={bba} granularity={gran:?}", jdk.name());
            assert_eq!(stdout, oracle_out, "{what}: stdout");
            let a = summarize(&out);
            let mut errs = Vec::new();
            if a.bba != bba {
                errs.push(format!("bba={}", a.bba));
            }
            // main's own bytecodes do not depend on the depth; the catch blocks cut
            // blocks short, so bba=default may over-count main only.
            let main_ok = a.main.is_some_and(|(calls, bc)| {
                calls == 1
                    && if bba == "precise" {
                        bc == o_main_bc
                    } else {
                        bc >= o_main_bc
                    }
            });
            if !main_ok {
                errs.push(format!(
                    "main: oracle calls=1 bytecodes={o_main_bc}, agent {:?}",
                    a.main
                ));
            }
            if a.after != Some((3, 18)) {
                errs.push(format!(
                    "main → after: expected (3 calls, 18 bytecodes), got {:?}",
                    a.after
                ));
            }
            if a.down_calls != Some(3) {
                errs.push(format!(
                    "main → down: expected 3 calls, got {:?}",
                    a.down_calls
                ));
            }
            if !a.misplaced_after.is_empty() {
                errs.push(format!(
                    "after() outside main (a stale context after the overflow) at depths {:?}",
                    a.misplaced_after
                ));
            }
            if !a.odd.is_empty() {
                errs.push(format!("odd contexts below main → down: {:?}", a.odd));
            }
            if a.roots != [MAIN] {
                errs.push(format!("root children: {:?}", a.roots));
            }
            assert!(
                errs.is_empty(),
                "{what} ({}):\n  {}",
                out.display(),
                errs.join("\n  ")
            );
        }
    }
}

#[test]
fn overflow_jdk17() {
    overflow(Jdk::J17);
}

#[test]
fn overflow_jdk25() {
    overflow(Jdk::J25);
}

/// granularity=1: the profiler's report runs at every check; counts must not change.
fn granularity_one(jdk: Jdk) {
    for main in ["Paper", "Exceptions", "Threads", "Lambdas", "StaticInit"] {
        let dir = scratch(&format!("gran1-{main}-{}", jdk.name()));
        let (oracle, _) = run_oracle(jdk, main, &dir);
        for bba in ["precise", "default"] {
            let out = dir.join(format!("{main}-{bba}.json"));
            let (text, _) = run_agent(jdk, main, &agent_opts(bba, Some(1), &out, ""), &out, &dir);
            let what = format!("{main} on {} bba={bba} granularity=1", jdk.name());
            let agent = parse_agent(&text, bba, &what);
            let rule = if bba == "precise" {
                Rule::Exact
            } else {
                Rule::ExactUnlessException
            };
            assert_same(&what, &oracle, &agent, &compare(&oracle, &agent, rule));
        }
    }
}

#[test]
fn granularity_one_jdk17() {
    granularity_one(Jdk::J17);
}

#[test]
fn granularity_one_jdk25() {
    granularity_one(Jdk::J25);
}

/// `-javaagent:jp-agent.jar` on programs that load classes late, use lambdas and threads.
fn javaagent(jdk: Jdk) {
    for main in ["StaticInit", "Lambdas", "Threads", "Reflect"] {
        let dir = scratch(&format!("javaagent-{main}-{}", jdk.name()));
        let (oracle, oracle_out) = run_oracle(jdk, main, &dir);
        let out = dir.join(format!("{main}.json"));
        let args = vec![
            "-Xverify:all".to_string(),
            format!(
                "-javaagent:{}={}",
                agent_jar().display(),
                agent_opts("precise", None, &out, "")
            ),
            "-cp".to_string(),
            programs().display().to_string(),
            main.to_string(),
        ];
        let run = java(jdk, &args, &dir, LIMIT);
        run.assert_ok();
        let what = format!("{main} with -javaagent on {}", jdk.name());
        assert_eq!(run.stdout, oracle_out, "{what}: stdout");
        let text = std::fs::read_to_string(&out)
            .unwrap_or_else(|e| panic!("{what}: no profile: {e}\n{}", run.stderr));
        let agent = parse_agent(&text, "precise", &what);
        assert_same(
            &what,
            &oracle,
            &agent,
            &compare(&oracle, &agent, Rule::Exact),
        );
    }
}

#[test]
fn javaagent_jdk17() {
    javaagent(Jdk::J17);
}

#[test]
fn javaagent_jdk25() {
    javaagent(Jdk::J25);
}

const OVERFLOW: &str = "jp.[new contexts over max_contexts]";

/// The agent's statistics line (`stats=true`) as key → value.
fn stats(stderr: &str) -> std::collections::HashMap<String, String> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("jp-agent: stats: "))
        .unwrap_or_else(|| panic!("no statistics line in:\n{stderr}"));
    line.split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn stat(s: &std::collections::HashMap<String, String>, key: &str) -> u64 {
    s.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("statistics lack {key}: {s:?}"))
}

/// Runs Branching under the agent (precise) with `limits`; its profile and statistics.
fn branching_with(
    jdk: Jdk,
    dir: &Path,
    name: &str,
    limits: &str,
) -> (Mct, std::collections::HashMap<String, String>, String) {
    let out = dir.join(format!("{name}.json"));
    let opts = agent_opts("precise", None, &out, &format!("stats=true,{limits}"));
    let args = vec![
        format!("-agentpath:{}={opts}", agent_lib().display()),
        "-cp".to_string(),
        programs().display().to_string(),
        "Branching".to_string(),
    ];
    let run = java(jdk, &args, dir, LIMIT);
    run.assert_ok();
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("{name}: no profile: {e}\n{}", run.stderr));
    let what = format!("Branching {limits} on {}", jdk.name());
    (
        parse_agent(&text, "precise", &what),
        stats(&run.stderr),
        run.stderr.clone(),
    )
}

fn is_overflow(p: &[String]) -> bool {
    p.iter().any(|m| m == OVERFLOW)
}

/// max_thread_contexts: each thread's tree stops at the limit; every context it kept has the
/// oracle's exact counts, and each overflow node holds exactly what the oracle has in the
/// contexts that were left out under its parent: the first level the calls straight from
/// the parent, the second everything below them.
fn context_limits(jdk: Jdk) {
    let dir = scratch(&format!("context-limits-{}", jdk.name()));
    let (oracle, _) = run_oracle(jdk, "Branching", &dir);
    let what = format!("Branching max_thread_contexts=1000 on {}", jdk.name());
    let (agent, st, stderr) = branching_with(jdk, &dir, "thread-limit", "max_thread_contexts=1000");
    assert!(
        stderr.contains("warning: a context limit was reached (max_contexts=")
            && stderr.contains(", max_thread_contexts=1000)"),
        "{what}: no warning in:\n{stderr}"
    );

    // The main thread's tree, and the two workers' (the same contexts, merged), each hold
    // exactly the limit: the program asks for 11 112 contexts per thread.
    for top in [
        "Branching.main([Ljava/lang/String;)V",
        "Branching$Worker.run()V",
    ] {
        let kept = agent
            .nodes
            .keys()
            .filter(|p| p[0] == top && !is_overflow(p))
            .count();
        assert_eq!(kept, 1000, "{what}: contexts kept under {top}");
    }
    let mut diffs = Vec::new();
    let mut folded_calls = 0;
    for (path, got) in &agent.nodes {
        let Some(at) = path.iter().position(|m| m == OVERFLOW) else {
            match oracle.nodes.get(path) {
                Some(want) if (want.calls, want.bytecodes) == (got.calls, got.bytecodes) => {}
                want => diffs.push(format!(
                    "{}: agent {got:?}, oracle {want:?}",
                    show_path(path)
                )),
            }
            continue;
        };
        let parent = &path[..at];
        let level = path.len() - at;
        assert!(
            level <= 2,
            "{what}: overflow below overflow below overflow: {}",
            show_path(path)
        );
        // The oracle's contexts under `parent` that the agent did not keep, at the depth
        // this overflow node stands for (level 1: children; level 2: everything deeper).
        let want = oracle
            .nodes
            .iter()
            .filter(|(p, _)| {
                p.len() > at && p[..at] == *parent && !agent.nodes.contains_key(&p[..at + 1])
            })
            .filter(|(p, _)| {
                if level == 1 {
                    p.len() == at + 1
                } else {
                    p.len() > at + 1
                }
            })
            .fold((0, 0), |(c, b), (_, n)| (c + n.calls, b + n.bytecodes));
        folded_calls += got.calls;
        if want != (got.calls, got.bytecodes) {
            diffs.push(format!(
                "{}: agent {got:?}, the oracle's contexts left out {want:?}",
                show_path(path)
            ));
        }
    }
    assert!(diffs.is_empty(), "{what}:\n  {}", diffs.join("\n  "));
    assert!(folded_calls > 0, "{what}: nothing folded");
    assert_eq!(
        stat(&st, "calls_folded"),
        folded_calls,
        "{what}: statistics"
    );
    assert_eq!(
        (agent.total_calls(), agent.total_bytecodes()),
        (oracle.total_calls(), oracle.total_bytecodes()),
        "{what}: totals"
    );

    // max_contexts: the live trees share the budget and the merged tree has as much; the
    // file keeps at most that many contexts, and every call and bytecode is still there.
    let what = format!("Branching max_contexts=3000 on {}", jdk.name());
    let (agent, st, _) = branching_with(jdk, &dir, "jvm-limit", "max_contexts=3000");
    let kept = agent.nodes.keys().filter(|p| !is_overflow(p)).count();
    assert!((1..=3000).contains(&kept), "{what}: {kept} contexts kept");
    assert_eq!(stat(&st, "context_budget"), 3000, "{what}");
    assert!(stat(&st, "calls_folded") > 0, "{what}: {st:?}");
    for (path, got) in agent.nodes.iter().filter(|(p, _)| !is_overflow(p)) {
        // Threads fold different contexts once they compete for the budget, so a merged
        // context may hold only some threads' share: never more than the oracle's.
        let want = oracle.nodes.get(path).copied().unwrap_or_default();
        assert!(
            got.calls <= want.calls && got.bytecodes <= want.bytecodes,
            "{what}: {}: agent {got:?}, oracle {want:?}",
            show_path(path)
        );
    }
    assert_eq!(
        (agent.total_calls(), agent.total_bytecodes()),
        (oracle.total_calls(), oracle.total_bytecodes()),
        "{what}: totals"
    );

    // No limit given: the default (a sixteenth of the heap) is far above this program.
    let (agent, st, stderr) = branching_with(jdk, &dir, "no-limit", "");
    assert!(!stderr.contains("context limit"), "{stderr}");
    assert_same(
        "Branching without limits",
        &oracle,
        &agent,
        &compare(&oracle, &agent, Rule::Exact),
    );
    assert_eq!(stat(&st, "calls_folded"), 0);
    assert!(stat(&st, "context_budget") >= 1024, "{st:?}");
}

#[test]
fn context_limits_jdk17() {
    context_limits(Jdk::J17);
}

#[test]
fn context_limits_jdk25() {
    context_limits(Jdk::J25);
}

/// A bad option stops the JVM at start with a message naming it (both ways in).
fn bad_options(jdk: Jdk) {
    let dir = scratch(&format!("bad-options-{}", jdk.name()));
    for opt in [
        "bba=fast",
        "colour=red",
        "granularity=0",
        "granularity=x",
        "format=xml",
        "jdk=maybe",
    ] {
        for javaagent in [false, true] {
            let agent = if javaagent {
                format!("-javaagent:{}={opt}", agent_jar().display())
            } else {
                format!("-agentpath:{}={opt}", agent_lib().display())
            };
            let args = vec![
                agent,
                "-cp".into(),
                programs().display().to_string(),
                "Paper".into(),
            ];
            let r = java(jdk, &args, &dir, LIMIT);
            let what = format!("{} with {}", jdk.name(), args[0]);
            assert!(
                !r.status.success(),
                "{what}: the JVM ran despite a bad option"
            );
            let key = opt.split('=').next().unwrap_or(opt);
            assert!(
                r.stderr.contains(opt) || r.stderr.contains(key),
                "{what}: the message does not name the option:\n{}",
                r.stderr
            );
        }
    }
}

#[test]
fn bad_options_jdk17() {
    bad_options(Jdk::J17);
}

#[test]
fn bad_options_jdk25() {
    bad_options(Jdk::J25);
}
