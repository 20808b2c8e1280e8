//! Why a class could not be rewritten. The caller loads such a class unchanged.

/// A class file the rewriter cannot parse or rewrite.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RewriteError {
    #[error("class file truncated: needed {needed} bytes at offset {offset}")]
    Truncated { offset: usize, needed: usize },
    #[error("not a class file (magic {0:#010x})")]
    BadMagic(u32),
    #[error("bad constant pool index {index} (pool has {count} entries)")]
    BadCpIndex { index: u16, count: u16 },
    #[error("constant pool entry {index} has tag {tag}, expected {expected}")]
    BadCpTag {
        index: u16,
        tag: u8,
        expected: &'static str,
    },
    #[error("unknown constant pool tag {tag} at entry {index}")]
    UnknownCpTag { index: u16, tag: u8 },
    #[error("constant pool full: cannot append the profiler's entries")]
    CpFull,
    #[error("bad modified-UTF-8 in constant pool entry {0}")]
    BadUtf8(u16),
    #[error("method {method}: unknown opcode {opcode:#04x} at offset {offset}")]
    UnknownOpcode {
        method: String,
        opcode: u8,
        offset: u32,
    },
    #[error("method {method}: {what}")]
    BadCode { method: String, what: String },
    #[error("bad descriptor {0:?}")]
    BadDescriptor(String),
    #[error("{0}")]
    Malformed(String),
}
