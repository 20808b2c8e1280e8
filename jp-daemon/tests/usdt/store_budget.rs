//! What well-formed hostile records cost jpd itself: the fake agent fires, through
//! the real probe and a running jpd, 13 thread streams that each announce a context
//! slot, define a node id far beyond any used, and end. Each such record used to make
//! jpd grow a thread's slot array to the id (hundreds of MB for a few hundred bytes).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::jpd::Jpd;
use crate::support::usdt::fake_agent::{build, write_records, Agent};
use jp_common::wire::{self, Writer, FLAG_ABSOLUTE, FLAG_END, FLAG_RESYNC};
use jp_testkit::memory::{resident_kib, settled_resident_kib};

/// The attack's records for thread `t` of process `pid` (its main thread's tid).
fn far_id_thread(pid: u32, generation: u64, t: u64) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let mut out = Vec::new();
    let h = wire::header(wire::KIND_THREAD, pid, generation, t, 0, 0);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.varint(u64::from(pid)).unwrap();
    w.varint(0x7f00_0000_1000 + 4 * t).unwrap();
    out.push(w.finish().to_vec());
    for (seq, flags, entries) in [
        (
            0,
            FLAG_RESYNC | FLAG_ABSOLUTE,
            vec![(1, 0), (15_000_000 + t as u32, 1)],
        ),
        (1, FLAG_END, vec![]),
    ] {
        let h = wire::header(wire::KIND_TREE, pid, generation, t, seq, flags);
        let mut w = Writer::new(&mut buf, &h).unwrap();
        w.string(b"").unwrap();
        w.begin_entries().unwrap();
        for (node, parent) in entries {
            w.tree_entry(&wire::TreeEntry {
                node,
                definition: Some((parent, 0)),
                calls: 1,
                bytecodes: 1,
            })
            .unwrap();
        }
        out.push(w.finish().to_vec());
    }
    out
}

#[test]
fn far_node_ids_do_not_grow_jpd() {
    let dir = tempfile::tempdir().unwrap();
    let (_lib, prog) = build(dir.path(), "libjpagent.so");
    let jpd = Jpd::start("[usdt]\nscan_interval_ms = 100\n");
    let mut agent = Agent::spawn(Command::new(&prog));
    let answer = agent.ask("wait");
    let f: Vec<&str> = answer.split_whitespace().collect();
    assert!(f.len() == 7 && f[0] == "ready", "{answer:?}");
    let generation: u64 = f[4].parse().unwrap();
    let records: Vec<Vec<u8>> = (1..=13)
        .flat_map(|t| far_id_thread(agent.pid, generation, t))
        .collect();
    let sent: usize = records.iter().map(Vec::len).sum();
    let path = dir.path().join("records");
    write_records(&path, &records);
    let before = settled_resident_kib(jpd.pid() as u32) << 10;
    assert_eq!(agent.fire(&format!("fire {}", path.display())).0, 39);
    // Until jpd has applied all 13 threads.
    let t0 = Instant::now();
    let jvm = loop {
        let list = jpd.jpctl_json(&["jvm", "list", "--json"]);
        let jvm = list["jvms"]
            .as_array()
            .and_then(|a| a.iter().find(|j| j["pid"] == agent.pid))
            .cloned();
        if let Some(j) = jvm.filter(|j| j["threads"]["total"] == 13) {
            break j;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{list}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let grown = (resident_kib(jpd.pid() as u32) << 10).saturating_sub(before);
    assert_eq!((&jvm["nodes"], &jvm["calls"]), (&2.into(), &26.into()));
    // Before: 611 MB for these 39 records. Allow the allocator's own slack.
    assert!(
        grown < 16 << 20,
        "{sent} bytes of records grew jpd by {grown} bytes"
    );
    agent.exit();
    jpd.stop();
}
