//! The JP paper's example (`tests/fixtures/programs/Paper.java`) with hand-derived numbers.
//!
//! Derivation from `javap -c Paper` (javac 17, `--release 17`); bytecodes are counted
//! as executed by the unmodified program, callees excluded:
//!
//! ```text
//! main:  0 new #7; 3 dup; 4 invokespecial <init>; 7 invokevirtual f; 10 return
//!        → 1 call, 5 bytecodes
//! <init>: 0 aload_0; 1 invokespecial Object.<init>; 4 return
//!        → 1 call, 3 bytecodes (Object.<init> is JDK code: not counted)
//! f:     0 iconst_1; 1 istore_1                                  (2, once)
//!        2 iload_1; 3 bipush 10; 5 if_icmpgt 23                  (3 per test)
//!        8 aload_0; 9 invokevirtual h; 12 aload_0; 13 iload_1;
//!        14 invokevirtual g; 17 iinc 1,1; 20 goto 2              (7 per iteration)
//!        23 return                                               (1)
//!        i = 1..10: 10 iterations → 2 + 10·(3+7) + 3 (last test) + 1 = 106
//! g(n):  0 iconst_0; 1 istore_2                                  (2)
//!        2 iload_2; 3 iload_1; 4 if_icmpge 17                    (3 per test)
//!        7 aload_0; 8 invokevirtual h; 11 iinc 2,1; 14 goto 2    (4 per iteration)
//!        17 return                                               (1)
//!        g(n) = 2 + 7n + 3 + 1 = 6 + 7n; Σ n=1..10 → 10·6 + 7·55 = 445, 10 calls
//! h:     0 return → 1 bytecode per call
//!        f→h: 10 calls / 10 bytecodes; f→g→h: Σ n = 55 calls / 55 bytecodes
//! ```
//! No exception is thrown, so both BBAs must give exactly these numbers.

mod common;

use common::*;

const MAIN: &str = "Paper.main([Ljava/lang/String;)V";
const INIT: &str = "Paper.<init>()V";
const F: &str = "Paper.f()V";
const G: &str = "Paper.g(I)V";
const H: &str = "Paper.h()V";

/// (path, calls, bytecodes): the whole expected tree, nothing else may appear.
fn expected() -> Vec<(Vec<&'static str>, u64, u64)> {
    vec![
        (vec![MAIN], 1, 5),
        (vec![MAIN, INIT], 1, 3),
        (vec![MAIN, F], 1, 106),
        (vec![MAIN, F, H], 10, 10),
        (vec![MAIN, F, G], 10, 445),
        (vec![MAIN, F, G, H], 55, 55),
    ]
}

fn assert_paper(what: &str, m: &Mct) {
    let mut errors = Vec::new();
    for (path, calls, bytecodes) in expected() {
        match m.get(&path) {
            None => errors.push(format!("missing {}", path.join(" → "))),
            Some(c) if c.calls != calls || c.bytecodes != bytecodes => errors.push(format!(
                "{}: expected calls={calls} bytecodes={bytecodes}, got calls={} bytecodes={}",
                path.join(" → "),
                c.calls,
                c.bytecodes
            )),
            Some(_) => {}
        }
    }
    if m.nodes.len() != expected().len() {
        errors.push(format!(
            "expected exactly {} nodes, got {}",
            expected().len(),
            m.nodes.len()
        ));
    }
    assert!(
        errors.is_empty(),
        "{what}:\n  {}\n--- tree ---\n{}",
        errors.join("\n  "),
        m.render()
    );
}

/// Validates the oracle itself against the hand derivation.
fn oracle(jdk: Jdk) {
    let dir = scratch(&format!("paper-oracle-{}", jdk.name()));
    let (m, _) = run_oracle(jdk, "Paper", &dir);
    assert_paper(&format!("oracle on {}", jdk.name()), &m);
}

#[test]
fn oracle_jdk17() {
    oracle(Jdk::J17);
}

#[test]
fn oracle_jdk25() {
    oracle(Jdk::J25);
}

fn agent(jdk: Jdk) {
    let dir = scratch(&format!("paper-agent-{}", jdk.name()));
    for bba in ["default", "precise"] {
        for gran in [None, Some(1000), Some(7)] {
            let out = dir.join(format!("paper-{bba}-{gran:?}.json"));
            let (text, _) = run_agent(jdk, "Paper", &agent_opts(bba, gran, &out, ""), &out, &dir);
            let what = format!("agent on {} bba={bba} granularity={gran:?}", jdk.name());
            assert_paper(&what, &parse_agent(&text, bba, &what));
        }
    }
}

#[test]
fn agent_jdk17() {
    agent(Jdk::J17);
}

#[test]
fn agent_jdk25() {
    agent(Jdk::J25);
}

/// The `-javaagent:jp-agent.jar` way in gives the same numbers for application classes.
fn javaagent(jdk: Jdk) {
    let dir = scratch(&format!("paper-javaagent-{}", jdk.name()));
    for bba in ["default", "precise"] {
        let out = dir.join(format!("paper-{bba}.json"));
        let args = vec![
            "-Xverify:all".to_string(),
            format!(
                "-javaagent:{}={}",
                agent_jar().display(),
                agent_opts(bba, None, &out, "")
            ),
            "-cp".to_string(),
            programs().display().to_string(),
            "Paper".to_string(),
        ];
        let run = java(jdk, &args, &dir, LIMIT);
        run.assert_ok();
        let text = std::fs::read_to_string(&out)
            .unwrap_or_else(|e| panic!("no profile {}: {e}\n{}", out.display(), run.stderr));
        let what = format!("-javaagent on {} bba={bba}", jdk.name());
        assert_paper(&what, &parse_agent(&text, bba, &what));
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
