//! The bytecode rewriter of the jp agent (see `docs/agent-contract.md`).
//!
//! Our own code rather than a class-file crate: an agent must never damage what it does
//! not touch, and the whole-class re-serializers available here silently corrupt some
//! classes (see `shared/docs/CLASSFILES.md`). So every byte of the input class is copied
//! as it is; the constant pool is only appended to, and only the `Code` attributes of
//! instrumented methods are rebuilt. A class we cannot parse gives an error (the caller
//! then loads it unchanged): no input may panic.
//!
//! One class (`class_rewrite`): its layout read (`class`), the methods that get a second
//! body chosen (`second`), every method's `Code` attribute rebuilt, the class written
//! around them.
//!
//! One method (`rewrite`, a file per phase), in order: decode the instructions (`insn`),
//! split them into blocks and compute the activation ticks (`blocks`); plan — in
//! constructors find where `this` is initialized (`initthis`), decide the catch-all, the
//! pending count and the runtime helpers; generate the position-independent injected
//! code; lay the code out widening branches until every offset fits; then emit the code,
//! the exception table (originals, then the catch-all), the debug tables, the type
//! annotations (`typeann`) and every stack map frame as a full frame (`frames`; a frame
//! after a widened conditional branch is inferred by `infer`).
//!
//! Left unchanged (and counted in [`ClassStats`]): methods whose code would exceed 65535
//! bytes, methods needing a frame `infer` cannot compute (none in the JDKs and jars
//! tested), classes older than 45.3 and the profiler's own `jp/rt/` classes.

mod blocks;
mod class;
mod class_rewrite;
mod cpool;
mod error;
mod frames;
mod infer;
mod initthis;
mod insn;
mod reader;
mod rewrite;
mod second;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
mod typeann;

pub use error::RewriteError;

use class::ClassInfo;
use class_rewrite::ClassRewrite;
use reader::u16_at;

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
    /// call with their context (no thread lookup on those calls; jp-agent/README-dev.md,
    /// "Passed contexts"). Only for a class being loaded: a retransformation may not add
    /// methods.
    pub pass_context: bool,
    /// Enter methods through `Rt.enterOutOfLine`, which C2 never inlines, rather than
    /// `Rt.enter`: on JDK 17 C2 inlines `enter` only in the JVMs where its own compile came
    /// out small, which run no faster and spend 2-4 times as long compiling (README-dev.md,
    /// "C2's two ways with the entry").
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

/// The blocks of every method with code, without rewriting anything.
pub fn describe_blocks(bytes: &[u8], bba: Bba) -> Result<Vec<MethodBlocks>, RewriteError> {
    let class = ClassInfo::parse(bytes)?;
    let mut out = Vec::new();
    let mut s = rewrite::Scratch::default();
    for m in &class.methods {
        let Some(body) = m.code_body(bytes) else {
            continue;
        };
        let name = class.cp.utf8(m.name)?.into_owned();
        let descriptor = class.cp.utf8(m.desc)?.into_owned();
        let label = || format!("{}.{name}{descriptor}", class.name);
        let (entry_ticks, blocks) = rewrite::describe(body, &class.cp, bba, &label, &mut s)?;
        out.push(MethodBlocks {
            name,
            descriptor,
            entry_ticks,
            blocks,
        });
    }
    Ok(out)
}

/// Rewrites one class file. `Err` means the class must be loaded unchanged.
pub fn rewrite_class(
    bytes: &[u8],
    opts: &RewriteOptions,
    ids: &mut dyn MethodIds,
) -> Result<Rewritten, RewriteError> {
    rewrite(bytes, opts, ids, false)
}

/// Test only: like [`rewrite_class`], but every 16-bit branch is widened as if it were
/// out of reach (goto_w, inverted conditional over a goto_w with an inferred frame).
#[doc(hidden)]
pub fn rewrite_class_widening_all(
    bytes: &[u8],
    opts: &RewriteOptions,
    ids: &mut dyn MethodIds,
) -> Result<Rewritten, RewriteError> {
    rewrite(bytes, opts, ids, true)
}

fn rewrite(
    bytes: &[u8],
    opts: &RewriteOptions,
    ids: &mut dyn MethodIds,
    force_wide: bool,
) -> Result<Rewritten, RewriteError> {
    let class = ClassInfo::parse(bytes)?;
    if class.major == 45 && u16_at(bytes, 4)? < 3 {
        // Before 45.3, Code attributes have 1-byte max_stack/max_locals and 2-byte lengths.
        return Ok(Rewritten::Unchanged {
            reason: "class file older than 45.3".into(),
        });
    }
    if class.name.starts_with("jp/rt/") {
        return Ok(Rewritten::Unchanged {
            reason: "profiler runtime class".into(),
        });
    }
    let c = ClassRewrite {
        bytes,
        opts,
        class: &class,
        force_wide,
    };
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => class_rewrite::rewrite_methods(&c, ids, &mut s),
        Err(_) => class_rewrite::rewrite_methods(&c, ids, &mut rewrite::Scratch::default()),
    })
}

thread_local! {
    /// Buffers reused by every rewrite on this thread (no allocation per instruction, and
    /// few per class).
    static SCRATCH: std::cell::RefCell<rewrite::Scratch> = std::cell::RefCell::new(rewrite::Scratch::default());
}
