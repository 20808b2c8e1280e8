//! Virtual threads' time off their carriers, for real, on JDK 25 only (JDK 17 has no
//! virtual threads; there the agent asks for nothing and nothing changes). A parked virtual
//! thread is on no carrier: the scheduler never sees it wait. The agent times it from its
//! unmount to its next mount, and jpd counts that under the context it left in, with the
//! kernel's periods (`kernel.offcpu`).

use serde_json::Value;

use super::cpu::{compile, export_pprof, jdks, wait_listed, Jvm};
use super::offcpu::{
    done_line, export_json, go, measured, nodes, of, offcpu_kind_ns, pprof_cum, CONFIG,
};
use crate::support::jpd::Jpd;
use crate::support::require_root;

/// Waits until jpd saw the JVM exit with every stream complete, and read what followed.
/// (Not the CPU's pending samples: a carrier's sample of a virtual thread that ended before
/// it was read, beyond the ended threads jpd keeps ids for, waits until it expires.)
fn exited(d: &Jpd, pid: u32) {
    wait_listed(d, pid, "exited", |j| {
        !j["exited_unix_ms"].is_null() && j["complete"] == true
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
}

/// Time off CPU of kind `kind` in the whole tree.
fn kind_everywhere(doc: &Value, kind: &str) -> u64 {
    let all = nodes(doc);
    offcpu_kind_ns(&all.iter().collect::<Vec<_>>(), kind)
}

/// 1000 virtual threads on 2 carriers: 500 sleep 20 ms in d() 4 times, each measuring its
/// own time in d(); 500 spin 1 ms in a() and yield. jpd's "sleep" time under d() is what
/// the threads measured, less what d() ran on a carrier around each sleep (the calls to
/// nanoTime and sleep up to the unmount, and from the mount back): a few µs of 20 ms, and
/// the carriers' waits for a CPU on this shared machine, bounded at 5 % of the total. Never
/// more (the agent's period lies inside the thread's own, on the same clock). The time is
/// the virtual threads', in their trees: all "sleep" time in the export is under d() (and
/// the first thread's warm()), none on the carriers' own contexts; pprof shows it with the
/// leaf frame "(virtual thread sleeping)". jpd is asked after the JVM exited (its ended
/// virtual threads' last records come then at the latest). Before the agent timed unmounted virtual
/// threads, d() had no time off CPU at all (the carriers ran other virtual threads).
#[test]
fn jdk25_virtual_threads_sleeping_in_d_show_ds_off_cpu_time() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    let [_, (tag, home)] = jdks();
    let dir = compile("VirtualSleeps", tag, &home);
    let wrapper = [
        "env",
        "JAVA_TOOL_OPTIONS=-Djdk.virtualThreadScheduler.parallelism=2",
    ];
    let args = ["1000".to_string(), "4".to_string()];
    let mut jvm = Jvm::launch(&wrapper, &home, &dir, "VirtualSleeps", &args);
    jvm.expect_line("started");
    let pid = jvm.pid();
    let what = format!("{tag}, 1000 virtual threads on 2 carriers");
    // main announced its slot: jpd listens, the agent times what follows.
    go(&d, &mut jvm, 1);
    let line = done_line(&mut jvm);
    let [slept, sleeps] = measured(&line)[..] else {
        panic!("{what}: the JVM printed {line:?}");
    };
    assert_eq!(sleeps, 2000, "{what}: {line}");
    // A virtual thread that ended sends its last records (its time off carriers among them)
    // when the runtime next sweeps ended threads, at the latest at the JVM's exit: jpd is
    // asked once the JVM has exited.
    jvm.finish();
    exited(&d, pid);
    let doc = export_json(&d, pid, &format!("{tag}-virtual"));
    let all = nodes(&doc);
    let in_d = offcpu_kind_ns(&of(&all, "VirtualSleeps.d("), "sleep");
    let in_warm = offcpu_kind_ns(&of(&all, "VirtualSleeps.warm("), "sleep");
    let everywhere = kind_everywhere(&doc, "sleep");
    eprintln!("{what}: d() sleep {in_d} ns off CPU, the threads measured {slept} ns");
    assert!(
        in_d <= slept && in_d >= slept - slept / 20,
        "{what}: d() has {in_d} ns of sleep off CPU, the threads measured {slept} ns"
    );
    assert_eq!(
        everywhere,
        in_d + in_warm,
        "{what}: sleep time outside d() and warm()"
    );
    let root_sleep = doc["root"]["offcpu"]["kinds"]["sleep"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(
        root_sleep, 0,
        "{what}: sleep time on the carriers' own contexts"
    );
    let file = export_pprof(&d, pid, &format!("{tag}-virtual-offcpu"));
    let (leaf, text) = pprof_cum(&file, "offcpu", "(virtual thread sleeping)");
    assert_eq!(leaf, everywhere, "{what}: pprof's sleep leaf\n{text}");
    d.stop();
}
