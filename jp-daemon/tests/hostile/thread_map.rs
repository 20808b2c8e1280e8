//! A thread map filler: one fake JVM announces [`SLOTS`] context slots, more than the
//! sampler's host-wide thread map holds (16 384). A full map aborted the join's sync
//! for every JVM, so the real JVM beside it lost its CPU per context.

use crate::harness::Scene;
use crate::records::{fire, hello, thread_slot};

const SLOTS: u32 = 16_400;
/// Thread ids of the fake threads: none is a real thread's.
const FIRST_TID: u32 = 3_000_000;

#[test]
fn a_thread_map_filler_does_not_unjoin_the_real_jvm() {
    let mut scene = Scene::start("");
    scene.start_jvm();
    let (mut agent, _, generation) = scene.fake_agent();
    let pid = agent.pid;
    let mut records = vec![hello(pid, generation, b"ThreadFiller")];
    for i in 0..SLOTS {
        let stream = u64::from(i) + 1;
        records.push(thread_slot(
            pid,
            generation,
            stream,
            FIRST_TID + i,
            0x10_000 + 8 * stream,
        ));
    }
    scene.attack_begins();
    assert_eq!(
        fire(&mut agent, &scene.path("threads.rec"), &records),
        records.len() as u64
    );
    scene.run_jvm_while(|_| true);
    let outcome = scene.finish("thread map filler");
    agent.exit();
    outcome.assert_goals();
    let jvm = outcome.jvm.as_ref().expect("the real JVM");
    let cpu = &jvm.entry["cpu"];
    let app: u64 = cpu["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|k| k["kind"] == "app")
        .map(|k| k["user_ns"].as_u64().unwrap_or(0) + k["kernel_ns"].as_u64().unwrap_or(0))
        .sum();
    let contexts = cpu["contexts_ns"].as_u64().unwrap_or(0);
    println!("thread map filler: real JVM app CPU {app} ns, {contexts} ns under its contexts");
    // The real JVM's threads are joined: most of its application CPU is put under its
    // contexts (sampling makes it a share, not an exact count).
    assert!(
        app > 0 && contexts * 2 >= app,
        "the real JVM's CPU was not joined to its contexts: {contexts} of {app} ns; entry {}",
        jvm.entry
    );
    // The filler's threads beyond its JVM's share of the map were left out, and counted.
    outcome.assert_refused("sampler_map", "jvm_quota", |n| {
        n >= 1 && n <= u64::from(SLOTS)
    });
}
