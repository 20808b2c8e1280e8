//! Well-formed records for the fake agent, written with the shared encoder
//! (`jp_common::wire`): every attack passes jpd's decoders and hurts by what it asks.

use std::path::Path;

use jp_common::wire::{
    header, MethodDef, RecordHeader, TreeEntry, Writer, FLAG_ABSOLUTE, FLAG_END, FLAG_RESYNC,
    KIND_HELLO, KIND_METHODS, KIND_THREAD, KIND_TREE, MAX_RECORD,
};

use crate::support::usdt::fake_agent::{write_records, Agent};

/// A hello answering `generation` for a JVM whose main class is `main`.
pub fn hello(pid: u32, generation: u64, main: &[u8]) -> Vec<u8> {
    let h = header(
        KIND_HELLO,
        pid,
        generation,
        0,
        0,
        FLAG_RESYNC | FLAG_ABSOLUTE,
    );
    let mut buf = vec![0u8; MAX_RECORD];
    let mut w = Writer::new(&mut buf, &h).expect("header fits");
    for v in [1_700_000_000_000u64, 1, 0, 1] {
        w.varint(v).expect("fits");
    }
    for s in [&b"17.0.9"[..], main, b"0.1.0"] {
        w.string(s).expect("fits");
    }
    w.finish().to_vec()
}

/// A method table record (stream 0, sequence `seq`) with `defs`.
pub fn methods(pid: u32, generation: u64, seq: u32, defs: &[MethodDef<'_>]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_RECORD];
    let h = header(KIND_METHODS, pid, generation, 0, seq, 0);
    let mut w = Writer::new(&mut buf, &h).expect("header fits");
    w.begin_entries().expect("fits");
    for d in defs {
        w.method(d).expect("the methods fit one record");
    }
    w.finish().to_vec()
}

/// Thread `stream` announces where it publishes its context: `slot` in `os_tid`.
pub fn thread_slot(pid: u32, generation: u64, stream: u64, os_tid: u32, slot: u64) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_RECORD];
    let h = header(KIND_THREAD, pid, generation, stream, 0, 0);
    let mut w = Writer::new(&mut buf, &h).expect("header fits");
    w.varint(u64::from(os_tid)).expect("fits");
    w.varint(slot).expect("fits");
    w.finish().to_vec()
}

/// Thread `stream`'s whole tree from a re-send: `entries` in as many records as they
/// need (the first with RESYNC, all absolute), the last with END when `end`.
pub fn thread_tree(
    pid: u32,
    generation: u64,
    stream: u64,
    name: &[u8],
    entries: &[TreeEntry],
    end: bool,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_RECORD];
    let mut rest = entries;
    loop {
        let seq = out.len() as u32;
        let first = seq == 0;
        let mut flags = FLAG_ABSOLUTE | if first { FLAG_RESYNC } else { 0 };
        // Whether what is left fits is known only after writing: write, and on a
        // last record write it again with END.
        let h = header(KIND_TREE, pid, generation, stream, seq, flags);
        let (bytes, taken) = tree_record(&mut buf, &h, name, rest);
        if taken == rest.len() && end {
            flags |= FLAG_END;
            let h = header(KIND_TREE, pid, generation, stream, seq, flags);
            let (bytes, _) = tree_record(&mut buf, &h, name, rest);
            out.push(bytes);
            return out;
        }
        out.push(bytes);
        rest = &rest[taken..];
        if rest.is_empty() {
            return out;
        }
    }
}

/// One tree record with as many of `entries` as fit: (bytes, entries taken). The
/// thread's name goes in its first record only.
fn tree_record(
    buf: &mut [u8],
    h: &RecordHeader,
    name: &[u8],
    entries: &[TreeEntry],
) -> (Vec<u8>, usize) {
    let mut w = Writer::new(buf, h).expect("header fits");
    w.string(if h.seq == 0 { name } else { b"" }).expect("fits");
    w.begin_entries().expect("fits");
    let taken = entries
        .iter()
        .take_while(|e| w.tree_entry(e).is_ok())
        .count();
    (w.finish().to_vec(), taken)
}

/// A new node `node` under `parent` running `mid`, called once.
pub fn node(node: u32, parent: u32, mid: u32) -> TreeEntry {
    TreeEntry {
        node,
        definition: Some((parent, mid)),
        calls: 1,
        bytecodes: 10,
    }
}

/// Records and bytes fired at once: the attacker paces itself to stay under a
/// process's rate (`records_per_second_per_process`, 20 000 by default) and to leave
/// the shared ring room, so that what it sends arrives and does its harm.
const CHUNK_RECORDS: usize = 1000;
const CHUNK_BYTES: usize = 256 << 10;
const PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Fires `records` through the fake agent (via a file of the scene), paced in chunks:
/// how many fired.
pub fn fire(agent: &mut Agent, file: &Path, records: &[Vec<u8>]) -> u64 {
    let mut fired = 0;
    let mut rest = records;
    while !rest.is_empty() {
        let mut bytes = 0;
        let n = rest
            .iter()
            .take(CHUNK_RECORDS)
            .take_while(|r| {
                bytes += r.len();
                bytes <= CHUNK_BYTES
            })
            .count()
            .max(1);
        write_records(file, &rest[..n]);
        fired += agent.fire(&format!("fire {}", file.display())).0;
        rest = &rest[n..];
        if !rest.is_empty() {
            std::thread::sleep(PAUSE);
        }
    }
    fired
}
