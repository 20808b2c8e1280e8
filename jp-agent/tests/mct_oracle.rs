//! Every test program (`tests/fixtures/programs/`) profiled by the agent and by the
//! independent C oracle (`oracle/jporacle.c`), compared node by node, on both JDKs,
//! under `bba=precise` (exact) and `bba=default` (exact where no exception crossed
//! a context, never under-counting elsewhere), with `-Xverify:all`, with the default
//! granularity and with a small one (reports must not change counts). The program's
//! stdout must be the same with and without the agent.

mod common;

use common::*;

/// Programs where no exception is ever thrown in application code: bba=default
/// must be exact there too (also checked: the oracle saw no exception).
const NO_EXCEPTIONS: &[&str] = &[
    "Paper",
    "Fib",
    "StaticInit",
    "Ctors",
    "Dispatch",
    "Switches",
    "Lambdas",
    "Reflect",
    "LongDouble",
    "Wide",
    "Hot",
    "Unicode",
    "Stale",
];

/// Contexts (with call counts) that must exist: lambda bodies under the method that
/// called the stream operation, <clinit> under the triggering context, reflective and
/// thread-pool calls under the nearest instrumented caller (or the thread's root).
fn required_contexts(main: &str) -> &'static [(&'static [&'static str], u64)] {
    match main {
        "Lambdas" => &[
            (
                &[
                    "Lambdas.main([Ljava/lang/String;)V",
                    "Lambdas.streamSum()I",
                    "Lambdas.lambda$streamSum$0(I)I",
                    "Lambdas.square(I)I",
                ],
                10,
            ),
            (
                &[
                    "Lambdas.main([Ljava/lang/String;)V",
                    "Lambdas.streamSum()I",
                    "Lambdas.odd(I)Z",
                ],
                20,
            ),
            (
                &[
                    "Lambdas.main([Ljava/lang/String;)V",
                    "Lambdas.names()Ljava/util/List;",
                    "Lambdas.lambda$names$1(Ljava/lang/String;Ljava/lang/String;)I",
                    "Lambdas.compareLen(Ljava/lang/String;Ljava/lang/String;)I",
                ],
                8,
            ),
            (
                &["Lambdas.main([Ljava/lang/String;)V", "Lambdas.square(I)I"],
                10,
            ),
        ],
        "StaticInit" => &[
            (
                &[
                    "StaticInit.main([Ljava/lang/String;)V",
                    "StaticInit$A.<clinit>()V",
                    "StaticInit$A.compute(I)I",
                ],
                1,
            ),
            (
                &[
                    "StaticInit.main([Ljava/lang/String;)V",
                    "StaticInit.trigger()I",
                    "StaticInit$B.<clinit>()V",
                ],
                1,
            ),
            (
                &[
                    "StaticInit.main([Ljava/lang/String;)V",
                    "StaticInit$Base.<clinit>()V",
                ],
                1,
            ),
            (
                &[
                    "StaticInit.main([Ljava/lang/String;)V",
                    "StaticInit$ByReflection.<clinit>()V",
                ],
                1,
            ),
        ],
        "Reflect" => &[
            (
                &["Reflect.main([Ljava/lang/String;)V", "Reflect.add(I)I"],
                20,
            ),
            (
                &[
                    "Reflect.main([Ljava/lang/String;)V",
                    "Reflect.twice(I)I",
                    "Reflect.helper(I)I",
                ],
                20,
            ),
            (
                &["Reflect.main([Ljava/lang/String;)V", "Reflect.<init>(I)V"],
                20,
            ),
        ],
        "Threads" => &[
            (
                &[
                    "Threads$Worker.run()V",
                    "Threads.work(I)I",
                    "Threads.step(I)I",
                ],
                1000,
            ),
            (
                &[
                    "Threads.lambda$main$2()Ljava/lang/Integer;",
                    "Threads.work(I)I",
                ],
                1,
            ),
        ],
        "Fib" => &[(&["Fib.main([Ljava/lang/String;)V", "Fib.fib(I)I"], 1)],
        "Unicode" => &[
            (
                &[
                    "Unicode.main([Ljava/lang/String;)V",
                    "Unicode$Grüße.zähle(I)I",
                    "Unicode$Grüße.naïve(I)I",
                ],
                4,
            ),
            (
                &["Unicode.main([Ljava/lang/String;)V", "Unicode.計算(I)I"],
                1,
            ),
        ],
        _ => &[],
    }
}

fn check(main: &str, jdk: Jdk) {
    let dir = scratch(&format!("{main}-{}", jdk.name()));
    let (oracle, oracle_stdout) = run_oracle(jdk, main, &dir);
    // The oracle's placement rules, stated explicitly for the cases the issue names.
    for (path, calls) in required_contexts(main) {
        let got = oracle.get(path).map(|c| c.calls);
        assert_eq!(
            got,
            Some(*calls),
            "{main}: oracle has {got:?} calls for {}\n{}",
            path.join(" → "),
            oracle.render()
        );
    }
    let exc_free = NO_EXCEPTIONS.contains(&main);
    if exc_free {
        let with_exc: Vec<_> = oracle
            .nodes
            .iter()
            .filter(|(_, c)| c.exc)
            .map(|(p, _)| mct::show_path(p))
            .collect();
        assert!(
            with_exc.is_empty(),
            "{main} is listed as exception-free but the oracle saw: {with_exc:?}"
        );
    }
    let mut failures = Vec::new();
    for bba in ["precise", "default"] {
        let rule = if bba == "precise" || exc_free {
            Rule::Exact
        } else {
            Rule::ExactUnlessException
        };
        for gran in [None, Some(1000)] {
            let out = dir.join(format!("{main}-{bba}-{gran:?}.json"));
            let (text, stdout) = run_agent(jdk, main, &agent_opts(bba, gran, &out, ""), &out, &dir);
            let what = format!("{main} on {} bba={bba} granularity={gran:?}", jdk.name());
            if stdout != oracle_stdout {
                failures.push(format!(
                    "{what}: stdout differs\n--- without agent (oracle run) ---\n{oracle_stdout}\n--- with agent ---\n{stdout}"
                ));
            }
            let agent = parse_agent(&text, bba, &what);
            let diffs = compare(&oracle, &agent, rule);
            if !diffs.is_empty() {
                failures.push(format!(
                    "{what}: {} difference(s) ({rule:?}):\n  {}\n--- oracle ---\n{}--- agent ---\n{}",
                    diffs.len(),
                    diffs.join("\n  "),
                    oracle.render(),
                    agent.render()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

macro_rules! programs {
    ($($main:ident => $t17:ident, $t25:ident;)*) => {
        $(
            #[test]
            fn $t17() {
                check(stringify!($main), Jdk::J17);
            }
            #[test]
            fn $t25() {
                check(stringify!($main), Jdk::J25);
            }
        )*
    };
}

programs! {
    Paper => paper_jdk17, paper_jdk25;
    Fib => fib_jdk17, fib_jdk25;
    Exceptions => exceptions_jdk17, exceptions_jdk25;
    StaticInit => static_init_jdk17, static_init_jdk25;
    Ctors => ctors_jdk17, ctors_jdk25;
    Dispatch => dispatch_jdk17, dispatch_jdk25;
    Switches => switches_jdk17, switches_jdk25;
    Lambdas => lambdas_jdk17, lambdas_jdk25;
    Reflect => reflect_jdk17, reflect_jdk25;
    Sync => sync_jdk17, sync_jdk25;
    LongDouble => long_double_jdk17, long_double_jdk25;
    Wide => wide_jdk17, wide_jdk25;
    Threads => threads_jdk17, threads_jdk25;
    Hot => hot_jdk17, hot_jdk25;
    CtorThrow => ctor_throw_jdk17, ctor_throw_jdk25;
    Misc => misc_jdk17, misc_jdk25;
    Unicode => unicode_jdk17, unicode_jdk25;
    Across => across_jdk17, across_jdk25;
    Stale => stale_jdk17, stale_jdk25;
    Virtual => virtual_jdk17, virtual_jdk25;
    Many => many_jdk17, many_jdk25;
}

/// Deterministic programs give byte-identical JSON on every run.
fn deterministic(jdk: Jdk) {
    let dir = scratch(&format!("determinism-{}", jdk.name()));
    for main in ["Paper", "Threads", "Lambdas", "Exceptions"] {
        for bba in ["default", "precise"] {
            let mut texts = Vec::new();
            for run in 0..2 {
                let out = dir.join(format!("{main}-{bba}-{run}.json"));
                texts.push(
                    run_agent(
                        jdk,
                        main,
                        &agent_opts(bba, Some(1000), &out, ""),
                        &out,
                        &dir,
                    )
                    .0,
                );
            }
            assert!(
                texts[0] == texts[1],
                "{main} on {} bba={bba}: two runs gave different JSON (see {})",
                jdk.name(),
                dir.display()
            );
        }
    }
}

#[test]
fn deterministic_jdk17() {
    deterministic(Jdk::J17);
}

#[test]
fn deterministic_jdk25() {
    deterministic(Jdk::J25);
}

/// The comparison itself must catch every kind of difference (no JVM needed).
#[test]
fn comparison_detects_differences() {
    let oracle = Mct::parse(
        r#"{"format":"jp-mct/1","bba":"oracle","root":{"children":[
            {"method":"A.m()V","calls":1,"bytecodes":10,"exc":true,"children":[
                {"method":"A.n()V","calls":2,"bytecodes":4,"children":[]}]}]}}"#,
    )
    .unwrap();
    let agent = |m_bc: u64, n_calls: u64, n_bc: u64, extra: &str| {
        Mct::parse(&format!(
            r#"{{"format":"jp-mct/1","bba":"default","root":{{"children":[
                {{"method":"A.m()V","calls":1,"bytecodes":{m_bc},"children":[
                    {{"method":"A.n()V","calls":{n_calls},"bytecodes":{n_bc},"children":[]}}{extra}]}}]}}}}"#
        ))
        .unwrap()
    };
    let extra = r#",{"method":"A.x()V","calls":1,"bytecodes":1,"children":[]}"#;
    assert!(compare(&oracle, &agent(10, 2, 4, ""), Rule::Exact).is_empty());
    assert_eq!(compare(&oracle, &agent(11, 2, 4, ""), Rule::Exact).len(), 1);
    // Over-counting is allowed under bba=default only where an exception passed...
    assert!(compare(&oracle, &agent(11, 2, 4, ""), Rule::ExactUnlessException).is_empty());
    // ...never under-counting, and never elsewhere.
    assert_eq!(
        compare(&oracle, &agent(9, 2, 4, ""), Rule::ExactUnlessException).len(),
        1
    );
    assert_eq!(
        compare(&oracle, &agent(10, 2, 5, ""), Rule::ExactUnlessException).len(),
        1
    );
    assert_eq!(compare(&oracle, &agent(10, 3, 4, ""), Rule::Exact).len(), 1);
    let d = compare(&oracle, &agent(10, 2, 4, extra), Rule::Exact);
    assert!(
        d.len() == 1 && d[0].contains("extra in agent: A.m()V → A.x()V"),
        "{d:?}"
    );
    let d = compare(&agent(10, 2, 4, extra), &oracle, Rule::Exact);
    assert!(d.len() == 1 && d[0].contains("missing in agent"), "{d:?}");
    // Malformed documents are rejected.
    assert!(Mct::parse(r#"{"format":"jp-mct/2","bba":"x","root":{"children":[]}}"#).is_err());
    assert!(Mct::parse(r#"{"format":"jp-mct/1","bba":"x","root":{"children":[{"method":"A","calls":-1,"bytecodes":0,"children":[]}]}}"#).is_err());
    assert!(Mct::parse(
        r#"{"format":"jp-mct/1","bba":"x","root":{"children":[
            {"method":"A","calls":1,"bytecodes":0,"children":[]},{"method":"A","calls":1,"bytecodes":0,"children":[]}]}}"#
    )
    .is_err());
}
