//! A far node id per thread stream: each thread announces its context slot, defines one
//! node with an id just under the per-JVM slot limit, and ends. Thirteen records of a few
//! hundred bytes made jpd allocate a slot array up to that id per thread and keep each
//! ended thread's node map (4 bytes per id) for the sampler, counted in no budget.

use crate::harness::Scene;
use crate::records::{fire, hello, node, thread_slot, thread_tree};
use jp_testkit::jdk::Jdk;

/// Threads of the attack: with the hello, 13 records.
pub(crate) const THREADS: u64 = 6;
/// Just under `max_thread_nodes_per_jvm` (16 M by default): the largest id one thread
/// may define while its slots are charged to that limit.
pub(crate) const FAR: u32 = 16_000_000 - 1;

#[test]
fn far_node_ids_of_ended_threads_stay_within_the_budget() {
    let mut scene = Scene::start("");
    scene.start_jvm(Jdk::J25);
    let (mut agent, tid, generation) = scene.fake_agent();
    let pid = agent.pid;
    let mut records = vec![hello(pid, generation, b"FarNodes")];
    for t in 1..=THREADS {
        records.push(thread_slot(pid, generation, t, tid, 0x1000 * t));
        records.extend(thread_tree(
            pid,
            generation,
            t,
            b"far",
            &[node(FAR, 0, 1)],
            true,
        ));
    }
    let bytes: usize = records.iter().map(Vec::len).sum();
    println!("far node: {} records, {bytes} bytes", records.len());
    assert_eq!(records.len(), 13);
    scene.attack_begins();
    assert_eq!(fire(&mut agent, &scene.path("far.rec"), &records), 13);
    scene.run_jvm_while(|_| true);
    let outcome = scene.finish("far node");
    outcome.assert_goals();
    // Far ids are held sparsely, at the cost of what was sent: nothing to refuse.
    outcome.assert_refused("store", "over_budget", |n| n == 0);
    agent.exit();
}
