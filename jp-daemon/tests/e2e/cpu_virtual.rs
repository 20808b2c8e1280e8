//! CPU per exact context of virtual threads, for real, on JDK 25 only (JDK 17 has no
//! virtual threads; there the agent asks for nothing and nothing changes). jpd's sampler
//! sees only the carriers' kernel threads: their CPU must land under the mounted virtual
//! thread's context, in its tree, not on the carriers' names.

use std::time::Duration;

use serde_json::Value;

use super::cpu::{
    assert_two_to_one, compile, cpu_of_kind, cum_ns, cum_of, export_pprof, jdks, wait_listed, Jvm,
    CONFIG,
};
use crate::support::jpd::Jpd;
use crate::support::require_root;

/// One sample of jpd's default sampler (997 Hz), as cpu.rs counts it.
const PERIOD_NS: u64 = 1_000_000_000 / 997;

fn ns(j: &Value, field: &str) -> u64 {
    j["cpu"][field].as_u64().unwrap_or(0)
}

/// The app's CPU that is on no context: what jpd counted by thread name.
fn by_name(j: &Value) -> u64 {
    let app = cpu_of_kind(j, "app");
    [
        "contexts_ns",
        "pending_ns",
        "unresolved_ns",
        "read_failed_ns",
    ]
    .iter()
    .fold(app, |left, f| left.saturating_sub(ns(j, f)))
}

/// 1000 virtual threads on 2 carriers, half spinning in a() and half in b() (a() twice b()'s
/// iterations), yielding between rounds so that they move between carriers: a() and b() get
/// their CPU 2 : 1 within the binomial bounds of the sample count, and once jpd has joined
/// the carriers (before that their kernel threads are not known to it, as any thread's),
/// what it counts by thread name — the carriers' names: before virtual threads were
/// followed, all of it — is at most 1 % of the app's CPU.
#[test]
fn jdk25_virtual_threads_cpu_lands_under_their_contexts_not_their_carriers() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    let [_, (tag, home)] = jdks();
    let dir = compile("VirtualSplit", tag, &home);
    let wrapper = [
        "env",
        "JAVA_TOOL_OPTIONS=-Djdk.virtualThreadScheduler.parallelism=2",
    ];
    let args = ["1000".to_string(), "24".to_string()];
    let mut jvm = Jvm::launch(&wrapper, &home, &dir, "VirtualSplit", &args);
    jvm.expect_line("started");
    let pid = jvm.pid();
    let what = format!("{tag}, 1000 virtual threads on 2 carriers");
    // The two carriers announced their slots and the sampler reads them.
    let joined = wait_listed(&d, pid, "joined", |j| {
        j["cpu"]["publishing_threads"].as_u64() >= Some(2)
    });
    std::thread::sleep(Duration::from_millis(300));
    let first = wait_listed(&d, pid, "listed", |_| true);
    jvm.expect_line("done");
    // The virtual threads live on (parked): their trees are in, the samples of the last
    // pass read, and none waits for its node.
    std::thread::sleep(Duration::from_millis(2500));
    let last = wait_listed(&d, pid, "sampled", |j| {
        j["cpu"]["pending_ns"].as_u64() == Some(0)
    });
    assert_eq!(last["cpu"]["unresolved_ns"], 0, "{what}: {last}");
    assert_eq!(last["cpu"]["read_failed_ns"], 0, "{what}: {last}");
    let file = export_pprof(&d, pid, &format!("{tag}-virtual"));
    let (rows, text) = cum_ns(&file);
    let (a, b) = (
        cum_of(&rows, "VirtualSplit.a("),
        cum_of(&rows, "VirtualSplit.b("),
    );
    assert_two_to_one(&what, a, b, PERIOD_NS, &text);
    let app = cpu_of_kind(&last, "app") - cpu_of_kind(&first, "app");
    let named = by_name(&last) - by_name(&first).min(by_name(&last));
    eprintln!("{what}: a() {a} ns, b() {b} ns; after the join {named} ns of {app} ns by name");
    assert!(
        app >= 1_000_000_000,
        "{what}: only {app} ns of app CPU after the carriers were joined\n{joined}\n{last}"
    );
    assert!(
        named * 100 <= app,
        "{what}: {named} ns of the app's {app} ns counted by thread name after the carriers \
         were joined\n{first}\n{last}"
    );
    jvm.finish();
    d.stop();
}
