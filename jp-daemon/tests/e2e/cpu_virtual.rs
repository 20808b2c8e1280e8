//! CPU per exact context of virtual threads, for real, on JDK 25 only (JDK 17 has no
//! virtual threads; there the agent asks for nothing and nothing changes). jpd's sampler
//! sees only the carriers' kernel threads: their CPU must land under the mounted virtual
//! thread's context, in its tree, not on the carriers' names.

use std::time::Duration;

use serde_json::Value;

use super::cpu::{
    assert_two_to_one, compile, cpu_of_kind, cum_ns, cum_of, export_pprof, jdks, wait_listed,
    Jvm, CONFIG,
};
use crate::support::jpd::Jpd;
use crate::support::require_root;

/// One sample of jpd's default sampler (997 Hz), as cpu.rs counts it.
const PERIOD_NS: u64 = 1_000_000_000 / 997;

fn ns(j: &Value, field: &str) -> u64 {
    j["cpu"][field].as_u64().unwrap_or(0)
}

/// 1000 virtual threads on 2 carriers, half spinning in a() and half in b() (a() twice b()'s
/// iterations), yielding between rounds so that they move between carriers: a() and b() get
/// their CPU 2 : 1 within the binomial bounds of the sample count, and what jpd counts by
/// thread name (the carriers', before this: all of it) is at most 3 % of the app's CPU.
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
    let args = ["1000".to_string(), "8".to_string()];
    let mut jvm = Jvm::launch(&wrapper, &home, &dir, "VirtualSplit", &args);
    jvm.expect_line("started");
    jvm.expect_line("done");
    let pid = jvm.pid();
    // The virtual threads live on (parked): their trees are in, the samples of the last
    // pass read, and none waits for its node.
    std::thread::sleep(Duration::from_millis(2500));
    let j = wait_listed(&d, pid, "sampled", |j| {
        cpu_of_kind(j, "app") > 0 && j["cpu"]["pending_ns"].as_u64() == Some(0)
    });
    assert_eq!(j["cpu"]["unresolved_ns"], 0, "{tag}: {j}");
    assert_eq!(j["cpu"]["read_failed_ns"], 0, "{tag}: {j}");
    eprintln!("DEBUG {j}");
    let file = export_pprof(&d, pid, &format!("{tag}-virtual"));
    let (rows, text) = cum_ns(&file);
    let (a, b) = (
        cum_of(&rows, "VirtualSplit.a("),
        cum_of(&rows, "VirtualSplit.b("),
    );
    let what = format!("{tag}, 1000 virtual threads on 2 carriers");
    assert_two_to_one(&what, a, b, PERIOD_NS, &text);
    eprintln!("DEBUG {text}");
    // The app's CPU that is on no context is what was counted by thread name.
    let app = cpu_of_kind(&j, "app");
    let on_contexts = ns(&j, "contexts_ns");
    let by_name = app
        - on_contexts.min(app)
        - ns(&j, "pending_ns")
        - ns(&j, "unresolved_ns")
        - ns(&j, "read_failed_ns");
    assert!(
        by_name * 100 <= app * 3,
        "{what}: {by_name} ns of the app's {app} ns counted by thread name (a() {a} ns, \
         b() {b} ns)\n{j}"
    );
    assert!(
        (a + b) * 10 >= app * 8,
        "{what}: a() and b() hold {} ns of the app's {app} ns\n{j}\n{text}",
        a + b
    );
    jvm.finish();
    d.stop();
}
