//! Unit tests of the JVM store: records built with `jp_common::wire::Writer`, trees
//! compared node by node. The records and the store they start from are here; the
//! tests are in one module per topic.

use std::time::{Duration, SystemTime};

use jp_common::wire::{
    self, EventHeader, MethodDef, TreeEntry, Writer, FLAG_ABSOLUTE, FLAG_END, FLAG_RESYNC,
};
use jp_mct::{Mct, MethodInfo};

use super::*;

mod budgets;
mod contexts;
mod lifecycle;
mod limits;
mod loss;
mod queries;
mod resync;

pub(crate) const PID: u32 = 1000;
pub(crate) const GEN: u64 = 77;

pub(crate) fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

pub(crate) fn ev(tgid: u32, rec: &[u8]) -> EventHeader {
    EventHeader {
        tgid,
        tid: tgid,
        ktime_ns: 0,
        len: rec.len() as u32,
        status: wire::EVENT_OK,
    }
}

fn hello_rec(generation: u64, live_threads: u64, start_ms: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 512];
    let h = wire::header(
        wire::KIND_HELLO,
        7,
        generation,
        0,
        0,
        FLAG_RESYNC | FLAG_ABSOLUTE,
    );
    let mut w = Writer::new(&mut buf, &h).unwrap();
    for v in [start_ms, 10_000_000, 1, live_threads] {
        w.varint(v).unwrap();
    }
    for s in [&b"17.0.9+9"[..], b"app.Main arg1 arg2", b"0.1.0"] {
        w.string(s).unwrap();
    }
    w.finish().to_vec()
}

/// (mid, class, name, descriptor, source)
type M<'a> = (u32, &'a str, &'a str, &'a str, &'a str);

fn methods_rec(generation: u64, seq: u32, ms: &[M<'_>]) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(wire::KIND_METHODS, 7, generation, 0, seq, 0);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.begin_entries().unwrap();
    for &(mid, class, name, descriptor, source) in ms {
        w.method(&MethodDef {
            mid,
            class: class.as_bytes(),
            name: name.as_bytes(),
            descriptor: descriptor.as_bytes(),
            source_file: source.as_bytes(),
        })
        .unwrap();
    }
    w.finish().to_vec()
}

pub(crate) fn tree_rec(
    generation: u64,
    stream: u64,
    seq: u32,
    flags: u32,
    name: &str,
    entries: &[TreeEntry],
) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(wire::KIND_TREE, 7, generation, stream, seq, flags);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.string(name.as_bytes()).unwrap();
    w.begin_entries().unwrap();
    for e in entries {
        w.tree_entry(e).unwrap();
    }
    w.finish().to_vec()
}

/// The first record of stream `stream` of generation `GEN`: sequence 0, a resync with
/// absolute counts, thread name `name`; most tests start a stream this way.
fn resync_rec(stream: u64, name: &str, entries: &[TreeEntry]) -> Vec<u8> {
    tree_rec(GEN, stream, 0, FLAG_RESYNC | FLAG_ABSOLUTE, name, entries)
}

pub(crate) fn def(node: u32, parent: u32, mid: u32, calls: u64, bytecodes: u64) -> TreeEntry {
    TreeEntry {
        node,
        definition: Some((parent, mid)),
        calls,
        bytecodes,
    }
}

pub(crate) fn upd(node: u32, calls: u64, bytecodes: u64) -> TreeEntry {
    TreeEntry {
        node,
        definition: None,
        calls,
        bytecodes,
    }
}

const METHODS: &[M<'static>] = &[
    (
        0,
        "app.Main",
        "main",
        "([Ljava/lang/String;)V",
        "app/Main.java",
    ),
    (1, "app.Main", "f", "()V", "app/Main.java"),
    (2, "app.Main", "g", "(I)V", "app/Main.java"),
    (3, "app.Util", "h", "()V", ""),
];

/// A store that saw the process, wrote GEN, and got HELLO + the method table.
pub(crate) fn started(live_threads: u64) -> JvmStore {
    let mut s = JvmStore::new(JvmLimits::default());
    s.process_found(
        PID,
        ProcessInfo {
            start_time_ticks: 5,
            ns_pid: Some(1),
            cmdline: "java -jar app.jar".into(),
            exe: "/usr/bin/java".into(),
            uid: None,
        },
        t0(),
    );
    s.generation_written(PID, GEN);
    feed(&mut s, &hello_rec(GEN, live_threads, 1));
    feed(&mut s, &methods_rec(GEN, 1, METHODS));
    s
}

pub(crate) fn feed(s: &mut JvmStore, rec: &[u8]) {
    s.ingest(&ev(PID, rec), rec, t0());
}

/// The merged tree node by node: (parent, method, calls, bytecodes) in index order.
fn nodes(s: &JvmStore) -> Vec<(usize, String, u64, u64)> {
    let t = s.mct(PID).unwrap();
    t.nodes
        .iter()
        .skip(1)
        .map(|n| {
            (
                n.parent.unwrap(),
                n.method.to_string(),
                n.calls,
                n.bytecodes,
            )
        })
        .collect()
}

fn n(parent: usize, m: &str, calls: u64, bytecodes: u64) -> (usize, String, u64, u64) {
    (parent, m.to_string(), calls, bytecodes)
}

const MAIN: &str = "app.Main.main([Ljava/lang/String;)V";
const F: &str = "app.Main.f()V";
const G: &str = "app.Main.g(I)V";
const H: &str = "app.Util.h()V";

/// Thread 1: main → f → g, main → h, fully sent (RESYNC, one record).
pub(crate) fn base_thread(s: &mut JvmStore) {
    feed(
        s,
        &resync_rec(
            1,
            "main",
            &[
                def(1, 0, 0, 1, 10),
                def(2, 1, 1, 2, 20),
                def(3, 2, 2, 3, 30),
                def(4, 1, 3, 4, 40),
            ],
        ),
    );
}

/// A store with `l` that got HELLO (no method table).
fn limited(l: JvmLimits) -> JvmStore {
    let mut s = JvmStore::new(l);
    s.generation_written(PID, GEN);
    feed(&mut s, &hello_rec(GEN, 0, 1));
    s
}
