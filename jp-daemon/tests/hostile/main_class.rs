//! A main class, a method and a thread name carrying a terminal escape (`ESC ]0;…BEL`, which
//! retitles a terminal) and 3000 characters: jpctl's text outputs must print them escaped,
//! and the Prometheus label must stay short and of safe characters.

use jp_common::wire::MethodDef;

use crate::harness::Scene;
use crate::records::{fire, hello, methods, node, thread_tree};
use jp_testkit::jdk::Jdk;

const ESCAPE: &[u8] = b"\x1b]0;owned\x07";

fn hostile_name(tail: u8) -> Vec<u8> {
    let mut name = ESCAPE.to_vec();
    name.extend(std::iter::repeat_n(tail, 3000));
    name
}

/// A main class, a method and a thread named with an escape sequence and 3000 characters.
pub(crate) fn names(pid: u32, generation: u64) -> Vec<Vec<u8>> {
    let (main, method, thread) = (hostile_name(b'M'), hostile_name(b'm'), hostile_name(b't'));
    let def = MethodDef {
        mid: 1,
        class: &main,
        name: &method,
        descriptor: b"()V",
        source_file: b"A.java",
    };
    let mut records = vec![
        hello(pid, generation, &main),
        methods(pid, generation, 1, &[def]),
    ];
    let first = [node(1, 0, 1)];
    records.extend(thread_tree(pid, generation, 1, &thread, &first, false));
    records
}

#[test]
fn names_with_escapes_reach_no_terminal_and_no_label_raw() {
    let mut scene = Scene::start("");
    scene.start_jvm(Jdk::J25);
    let (mut agent, _, generation) = scene.fake_agent();
    let pid = agent.pid;
    let records = names(pid, generation);
    scene.attack_begins();
    assert_eq!(
        fire(&mut agent, &scene.path("names.rec"), &records),
        records.len() as u64
    );
    let p = pid.to_string();
    let t0 = std::time::Instant::now();
    while crate::harness::listed(&scene.jpd, pid).and_then(|e| e["nodes"].as_u64()) != Some(1) {
        assert!(
            t0.elapsed().as_secs() < 30,
            "jpd never held the fake JVM's node"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for args in [
        &["jvm", "list"][..],
        &["jvm", "top", &p],
        &["jvm", "tree", &p],
        &["status"],
    ] {
        let out = scene.jpd.jpctl().args(args).output().expect("run jpctl");
        let raw = out
            .stdout
            .iter()
            .chain(&out.stderr)
            .filter(|&&b| b == 0x1b || b == 0x07)
            .count();
        assert_eq!(
            raw,
            0,
            "jpctl {args:?} printed {raw} raw control bytes:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let metrics = scene.jpd.metrics();
    for line in metrics.lines().filter(|l| l.contains("main=\"")) {
        let value = line
            .split("main=\"")
            .nth(1)
            .and_then(|v| v.split('"').next());
        let value = value.unwrap_or_default();
        assert!(
            value.len() <= 128 && value.bytes().all(|b| b.is_ascii_graphic()),
            "a main label of {} bytes or with unsafe characters: {line:.300}",
            value.len()
        );
    }
    scene.run_jvm_while(|_| true);
    let outcome = scene.finish("hostile names");
    agent.exit();
    outcome.assert_goals();
}
