//! The bytecode rewriter of the jp agent (see `notes/agent-contract.md`).
//!
//! Every byte of the input class is copied as it is; the constant pool is only appended
//! to, and only the `Code` attributes of instrumented methods are rebuilt. A class we cannot
//! parse gives an error (the caller then loads it unchanged): no input may panic.

mod error;

pub use error::RewriteError;

/// Which basic-block algorithm decides where counts are updated (JP's two BBAs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bba {
    /// Only jumps, branches, returns, throws and subroutine returns end a block.
    #[default]
    Default,
    /// Additionally every instruction that may throw ends its block.
    Precise,
}

/// Options of one rewrite.
#[derive(Debug, Clone, Copy, Default)]
pub struct RewriteOptions {
    pub bba: Bba,
}

/// The agent's method table: one id per method, embedded as a constant in its code.
pub trait MethodIds {
    fn method_id(
        &mut self,
        class: &str,
        name: &str,
        descriptor: &str,
        source_file: Option<&str>,
    ) -> u32;
}

/// What the rewriter did with a class.
#[derive(Debug)]
pub enum Rewritten {
    /// Nothing was instrumented (no method with code, or every one was skipped).
    Unchanged { reason: String },
    Changed { bytes: Vec<u8>, stats: ClassStats },
}

/// Counts about one rewritten class.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClassStats {
    pub methods_instrumented: u32,
    /// Left unchanged: the new code would exceed 65535 bytes (or locals/stack overflow).
    pub methods_too_large: u32,
    /// Left unchanged: a conditional branch would need widening in a class with stack map
    /// frames (that needs a new frame we cannot infer without a type checker).
    pub methods_unwidenable: u32,
    /// `<init>` methods whose catch-all handler was omitted (uninitializedThis undecidable).
    pub methods_without_catch_all: u32,
    pub type_annotations_dropped: u32,
    /// Bytes of original code and of rewritten code of the instrumented methods.
    pub code_bytes_before: u64,
    pub code_bytes_after: u64,
}

/// Rewrites one class file. `Err` means the class must be loaded unchanged.
pub fn rewrite_class(
    bytes: &[u8],
    opts: &RewriteOptions,
    ids: &mut dyn MethodIds,
) -> Result<Rewritten, RewriteError> {
    let _ = (bytes, opts, ids);
    Err(RewriteError::Malformed("rewriter not implemented yet".into()))
}
