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

/// First four bytes of every record: `JPW1`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"JPW1");
pub const VERSION: u16 = 1;
/// Largest record, header included. Also the eBPF copy buffer's size.
pub const MAX_RECORD: usize = 16384;
/// Largest string in a body, in bytes.
pub const MAX_STRING: usize = 4096;
/// Node and method ids are below this (they fit an `i32` on the Java side).
pub const MAX_NODE_ID: u64 = 1 << 31;

pub const KIND_HELLO: u16 = 1;
pub const KIND_METHODS: u16 = 2;
pub const KIND_TREE: u16 = 3;
pub const KIND_JVM_END: u16 = 4;
pub const KIND_THREAD: u16 = 5;

/// The first record of a stream's full state: `seq` restarts at 0, what jpd knew of the
/// stream is replaced.
pub const FLAG_RESYNC: u32 = 1;
/// Counts are totals, not deltas (set on every record of a full re-send).
pub const FLAG_ABSOLUTE: u32 = 2;
/// The stream's last record (thread ended, or the JVM is dying).
pub const FLAG_END: u32 = 4;
pub const KNOWN_FLAGS: u32 = FLAG_RESYNC | FLAG_ABSOLUTE | FLAG_END;

/// The tree stream carrying the merged trees of ended threads (see the module doc). Java
/// thread ids are positive `long`s, so this id is never a thread's.
pub const STREAM_ENDED: u64 = u64::MAX;

/// USDT provider and probe name of the record probe in `libjpagent.so`.
pub const PROBE_PROVIDER: &str = "jp";
pub const PROBE_NAME: &str = "record";
/// File name jpd looks for in `/proc/PID/maps`.
pub const AGENT_LIBRARY: &str = "libjpagent.so";

/// The header of every record, little-endian.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// [`MAGIC`].
    pub magic: u32,
    /// [`VERSION`].
    pub version: u16,
    /// One of `KIND_*`.
    pub kind: u16,
    /// Whole record length, header included; equals the probe's `len` argument.
    pub len: u32,
    /// `getpid()` as the JVM sees it (its own PID namespace): informational only.
    pub pid: u32,
    /// The control generation the sender had seen when it built the record (0: none).
    pub generation: u64,
    /// 0 for the JVM, else the Java thread id.
    pub stream: u64,
    /// Record number within the stream since its last [`FLAG_RESYNC`].
    pub seq: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
}

pub const HEADER_LEN: usize = core::mem::size_of::<RecordHeader>();

/// Name of the [`Control`] symbol in the agent library's dynamic symbol table.
pub const CONTROL_SYMBOL: &str = "jp_usdt_control";
/// `Control::magic`: `JPCTRL` then the format version 1.
pub const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"JPCTRL\x00\x01");

/// The block jpd writes into a traced JVM (64 bytes, 8-aligned).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// [`CONTROL_MAGIC`]: jpd checks it before writing.
    pub magic: u64,
    /// Written by jpd, read by the agent: a change asks for a full re-send.
    pub generation: u64,
    pub _reserved: [u64; 6],
}

/// What jpd's eBPF program puts in front of each copied record in the ring buffer. All of
/// it comes from the kernel, none from the traced process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// Process (thread group) id, in the initial PID namespace.
    pub tgid: u32,
    /// Thread id, in the initial PID namespace.
    pub tid: u32,
    /// `bpf_ktime_get_ns()` at the probe.
    pub ktime_ns: u64,
    /// Bytes of record that follow (the probe's `len`, when it was copied).
    pub len: u32,
    /// `EVENT_*`: [`EVENT_OK`] or why nothing follows.
    pub status: u32,
}

pub const EVENT_HEADER_LEN: usize = core::mem::size_of::<EventHeader>();
/// The record follows.
pub const EVENT_OK: u32 = 0;
/// `len` was above [`MAX_RECORD`]; nothing follows.
pub const EVENT_TOO_LONG: u32 = 1;
/// Reading the traced process's memory failed; nothing follows.
pub const EVENT_FAULT: u32 = 2;

/// Slots of the eBPF per-CPU counter array `JP_USDT_STATS`.
pub mod usdt_stat {
    /// Probe hits.
    pub const FIRED: u32 = 0;
    /// Records (or error events) written to the ring buffer.
    pub const SENT: u32 = 1;
    /// Ring buffer full: the record was lost.
    pub const RING_FULL: u32 = 2;
    /// The argument spec could not be evaluated or user memory could not be read.
    pub const FAULT: u32 = 3;
    /// `len` above [`super::MAX_RECORD`].
    pub const TOO_LONG: u32 = 4;
    pub const COUNT: u32 = 5;
}

/// Why a record was rejected. Every variant means "drop the record and count it".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its header or than its `len`, or `len` above [`MAX_RECORD`].
    Truncated,
    BadMagic,
    /// A version this decoder does not know.
    Version(u16),
    /// An unknown `kind`.
    Kind(u16),
    /// Unknown flag bits, or a flag that the kind does not allow.
    Flags(u32),
    /// The header's `len` differs from the bytes received.
    Length,
    /// A varint longer than 10 bytes or above the field's range.
    Varint,
    /// A string longer than [`MAX_STRING`] or running past the record.
    String,
    /// A node id or method id out of range, or a node defined as its own ancestor.
    Id,
    /// Bytes left after the last entry.
    Trailing,
    /// Stream 0 carries a tree, or a thread stream carries JVM records.
    Stream,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WireError::Truncated => f.write_str("record truncated"),
            WireError::BadMagic => f.write_str("bad magic"),
            WireError::Version(v) => write!(f, "unknown version {v}"),
            WireError::Kind(k) => write!(f, "unknown record kind {k}"),
            WireError::Flags(x) => write!(f, "flags {x:#x} not allowed here"),
            WireError::Length => f.write_str("header length differs from the record's"),
            WireError::Varint => f.write_str("bad varint"),
            WireError::String => f.write_str("bad string"),
            WireError::Id => f.write_str("id out of range"),
            WireError::Trailing => f.write_str("trailing bytes"),
            WireError::Stream => f.write_str("record kind does not belong to this stream"),
        }
    }
}

mod reader;
mod writer;

#[cfg(any(test, feature = "alloc"))]
pub use reader::{decode_body, Body, TreeBody};
pub use reader::{
    split_record, HeapContext, Hello, MethodDef, MethodIter, Reader, Record, ThreadSlot, Tree,
    TreeEntry, TreeIter, MAX_HEAP_OFFSET,
};
pub use writer::{header, Full, Writer};

#[cfg(test)]
mod tests;
