//! A thread map filler: one fake JVM starts [`SLOTS`] real threads and announces a
//! context slot for each, more than the sampler's host-wide thread map holds (16 384).
//! A full map aborted the join's sync for every JVM, so the real JVM beside it lost its
//! CPU per context; now each JVM gets a fair share of the map.
//! A second filler announces as many thread ids that do not exist: they cost jpd one
//! look in /proc each, once, not at every sync.

use crate::harness::Scene;
use crate::records::{fire, hello, thread_slot};
use jp_testkit::jdk::Jdk;

pub(crate) const SLOTS: u32 = 16_400;
/// Thread ids of the made-up threads: none is a real thread's.
pub(crate) const FIRST_MADE_UP_TID: u32 = 3_000_000;

/// A hello and one context slot announced for each of `tids`.
pub(crate) fn announce(pid: u32, generation: u64, tids: &[u32], name: &[u8]) -> Vec<Vec<u8>> {
    let mut records = vec![hello(pid, generation, name)];
    for (i, &tid) in tids.iter().enumerate() {
        let stream = i as u64 + 1;
        records.push(thread_slot(
            pid,
            generation,
            stream,
            tid,
            0x10_000 + 8 * stream,
        ));
    }
    records
}

#[test]
fn a_thread_map_filler_does_not_unjoin_the_real_jvm() {
    let mut scene = Scene::start("");
    scene.start_jvm(Jdk::J17);
    let (mut agent, _, generation) = scene.fake_agent();
    let (mut made_up, _, made_up_generation) = scene.fake_agent();
    let tids_file = scene.path("threads.tids");
    let answer = agent.ask(&format!("threads {SLOTS} {}", tids_file.display()));
    assert_eq!(answer, format!("threads {SLOTS}"), "the filler's threads");
    let tids: Vec<u32> = std::fs::read_to_string(&tids_file)
        .expect("the filler's thread ids")
        .lines()
        .map(|l| l.parse().expect("a thread id"))
        .collect();
    let records = announce(agent.pid, generation, &tids, b"ThreadFiller");
    let made_up_tids: Vec<u32> = (0..SLOTS).map(|i| FIRST_MADE_UP_TID + i).collect();
    let made_up_records = announce(
        made_up.pid,
        made_up_generation,
        &made_up_tids,
        b"MadeUpThreads",
    );
    scene.attack_begins();
    assert_eq!(
        fire(&mut agent, &scene.path("threads.rec"), &records),
        records.len() as u64
    );
    assert_eq!(
        fire(&mut made_up, &scene.path("made-up.rec"), &made_up_records),
        made_up_records.len() as u64
    );
    scene.run_jvm_while(|_| true);
    let log = scene.jpd.log_text();
    let filler_pid = agent.pid;
    let outcome = scene.finish("thread map filler");
    agent.exit();
    made_up.exit();
    outcome.assert_goals();
    let jvm = outcome.jvm.as_ref().expect("the real JVM");
    let cpu = &jvm.entry["cpu"];
    let app = crate::harness::app_cpu_ns(&jvm.entry);
    let contexts = cpu["contexts_ns"].as_u64().unwrap_or(0);
    // How much of the real JVM's CPU lands under its contexts depends on how soon each of
    // its short-lived workers joins the sampler after it starts: a timing, for the
    // benchmark, not for this test. What the test holds is that the map's fair share
    // never left one of the real JVM's threads out, and left the filler's excess out.
    println!("thread map filler: real JVM app CPU {app} ns, {contexts} ns under its contexts");
    let left_out = |pid: u32| {
        log.lines()
            .filter(|l| l.contains(&format!("JVM {pid}: ")) && l.contains("over its share"))
            .count()
    };
    assert_eq!(
        left_out(jvm.pid),
        0,
        "the real JVM lost threads to the map:\n{log}"
    );
    assert!(
        left_out(filler_pid) >= 1,
        "the filler was not cut to its share:\n{log}"
    );
    // The filler's threads beyond its JVM's share of the map were left out, and counted.
    // At least the filler's own excess over the map (16 400 − 16 384), at most all of it.
    let capacity = jp_common::maps::JVM_THREADS.max_entries;
    outcome.assert_refused("sampler_map", "jvm_quota", |n| {
        n >= u64::from(SLOTS - capacity) && n <= u64::from(SLOTS)
    });
}
