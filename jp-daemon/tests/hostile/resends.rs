//! Endless re-sends: a fake JVM answers every new generation with a hello and a tree
//! whose sequence skips, so that jpd sees a loss and asks again, for [`ATTACK_FOR`]. A
//! new generation used to clear the retry spacing, so the attacker was asked as fast as
//! it answered, and its whole state crossed the ring each time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jp_common::wire::{header, Writer, FLAG_ABSOLUTE, KIND_TREE, MAX_RECORD};

use crate::harness::Scene;
use crate::records::{fire, hello, node, thread_tree};
use jp_testkit::jdk::Jdk;

const ATTACK_FOR: Duration = Duration::from_secs(10);
/// Re-sends a per-JVM backoff allows in [`ATTACK_FOR`] (a second apart at the least).
const MAX_ATTACKER_RESENDS: u64 = 10;

/// A hello, a tree, and a record that skips four sequence numbers: a loss.
pub(crate) fn lossy_state(pid: u32, generation: u64) -> Vec<Vec<u8>> {
    let mut records = vec![hello(pid, generation, b"Resender")];
    let nodes: Vec<_> = (1..=100).map(|i| node(i, i - 1, 1 + i % 5)).collect();
    records.extend(thread_tree(pid, generation, 1, b"t", &nodes, false));
    let mut buf = vec![0u8; MAX_RECORD];
    let h = header(KIND_TREE, pid, generation, 1, 5, FLAG_ABSOLUTE);
    let mut w = Writer::new(&mut buf, &h).expect("fits");
    w.string(b"").expect("fits");
    w.begin_entries().expect("fits");
    records.push(w.finish().to_vec());
    records
}

#[test]
fn endless_resends_are_spaced_and_cost_the_real_jvm_nothing_jdk17() {
    resends_beside(Jdk::J17);
}

#[test]
fn endless_resends_are_spaced_and_cost_the_real_jvm_nothing_jdk25() {
    resends_beside(Jdk::J25);
}

/// The endless re-sender beside a real JVM of `jdk`.
fn resends_beside(jdk: Jdk) {
    let mut scene = Scene::start("");
    scene.start_jvm(jdk);
    let (mut agent, _, first) = scene.fake_agent();
    let pid = agent.pid;
    let file = scene.path("resend.rec");
    scene.attack_begins();
    let until = Instant::now() + ATTACK_FOR;
    let asked = Arc::new(AtomicU64::new(0));
    let counter = asked.clone();
    let attacker = std::thread::spawn(move || {
        let mut generation = first;
        while Instant::now() < until {
            fire(&mut agent, &file, &lossy_state(pid, generation));
            // Blocks until jpd writes a new generation: the attacker is killed below
            // when none comes before the end.
            let answer = agent.ask(&format!("gen_after {generation}"));
            generation = answer
                .strip_prefix("gen ")
                .and_then(|g| g.parse().ok())
                .expect("gen N");
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    scene.run_jvm_while(|_| Instant::now() < until);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    scene.attack_ends();
    // SAFETY: kill on the fake agent, our own child (its thread may wait on it).
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    // It panics when killed waiting: the count is what matters.
    let _ = attacker.join();
    let asked = asked.load(Ordering::SeqCst);
    println!("re-sends: jpd asked the attacker {asked} times in {ATTACK_FOR:?}");
    let outcome = scene.finish("re-sends");
    outcome.assert_goals();
    assert!(
        asked <= MAX_ATTACKER_RESENDS,
        "jpd asked the attacker to re-send {asked} times in {ATTACK_FOR:?} (at most \
         {MAX_ATTACKER_RESENDS}: re-sends back off per JVM)"
    );
    // The losses past the backoff were noted and the re-sends deferred, and counted.
    outcome.assert_refused("ring", "resend_deferred", |n| n >= 1);
}
