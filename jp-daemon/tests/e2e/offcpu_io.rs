//! Disk and network waits under their contexts, for real, on JDK 17 and 25:
//! `tests/fixtures/jvm/OffcpuIo.java` reads a file with O_DIRECT in `r()` and waits for a
//! loopback echo in `n()`. The pprof export, read by `go tool pprof -sample_index=offcpu`,
//! has the disk kind's frame under r() and the network kind's under n(), with the JSON's
//! times.

use std::path::Path;

use serde_json::Value;

use crate::cpu::{compile, jdks, Jvm};
use crate::offcpu::{done_line, go, pprof_cum_with, CONFIG};
use crate::support::jpd::Jpd;
use crate::support::require_root;

/// The `offcpu` object of the one context of the method starting with `prefix`.
fn offcpu_of(doc: &Value, prefix: &str) -> Value {
    fn walk(n: &Value, prefix: &str, out: &mut Vec<Value>) {
        for c in n["children"].as_array().into_iter().flatten() {
            if c["method"].as_str().is_some_and(|m| m.starts_with(prefix)) {
                out.push(c["offcpu"].clone());
            }
            walk(c, prefix, out);
        }
    }
    let mut out = Vec::new();
    walk(&doc["root"], prefix, &mut out);
    assert_eq!(out.len(), 1, "{prefix}: {doc}");
    out.remove(0)
}

#[test]
fn disk_and_network_waits_have_their_kinds_under_their_contexts() {
    require_root();
    let _one = crate::support::exclusive();
    let d = Jpd::start(CONFIG);
    for (tag, home) in jdks() {
        let dir = compile("OffcpuIo", &format!("{tag}-io"), &home);
        // On the disk: the test's scratch directory (O_DIRECT needs a real file system).
        let data = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("offcpu-io-{tag}.bin"));
        let args = [data.display().to_string(), "3".to_string()];
        let mut jvm = Jvm::launch(&[], &home, &dir, "OffcpuIo", &args);
        jvm.expect_line("started");
        go(&d, &mut jvm, 2);
        done_line(&mut jvm);
        std::thread::sleep(std::time::Duration::from_millis(2500));
        let pid = jvm.pid();
        let json = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("offcpu-io-{tag}.json"));
        d.export_to(pid, "json", &json);
        let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("offcpu-io-{tag}.pb.gz"));
        d.export_to(pid, "pprof", &file);
        let doc: Value =
            serde_json::from_slice(&std::fs::read(&json).expect("read")).expect("JSON");
        for (method, focus, kind) in [
            ("OffcpuIo.r(", "OffcpuIo\\.r\\(", "disk"),
            ("OffcpuIo.n(", "OffcpuIo\\.n\\(", "network"),
        ] {
            let o = offcpu_of(&doc, method);
            let (all, of_kind) = (
                o["ns"].as_u64().unwrap_or(0),
                o["kinds"][kind].as_u64().unwrap_or(0),
            );
            let what = format!("{tag}: {method} {o}");
            // The method does nothing but wait for the device or the peer: most of its
            // time off CPU is that wait (the rest: waiting for a CPU on a shared host).
            assert!(of_kind * 2 > all && all > 1_000_000_000, "{what}");
            let focus = format!("-focus={focus}");
            let (pprof, text) =
                pprof_cum_with(&file, "offcpu", &format!("off-CPU: {kind}"), &[&focus]);
            assert_eq!(pprof, of_kind, "{what}\n{text}");
            let (pprof_all, text) = pprof_cum_with(&file, "offcpu", method, &[&focus]);
            assert_eq!(pprof_all, all, "{what}\n{text}");
        }
        jvm.finish();
    }
    d.stop();
}
