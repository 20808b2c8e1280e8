//! The bytecode rewriter of the jp agent (what it inserts, and the runtime helper each
//! insertion calls: `docs/agent-design.md`, "The rewrite" and "The runtime's helpers").
//!
//! Our own code rather than a class-file crate: an agent must never damage what it does
//! not touch, and the whole-class re-serializers available as Rust crates were measured
//! to corrupt some classes silently. So every byte of the input class is copied
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

mod api;
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

pub use api::{Bba, BlockInfo, ClassStats, MethodBlocks, MethodIds, RewriteOptions, Rewritten};
pub use error::RewriteError;

pub(crate) use class::name_and_supertypes;
use class::ClassInfo;
use class_rewrite::ClassRewrite;
use reader::u16_at;

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
