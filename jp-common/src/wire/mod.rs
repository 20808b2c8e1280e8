//! The agent → jpd wire format (version 1): what a JVM running `libjpagent.so` with
//! `profiler=usdt` hands to the USDT probe `jp:record`, and what jpd's eBPF program copies
//! into the ring buffer.
//!
//! # Transport
//! - The probe `jp:record(addr: u64, len: u64)` in `libjpagent.so`, with a semaphore: the
//!   agent serializes nothing while the semaphore is zero. One firing carries one record
//!   of at most [`MAX_RECORD`] bytes; larger state is split over several records.
//! - jpd's uprobe program copies the record into the ring buffer behind a
//!   [`EventHeader`] that the kernel fills (tgid, tid, time): those fields are trusted,
//!   everything in the record is not. Any process that maps the library can fire the
//!   probe with any bytes.
//! - The control block [`Control`], exported by the library as the dynamic symbol
//!   [`CONTROL_SYMBOL`]: jpd writes a new `generation` into it (through `/proc/PID/mem`)
//!   when it attaches to a JVM, restarts, or finds records lost. The agent compares it at
//!   every report point; a change means "re-send everything": the JVM stream sends
//!   [`KIND_HELLO`] and the whole method table, each thread its whole tree with absolute
//!   counts, at its next report point (or at its end, or at VM death).
//!
//! # Records
//! A record is a [`RecordHeader`] (40 bytes, little-endian) and a body. Streams: stream
//! 0 is the JVM (hello, methods, end); stream `t > 0` is the Java thread whose
//! `Thread.getId()` is `t`. `seq` counts the records of a stream, from 0 at the record that
//! carries [`FLAG_RESYNC`]; a gap in `seq` means records were lost. Records of one stream
//! are fired by one thread at a time, so they arrive in order.
//!
//! Bodies use LEB128 varints (at most 10 bytes for a `u64`) and strings (a varint length of
//! at most [`MAX_STRING`], then UTF-8 bytes; not NUL-terminated):
//! - [`KIND_HELLO`] (stream 0, `FLAG_RESYNC | FLAG_ABSOLUTE`): varint `start_time_ms` (JVM
//!   start, Unix ms), varint `granularity`, varint `bba` (0 default, 1 precise), varint
//!   `live_threads` (threads registered with the runtime when sent), string `jdk_version`
//!   (`java.vm.version`), string `main` (`sun.java.command`, may be empty), string
//!   `agent_version`.
//! - [`KIND_METHODS`] (stream 0): `u32` count (little-endian, fixed), then per method:
//!   varint `mid`, string class (dotted binary name), string name, string descriptor,
//!   string source file (with its package directory, empty if unknown). A method is always
//!   sent before the first tree entry that names it (in arrival order).
//! - [`KIND_TREE`] (stream = thread): string `thread_name` (empty = unchanged), `u32`
//!   entry count, then entries. Each entry: varint `tag = node_id << 1 | is_definition`;
//!   a definition continues with varint `parent_id`, varint `mid`; every entry then has
//!   varint `calls`, varint `bytecodes`: deltas since the node's last entry, or totals if
//!   the record has [`FLAG_ABSOLUTE`]. Node 0 is the thread's root (never defined, never
//!   counted); ids are the sender's, below [`MAX_NODE_ID`], and a parent is defined
//!   before its children.
//! - [`KIND_JVM_END`] (stream 0, [`FLAG_END`]): empty body; the VM is dying and every
//!   thread stream has sent its last record.
//! - [`KIND_THREAD`] (stream = thread, seq 0, no flags, outside the stream's numbering):
//!   varint `os_tid` (the kernel's id of the thread), varint `slot` (the address, in the
//!   JVM's memory, of the thread's context slot: a little-endian `u32` holding the node id
//!   of the thread's current context, 0 = its root). Sent before a thread's full tree when
//!   it has a slot, so that jpd's sampler can count CPU per context. Added to version 1:
//!   a decoder that predates it refuses the record (its tree still applies). A thread
//!   that publishes on the JVM's heap ([`HeapContext`]) continues with varint
//!   `current_offset`, varint `cookie_offset` (each below [`MAX_HEAP_OFFSET`]) and varint
//!   `cookie` (a `u32`): then `slot` is the address of a cell holding the address of the
//!   object whose `u32` at `current_offset` is the current context's id, and whose `u32`
//!   at `cookie_offset` is `cookie`.
//! - [`KIND_UNMOUNTED`] (stream = a virtual thread, seq 0, no flags, outside the stream's
//!   numbering): time the virtual thread spent off its carriers since its last such record,
//!   measured by the agent from its unmount to its next mount. `u32` entry count (at most
//!   [`MAX_UNMOUNTED_ENTRIES`]), then per entry: varint `node` (the context it was in at the
//!   unmount, a node id of the stream's tree, 0 = its root), varint `why` (one of
//!   [`unmounted`], not 0), varint `ns` (summed), varint `periods` (at least 1). Sent after
//!   the tree records that define its nodes (at a thread's end: before its last, empty,
//!   `FLAG_END` tree record). Added to version 1: a decoder that predates it refuses the
//!   record.
//!
//! Thread trees number their nodes when the agent makes them, not when it first sends
//! them: a slot may name a node whose definition is still to come (in a later record).
//!
//! # Ended threads
//! A thread that ended while nobody listened, or before jpd restarted, cannot re-send its
//! tree. So the agent keeps the merged tree of every ended thread and, when it answers a
//! new generation, sends it as the tree stream [`STREAM_ENDED`] (RESYNC|ABSOLUTE) right
//! after HELLO and the method table, before any thread record of that generation. It
//! covers exactly the threads whose END was fired before it; a thread that ends later
//! sends its own END as usual (and is folded into the agent's ended tree for the next
//! generation, atomically with that END). So jpd, on a RESYNC of [`STREAM_ENDED`], drops
//! the contributions of every thread stream that has ended and of the previous
//! [`STREAM_ENDED`], then applies the new totals: the JVM's tree stays the exact sum of
//! the live threads, the threads ended since, and this snapshot.

mod format;
mod reader;
mod writer;

pub use format::*;

#[cfg(any(test, feature = "alloc"))]
pub use reader::{decode_body, Body, TreeBody};
pub use reader::{
    split_record, HeapContext, Hello, MethodDef, MethodIter, Reader, Record, ThreadSlot, Tree,
    TreeEntry, TreeIter, Unmounted, MAX_HEAP_OFFSET,
};
pub use writer::{header, Full, Writer};

#[cfg(test)]
mod tests;
