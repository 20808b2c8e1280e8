//! The CPU join (CPU per exact context) in one process, on the real sampler: this test process plays
//! a JVM. Its agent records (built with `jp_common::wire::Writer`) go into a real JVM
//! store, jpd's own adapter hands the announced threads to the kernel collector, and a
//! thread of ours spins with its context id in a slot of our memory. Hostile
//! announcements beside it are refused, counted, and change nothing else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use jp_common::wire::{
    self, EventHeader, MethodDef, TreeEntry, Writer, FLAG_ABSOLUTE, FLAG_RESYNC,
};
use jp_daemon::daemon::JvmContexts;
use jp_daemon::store::jvm::{JvmLimits, JvmStore, ProcessInfo};

use jp_daemon::kernel::KernelCollector;

use crate::support::kernel::start;

const GEN: u64 = 5;
/// The spinning thread's context: wire node 1 of stream 1.
static SLOT: AtomicU64 = AtomicU64::new(0);

fn event(rec: &[u8]) -> EventHeader {
    let me = std::process::id();
    EventHeader {
        tgid: me,
        tid: me,
        ktime_ns: 0,
        len: rec.len() as u32,
        status: wire::EVENT_OK,
    }
}

fn record(
    kind: u16,
    stream: u64,
    seq: u32,
    flags: u32,
    body: impl FnOnce(&mut Writer<'_>),
) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_RECORD];
    let h = wire::header(kind, std::process::id(), GEN, stream, seq, flags);
    let mut w = Writer::new(&mut buf, &h).expect("header fits");
    body(&mut w);
    w.finish().to_vec()
}

fn hello() -> Vec<u8> {
    record(wire::KIND_HELLO, 0, 0, FLAG_RESYNC | FLAG_ABSOLUTE, |w| {
        for v in [1, 10_000_000, 1, 2] {
            w.varint(v).expect("fits");
        }
        for s in [&b"17.0.9+9"[..], b"JoinTest", b"0.1.0"] {
            w.string(s).expect("fits");
        }
    })
}

fn methods() -> Vec<u8> {
    record(wire::KIND_METHODS, 0, 1, 0, |w| {
        w.begin_entries().expect("fits");
        w.method(&MethodDef {
            mid: 0,
            class: b"JoinTest",
            name: b"spin",
            descriptor: b"()V",
            source_file: b"JoinTest.java",
        })
        .expect("fits");
    })
}

/// Stream `stream`'s first tree: node 1 (JoinTest.spin) under the root.
fn tree(stream: u64) -> Vec<u8> {
    record(
        wire::KIND_TREE,
        stream,
        0,
        FLAG_RESYNC | FLAG_ABSOLUTE,
        |w| {
            w.string(b"spinner").expect("fits");
            w.begin_entries().expect("fits");
            w.tree_entry(&TreeEntry {
                node: 1,
                definition: Some((0, 0)),
                calls: 1,
                bytecodes: 1,
            })
            .expect("fits");
        },
    )
}

fn announce(stream: u64, os_tid: u64, slot: u64) -> Vec<u8> {
    record(wire::KIND_THREAD, stream, 0, 0, |w| {
        w.varint(os_tid).expect("fits");
        w.varint(slot).expect("fits");
    })
}

fn gettid() -> u64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

fn refused(store: &Mutex<JvmStore>) -> u64 {
    let stats = store.lock().expect("store").stats();
    stats
        .malformed
        .by_reason()
        .into_iter()
        .find(|(r, _)| *r == "context slot refused")
        .map_or(0, |(_, n)| n)
}

/// A JVM store that knows this process as a JVM that said hello and named its method,
/// whose announced threads the kernel collector `c` joins.
fn this_process_as_a_joined_jvm(c: &KernelCollector) -> Arc<Mutex<JvmStore>> {
    let store = Arc::new(Mutex::new(JvmStore::new(JvmLimits::default())));
    {
        let mut s = store.lock().expect("store");
        s.process_found(
            std::process::id(),
            ProcessInfo {
                start_time_ticks: 1,
                ns_pid: None,
                cmdline: "JoinTest".into(),
                exe: "/usr/bin/java".into(),
                uid: None,
            },
            SystemTime::now(),
        );
        s.generation_written(std::process::id(), GEN);
    }
    for rec in [hello(), methods()] {
        store
            .lock()
            .expect("store")
            .ingest(&event(&rec), &rec, SystemTime::now());
    }
    c.set_context_join(Arc::new(JvmContexts(Arc::clone(&store))));
    store
}

/// Hands one agent record to `store`.
fn feed(store: &Mutex<JvmStore>, rec: &[u8]) {
    store
        .lock()
        .expect("store")
        .ingest(&event(rec), rec, SystemTime::now());
}

#[test]
fn hostile_announcements_are_refused_and_counted_and_the_real_thread_is_joined() {
    let (c, _kernel) = start();
    let me = std::process::id();
    let store = this_process_as_a_joined_jvm(&c);
    let feed = |rec: Vec<u8>| feed(&store, &rec);

    SLOT.store(1, Ordering::SeqCst);
    // Spins once the collector has joined the announced threads.
    let (tid, go_tx, spinner) = spinner(1500);
    let slot = std::ptr::addr_of!(SLOT) as u64;
    // Stream 1: the real thread. Stream 2: another process's thread (init's). Streams
    // 3 and 4: slots that cannot be addresses.
    feed(tree(1));
    feed(announce(1, tid, slot));
    feed(announce(2, 1, slot));
    feed(announce(3, tid, 3));
    feed(announce(4, tid, 0));
    let before_refusals = refused(&store);
    assert_eq!(
        before_refusals, 2,
        "the store refuses slots 3 and 0 at once"
    );
    // A pass mirrors the announced threads into the sampler's maps.
    c.refresh();
    let _ = go_tx.send(());
    let _ = spinner.join();
    c.refresh();
    c.refresh();

    assert_eq!(
        refused(&store),
        3,
        "the collector refuses init's thread, announced by this process"
    );
    let s = store.lock().expect("store");
    let threads = s.context_threads();
    assert_eq!(
        threads
            .iter()
            .map(|t| (t.1.os_tid as u64, t.2))
            .collect::<Vec<_>>(),
        [(tid, 1)],
        "only the real thread keeps its slot: {threads:?}"
    );
    let j = s
        .list()
        .into_iter()
        .find(|j| j.pid == me)
        .expect("this process is a JVM of the store");
    // (Our other threads, without a slot, count as the app's by their names.)
    let app: u64 = j
        .cpu
        .iter()
        .filter(|(k, _, _)| *k == "app")
        .map(|(_, u, k)| u + k)
        .sum();
    let period = 1_000_000_000 / 997;
    assert_eq!(j.records_lost, 0, "{j:?}");
    assert_eq!(
        (j.cpu_pending_ns, j.cpu_unresolved_ns, j.cpu_read_failed_ns),
        (0, 0, 0),
        "{j:?}"
    );
    drop(s);
    // The spinner's samples are in its context, the only one with CPU.
    let snapshot = store.lock().expect("store").snapshot(me).expect("snapshot");
    let cpu = snapshot.cpu().expect("joined");
    let in_contexts: u64 = cpu.by_node.values().map(|s| s.total()).sum();
    assert_eq!(cpu.by_node.len(), 1, "{:?}", cpu.by_node);
    // 1.5 s on one CPU at 997 Hz is ~1500 samples; a busy 2-CPU host gives it less.
    assert!(
        in_contexts >= 300 && in_contexts * period <= app,
        "{in_contexts} samples in the spinner's context, app {app} ns: {j:?}"
    );
    c.shutdown();
}

/// What a thread that publishes on the heap points the sampler at: an object whose `u32`
/// at offset 12 is its current context and at offset 16 its cookie, side by side as the
/// agent lays out its `ThreadState` (read through its JNI global reference); the cookie
/// again at 24, for a layout that puts them apart.
#[repr(C)]
struct HeapState {
    header: [u32; 3],
    current: u32,
    cookie: u32,
    other: u32,
    cookie_apart: u32,
}

const COOKIE: u32 = 0xc0ff_ee01;
static STATE: HeapState = HeapState {
    header: [0; 3],
    current: 1,
    cookie: COOKIE,
    other: 0,
    cookie_apart: COOKIE,
};
/// The reference's cell: the object's address.
static CELL: AtomicU64 = AtomicU64::new(0);

fn announce_heap(stream: u64, os_tid: u64, cell: u64, cookie_at: u64, cookie: u32) -> Vec<u8> {
    record(wire::KIND_THREAD, stream, 0, 0, |w| {
        for v in [os_tid, cell, 12, cookie_at, u64::from(cookie)] {
            w.varint(v).expect("fits");
        }
    })
}

/// Spins on a thread of its own for `ms` once told to, after sending its tid.
fn spinner(
    ms: u64,
) -> (
    u64,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<u64>,
) {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        let _ = tid_tx.send(gettid());
        let _ = go_rx.recv();
        let end = Instant::now() + Duration::from_millis(ms);
        let mut x = 0u64;
        while Instant::now() < end {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        x
    });
    (tid_rx.recv().expect("spinner's tid"), go_tx, handle)
}

#[test]
fn a_heap_context_is_read_through_its_cell_and_never_under_a_wrong_cookie() {
    let (c, _kernel) = start();
    let me = std::process::id();
    let store = this_process_as_a_joined_jvm(&c);
    let feed = |rec: Vec<u8>| feed(&store, &rec);
    CELL.store(std::ptr::addr_of!(STATE) as u64, Ordering::SeqCst);
    let cell = std::ptr::addr_of!(CELL) as u64;
    feed(tree(1));
    let cpu = |what: &str| {
        let mut s = store.lock().expect("store");
        let j = s
            .list()
            .into_iter()
            .find(|j| j.pid == me)
            .expect("this process is a JVM of the store");
        assert_eq!(
            (j.cpu_pending_ns, j.cpu_unresolved_ns),
            (0, 0),
            "{what}: {j:?}"
        );
        let snapshot = s.snapshot(me).expect("snapshot");
        // No CPU part at all while no sample has landed on a context.
        let on_contexts: u64 = snapshot
            .cpu()
            .map_or(0, |c| c.by_node.values().map(|v| v.total()).sum());
        (on_contexts, j.cpu_read_failed_ns)
    };
    // First with a cookie that the object does not hold (memory the collector gave to
    // something else): the samples are counted as failed reads, none on a context.
    let (tid, go, handle) = spinner(1000);
    feed(announce_heap(1, tid, cell, 16, COOKIE ^ 2));
    c.refresh();
    let _ = go.send(());
    let _ = handle.join();
    c.refresh();
    c.refresh();
    let (on_contexts, failed) = cpu("wrong cookie");
    assert_eq!(on_contexts, 0, "a wrong cookie's samples went to a context");
    assert!(
        failed >= 200 * (1_000_000_000 / 997),
        "{failed} ns of failed reads for 1 s of spinning under a wrong cookie"
    );
    // Then the thread's own cookie, beside the id (one read) and apart from it (two): its
    // samples are in its context.
    let mut before = 0;
    for cookie_at in [16, 24] {
        let (tid, go, handle) = spinner(1500);
        feed(announce_heap(1, tid, cell, cookie_at, COOKIE));
        c.refresh();
        let _ = go.send(());
        let _ = handle.join();
        c.refresh();
        c.refresh();
        let (on_contexts, failed_after) = cpu("right cookie");
        assert!(
            on_contexts >= before + 300,
            "cookie at {cookie_at}: {} samples in the context read on the heap",
            on_contexts - before
        );
        assert_eq!(failed_after, failed, "reads failed under the right cookie");
        before = on_contexts;
    }
    c.shutdown();
}
