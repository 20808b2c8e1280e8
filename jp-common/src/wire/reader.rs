//! Reading records: every byte comes from a process jpd does not trust, so every read
//! is bounds-checked and every id range-checked before anything is decoded further.
use super::format::{
    RecordHeader, WireError, FLAG_ABSOLUTE, FLAG_END, FLAG_RESYNC, HEADER_LEN, KIND_HELLO,
    KIND_JVM_END, KIND_METHODS, KIND_THREAD, KIND_TREE, KIND_UNMOUNTED, KNOWN_FLAGS, MAGIC,
    MAX_NODE_ID, MAX_RECORD, MAX_STRING, MAX_UNMOUNTED_ENTRIES, STREAM_ENDED, VERSION,
};

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
    check_kind(&header)?;
    Ok(Record {
        header,
        body: &buf[HEADER_LEN..],
    })
}

/// The flags, `seq` and stream each kind allows.
fn check_kind(header: &RecordHeader) -> Result<(), WireError> {
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
        KIND_THREAD | KIND_UNMOUNTED => {
            if header.flags != 0 || header.seq != 0 {
                return Err(WireError::Flags(header.flags));
            }
        }
        k => return Err(WireError::Kind(k)),
    }
    let thread_kind = matches!(header.kind, KIND_TREE | KIND_THREAD | KIND_UNMOUNTED);
    let own_thread = matches!(header.kind, KIND_THREAD | KIND_UNMOUNTED);
    if jvm_stream == thread_kind || (own_thread && header.stream == STREAM_ENDED) {
        return Err(WireError::Stream);
    }
    Ok(())
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
    Unmounted(alloc::vec::Vec<Unmounted>),
}

/// One entry of [`KIND_UNMOUNTED`]: time a virtual thread spent off its carriers, since the
/// stream's last such record, for one (context, why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unmounted {
    /// The sender's node id of the context the thread was in when it left (0: its root).
    pub node: u32,
    /// One of [`super::format::unmounted`], below its `END`, not 0.
    pub why: u8,
    /// Unmount to mount, summed (ns).
    pub ns: u64,
    /// How many such periods (at least 1).
    pub periods: u64,
}

impl Unmounted {
    /// The entries of a [`KIND_UNMOUNTED`] body: `u32` count, then per entry varint node,
    /// varint why, varint ns, varint periods. Refused whole at the first bad entry.
    pub fn decode_each(body: &[u8], mut each: impl FnMut(Unmounted)) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        let n = r.u32()?;
        if n > MAX_UNMOUNTED_ENTRIES {
            return Err(WireError::Id);
        }
        for _ in 0..n {
            let node = r.varint_below(MAX_NODE_ID)? as u32;
            let why = r.varint_below(super::format::unmounted::END)? as u8;
            let ns = r.varint()?;
            let periods = r.varint()?;
            if why == 0 || periods == 0 {
                return Err(WireError::Id);
            }
            each(Unmounted {
                node,
                why,
                ns,
                periods,
            });
        }
        if !r.is_empty() {
            return Err(WireError::Trailing);
        }
        Ok(())
    }
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
        KIND_UNMOUNTED => {
            let mut v = alloc::vec::Vec::new();
            Unmounted::decode_each(rec.body, |u| v.push(u))?;
            Ok(Body::Unmounted(v))
        }
        KIND_JVM_END if rec.body.is_empty() => Ok(Body::JvmEnd),
        KIND_JVM_END => Err(WireError::Trailing),
        k => Err(WireError::Kind(k)),
    }
}
