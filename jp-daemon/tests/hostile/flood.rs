//! A flood: two processes fire well-formed records as fast as they can for
//! [`FLOOD_FOR`], overflowing the one ring every process shares. A loss used to mark
//! every JVM lossy, so the real JVM beside them was asked to re-send its whole state
//! again and again (97–141 times in 10 s) for losses it did not cause.

use std::time::{Duration, Instant};

use crate::harness::Scene;
use crate::records::hello;
use crate::support::usdt::fake_agent::write_records;
use jp_testkit::jdk::Jdk;

const FLOOD_FOR: Duration = Duration::from_secs(10);
pub(crate) const FLOODERS: usize = 2;
/// Hellos in each flooder's file (about 12 KiB each: three strings near their limit).
pub(crate) const PER_FILE: usize = 1000;

#[test]
fn a_flood_costs_the_real_jvm_beside_it_no_resends_jdk17() {
    flood_beside(Jdk::J17);
}

#[test]
fn a_flood_costs_the_real_jvm_beside_it_no_resends_jdk25() {
    flood_beside(Jdk::J25);
}

/// The flood beside a real JVM of `jdk`: its agent's answer to a new generation (the
/// report budget) is the Java runtime's, which each JDK runs compiled its own way.
fn flood_beside(jdk: Jdk) {
    let mut scene = Scene::start("");
    scene.start_jvm(jdk);
    let mut flooders = Vec::new();
    for i in 0..FLOODERS {
        let (agent, _, generation) = scene.fake_agent();
        let main = vec![b'F'; 4000];
        let records = vec![hello(agent.pid, generation, &main); PER_FILE];
        let file = scene.path(&format!("flood-{i}.rec"));
        write_records(&file, &records);
        flooders.push((agent, file));
    }
    scene.attack_begins();
    let until = Instant::now() + FLOOD_FOR;
    let handles: Vec<_> = flooders
        .into_iter()
        .map(|(mut agent, file)| {
            std::thread::spawn(move || {
                let mut fired = 0;
                while Instant::now() < until {
                    fired += agent.fire(&format!("fire {}", file.display())).0;
                }
                agent.exit();
                fired
            })
        })
        .collect();
    scene.run_jvm_while(|_| Instant::now() < until);
    let fired: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("flooder"))
        .sum();
    scene.attack_ends();
    println!("flood: {fired} records fired by {FLOODERS} processes");
    let outcome = scene.finish("flood");
    outcome.assert_goals();
    // The flooders were held to their rate: what they fired beyond it was refused.
    outcome.assert_refused("ring", "rate_limited", |n| n > 0 && n <= fired);
}
