//! Colliding method ids: one thread defines [`NODES`] children of the root whose
//! (parent, method) keys all fall in the same few buckets of the merged tree's index (a
//! fixed public multiplier with linear probing), so each insertion probes every earlier
//! one while the JVM store's lock is held.

use crate::harness::Scene;
use crate::records::{fire, hello, node, thread_tree};
use jp_testkit::jdk::Jdk;

pub(crate) const NODES: usize = 60_000;
/// The index's multiplier: keys are `parent << 32 | mid`.
const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
/// Bits of the bucket all the keys share: they collide in every table of up to 2^15
/// buckets and fall in a handful of runs in bigger ones.
const SHARED_BITS: u32 = 15;
/// Method ids are below 2^31 on the wire.
const MAX_MID: u32 = (1 << 31) - 1;

/// Method ids (children of the root) that land in bucket 0 of every table of at most
/// 2^SHARED_BITS buckets.
pub(crate) fn colliding_mids(n: usize) -> Vec<u32> {
    let mask = (1u64 << SHARED_BITS) - 1;
    (1..=MAX_MID)
        .filter(|&mid| (u64::from(mid).wrapping_mul(MULTIPLIER) >> 32) & mask == 0)
        .take(n)
        .collect()
}

/// A hello and one thread's tree of a node per method id of `mids`, all under the root.
pub(crate) fn collider(pid: u32, generation: u64, mids: &[u32]) -> Vec<Vec<u8>> {
    let nodes: Vec<_> = mids
        .iter()
        .enumerate()
        .map(|(i, &mid)| node(i as u32 + 1, 0, mid))
        .collect();
    let mut records = vec![hello(pid, generation, b"Collider")];
    records.extend(thread_tree(pid, generation, 1, b"collider", &nodes, false));
    records
}

#[test]
fn colliding_method_ids_do_not_stall_jpd() {
    let mids = colliding_mids(NODES);
    assert_eq!(mids.len(), NODES);
    let mut scene = Scene::start("");
    scene.start_jvm(Jdk::J17);
    let (mut agent, _, generation) = scene.fake_agent();
    let pid = agent.pid;
    let records = collider(pid, generation, &mids);
    println!(
        "colliding method ids: {NODES} nodes in {} records",
        records.len()
    );
    scene.attack_begins();
    assert_eq!(
        fire(&mut agent, &scene.path("collide.rec"), &records),
        records.len() as u64
    );
    scene.run_jvm_while(|_| true);
    // The attacker's tree is whole: every colliding node was taken.
    let entry = crate::harness::listed(&scene.jpd, pid).expect("the attacker is listed");
    let outcome = scene.finish("colliding method ids");
    agent.exit();
    outcome.assert_goals();
    assert_eq!(entry["nodes"].as_u64(), Some(NODES as u64), "{entry}");
}
