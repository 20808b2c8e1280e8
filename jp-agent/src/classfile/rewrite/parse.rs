//! Phase 1, parse: the parts of a `Code` attribute, its instructions decoded and its
//! exception table resolved to instruction indices.

use super::super::cpool::ConstPool;
use super::super::error::RewriteError;
use super::super::insn::{self, Code, Insn};
use super::super::reader::Reader;

/// The parts of one `Code` attribute body (everything after attribute_length).
pub(super) struct CodeAttr<'a> {
    pub body: &'a [u8],
    pub max_stack: u32,
    pub max_locals: u32,
    pub code: &'a [u8],
    /// The exception table, 8 bytes an entry.
    pub exc: &'a [u8],
    /// Where the attributes start in `body`, and how many there are.
    attrs_start: usize,
    n_attrs: u16,
}

impl<'a> CodeAttr<'a> {
    pub fn parse(body: &'a [u8], label: &dyn Fn() -> String) -> Result<Self, RewriteError> {
        let bad = |what: &str| RewriteError::BadCode {
            method: label(),
            what: what.to_string(),
        };
        let mut r = Reader::new(body, 0);
        let max_stack = r.u16()? as u32;
        let max_locals = r.u16()? as u32;
        let code_len = r.u32()? as usize;
        if code_len == 0 || code_len > 65535 {
            return Err(bad("code length 0 or over 65535"));
        }
        let code = r.bytes(code_len)?;
        let n_exc = r.u16()? as usize;
        let exc = r.bytes(8 * n_exc)?;
        let n_attrs = r.u16()?;
        let attrs_start = r.pos;
        for _ in 0..n_attrs {
            r.skip(2)?;
            let len = r.u32()? as usize;
            r.skip(len)?;
        }
        if r.pos != body.len() {
            return Err(bad("Code attribute length mismatch"));
        }
        Ok(CodeAttr {
            body,
            max_stack,
            max_locals,
            code,
            exc,
            attrs_start,
            n_attrs,
        })
    }

    /// Whether the added stack slots and locals would overflow their u16 counts.
    pub fn too_large_to_grow(&self) -> bool {
        self.max_stack + 3 > 0xFFFF || self.max_locals + 2 > 0xFFFF
    }

    /// The catch_type of exception table entry `k`.
    pub fn catch_type(&self, k: usize) -> &'a [u8] {
        &self.exc[8 * k + 6..8 * k + 8]
    }

    /// The attributes of the `Code` attribute: (name index, data).
    pub fn attributes(&self) -> Attributes<'a> {
        Attributes {
            r: Reader::new(self.body, self.attrs_start),
            left: self.n_attrs,
        }
    }
}

/// Iterates over the attributes of a `Code` attribute.
pub(super) struct Attributes<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for Attributes<'a> {
    type Item = Result<(u16, &'a [u8]), RewriteError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut read = || -> Result<(u16, &'a [u8]), RewriteError> {
            let name = self.r.u16()?;
            let len = self.r.u32()? as usize;
            Ok((name, self.r.bytes(len)?))
        };
        Some(read())
    }
}

/// The instructions of one method (reused buffers).
#[derive(Default)]
pub(super) struct Decoded {
    pub insns: Vec<Insn>,
    /// Branch targets as instruction indices (`Insn::t0`, `Insn::tn` index into it).
    pub targets: Vec<u32>,
    /// Per original byte offset: the instruction starting there (u32::MAX: none), and
    /// one more entry for the code's end.
    pub map: Vec<u32>,
    /// The exception table as (start, end, handler) instruction indices.
    pub handlers: Vec<(u32, u32, u32)>,
}

impl Decoded {
    /// Decodes `code` and resolves the exception table `exc`.
    pub fn decode(
        &mut self,
        code: &[u8],
        exc: &[u8],
        label: &dyn Fn() -> String,
    ) -> Result<(), RewriteError> {
        insn::decode(
            code,
            label,
            &mut self.insns,
            &mut self.targets,
            &mut self.map,
        )?;
        self.resolve_handlers(exc, label)
    }

    /// The decoded code as the analyses read it.
    pub fn view<'a>(&'a self, bytes: &'a [u8], cp: &'a ConstPool<'a>) -> Code<'a> {
        Code {
            bytes,
            insns: &self.insns,
            targets: &self.targets,
            handlers: &self.handlers,
            cp,
        }
    }

    /// Instruction index of an original offset (`allow_end`: the code's end is allowed).
    fn index_of(
        &self,
        off: usize,
        allow_end: bool,
        label: &dyn Fn() -> String,
    ) -> Result<u32, RewriteError> {
        let n = self.insns.len();
        match self.map.get(off) {
            Some(&i) if i != u32::MAX && (allow_end || (i as usize) < n) => Ok(i),
            _ => Err(RewriteError::BadCode {
                method: label(),
                what: format!("offset {off} is not an instruction"),
            }),
        }
    }

    fn resolve_handlers(
        &mut self,
        exc: &[u8],
        label: &dyn Fn() -> String,
    ) -> Result<(), RewriteError> {
        self.handlers.clear();
        for e in exc.chunks_exact(8) {
            let at = |k: usize| u16::from_be_bytes([e[k], e[k + 1]]) as usize;
            let sp = self.index_of(at(0), false, label)?;
            let ep = self.index_of(at(2), true, label)?;
            let hp = self.index_of(at(4), false, label)?;
            if sp >= ep {
                return Err(RewriteError::BadCode {
                    method: label(),
                    what: "empty exception range".into(),
                });
            }
            self.handlers.push((sp, ep, hp));
        }
        Ok(())
    }
}
