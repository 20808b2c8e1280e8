//! The method being rewritten: what the class gives each method's rewrite
//! ([`MethodInput`]), and the method once parsed and split into blocks ([`Method`]), which
//! every phase after parsing reads.

use super::super::api::Bba;
use super::super::blocks::BlockMap;
use super::super::cpool::ConstPool;
use super::super::frames::Signature;
use super::super::insn::Code;
use super::parse::CodeAttr;

/// A method of the class with a second body `NAME$jp(ARGS, jp/rt/Node)`, which the class's
/// own call sites to it call instead, passing their context.
pub(crate) struct Passed {
    pub name: Vec<u8>,
    pub desc: Vec<u8>,
    pub is_static: bool,
    /// The Methodref of the second body.
    pub methodref: u16,
}

/// The class-level facts a method rewrite needs.
pub(crate) struct MethodInput<'a> {
    pub cp: &'a ConstPool<'a>,
    pub major: u16,
    /// The method's descriptor and what its implicit first frame depends on.
    pub sig: Signature<'a>,
    pub label: &'a dyn Fn() -> String,
    pub bba: Bba,
    /// Enter through `Rt.enterOutOfLine` (see `RewriteOptions`).
    pub out_of_line_entry: bool,
    pub mid: u32,
    /// The second body: Some(the local slot of the caller's context, right after the
    /// arguments); None for the method's own body.
    pub second: Option<u32>,
    /// The class's methods that have a second body (their call sites pass the context).
    pub passed: &'a [Passed],
    /// The class's name (the owner of the call sites that may pass the context).
    pub class_name: &'a [u8],
    /// Test only: widen every branch (exercises goto_w and the inferred frames everywhere).
    pub force_wide: bool,
}

/// The parsed and analysed method, as the phases after parsing read it.
pub(super) struct Method<'a> {
    pub input: &'a MethodInput<'a>,
    pub attr: &'a CodeAttr<'a>,
    pub code: Code<'a>,
    /// Per original offset: the instruction there (see [`Decoded::map`]).
    pub map: &'a [u32],
    pub blocks: &'a BlockMap,
    /// Activation ticks passed to `Rt.enter`.
    pub entry_ticks: u32,
}

impl Method<'_> {
    /// The instruction starting at an original offset, if one does.
    pub fn insn_at(&self, off: usize) -> Option<usize> {
        match self.map.get(off) {
            Some(&i) if (i as usize) < self.code.insns.len() => Some(i as usize),
            _ => None,
        }
    }
}
