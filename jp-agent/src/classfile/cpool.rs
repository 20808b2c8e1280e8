//! The constant pool: read access to the original entries, and an appender for the
//! entries the injected code needs (the original entries are never moved or changed).

use std::borrow::Cow;

use super::error::RewriteError;
use super::reader::{u16_at, Reader};

pub(crate) const UTF8: u8 = 1;
pub(crate) const INTEGER: u8 = 3;
pub(crate) const CLASS: u8 = 7;
pub(crate) const FIELDREF: u8 = 9;
pub(crate) const METHODREF: u8 = 10;
pub(crate) const INTERFACE_METHODREF: u8 = 11;
pub(crate) const NAME_AND_TYPE: u8 = 12;
pub(crate) const METHOD_HANDLE: u8 = 15;
pub(crate) const METHOD_TYPE: u8 = 16;
pub(crate) const DYNAMIC: u8 = 17;
pub(crate) const INVOKE_DYNAMIC: u8 = 18;

/// The original constant pool of a class: tag and byte offset (of the entry's body,
/// just after the tag) of every entry.
pub(crate) struct ConstPool<'a> {
    data: &'a [u8],
    /// (tag, body offset); index 0 and the second slot of long/double have tag 0.
    entries: Vec<(u8, u32)>,
    /// Byte offset just past the pool.
    pub end: usize,
}

impl<'a> ConstPool<'a> {
    /// Parses the pool that starts at byte 8 of `data` (its count at 8).
    pub fn parse(data: &'a [u8]) -> Result<Self, RewriteError> {
        let mut r = Reader::new(data, 8);
        let count = r.u16()?;
        if count == 0 {
            return Err(RewriteError::Malformed("constant pool count 0".into()));
        }
        let mut entries = Vec::with_capacity(count as usize);
        entries.push((0u8, 0u32));
        let mut i = 1u32;
        while i < count as u32 {
            let tag = r.u8()?;
            let body = r.pos as u32;
            let len = match tag {
                UTF8 => r.u16()? as usize,
                3 | 4 => 4,
                5 | 6 => 8,
                CLASS | 8 | METHOD_TYPE | 19 | 20 => 2,
                FIELDREF | METHODREF | INTERFACE_METHODREF | NAME_AND_TYPE | DYNAMIC
                | INVOKE_DYNAMIC => 4,
                METHOD_HANDLE => 3,
                _ => {
                    return Err(RewriteError::UnknownCpTag {
                        index: i as u16,
                        tag,
                    })
                }
            };
            r.skip(len)?;
            entries.push((tag, body));
            if tag == 5 || tag == 6 {
                entries.push((0, 0));
                i += 1;
            }
            i += 1;
        }
        if entries.len() > count as usize {
            return Err(RewriteError::Malformed(
                "long/double entry overflows the constant pool".into(),
            ));
        }
        Ok(ConstPool {
            data,
            entries,
            end: r.pos,
        })
    }

    pub fn count(&self) -> u16 {
        self.entries.len() as u16
    }

    pub fn tag(&self, index: u16) -> Result<u8, RewriteError> {
        self.entries
            .get(index as usize)
            .filter(|e| e.0 != 0)
            .map(|e| e.0)
            .ok_or_else(|| RewriteError::BadCpIndex {
                index,
                count: self.count(),
            })
    }

    fn body(&self, index: u16, expected: u8, what: &'static str) -> Result<usize, RewriteError> {
        let tag = self.tag(index)?;
        if tag != expected {
            return Err(RewriteError::BadCpTag {
                index,
                tag,
                expected: what,
            });
        }
        Ok(self.entries[index as usize].1 as usize)
    }

    /// Raw (modified UTF-8) bytes of a Utf8 entry.
    pub fn utf8_bytes(&self, index: u16) -> Result<&'a [u8], RewriteError> {
        let body = self.body(index, UTF8, "Utf8")?;
        let len = u16_at(self.data, body)? as usize;
        super::reader::slice_at(self.data, body + 2, len)
    }

    pub fn utf8(&self, index: u16) -> Result<Cow<'a, str>, RewriteError> {
        decode_mutf8(self.utf8_bytes(index)?).ok_or(RewriteError::BadUtf8(index))
    }

    /// (class index, name, descriptor) of a Fieldref/Methodref/InterfaceMethodref, or
    /// (bootstrap index, name, descriptor) of an InvokeDynamic/Dynamic entry.
    pub fn member(&self, index: u16) -> Result<(u16, &'a [u8], &'a [u8]), RewriteError> {
        let tag = self.tag(index)?;
        if !matches!(
            tag,
            FIELDREF | METHODREF | INTERFACE_METHODREF | DYNAMIC | INVOKE_DYNAMIC
        ) {
            return Err(RewriteError::BadCpTag {
                index,
                tag,
                expected: "member reference",
            });
        }
        let body = self.entries[index as usize].1 as usize;
        let owner = u16_at(self.data, body)?;
        let nat = u16_at(self.data, body + 2)?;
        let nbody = self.body(nat, NAME_AND_TYPE, "NameAndType")?;
        let name = self.utf8_bytes(u16_at(self.data, nbody)?)?;
        let desc = self.utf8_bytes(u16_at(self.data, nbody + 2)?)?;
        Ok((owner, name, desc))
    }

    /// Index of an existing Utf8 entry equal to `s`.
    pub fn find_utf8(&self, s: &[u8]) -> Option<u16> {
        (1..self.entries.len()).find_map(|i| {
            (self.entries[i].0 == UTF8 && self.utf8_bytes(i as u16).ok() == Some(s))
                .then_some(i as u16)
        })
    }
}

/// Decodes modified UTF-8 (NUL as C0 80, supplementary characters as surrogate pairs).
pub(crate) fn decode_mutf8(b: &[u8]) -> Option<Cow<'_, str>> {
    if let Ok(s) = std::str::from_utf8(b) {
        return Some(Cow::Borrowed(s));
    }
    let mut units: Vec<u16> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as u16;
        if c & 0x80 == 0 {
            units.push(c);
            i += 1;
        } else if c & 0xE0 == 0xC0 {
            let c2 = *b.get(i + 1)? as u16;
            units.push(((c & 0x1F) << 6) | (c2 & 0x3F));
            i += 2;
        } else if c & 0xF0 == 0xE0 {
            let c2 = *b.get(i + 1)? as u16;
            let c3 = *b.get(i + 2)? as u16;
            units.push(((c & 0x0F) << 12) | ((c2 & 0x3F) << 6) | (c3 & 0x3F));
            i += 3;
        } else {
            return None;
        }
    }
    Some(Cow::Owned(String::from_utf16_lossy(&units)))
}

/// Entries appended after the original pool, deduplicated among themselves.
pub(crate) struct CpAppender {
    next: u32,
    pub bytes: Vec<u8>,
    utf8s: Vec<(Vec<u8>, u16)>,
    classes: Vec<(Vec<u8>, u16)>,
    ints: Vec<(i32, u16)>,
    methods: Vec<(&'static str, u16)>,
    /// Methodrefs to the class's own second bodies: (class, name, descriptor) → index.
    members: Vec<(u16, Vec<u8>, Vec<u8>, u16)>,
    /// The Utf8 "StackMapTable" once looked up (original or appended).
    pub stack_map_table_name: Option<u16>,
}

impl CpAppender {
    pub fn new(original_count: u16) -> Self {
        CpAppender {
            next: original_count as u32,
            bytes: Vec::with_capacity(256),
            utf8s: Vec::new(),
            classes: Vec::new(),
            ints: Vec::new(),
            methods: Vec::new(),
            members: Vec::new(),
            stack_map_table_name: None,
        }
    }

    /// The constant pool count of the new class.
    pub fn count(&self) -> u16 {
        self.next as u16
    }

    fn alloc(&mut self) -> Result<u16, RewriteError> {
        if self.next >= 0xFFFF {
            return Err(RewriteError::CpFull);
        }
        let i = self.next as u16;
        self.next += 1;
        Ok(i)
    }

    pub fn utf8(&mut self, s: &[u8]) -> Result<u16, RewriteError> {
        if let Some(&(_, i)) = self.utf8s.iter().find(|(v, _)| v == s) {
            return Ok(i);
        }
        if s.len() > 0xFFFF {
            return Err(RewriteError::Malformed(
                "name too long for the constant pool".into(),
            ));
        }
        let i = self.alloc()?;
        self.bytes.push(UTF8);
        self.bytes
            .extend_from_slice(&(s.len() as u16).to_be_bytes());
        self.bytes.extend_from_slice(s);
        self.utf8s.push((s.to_vec(), i));
        Ok(i)
    }

    pub fn class(&mut self, name: &[u8]) -> Result<u16, RewriteError> {
        if let Some(&(_, i)) = self.classes.iter().find(|(v, _)| v == name) {
            return Ok(i);
        }
        let u = self.utf8(name)?;
        let i = self.alloc()?;
        self.bytes.push(CLASS);
        self.bytes.extend_from_slice(&u.to_be_bytes());
        self.classes.push((name.to_vec(), i));
        Ok(i)
    }

    pub fn int(&mut self, v: i32) -> Result<u16, RewriteError> {
        if let Some(&(_, i)) = self.ints.iter().find(|(x, _)| *x == v) {
            return Ok(i);
        }
        let i = self.alloc()?;
        self.bytes.push(INTEGER);
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self.ints.push((v, i));
        Ok(i)
    }

    /// The name of an appended Class entry.
    pub fn class_name(&self, index: u16) -> Option<&[u8]> {
        self.classes
            .iter()
            .find(|(_, i)| *i == index)
            .map(|(n, _)| n.as_slice())
    }

    /// A Methodref `class.name:desc`, `class` an index of the original pool.
    pub fn method_ref(
        &mut self,
        class: u16,
        name: &[u8],
        desc: &[u8],
    ) -> Result<u16, RewriteError> {
        if let Some(&(.., i)) = self
            .members
            .iter()
            .find(|(c, n, d, _)| *c == class && n == name && d == desc)
        {
            return Ok(i);
        }
        let n = self.utf8(name)?;
        let d = self.utf8(desc)?;
        let nat = self.alloc()?;
        self.bytes.push(NAME_AND_TYPE);
        self.bytes.extend_from_slice(&n.to_be_bytes());
        self.bytes.extend_from_slice(&d.to_be_bytes());
        let i = self.alloc()?;
        self.bytes.push(METHODREF);
        self.bytes.extend_from_slice(&class.to_be_bytes());
        self.bytes.extend_from_slice(&nat.to_be_bytes());
        self.members.push((class, name.to_vec(), desc.to_vec(), i));
        Ok(i)
    }

    /// A Methodref `jp/rt/Rt.name:desc`.
    pub fn rt_method(
        &mut self,
        name: &'static str,
        desc: &'static str,
    ) -> Result<u16, RewriteError> {
        if let Some(&(_, i)) = self.methods.iter().find(|(n, _)| *n == name) {
            return Ok(i);
        }
        let class = self.class(b"jp/rt/Rt")?;
        let i = self.method_ref(class, name.as_bytes(), desc.as_bytes())?;
        self.methods.push((name, i));
        Ok(i)
    }
}

impl ConstPool<'_> {
    /// The Utf8 index holding a Class entry's name.
    pub fn class_name_index(&self, index: u16) -> Result<u16, RewriteError> {
        let body = self.body(index, CLASS, "Class")?;
        u16_at(self.data, body)
    }
}
