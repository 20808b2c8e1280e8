//! Thousands of fake JVMs, in small: [`FAKES`] sleeping processes of another user that
//! map a fake agent and never say hello. The table of JVMs filled before any hello and
//! only exited JVMs were evicted, so every real JVM started afterwards was locked out.

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use crate::harness::Scene;
use crate::support::usdt::fake_agent::Agent;
use jp_testkit::jdk::Jdk;

/// More than the 256 JVMs jpd keeps by default.
pub(crate) const FAKES: usize = 300;
/// The attacker is another user than the real JVM's (root): `nobody`.
pub(crate) const ATTACKER_UID: u32 = 65_534;
/// JVMs one uid may have tracked (`[usdt] max_jvms_per_uid`'s default).
const JVMS_PER_UID: usize = 32;

#[test]
fn sleeping_fake_jvms_do_not_lock_a_real_jvm_out() {
    let mut scene = Scene::start("");
    scene.attack_begins();
    let fakes: Vec<Agent> = (0..FAKES)
        .map(|_| {
            let mut c = scene.fake_command();
            c.uid(ATTACKER_UID).gid(ATTACKER_UID);
            Agent::spawn(c)
        })
        .collect();
    // jpd has found every one of them (and given each a generation) before the real
    // JVM starts.
    let t0 = Instant::now();
    loop {
        let status = scene.jpd.jpctl_json(&["status", "--json"]);
        let processes = status["jvm"]["collector"]["processes"]
            .as_u64()
            .unwrap_or(0);
        if processes >= FAKES as u64 {
            println!("fake JVMs: jpd watches {processes} processes");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "jpd found {processes} of the {FAKES} fake JVMs within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    scene.start_jvm(Jdk::J17);
    scene.run_jvm_while(|_| true);
    let outcome = scene.finish("fake JVMs");
    for fake in fakes {
        fake.exit();
    }
    outcome.assert_goals();
    // The attacker's processes past its uid's quota were refused, each one counted once.
    outcome.assert_refused("store", "uid_quota", |n| n == (FAKES - JVMS_PER_UID) as u64);
}
