//! Writing records, for the agent's Rust side and the tests.
use super::format::{RecordHeader, HEADER_LEN, MAGIC, MAX_RECORD, MAX_STRING, VERSION};
use super::reader::{MethodDef, TreeEntry, Unmounted};

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

    /// Appends one [`super::KIND_UNMOUNTED`] entry, or nothing if it does not fit.
    pub fn unmounted(&mut self, u: &Unmounted) -> Result<(), Full> {
        let save = self.pos;
        let r = (|| {
            self.varint(u64::from(u.node))?;
            self.varint(u64::from(u.why))?;
            self.varint(u.ns)?;
            self.varint(u.periods)
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
