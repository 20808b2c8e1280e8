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

/// A cursor over untrusted bytes: every read is bounds-checked.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    #[inline]
    pub fn varint(&mut self) -> Result<u64, WireError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err(WireError::Varint);
            };
            self.buf = rest;
            let bits = u64::from(b & 0x7f);
            // The tenth byte may only hold the top bit of a u64.
            if i == 9 && bits > 1 {
                return Err(WireError::Varint);
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError::Varint)
    }

    /// A varint that must be below `limit`.
    #[inline]
    pub fn varint_below(&mut self, limit: u64) -> Result<u64, WireError> {
        let v = self.varint()?;
        if v < limit {
            Ok(v)
        } else {
            Err(WireError::Id)
        }
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        let (head, rest) = self.buf.split_at_checked(4).ok_or(WireError::Truncated)?;
        self.buf = rest;
        let mut b = [0u8; 4];
        b.copy_from_slice(head);
        Ok(u32::from_le_bytes(b))
    }

    pub fn string(&mut self) -> Result<&'a [u8], WireError> {
        let len = self.varint()?;
        if len > MAX_STRING as u64 {
            return Err(WireError::String);
        }
        let (s, rest) = self
            .buf
            .split_at_checked(len as usize)
            .ok_or(WireError::String)?;
        self.buf = rest;
        Ok(s)
    }
}

/// A record split into its checked header and its (not yet decoded) body.
#[derive(Clone, Debug)]
pub struct Record<'a> {
    pub header: RecordHeader,
    pub body: &'a [u8],
}

/// Checks the header of `buf` (one whole record as the probe delivered it) and returns it
/// with the body. The body is checked as it is decoded: all of it by [`decode_body`],
/// or piece by piece ([`Hello::decode`], [`MethodIter`], [`Tree::decode`]).
pub fn split_record(buf: &[u8]) -> Result<Record<'_>, WireError> {
    if buf.len() < HEADER_LEN || buf.len() > MAX_RECORD {
        return Err(WireError::Truncated);
    }
    let u16_at = |o: usize| u16::from_le_bytes([buf[o], buf[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
    let u64_at = |o: usize| u64::from(u32_at(o)) | (u64::from(u32_at(o + 4)) << 32);
    let header = RecordHeader {
        magic: u32_at(0),
        version: u16_at(4),
        kind: u16_at(6),
        len: u32_at(8),
        pid: u32_at(12),
        generation: u64_at(16),
        stream: u64_at(24),
        seq: u32_at(32),
        flags: u32_at(36),
    };
    if header.magic != MAGIC {
        return Err(WireError::BadMagic);
    }
    if header.version != VERSION {
        return Err(WireError::Version(header.version));
    }
    if header.len as usize != buf.len() {
        return Err(WireError::Length);
    }
    if header.flags & !KNOWN_FLAGS != 0 {
        return Err(WireError::Flags(header.flags));
    }
    let jvm_stream = header.stream == 0;
    match header.kind {
        KIND_HELLO => {
            if header.flags != FLAG_RESYNC | FLAG_ABSOLUTE || header.seq != 0 {
                return Err(WireError::Flags(header.flags));
            }
        }
        KIND_METHODS => {
            if header.flags != 0 {
                return Err(WireError::Flags(header.flags));
            }
        }
        KIND_TREE => {
            if header.flags & FLAG_RESYNC != 0
                && (header.flags & FLAG_ABSOLUTE == 0 || header.seq != 0)
            {
                return Err(WireError::Flags(header.flags));
            }
        }
        KIND_JVM_END => {
            if header.flags != FLAG_END {
                return Err(WireError::Flags(header.flags));
            }
        }
        KIND_THREAD => {
            if header.flags != 0 || header.seq != 0 {
                return Err(WireError::Flags(header.flags));
            }
        }
        k => return Err(WireError::Kind(k)),
    }
    let thread_kind = matches!(header.kind, KIND_TREE | KIND_THREAD);
    if jvm_stream == thread_kind || (header.kind == KIND_THREAD && header.stream == STREAM_ENDED) {
        return Err(WireError::Stream);
    }
    Ok(Record {
        header,
        body: &buf[HEADER_LEN..],
    })
}

/// The body of [`KIND_HELLO`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello<'a> {
    pub start_time_ms: u64,
    pub granularity: u64,
    pub bba: u64,
    pub live_threads: u64,
    pub jdk_version: &'a [u8],
    pub main: &'a [u8],
    pub agent_version: &'a [u8],
}

impl<'a> Hello<'a> {
    pub fn decode(body: &'a [u8]) -> Result<Hello<'a>, WireError> {
        let mut r = Reader::new(body);
        let hello = Hello {
            start_time_ms: r.varint()?,
            granularity: r.varint()?,
            bba: r.varint_below(2)?,
            live_threads: r.varint()?,
            jdk_version: r.string()?,
            main: r.string()?,
            agent_version: r.string()?,
        };
        if !r.is_empty() {
            return Err(WireError::Trailing);
        }
        Ok(hello)
    }
}

/// One entry of [`KIND_METHODS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodDef<'a> {
    pub mid: u32,
    pub class: &'a [u8],
    pub name: &'a [u8],
    pub descriptor: &'a [u8],
    pub source_file: &'a [u8],
}

/// The entries of a [`KIND_METHODS`] body; yields an error once and then stops.
#[derive(Clone, Debug)]
pub struct MethodIter<'a> {
    r: Reader<'a>,
    left: u32,
    failed: bool,
}

impl<'a> MethodIter<'a> {
    pub fn new(body: &'a [u8]) -> Result<MethodIter<'a>, WireError> {
        let mut r = Reader::new(body);
        let left = r.u32()?;
        Ok(MethodIter {
            r,
            left,
            failed: false,
        })
    }

    fn next_def(&mut self) -> Result<MethodDef<'a>, WireError> {
        Ok(MethodDef {
            mid: self.r.varint_below(MAX_NODE_ID)? as u32,
            class: self.r.string()?,
            name: self.r.string()?,
            descriptor: self.r.string()?,
            source_file: self.r.string()?,
        })
    }
}

impl<'a> Iterator for MethodIter<'a> {
    type Item = Result<MethodDef<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.r.is_empty() {
                return None;
            }
            self.failed = true;
            return Some(Err(WireError::Trailing));
        }
        self.left -= 1;
        let item = self.next_def();
        self.failed = item.is_err();
        Some(item)
    }
}

/// One entry of a [`KIND_TREE`] body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeEntry {
    /// Sender's node id, `1..MAX_NODE_ID`.
    pub node: u32,
    /// `Some((parent, mid))` when the entry defines the node.
    pub definition: Option<(u32, u32)>,
    pub calls: u64,
    pub bytecodes: u64,
}

/// A [`KIND_TREE`] body: the thread name, then its entries.
#[derive(Clone, Debug)]
pub struct Tree<'a> {
    pub thread_name: &'a [u8],
    pub entries: TreeIter<'a>,
}

impl<'a> Tree<'a> {
    pub fn decode(body: &'a [u8]) -> Result<Tree<'a>, WireError> {
        let mut r = Reader::new(body);
        let thread_name = r.string()?;
        let left = r.u32()?;
        Ok(Tree {
            thread_name,
            entries: TreeIter {
                r,
                left,
                failed: false,
            },
        })
    }
}

/// The entries of a tree body; yields an error once and then stops.
#[derive(Clone, Debug)]
pub struct TreeIter<'a> {
    r: Reader<'a>,
    left: u32,
    failed: bool,
}

impl TreeIter<'_> {
    #[inline]
    fn next_entry(&mut self) -> Result<TreeEntry, WireError> {
        let tag = self.r.varint_below(MAX_NODE_ID << 1)?;
        let node = (tag >> 1) as u32;
        if node == 0 {
            return Err(WireError::Id);
        }
        let definition = if tag & 1 == 1 {
            let parent = self.r.varint_below(MAX_NODE_ID)? as u32;
            let mid = self.r.varint_below(MAX_NODE_ID)? as u32;
            if parent == node {
                return Err(WireError::Id);
            }
            Some((parent, mid))
        } else {
            None
        };
        Ok(TreeEntry {
            node,
            definition,
            calls: self.r.varint()?,
            bytecodes: self.r.varint()?,
        })
    }
}

impl Iterator for TreeIter<'_> {
    type Item = Result<TreeEntry, WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.r.is_empty() {
                return None;
            }
            self.failed = true;
            return Some(Err(WireError::Trailing));
        }
        self.left -= 1;
        let item = self.next_entry();
        self.failed = item.is_err();
        Some(item)
    }
}

/// A record's body, decoded: what jpd's store applies. Tree entries live in the
/// caller's buffer, reused from record to record (see [`decode_body`]).
#[cfg(any(test, feature = "alloc"))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body<'a, 's> {
    Hello(Hello<'a>),
    Methods(alloc::vec::Vec<MethodDef<'a>>),
    Tree(TreeBody<'a, 's>),
    /// [`KIND_JVM_END`]: its body is empty (bytes there refuse the record).
    JvmEnd,
    Thread(ThreadSlot),
}

/// The body of [`KIND_THREAD`]: where the thread publishes its current context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSlot {
    pub os_tid: u32,
    /// A context slot (a `u32`), or with [`ThreadSlot::heap`] the cell holding the
    /// address of the object that keeps the current context.
    pub slot: u64,
    pub heap: Option<HeapContext>,
}

/// Where a thread that publishes on the JVM's heap keeps its current context: `slot` is
/// a cell (a JNI global reference's) holding the address of an object, whose `u32` at
/// `current_offset` is the current context's node id. The `u32` at `cookie_offset` is
/// `cookie`, which tells a read of that object from a read of memory the collector has
/// since given to something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapContext {
    pub current_offset: u32,
    pub cookie_offset: u32,
    pub cookie: u32,
}

/// Offsets of a [`HeapContext`] are below this (an object's first fields).
pub const MAX_HEAP_OFFSET: u64 = 1 << 12;

impl ThreadSlot {
    pub fn decode(body: &[u8]) -> Result<ThreadSlot, WireError> {
        let mut r = Reader::new(body);
        let os_tid = r.varint_below(1 << 32)? as u32;
        let slot = r.varint()?;
        let heap = if r.is_empty() {
            None
        } else {
            Some(HeapContext {
                current_offset: r.varint_below(MAX_HEAP_OFFSET)? as u32,
                cookie_offset: r.varint_below(MAX_HEAP_OFFSET)? as u32,
                cookie: r.varint_below(1 << 32)? as u32,
            })
        };
        if !r.is_empty() {
            return Err(WireError::Trailing);
        }
        Ok(ThreadSlot { os_tid, slot, heap })
    }

    /// Whether it can say where a thread publishes: a thread id, and a slot that can be an
    /// int's (on the heap: a cell that can be a pointer's, and two different ints'
    /// offsets past the object's header word). Decoding checks the encoding only; what
    /// fails here is what a JVM could not have meant.
    pub fn well_formed(&self) -> bool {
        let aligned = match self.heap {
            None => self.slot.is_multiple_of(4),
            Some(c) => {
                self.slot.is_multiple_of(8)
                    && c.current_offset != 0
                    && c.current_offset.is_multiple_of(4)
                    && c.cookie_offset.is_multiple_of(4)
                    && c.cookie_offset != c.current_offset
            }
        };
        self.os_tid != 0 && self.slot != 0 && aligned
    }
}

/// A [`KIND_TREE`] body, decoded.
#[cfg(any(test, feature = "alloc"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeBody<'a, 's> {
    /// Empty: unchanged.
    pub thread_name: &'a [u8],
    pub entries: &'s [TreeEntry],
}

/// Decodes the whole body of a record that [`split_record`] checked, tree entries
/// into `entries` (cleared first). Decoding stops at the first error: the record is
/// refused as a whole.
#[cfg(any(test, feature = "alloc"))]
pub fn decode_body<'a, 's>(
    rec: &Record<'a>,
    entries: &'s mut alloc::vec::Vec<TreeEntry>,
) -> Result<Body<'a, 's>, WireError> {
    match rec.header.kind {
        KIND_HELLO => Hello::decode(rec.body).map(Body::Hello),
        KIND_METHODS => MethodIter::new(rec.body)?
            .collect::<Result<_, _>>()
            .map(Body::Methods),
        KIND_TREE => {
            let tree = Tree::decode(rec.body)?;
            entries.clear();
            for e in tree.entries {
                entries.push(e?);
            }
            Ok(Body::Tree(TreeBody {
                thread_name: tree.thread_name,
                entries,
            }))
        }
        KIND_THREAD => ThreadSlot::decode(rec.body).map(Body::Thread),
        KIND_JVM_END if rec.body.is_empty() => Ok(Body::JvmEnd),
        KIND_JVM_END => Err(WireError::Trailing),
        k => Err(WireError::Kind(k)),
    }
}

/// Builds one record in a caller-owned buffer (no allocation): the agent's Rust side and
/// tests use it; the Java runtime has its own encoder of the same format.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
    count_at: Option<usize>,
    count: u32,
}

/// The record does not fit in the buffer (or in [`MAX_RECORD`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

impl<'a> Writer<'a> {
    /// Starts a record; `header.len` is filled in by [`Writer::finish`].
    pub fn new(buf: &'a mut [u8], header: &RecordHeader) -> Result<Writer<'a>, Full> {
        let limit = buf.len().min(MAX_RECORD);
        let buf = &mut buf[..limit];
        if buf.len() < HEADER_LEN {
            return Err(Full);
        }
        let mut w = Writer {
            buf,
            pos: 0,
            count_at: None,
            count: 0,
        };
        w.bytes(&header.magic.to_le_bytes())?;
        w.bytes(&header.version.to_le_bytes())?;
        w.bytes(&header.kind.to_le_bytes())?;
        w.bytes(&0u32.to_le_bytes())?;
        w.bytes(&header.pid.to_le_bytes())?;
        w.bytes(&header.generation.to_le_bytes())?;
        w.bytes(&header.stream.to_le_bytes())?;
        w.bytes(&header.seq.to_le_bytes())?;
        w.bytes(&header.flags.to_le_bytes())?;
        Ok(w)
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    fn bytes(&mut self, b: &[u8]) -> Result<(), Full> {
        let end = self.pos.checked_add(b.len()).ok_or(Full)?;
        let dst = self.buf.get_mut(self.pos..end).ok_or(Full)?;
        dst.copy_from_slice(b);
        self.pos = end;
        Ok(())
    }

    pub fn varint(&mut self, mut v: u64) -> Result<(), Full> {
        let mut tmp = [0u8; 10];
        let mut n = 0;
        loop {
            let low = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                tmp[n] = low;
                n += 1;
                break;
            }
            tmp[n] = low | 0x80;
            n += 1;
        }
        self.bytes(&tmp[..n])
    }

    /// A string, cut to [`MAX_STRING`] bytes (at a byte boundary: the decoder treats names
    /// as bytes and shows invalid UTF-8 lossily).
    pub fn string(&mut self, s: &[u8]) -> Result<(), Full> {
        let s = &s[..s.len().min(MAX_STRING)];
        self.varint(s.len() as u64)?;
        self.bytes(s)
    }

    /// Reserves the fixed `u32` entry count of a methods or tree body.
    pub fn begin_entries(&mut self) -> Result<(), Full> {
        self.count_at = Some(self.pos);
        self.count = 0;
        self.bytes(&0u32.to_le_bytes())
    }

    /// Appends one method definition, or nothing if it does not fit.
    pub fn method(&mut self, def: &MethodDef<'_>) -> Result<(), Full> {
        let save = self.pos;
        let r = (|| {
            self.varint(u64::from(def.mid))?;
            self.string(def.class)?;
            self.string(def.name)?;
            self.string(def.descriptor)?;
            self.string(def.source_file)
        })();
        self.commit_entry(save, r)
    }

    /// Appends one tree entry, or nothing if it does not fit.
    pub fn tree_entry(&mut self, e: &TreeEntry) -> Result<(), Full> {
        let save = self.pos;
        let r = (|| {
            let def = u64::from(e.definition.is_some());
            self.varint((u64::from(e.node) << 1) | def)?;
            if let Some((parent, mid)) = e.definition {
                self.varint(u64::from(parent))?;
                self.varint(u64::from(mid))?;
            }
            self.varint(e.calls)?;
            self.varint(e.bytecodes)
        })();
        self.commit_entry(save, r)
    }

    fn commit_entry(&mut self, save: usize, r: Result<(), Full>) -> Result<(), Full> {
        match r {
            Ok(()) => {
                self.count += 1;
                Ok(())
            }
            Err(Full) => {
                self.pos = save;
                Err(Full)
            }
        }
    }

    /// Fills in `len` and the entry count; returns the record's bytes.
    pub fn finish(self) -> &'a [u8] {
        let len = (self.pos as u32).to_le_bytes();
        self.buf[8..12].copy_from_slice(&len);
        if let Some(at) = self.count_at {
            self.buf[at..at + 4].copy_from_slice(&self.count.to_le_bytes());
        }
        &self.buf[..self.pos]
    }
}

/// A header with magic and version set.
pub fn header(
    kind: u16,
    pid: u32,
    generation: u64,
    stream: u64,
    seq: u32,
    flags: u32,
) -> RecordHeader {
    RecordHeader {
        magic: MAGIC,
        version: VERSION,
        kind,
        len: 0,
        pid,
        generation,
        stream,
        seq,
        flags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_fixed() {
        assert_eq!(HEADER_LEN, 40);
        assert_eq!(EVENT_HEADER_LEN, 24);
        assert_eq!(core::mem::size_of::<Control>(), 64);
        assert_eq!(&MAGIC.to_le_bytes(), b"JPW1");
    }

    #[test]
    fn tree_round_trip() {
        let mut buf = [0u8; 256];
        let h = header(KIND_TREE, 7, 3, 1, 0, FLAG_RESYNC | FLAG_ABSOLUTE);
        let mut w = Writer::new(&mut buf, &h).unwrap();
        w.string(b"main").unwrap();
        w.begin_entries().unwrap();
        let a = TreeEntry {
            node: 1,
            definition: Some((0, 42)),
            calls: 1,
            bytecodes: 300,
        };
        let b = TreeEntry {
            node: 1,
            definition: None,
            calls: u64::MAX,
            bytecodes: 0,
        };
        w.tree_entry(&a).unwrap();
        w.tree_entry(&b).unwrap();
        let rec = w.finish();
        let r = split_record(rec).unwrap();
        assert_eq!(r.header.len as usize, rec.len());
        assert_eq!(r.header.pid, 7);
        assert_eq!(r.header.generation, 3);
        let t = Tree::decode(r.body).unwrap();
        assert_eq!(t.thread_name, b"main");
        let got: Vec<_> = t.entries.collect::<Result<_, _>>().unwrap();
        assert_eq!(got, [a, b]);

        let mut entries = vec![a; 3];
        assert_eq!(
            decode_body(&r, &mut entries),
            Ok(Body::Tree(TreeBody {
                thread_name: b"main",
                entries: &[a, b]
            }))
        );
        // One bad entry refuses the whole body.
        let mut bad = rec.to_vec();
        let last = bad.len() - 1;
        bad[last] = 0x80;
        let r = split_record(&bad).unwrap();
        assert_eq!(decode_body(&r, &mut entries), Err(WireError::Varint));
    }

    #[test]
    fn thread_slots_decode_with_or_without_a_heap_context() {
        let body = |vals: &[u64]| {
            let mut buf = [0u8; 128];
            let h = header(KIND_THREAD, 7, 3, 1, 0, 0);
            let mut w = Writer::new(&mut buf, &h).unwrap();
            for v in vals {
                w.varint(*v).unwrap();
            }
            w.finish()[HEADER_LEN..].to_vec()
        };
        assert_eq!(
            ThreadSlot::decode(&body(&[42, 0x7f00_0000_1000])),
            Ok(ThreadSlot {
                os_tid: 42,
                slot: 0x7f00_0000_1000,
                heap: None
            })
        );
        assert_eq!(
            ThreadSlot::decode(&body(&[42, 0x7f00_0000_1000, 12, 16, 0xdead_beef])),
            Ok(ThreadSlot {
                os_tid: 42,
                slot: 0x7f00_0000_1000,
                heap: Some(HeapContext {
                    current_offset: 12,
                    cookie_offset: 16,
                    cookie: 0xdead_beef
                })
            })
        );
        // Half a heap context, offsets beyond an object's first fields, a cookie wider
        // than 32 bits, and bytes after it are refused.
        assert!(ThreadSlot::decode(&body(&[42, 8, 12, 16])).is_err());
        assert!(ThreadSlot::decode(&body(&[42, 8, MAX_HEAP_OFFSET, 16, 1])).is_err());
        assert!(ThreadSlot::decode(&body(&[42, 8, 12, MAX_HEAP_OFFSET, 1])).is_err());
        assert!(ThreadSlot::decode(&body(&[42, 8, 12, 16, 1 << 32])).is_err());
        assert!(ThreadSlot::decode(&body(&[42, 8, 12, 16, 1, 0])).is_err());
    }

    #[test]
    fn jvm_end_has_an_empty_body() {
        let mut buf = [0u8; 128];
        let h = header(KIND_JVM_END, 1, 2, 0, 5, FLAG_END);
        let rec = Writer::new(&mut buf, &h).unwrap().finish();
        let r = split_record(rec).unwrap();
        assert_eq!(decode_body(&r, &mut Vec::new()), Ok(Body::JvmEnd));
        let mut w = Writer::new(&mut buf, &h).unwrap();
        w.string(b"garbage").unwrap();
        let rec = w.finish();
        let r = split_record(rec).unwrap();
        assert_eq!(decode_body(&r, &mut Vec::new()), Err(WireError::Trailing));
    }

    #[test]
    fn methods_and_hello_round_trip() {
        let mut buf = [0u8; 512];
        let mut w = Writer::new(&mut buf, &header(KIND_METHODS, 1, 0, 0, 1, 0)).unwrap();
        w.begin_entries().unwrap();
        let m = MethodDef {
            mid: 5,
            class: b"a.B",
            name: b"f",
            descriptor: b"(I)V",
            source_file: b"a/B.java",
        };
        w.method(&m).unwrap();
        let rec = w.finish();
        let r = split_record(rec).unwrap();
        let got: Vec<_> = MethodIter::new(r.body)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got, std::slice::from_ref(&m));
        let mut entries = Vec::new();
        assert_eq!(decode_body(&r, &mut entries), Ok(Body::Methods(vec![m])));

        let mut buf = [0u8; 512];
        let h = header(KIND_HELLO, 1, 9, 0, 0, FLAG_RESYNC | FLAG_ABSOLUTE);
        let mut w = Writer::new(&mut buf, &h).unwrap();
        for v in [1_700_000_000_000u64, 10_000_000, 1, 3] {
            w.varint(v).unwrap();
        }
        for s in [&b"17.0.9"[..], b"Main", b"0.1.0"] {
            w.string(s).unwrap();
        }
        let rec = w.finish();
        let hello = Hello::decode(split_record(rec).unwrap().body).unwrap();
        assert_eq!(hello.granularity, 10_000_000);
        assert_eq!(hello.main, b"Main");
        assert_eq!(
            decode_body(&split_record(rec).unwrap(), &mut entries),
            Ok(Body::Hello(hello))
        );
    }

    #[test]
    fn writer_never_overruns_and_drops_partial_entries() {
        let mut buf = [0u8; HEADER_LEN + 4 + 3];
        let mut w = Writer::new(&mut buf, &header(KIND_TREE, 1, 0, 1, 0, 0)).unwrap();
        w.string(b"").unwrap();
        w.begin_entries().unwrap();
        let e = TreeEntry {
            node: 300,
            definition: None,
            calls: 1,
            bytecodes: 1,
        };
        // 2 + 1 + 1 bytes do not fit in the 2 left.
        assert_eq!(w.tree_entry(&e), Err(Full));
        let rec = w.finish();
        let t = Tree::decode(split_record(rec).unwrap().body).unwrap();
        assert_eq!(t.entries.count(), 0);
    }

    #[test]
    fn bad_headers_are_rejected() {
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf, &header(KIND_TREE, 1, 0, 1, 0, 0)).unwrap();
        w.string(b"").unwrap();
        w.begin_entries().unwrap();
        let good = w.finish().to_vec();
        assert!(split_record(&good).is_ok());
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert_eq!(split_record(&bad).unwrap_err(), WireError::BadMagic);
        assert_eq!(
            split_record(&good[..good.len() - 1]).unwrap_err(),
            WireError::Length
        );
        let mut bad = good.clone();
        bad[24..32].copy_from_slice(&0u64.to_le_bytes()); // tree on the JVM stream
        assert_eq!(split_record(&bad).unwrap_err(), WireError::Stream);
        let mut bad = good.clone();
        bad[36] = FLAG_RESYNC as u8; // resync without absolute
        assert!(matches!(split_record(&bad), Err(WireError::Flags(_))));
        assert_eq!(split_record(&good[..10]).unwrap_err(), WireError::Truncated);
    }

    #[test]
    fn varints_are_bounded() {
        let ten = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Reader::new(&ten).varint(), Ok(u64::MAX));
        let overflow = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(Reader::new(&overflow).varint(), Err(WireError::Varint));
        let long = [0x80u8; 11];
        assert_eq!(Reader::new(&long).varint(), Err(WireError::Varint));
        assert_eq!(Reader::new(&[0x80]).varint(), Err(WireError::Varint));
    }

    #[test]
    fn hostile_bytes_never_panic() {
        // A small deterministic fuzz: every body decoder over pseudo-random bytes behind a
        // valid header.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..20_000u32 {
            let mut rec = [0u8; 96];
            let kind = [KIND_HELLO, KIND_METHODS, KIND_TREE, KIND_JVM_END][(round % 4) as usize];
            let flags = match kind {
                KIND_HELLO => FLAG_RESYNC | FLAG_ABSOLUTE,
                KIND_JVM_END => FLAG_END,
                _ => 0,
            };
            let stream = u64::from(kind == KIND_TREE);
            Writer::new(&mut rec, &header(kind, 1, 0, stream, 0, flags)).unwrap();
            let len = HEADER_LEN + (round as usize % 56);
            for b in rec[HEADER_LEN..len].iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            rec[8..12].copy_from_slice(&(len as u32).to_le_bytes());
            let Ok(r) = split_record(&rec[..len]) else {
                continue;
            };
            match kind {
                KIND_HELLO => {
                    let _ = Hello::decode(r.body);
                }
                KIND_METHODS => {
                    if let Ok(it) = MethodIter::new(r.body) {
                        it.for_each(|m| {
                            let _ = m;
                        });
                    }
                }
                KIND_TREE => {
                    if let Ok(t) = Tree::decode(r.body) {
                        t.entries.for_each(|e| {
                            let _ = e;
                        });
                    }
                }
                _ => {}
            }
        }
    }
}
