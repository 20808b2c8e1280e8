//! The format's constants, headers and errors: what both the reader and the writer
//! agree on (the module doc of [`super`] is the normative text).

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
pub const KIND_UNMOUNTED: u16 = 6;

/// Why a virtual thread left its carrier: the `why` of a [`KIND_UNMOUNTED`] entry, from the
/// virtual thread's state at its unmount. Each names what the thread waited for, until it
/// was mounted again (the wait for a free carrier after its wake-up included).
pub mod unmounted {
    /// Parked (`LockSupport.park`/`parkNanos`: a `java.util.concurrent` lock, condition,
    /// queue or future, or blocking I/O that the JDK turned into a park).
    pub const PARKED: u64 = 1;
    /// `Thread.sleep` (a timed park from `VirtualThread.sleepNanos`).
    pub const SLEEP: u64 = 2;
    /// Blocked entering a monitor (`synchronized`), JDK 24+.
    pub const MONITOR: u64 = 3;
    /// In `Object.wait` (timed or not), JDK 24+.
    pub const OBJECT_WAIT: u64 = 4;
    /// `Thread.yield`: runnable, waiting for a carrier.
    pub const YIELD: u64 = 5;
    /// A state the agent does not know.
    pub const OTHER: u64 = 6;
    /// Codes are below this.
    pub const END: u64 = 7;
}

/// Entries of one [`KIND_UNMOUNTED`] record, at most (the agent keeps fewer per thread).
pub const MAX_UNMOUNTED_ENTRIES: u32 = 1024;

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
    /// Written by the agent, read by jpd: `AGENT_STATE_*` (0 from an agent that predates it).
    pub agent_state: u64,
    /// Written by the agent: the id of the exact window open now, or of the last one (0: none yet).
    pub window_id: u64,
    pub _reserved: [u64; 4],
}

/// [`Control::agent_state`] of an agent that does not write it (it predates windows).
pub const AGENT_STATE_UNKNOWN: u64 = 0;
/// Profiled from start (`mode=live`): its live tree is already exact, windows are refused.
pub const AGENT_STATE_LIVE: u64 = 1;
/// Loaded but instrumenting nothing (`mode=dormant`, or loaded late): a window may open.
pub const AGENT_STATE_DORMANT: u64 = 2;
/// An exact window is open ([`Control::window_id`]).
pub const AGENT_STATE_WINDOW_OPEN: u64 = 3;

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
    /// Over the process's rate (`crate::ring`): dropped before anything was copied.
    pub const RATE_LIMITED: u32 = 5;
    /// The process is outside the allow-lists: dropped before anything was copied.
    pub const NOT_ALLOWED: u32 = 6;
    pub const COUNT: u32 = 7;
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
