//! A 100 k-deep chain: one thread defines a chain of [`DEPTH`] nodes. pprof wrote each
//! node with its whole stack (O(Σ depth): gigabytes for this chain), in the export a
//! caller asks for and in the Pyroscope pusher on its own.

use std::time::{Duration, Instant};

use crate::harness::{rss, Scene};
use crate::records::{fire, hello, node, thread_tree};
use jp_testkit::jdk::Jdk;

pub(crate) const DEPTH: u32 = 100_000;
/// What a pprof of the chain may weigh: stacks folded at a depth cap, not Σ depth.
const MAX_PPROF_BYTES: u64 = 64 << 20;

#[test]
fn a_deep_chain_exports_within_bounds() {
    let mut scene = Scene::start("");
    scene.start_jvm(Jdk::J25);
    let (mut agent, _, generation) = scene.fake_agent();
    let pid = agent.pid;
    let nodes: Vec<_> = (1..=DEPTH).map(|i| node(i, i - 1, 1 + i % 7)).collect();
    let mut records = vec![hello(pid, generation, b"DeepChain")];
    records.extend(thread_tree(pid, generation, 1, b"deep", &nodes, false));
    scene.attack_begins();
    assert_eq!(
        fire(&mut agent, &scene.path("deep.rec"), &records),
        records.len() as u64
    );
    let t0 = Instant::now();
    loop {
        let entry = crate::harness::listed(&scene.jpd, pid);
        if entry.as_ref().and_then(|e| e["nodes"].as_u64()) == Some(u64::from(DEPTH)) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "jpd did not hold the {DEPTH}-deep chain within 30 s: {entry:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A caller asks for the chain's pprof while the real JVM runs.
    let file = scene.path("deep.pb.gz");
    let mut export = scene
        .jpd
        .jpctl()
        .args(["jvm", "export", &pid.to_string(), "--format", "pprof", "-o"])
        .arg(&file)
        .spawn()
        .expect("run jpctl");
    let jpd_pid = scene.jpd.pid();
    let mut exported = None;
    scene.run_jvm_while(|_| {
        if exported.is_none() {
            exported = export.try_wait().expect("wait jpctl");
        }
        true
    });
    let t0 = Instant::now();
    while exported.is_none() && rss(jpd_pid).0 > 0 && t0.elapsed() < Duration::from_secs(60) {
        exported = export.try_wait().expect("wait jpctl");
        std::thread::sleep(Duration::from_millis(100));
    }
    if exported.is_none() {
        let _ = export.kill();
    }
    // Reaped in every case (a no-op once it exited).
    let _ = export.wait();
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    println!("deep chain: pprof export {exported:?}, {size} bytes");
    let outcome = scene.finish("deep chain");
    agent.exit();
    outcome.assert_goals();
    assert!(
        exported.is_some_and(|s| s.success()),
        "the pprof export of the deep chain failed or did not end: {exported:?}"
    );
    assert!(
        size <= MAX_PPROF_BYTES,
        "the deep chain's pprof is {size} bytes (at most {MAX_PPROF_BYTES})"
    );
    // The stacks deeper than the cap were folded, and counted.
    outcome.assert_refused("pprof", "depth_capped", |n| n >= 1);
}
