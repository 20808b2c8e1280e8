//! The rewriter's public types: its options, the method-id table it asks, and what it
//! reports.

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
    /// Give the class's static and private methods a second body that its own call sites
    /// call with their context (no thread lookup on those calls; docs/agent-design.md,
    /// "Second bodies: passed contexts"). Only for a class being loaded: a retransformation may not add
    /// methods.
    pub pass_context: bool,
    /// Enter methods through `Rt.enterOutOfLine`, which C2 never inlines, rather than
    /// `Rt.enter`: on JDK 17 C2 inlines `enter` only in the JVMs where its own compile came
    /// out small, which run no faster and spend 2-4 times as long compiling (measured in
    /// docs/journal/c2-inlining-of-the-entry.md).
    pub out_of_line_entry: bool,
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
    Unchanged {
        reason: String,
    },
    Changed {
        bytes: Vec<u8>,
        stats: ClassStats,
    },
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
    /// Empty `finalize()V` methods left unchanged (instrumenting one makes its class finalizable).
    pub methods_empty_finalizers: u32,
    /// Type annotation attributes of `Code` that could not be read (dropped).
    pub type_annotations_dropped: u32,
    /// Type annotation attributes of `Code` whose offsets were moved to the new code.
    pub type_annotations_remapped: u32,
    /// Bytes of original code and of rewritten code of the instrumented methods (second
    /// bodies included in the latter).
    pub code_bytes_before: u64,
    pub code_bytes_after: u64,
    /// Second bodies added (methods called with their caller's context).
    pub methods_passed: u32,
    /// Call sites that call a second body, passing their context.
    pub call_sites_passed: u32,
}

/// Block structure of one method, as the rewriter sees it (tests and diagnostics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodBlocks {
    pub name: String,
    pub descriptor: String,
    /// Activation ticks passed to `Rt.enter`.
    pub entry_ticks: u32,
    pub blocks: Vec<BlockInfo>,
}

/// One basic block of the original code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// Original byte offset of the first instruction.
    pub offset: u32,
    /// Original instructions in the block (the `n` of `Rt.count`).
    pub instructions: u32,
    pub loop_head: bool,
    pub handler: bool,
    /// Ticks of `Rt.tick` (meaningful at loop heads and handlers only).
    pub ticks: u32,
}
