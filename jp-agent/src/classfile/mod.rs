//! The bytecode rewriter of the jp agent (what it inserts, and the runtime helper each
//! insertion calls: `docs/agent-design.md`, "The rewrite" and "The runtime's helpers").
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
    /// Give the class's static and private methods a second body that its own call sites
    /// call with their context (no thread lookup on those calls; docs/agent-design.md,
    /// "Second bodies: passed contexts"). Only for a class being loaded: a retransformation
    /// may not add methods.
    pub pass_context: bool,
    /// Enter methods through `Rt.enterOutOfLine`, which C2 never inlines, rather than
    /// `Rt.enter`: on JDK 17 C2 inlines `enter` only in the JVMs where its own compile came
    /// out small, which run no faster and spend 2-4 times as long compiling
    /// (docs/journal/c2-inlining-of-the-entry.md).
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
    access: u16,
    /// Byte offsets of the methods_count field and of the end of the methods table.
    methods_count_at: usize,
    methods_end: usize,
    /// The Utf8 "Code" of the pool, if a method has code.
    code_name: Option<u16>,
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
        let access = r.u16()?;
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
        let methods_count_at = r.pos;
        let n_methods = r.u16()?;
        let mut methods = Vec::with_capacity(n_methods as usize);
        let mut code_name = None;
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
                    code_name = Some(an);
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
        let methods_end = r.pos;
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
            access,
            methods_count_at,
            methods_end,
            code_name,
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
    // The methods that get a second body. One whose own body or second body cannot be made
    // (too large, a branch to its first instruction) is dropped and the class rewritten
    // again without it, so that no call site calls a second body that is not there.
    let mut candidates: Vec<usize> = Vec::new();
    // Not before version 50: the type-inferring verifier merges the context's slot with
    // the body's own locals and loads classes to do so (seen with downgraded jars).
    if opts.pass_context && class.major >= 50 && class.access & ACC_INTERFACE == 0 {
        for (i, m) in class.methods.iter().enumerate() {
            if may_have_second_body(bytes, &class, m)? {
                candidates.push(i);
            }
        }
        if class.methods.len() + candidates.len() > 0xFFFF {
            candidates.clear();
        }
    }
    let mut mids = Vec::with_capacity(class.methods.len());
    for m in &class.methods {
        let name = class.cp.utf8(m.name)?;
        let desc = class.cp.utf8(m.desc)?;
        mids.push(ids.method_id(&class.name, &name, &desc, class.source_file.as_deref()));
    }
    loop {
        match rewrite_with(bytes, opts, &class, &mids, &candidates, scratch, force_wide)? {
            Attempt::Done(r) => return Ok(r),
            Attempt::Without(i) => candidates.retain(|&c| c != i),
        }
    }
}

enum Attempt {
    Done(Rewritten),
    /// Method `i` can have no second body: rewrite again without one.
    Without(usize),
}

/// Static and private methods (not constructors, not bridges) may be called with their
/// caller's context from the class's own code, where the call's target is exactly known.
fn may_have_second_body(
    bytes: &[u8],
    class: &ClassInfo,
    m: &MethodInfo,
) -> Result<bool, RewriteError> {
    let Some((start, end)) = m.code else {
        return Ok(false);
    };
    let name = class.cp.utf8_bytes(m.name)?;
    let desc = class.cp.utf8_bytes(m.desc)?;
    if m.access & (ACC_STATIC | ACC_PRIVATE) == 0
        || m.access & ACC_BRIDGE != 0
        || name.first() == Some(&b'<')
        || is_empty_finalizer(&class.cp.utf8(m.name)?, desc, &bytes[start + 6..end])
    {
        return Ok(false);
    }
    let Some(slots) = arg_slots(desc) else {
        return Ok(false);
    };
    // The JVM allows 255 argument slots, `this` included; the context takes one more.
    let own = slots + u32::from(m.access & ACC_STATIC == 0);
    if own + 1 > 255 {
        return Ok(false);
    }
    // A method already named like the second body (not ours to shadow).
    let (second_name, second_desc) = second_signature(name, desc);
    for o in &class.methods {
        if class.cp.utf8_bytes(o.name)? == second_name.as_slice()
            && class.cp.utf8_bytes(o.desc)? == second_desc.as_slice()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `NAME$jp` and the descriptor with `Ljp/rt/Node;` as the last argument.
fn second_signature(name: &[u8], desc: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut n = name.to_vec();
    n.extend_from_slice(b"$jp");
    let close = desc.iter().rposition(|&c| c == b')').unwrap_or(0);
    let mut d = desc[..close].to_vec();
    d.extend_from_slice(b"Ljp/rt/Node;");
    d.extend_from_slice(&desc[close..]);
    (n, d)
}

/// Local slots the arguments of a method descriptor take (`this` not counted).
fn arg_slots(desc: &[u8]) -> Option<u32> {
    if desc.first() != Some(&b'(') {
        return None;
    }
    let mut i = 1;
    let mut n = 0;
    loop {
        match *desc.get(i)? {
            b')' => return Some(n),
            b'J' | b'D' => {
                n += 2;
                i += 1;
            }
            b'B' | b'C' | b'F' | b'I' | b'S' | b'Z' => {
                n += 1;
                i += 1;
            }
            b'L' | b'[' => {
                while *desc.get(i)? == b'[' {
                    i += 1;
                }
                if desc[i] == b'L' {
                    i += desc[i..].iter().position(|&c| c == b';')?;
                }
                n += 1;
                i += 1;
            }
            _ => return None,
        }
    }
}

/// What `rewrite_code` needs to know of method `i` of `class`.
#[allow(clippy::too_many_arguments)]
fn method_input<'a>(
    class: &'a ClassInfo<'a>,
    i: usize,
    mid: u32,
    opts: &RewriteOptions,
    second: Option<u32>,
    passed: &'a [method::Passed],
    label: &'a dyn Fn() -> String,
    force_wide: bool,
) -> Result<method::MethodInput<'a>, RewriteError> {
    let m = &class.methods[i];
    Ok(method::MethodInput {
        cp: &class.cp,
        major: class.major,
        this_class: class.this_class,
        this_is_object: class.name == "java/lang/Object",
        is_static: m.access & ACC_STATIC != 0,
        is_init: class.cp.utf8_bytes(m.name)? == b"<init>",
        desc: class.cp.utf8_bytes(m.desc)?,
        label,
        bba: opts.bba,
        out_of_line_entry: opts.out_of_line_entry,
        mid,
        second,
        passed,
        class_name: class.name.as_bytes(),
        force_wide,
    })
}

/// One rewrite of the class, with second bodies for `candidates`.
fn rewrite_with(
    bytes: &[u8],
    opts: &RewriteOptions,
    class: &ClassInfo<'_>,
    mids: &[u32],
    candidates: &[usize],
    scratch: &mut method::Scratch,
    force_wide: bool,
) -> Result<Attempt, RewriteError> {
    let cp = &class.cp;
    let class_name = class.name.as_str();
    let mut stats = ClassStats::default();
    let mut cpa = CpAppender::new(cp.count());
    let mut passed = Vec::with_capacity(candidates.len());
    for &i in candidates {
        let m = &class.methods[i];
        let name = cp.utf8_bytes(m.name)?;
        let desc = cp.utf8_bytes(m.desc)?;
        let (second_name, second_desc) = second_signature(name, desc);
        passed.push(method::Passed {
            name: name.to_vec(),
            desc: desc.to_vec(),
            is_static: m.access & ACC_STATIC != 0,
            methodref: cpa.method_ref(class.this_class, &second_name, &second_desc)?,
        });
    }
    // (Code attribute start, end, new Code attribute body)
    let mut replaced: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    for (i, m) in class.methods.iter().enumerate() {
        let Some((start, end)) = m.code else { continue };
        let name = cp.utf8(m.name)?;
        if is_empty_finalizer(&name, cp.utf8_bytes(m.desc)?, &bytes[start + 6..end]) {
            stats.methods_empty_finalizers += 1;
            continue;
        }
        let desc = cp.utf8(m.desc)?;
        let label = || format!("{class_name}.{name}{desc}");
        let outcome = method::rewrite_code(
            &bytes[start + 6..end],
            &method_input(class, i, mids[i], opts, None, &passed, &label, force_wide)?,
            &mut cpa,
            scratch,
            &mut stats,
        )?;
        match outcome {
            method::Outcome::Rewritten(body) => {
                stats.methods_instrumented += 1;
                replaced.push((start, end, body));
                continue;
            }
            _ if candidates.contains(&i) => return Ok(Attempt::Without(i)),
            method::Outcome::TooLarge => stats.methods_too_large += 1,
            method::Outcome::Unwidenable => stats.methods_unwidenable += 1,
            method::Outcome::NoSecondBody => {}
        }
    }
    if replaced.is_empty() {
        let reason = if stats.methods_too_large + stats.methods_unwidenable > 0 {
            "every method with code was too large to instrument"
        } else {
            "no method with code"
        };
        return Ok(Attempt::Done(Rewritten::Unchanged {
            reason: reason.into(),
        }));
    }
    // The second bodies: (access, name, descriptor, Code attribute body).
    let mut seconds: Vec<(u16, u16, u16, Vec<u8>)> = Vec::with_capacity(candidates.len());
    for &i in candidates {
        let m = &class.methods[i];
        let Some((start, end)) = m.code else { continue };
        let name = cp.utf8(m.name)?;
        let desc = cp.utf8(m.desc)?;
        let label = || format!("{class_name}.{name}{desc} (second body)");
        let slots = arg_slots(cp.utf8_bytes(m.desc)?).unwrap_or(0);
        let caller = slots + u32::from(m.access & ACC_STATIC == 0);
        match method::rewrite_code(
            &bytes[start + 6..end],
            &method_input(
                class,
                i,
                mids[i],
                opts,
                Some(caller),
                &passed,
                &label,
                force_wide,
            )?,
            &mut cpa,
            scratch,
            &mut stats,
        )? {
            method::Outcome::Rewritten(body) => {
                let (second_name, second_desc) =
                    second_signature(cp.utf8_bytes(m.name)?, cp.utf8_bytes(m.desc)?);
                let access = (m.access & (ACC_STATIC | ACC_SYNCHRONIZED | ACC_STRICT))
                    | ACC_PRIVATE
                    | ACC_SYNTHETIC;
                seconds.push((
                    access,
                    cpa.utf8(&second_name)?,
                    cpa.utf8(&second_desc)?,
                    body,
                ));
                stats.methods_passed += 1;
            }
            _ => return Ok(Attempt::Without(i)),
        }
    }
    let code_name = match (class.code_name, seconds.is_empty()) {
        (_, true) => 0,
        (Some(c), false) => c,
        (None, false) => cpa.utf8(b"Code")?,
    };

    let grow: usize = replaced
        .iter()
        .map(|(s, e, b)| b.len() + 6 - (e - s))
        .sum::<usize>()
        + seconds.iter().map(|s| 14 + s.3.len()).sum::<usize>();
    let mut out = Vec::with_capacity(bytes.len() + cpa.bytes.len() + grow);
    out.extend_from_slice(&bytes[..8]);
    put_u16(&mut out, cpa.count());
    out.extend_from_slice(&bytes[10..cp.end]);
    out.extend_from_slice(&cpa.bytes);
    let mut pos = cp.end;
    if !seconds.is_empty() {
        out.extend_from_slice(&bytes[pos..class.methods_count_at]);
        put_u16(&mut out, (class.methods.len() + seconds.len()) as u16);
        pos = class.methods_count_at + 2;
    }
    for (start, end, body) in &replaced {
        out.extend_from_slice(&bytes[pos..*start + 2]);
        let len = u32::try_from(body.len())
            .map_err(|_| RewriteError::Malformed("Code attribute too long".into()))?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(body);
        pos = *end;
    }
    out.extend_from_slice(&bytes[pos..class.methods_end]);
    for (access, name, desc, body) in &seconds {
        put_u16(&mut out, *access);
        put_u16(&mut out, *name);
        put_u16(&mut out, *desc);
        put_u16(&mut out, 1);
        put_u16(&mut out, code_name);
        let len = u32::try_from(body.len())
            .map_err(|_| RewriteError::Malformed("Code attribute too long".into()))?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(body);
    }
    out.extend_from_slice(&bytes[class.methods_end..]);
    Ok(Attempt::Done(Rewritten::Changed { bytes: out, stats }))
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

const ACC_PRIVATE: u16 = 0x0002;
const ACC_STATIC: u16 = 0x0008;
const ACC_SYNCHRONIZED: u16 = 0x0020;
const ACC_BRIDGE: u16 = 0x0040;
const ACC_INTERFACE: u16 = 0x0200;
const ACC_STRICT: u16 = 0x0800;
const ACC_SYNTHETIC: u16 = 0x1000;
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
