//! The bytecode rewriter of the jp agent (see `docs/agent-contract.md`).
//!
//! Our own code rather than a class-file crate: an agent must never damage what it does
//! not touch, and the whole-class re-serializers available here silently corrupt some
//! classes (see `shared/docs/CLASSFILES.md`). So every byte of the input class is copied
//! as it is; the constant pool is only appended to, and only the `Code` attributes of
//! instrumented methods are rebuilt. A class we cannot parse gives an error (the caller
//! then loads it unchanged): no input may panic.
//!
//! One method, in order: decode the instructions (`insn`), split them into blocks and
//! compute the activation ticks (`blocks`), in constructors find where `this` is
//! initialized (`initthis`), generate the position-independent injected code, lay the
//! code out widening branches until every offset fits, then emit the code, the exception
//! table (originals, then the catch-all), the debug tables, the type annotations
//! (`typeann`) and every stack map frame as a full frame (`frames`; a frame after a
//! widened conditional branch is inferred by `infer`).
//!
//! Left unchanged (and counted in [`ClassStats`]): methods whose code would exceed 65535
//! bytes, methods needing a frame `infer` cannot compute (none in the JDKs and jars
//! tested), classes older than 45.3 and the profiler's own `jp/rt/` classes.

mod blocks;
mod cpool;
mod error;
mod frames;
mod infer;
mod initthis;
mod insn;
mod method;
mod reader;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
mod typeann;

pub use error::RewriteError;

use cpool::{ConstPool, CpAppender};
use reader::{put_u16, u16_at, Reader};

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
    /// Bytes of original code and of rewritten code of the instrumented methods.
    pub code_bytes_before: u64,
    pub code_bytes_after: u64,
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
    let mut s = method::Scratch::default();
    for m in &class.methods {
        let Some((start, end)) = m.code else { continue };
        let name = class.cp.utf8(m.name)?.into_owned();
        let descriptor = class.cp.utf8(m.desc)?.into_owned();
        let label = || format!("{}.{name}{descriptor}", class.name);
        let (entry_ticks, blocks) =
            method::describe(&bytes[start + 6..end], &class.cp, bba, &label, &mut s)?;
        out.push(MethodBlocks {
            name,
            descriptor,
            entry_ticks,
            blocks,
        });
    }
    Ok(out)
}

struct MethodInfo {
    access: u16,
    name: u16,
    desc: u16,
    /// Byte range of the whole Code attribute (header included).
    code: Option<(usize, usize)>,
}

struct ClassInfo<'a> {
    cp: ConstPool<'a>,
    major: u16,
    this_class: u16,
    name: String,
    methods: Vec<MethodInfo>,
    source_file: Option<String>,
}

impl<'a> ClassInfo<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Self, RewriteError> {
        let magic = reader::u32_at(bytes, 0)?;
        if magic != 0xCAFE_BABE {
            return Err(RewriteError::BadMagic(magic));
        }
        let major = u16_at(bytes, 6)?;
        let cp = ConstPool::parse(bytes)?;
        let mut r = Reader::new(bytes, cp.end);
        let _access = r.u16()?;
        let this_class = r.u16()?;
        let name = cp.utf8(cp.class_name_index(this_class)?)?.into_owned();
        let _super = r.u16()?;
        let n_if = r.u16()? as usize;
        r.skip(2 * n_if)?;
        let n_fields = r.u16()?;
        for _ in 0..n_fields {
            r.skip(6)?;
            skip_attributes(&mut r)?;
        }
        let n_methods = r.u16()?;
        let mut methods = Vec::with_capacity(n_methods as usize);
        for _ in 0..n_methods {
            let access = r.u16()?;
            let name = r.u16()?;
            let desc = r.u16()?;
            let n_attrs = r.u16()?;
            let mut code = None;
            for _ in 0..n_attrs {
                let start = r.pos;
                let an = r.u16()?;
                let len = r.u32()? as usize;
                r.skip(len)?;
                if cp.utf8_bytes(an)? == b"Code" {
                    if code.is_some() {
                        return Err(RewriteError::Malformed(
                            "method with two Code attributes".into(),
                        ));
                    }
                    code = Some((start, r.pos));
                }
            }
            if access & (ACC_NATIVE | ACC_ABSTRACT) != 0 {
                code = None;
            }
            methods.push(MethodInfo {
                access,
                name,
                desc,
                code,
            });
        }
        let n_attrs = r.u16()?;
        let mut source_file = None;
        for _ in 0..n_attrs {
            let an = r.u16()?;
            let len = r.u32()? as usize;
            let data = r.bytes(len)?;
            if cp.utf8_bytes(an)? == b"SourceFile" && len == 2 {
                source_file = Some(cp.utf8(u16_at(data, 0)?)?.into_owned());
            }
        }
        if r.pos != bytes.len() {
            return Err(RewriteError::Malformed(format!(
                "{} bytes after the end of the class",
                bytes.len() - r.pos
            )));
        }
        Ok(ClassInfo {
            cp,
            major,
            this_class,
            name,
            methods,
            source_file,
        })
    }
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
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => rewrite_methods(bytes, opts, ids, class, &mut s, force_wide),
        Err(_) => rewrite_methods(
            bytes,
            opts,
            ids,
            class,
            &mut method::Scratch::default(),
            force_wide,
        ),
    })
}

thread_local! {
    /// Buffers reused by every rewrite on this thread (no allocation per instruction, and
    /// few per class).
    static SCRATCH: std::cell::RefCell<method::Scratch> = std::cell::RefCell::new(method::Scratch::default());
}

fn rewrite_methods(
    bytes: &[u8],
    opts: &RewriteOptions,
    ids: &mut dyn MethodIds,
    class: ClassInfo<'_>,
    scratch: &mut method::Scratch,
    force_wide: bool,
) -> Result<Rewritten, RewriteError> {
    let ClassInfo {
        cp,
        major,
        this_class,
        name: class_name,
        methods,
        source_file,
    } = class;
    let mut stats = ClassStats::default();
    let mut cpa = CpAppender::new(cp.count());
    // (Code attribute start, end, new Code attribute body)
    let mut replaced: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    for &MethodInfo {
        access,
        name: name_idx,
        desc: desc_idx,
        code,
    } in &methods
    {
        let Some((start, end)) = code else { continue };
        let name = cp.utf8(name_idx)?;
        let desc_bytes = cp.utf8_bytes(desc_idx)?;
        if is_empty_finalizer(&name, desc_bytes, &bytes[start + 6..end]) {
            stats.methods_empty_finalizers += 1;
            continue;
        }
        let desc = cp.utf8(desc_idx)?;
        let mid = ids.method_id(&class_name, &name, &desc, source_file.as_deref());
        let label = || format!("{class_name}.{name}{desc}");
        let input = method::MethodInput {
            cp: &cp,
            major,
            this_class,
            this_is_object: class_name == "java/lang/Object",
            is_static: access & ACC_STATIC != 0,
            is_init: name == "<init>",
            desc: desc_bytes,
            label: &label,
            bba: opts.bba,
            mid,
            force_wide,
        };
        match method::rewrite_code(
            &bytes[start + 6..end],
            &input,
            &mut cpa,
            scratch,
            &mut stats,
        )? {
            method::Outcome::Rewritten(body) => {
                stats.methods_instrumented += 1;
                replaced.push((start, end, body));
            }
            method::Outcome::TooLarge => stats.methods_too_large += 1,
            method::Outcome::Unwidenable => stats.methods_unwidenable += 1,
        }
    }
    if replaced.is_empty() {
        let reason = if stats.methods_too_large + stats.methods_unwidenable > 0 {
            "every method with code was too large to instrument"
        } else {
            "no method with code"
        };
        return Ok(Rewritten::Unchanged {
            reason: reason.into(),
        });
    }

    let grow: usize = replaced
        .iter()
        .map(|(s, e, b)| b.len() + 6 - (e - s))
        .sum::<usize>();
    let mut out = Vec::with_capacity(bytes.len() + cpa.bytes.len() + grow);
    out.extend_from_slice(&bytes[..8]);
    put_u16(&mut out, cpa.count());
    out.extend_from_slice(&bytes[10..cp.end]);
    out.extend_from_slice(&cpa.bytes);
    let mut pos = cp.end;
    for (start, end, body) in &replaced {
        out.extend_from_slice(&bytes[pos..*start + 2]);
        let len = u32::try_from(body.len())
            .map_err(|_| RewriteError::Malformed("Code attribute too long".into()))?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(body);
        pos = *end;
    }
    out.extend_from_slice(&bytes[pos..]);
    Ok(Rewritten::Changed { bytes: out, stats })
}

/// `finalize()V` whose code is a lone `return`. HotSpot registers every new instance of a
/// class for finalization unless the class's `finalize()V` is exactly that (its "empty
/// finalizer" rule, checked on the bytes it loads): instrumenting such a method would make
/// every allocation of the class, and of its subclasses, a finalizer registration
/// (jython's `PyObject` has one: 6× its allocation cost and objects kept for a GC cycle
/// more). So it loads unchanged; only explicit calls to it (`super.finalize()`) go uncounted.
fn is_empty_finalizer(name: &str, desc: &[u8], code_attr: &[u8]) -> bool {
    // Code attribute body: max_stack u16, max_locals u16, code_length u32, code.
    name == "finalize"
        && desc == b"()V"
        && code_attr.get(4..8) == Some(&[0, 0, 0, 1])
        && code_attr.get(8) == Some(&0xb1)
}

const ACC_STATIC: u16 = 0x0008;
const ACC_NATIVE: u16 = 0x0100;
const ACC_ABSTRACT: u16 = 0x0400;

fn skip_attributes(r: &mut Reader) -> Result<(), RewriteError> {
    let n = r.u16()?;
    for _ in 0..n {
        r.skip(2)?;
        let len = r.u32()? as usize;
        r.skip(len)?;
    }
    Ok(())
}
