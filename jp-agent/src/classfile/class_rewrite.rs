//! One class rewritten: every method's `Code` attribute rebuilt (`rewrite`), the second
//! bodies added, and the class file written around them — every other byte copied, the
//! constant pool only appended to.

use super::api::{ClassStats, MethodIds, RewriteOptions, Rewritten};
use super::class::{
    is_empty_finalizer, ClassInfo, ACC_INTERFACE, ACC_PRIVATE, ACC_STATIC, ACC_STRICT,
    ACC_SYNCHRONIZED, ACC_SYNTHETIC,
};
use super::cpool::CpAppender;
use super::error::RewriteError;
use super::frames::Signature;
use super::reader::put_u16;
use super::rewrite::{self, MethodInput, Outcome, Passed, Scratch};
use super::second::{arg_slots, may_have_second_body, second_signature};

/// The class-level inputs every method's rewrite shares.
pub(crate) struct ClassRewrite<'a> {
    pub bytes: &'a [u8],
    pub opts: &'a RewriteOptions,
    pub class: &'a ClassInfo<'a>,
    /// Test only: widen every branch.
    pub force_wide: bool,
}

/// A method's new Code attribute: (attribute start, end, new body).
type Replaced = (usize, usize, Vec<u8>);

/// A second body to add: (access, name, descriptor, Code attribute body).
type SecondBody = (u16, u16, u16, Vec<u8>);

enum Attempt {
    Done(Rewritten),
    /// Method `i` can have no second body: rewrite again without one.
    Without(usize),
}

/// The bodies of one kind made, or a method that can have no second body.
enum Made<T> {
    Bodies(T),
    Without(usize),
}

/// Rewrites the class's methods, with second bodies where possible.
pub(crate) fn rewrite_methods(
    c: &ClassRewrite,
    ids: &mut dyn MethodIds,
    scratch: &mut Scratch,
) -> Result<Rewritten, RewriteError> {
    let class = c.class;
    // The methods that get a second body. One whose own body or second body cannot be made
    // (too large, a branch to its first instruction) is dropped and the class rewritten
    // again without it, so that no call site calls a second body that is not there.
    let mut candidates: Vec<usize> = Vec::new();
    // Not before version 50: the type-inferring verifier merges the context's slot with
    // the body's own locals and loads classes to do so (seen with downgraded jars).
    if c.opts.pass_context && class.major >= 50 && class.access & ACC_INTERFACE == 0 {
        for (i, m) in class.methods.iter().enumerate() {
            if may_have_second_body(c.bytes, class, m)? {
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
        match rewrite_once(c, &mids, &candidates, scratch)? {
            Attempt::Done(r) => return Ok(r),
            Attempt::Without(i) => candidates.retain(|&c| c != i),
        }
    }
}

/// What every method's rewrite in one rewrite of the class reads.
struct Shared<'a> {
    c: &'a ClassRewrite<'a>,
    mids: &'a [u32],
    /// The methods with a second body in this rewrite.
    passed: Vec<Passed>,
}

impl Shared<'_> {
    /// What `rewrite_code` needs to know of method `i` (`second`: of its second body,
    /// the caller's context in that local).
    fn input<'b>(
        &'b self,
        i: usize,
        second: Option<u32>,
        label: &'b dyn Fn() -> String,
    ) -> Result<MethodInput<'b>, RewriteError> {
        let class = self.c.class;
        let m = &class.methods[i];
        Ok(MethodInput {
            cp: &class.cp,
            major: class.major,
            sig: Signature {
                this_class: class.this_class,
                this_is_object: class.name == "java/lang/Object",
                is_static: m.access & ACC_STATIC != 0,
                is_init: class.cp.utf8_bytes(m.name)? == b"<init>",
                desc: class.cp.utf8_bytes(m.desc)?,
            },
            label,
            bba: self.c.opts.bba,
            out_of_line_entry: self.c.opts.out_of_line_entry,
            mid: self.mids[i],
            second,
            passed: &self.passed,
            class_name: class.name.as_bytes(),
            force_wide: self.c.force_wide,
        })
    }
}

/// One rewrite of the class: its state while the methods are rewritten.
struct Once<'a> {
    shared: Shared<'a>,
    cpa: CpAppender,
    stats: ClassStats,
}

impl Once<'_> {
    /// Rewrites `body`, the code of method `i` (or of its second body).
    fn rewrite_code(
        &mut self,
        i: usize,
        body: &[u8],
        second: Option<u32>,
        label: &dyn Fn() -> String,
        scratch: &mut Scratch,
    ) -> Result<Outcome, RewriteError> {
        let input = self.shared.input(i, second, label)?;
        rewrite::rewrite_code(body, &input, &mut self.cpa, scratch, &mut self.stats)
    }
}

/// One rewrite of the class, with second bodies for `candidates`.
fn rewrite_once(
    c: &ClassRewrite,
    mids: &[u32],
    candidates: &[usize],
    scratch: &mut Scratch,
) -> Result<Attempt, RewriteError> {
    let cp = &c.class.cp;
    let mut once = Once {
        shared: Shared {
            c,
            mids,
            passed: Vec::with_capacity(candidates.len()),
        },
        cpa: CpAppender::new(cp.count()),
        stats: ClassStats::default(),
    };
    for &i in candidates {
        let m = &c.class.methods[i];
        let name = cp.utf8_bytes(m.name)?;
        let desc = cp.utf8_bytes(m.desc)?;
        let (second_name, second_desc) = second_signature(name, desc);
        let methodref = once
            .cpa
            .method_ref(c.class.this_class, &second_name, &second_desc)?;
        once.shared.passed.push(Passed {
            name: name.to_vec(),
            desc: desc.to_vec(),
            is_static: m.access & ACC_STATIC != 0,
            methodref,
        });
    }
    let replaced = match own_bodies(&mut once, candidates, scratch)? {
        Made::Bodies(replaced) => replaced,
        Made::Without(i) => return Ok(Attempt::Without(i)),
    };
    if replaced.is_empty() {
        let reason = if once.stats.methods_too_large + once.stats.methods_unwidenable > 0 {
            "every method with code was too large to instrument"
        } else {
            "no method with code"
        };
        return Ok(Attempt::Done(Rewritten::Unchanged {
            reason: reason.into(),
        }));
    }
    let seconds = match second_bodies(&mut once, candidates, scratch)? {
        Made::Bodies(seconds) => seconds,
        Made::Without(i) => return Ok(Attempt::Without(i)),
    };
    let code_name = match (c.class.code_name, seconds.is_empty()) {
        (_, true) => 0,
        (Some(n), false) => n,
        (None, false) => once.cpa.utf8(b"Code")?,
    };
    let bytes = write_class(c, &once.cpa, &replaced, &seconds, code_name)?;
    Ok(Attempt::Done(Rewritten::Changed {
        bytes,
        stats: once.stats,
    }))
}

/// Every method's own body rewritten, or a candidate whose own body cannot be (so it
/// can have no second body).
fn own_bodies(
    once: &mut Once,
    candidates: &[usize],
    scratch: &mut Scratch,
) -> Result<Made<Vec<Replaced>>, RewriteError> {
    let (bytes, class) = (once.shared.c.bytes, once.shared.c.class);
    let cp = &class.cp;
    let mut replaced = Vec::new();
    for (i, m) in class.methods.iter().enumerate() {
        let Some((start, end)) = m.code else { continue };
        let name = cp.utf8(m.name)?;
        if is_empty_finalizer(&name, cp.utf8_bytes(m.desc)?, &bytes[start + 6..end]) {
            once.stats.methods_empty_finalizers += 1;
            continue;
        }
        let desc = cp.utf8(m.desc)?;
        let label = || format!("{}.{name}{desc}", class.name);
        match once.rewrite_code(i, &bytes[start + 6..end], None, &label, scratch)? {
            Outcome::Rewritten(body) => {
                once.stats.methods_instrumented += 1;
                replaced.push((start, end, body));
                continue;
            }
            _ if candidates.contains(&i) => return Ok(Made::Without(i)),
            Outcome::TooLarge => once.stats.methods_too_large += 1,
            Outcome::Unwidenable => once.stats.methods_unwidenable += 1,
            Outcome::NoSecondBody => {}
        }
    }
    Ok(Made::Bodies(replaced))
}

/// The second bodies of the candidates, or one that cannot be made.
fn second_bodies(
    once: &mut Once,
    candidates: &[usize],
    scratch: &mut Scratch,
) -> Result<Made<Vec<SecondBody>>, RewriteError> {
    let (bytes, class) = (once.shared.c.bytes, once.shared.c.class);
    let cp = &class.cp;
    let mut seconds = Vec::with_capacity(candidates.len());
    for &i in candidates {
        let m = &class.methods[i];
        let Some((start, end)) = m.code else { continue };
        let name = cp.utf8(m.name)?;
        let desc = cp.utf8(m.desc)?;
        let label = || format!("{}.{name}{desc} (second body)", class.name);
        let slots = arg_slots(cp.utf8_bytes(m.desc)?).unwrap_or(0);
        let caller = slots + u32::from(m.access & ACC_STATIC == 0);
        let Outcome::Rewritten(body) =
            once.rewrite_code(i, &bytes[start + 6..end], Some(caller), &label, scratch)?
        else {
            return Ok(Made::Without(i));
        };
        let (second_name, second_desc) =
            second_signature(cp.utf8_bytes(m.name)?, cp.utf8_bytes(m.desc)?);
        let access =
            (m.access & (ACC_STATIC | ACC_SYNCHRONIZED | ACC_STRICT)) | ACC_PRIVATE | ACC_SYNTHETIC;
        seconds.push((
            access,
            once.cpa.utf8(&second_name)?,
            once.cpa.utf8(&second_desc)?,
            body,
        ));
        once.stats.methods_passed += 1;
    }
    Ok(Made::Bodies(seconds))
}

/// The class file: the original bytes with the appended pool entries, the new Code
/// attributes in place of the old ones, and the second bodies after the methods.
fn write_class(
    c: &ClassRewrite,
    cpa: &CpAppender,
    replaced: &[Replaced],
    seconds: &[SecondBody],
    code_name: u16,
) -> Result<Vec<u8>, RewriteError> {
    let (bytes, class) = (c.bytes, c.class);
    let grow: usize = replaced
        .iter()
        .map(|(s, e, b)| b.len() + 6 - (e - s))
        .sum::<usize>()
        + seconds.iter().map(|s| 14 + s.3.len()).sum::<usize>();
    let mut out = Vec::with_capacity(bytes.len() + cpa.bytes.len() + grow);
    out.extend_from_slice(&bytes[..8]);
    put_u16(&mut out, cpa.count());
    out.extend_from_slice(&bytes[10..class.cp.end]);
    out.extend_from_slice(&cpa.bytes);
    let mut pos = class.cp.end;
    if !seconds.is_empty() {
        out.extend_from_slice(&bytes[pos..class.methods_count_at]);
        put_u16(&mut out, (class.methods.len() + seconds.len()) as u16);
        pos = class.methods_count_at + 2;
    }
    for (start, end, body) in replaced {
        out.extend_from_slice(&bytes[pos..*start + 2]);
        put_code_body(&mut out, body)?;
        pos = *end;
    }
    out.extend_from_slice(&bytes[pos..class.methods_end]);
    for (access, name, desc, body) in seconds {
        put_u16(&mut out, *access);
        put_u16(&mut out, *name);
        put_u16(&mut out, *desc);
        put_u16(&mut out, 1);
        put_u16(&mut out, code_name);
        put_code_body(&mut out, body)?;
    }
    out.extend_from_slice(&bytes[class.methods_end..]);
    Ok(out)
}

/// A Code attribute's length and body.
fn put_code_body(out: &mut Vec<u8>, body: &[u8]) -> Result<(), RewriteError> {
    let len = u32::try_from(body.len())
        .map_err(|_| RewriteError::Malformed("Code attribute too long".into()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    Ok(())
}
