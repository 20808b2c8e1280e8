//! Bounds-checked big-endian reads: every read of class-file bytes goes through here,
//! so malformed input becomes `RewriteError::Truncated`, never a panic.

use super::error::RewriteError;

pub(crate) fn u8_at(data: &[u8], off: usize) -> Result<u8, RewriteError> {
    data.get(off).copied().ok_or(RewriteError::Truncated {
        offset: off,
        needed: 1,
    })
}

pub(crate) fn u16_at(data: &[u8], off: usize) -> Result<u16, RewriteError> {
    match data.get(off..off.wrapping_add(2)) {
        Some(b) if off.checked_add(2).is_some() => Ok(u16::from_be_bytes([b[0], b[1]])),
        _ => Err(RewriteError::Truncated {
            offset: off,
            needed: 2,
        }),
    }
}

pub(crate) fn u32_at(data: &[u8], off: usize) -> Result<u32, RewriteError> {
    match data.get(off..off.wrapping_add(4)) {
        Some(b) if off.checked_add(4).is_some() => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        _ => Err(RewriteError::Truncated {
            offset: off,
            needed: 4,
        }),
    }
}

pub(crate) fn i32_at(data: &[u8], off: usize) -> Result<i32, RewriteError> {
    u32_at(data, off).map(|v| v as i32)
}

pub(crate) fn slice_at(data: &[u8], off: usize, len: usize) -> Result<&[u8], RewriteError> {
    off.checked_add(len)
        .and_then(|end| data.get(off..end))
        .ok_or(RewriteError::Truncated {
            offset: off,
            needed: len,
        })
}

/// A cursor over a byte slice.
pub(crate) struct Reader<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], pos: usize) -> Self {
        Reader { data, pos }
    }
    pub fn u8(&mut self) -> Result<u8, RewriteError> {
        let v = u8_at(self.data, self.pos)?;
        self.pos += 1;
        Ok(v)
    }
    pub fn u16(&mut self) -> Result<u16, RewriteError> {
        let v = u16_at(self.data, self.pos)?;
        self.pos += 2;
        Ok(v)
    }
    pub fn u32(&mut self) -> Result<u32, RewriteError> {
        let v = u32_at(self.data, self.pos)?;
        self.pos += 4;
        Ok(v)
    }
    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8], RewriteError> {
        let v = slice_at(self.data, self.pos, len)?;
        self.pos += len;
        Ok(v)
    }
    pub fn skip(&mut self, len: usize) -> Result<(), RewriteError> {
        self.bytes(len).map(|_| ())
    }
}

pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
