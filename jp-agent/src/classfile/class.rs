//! The layout of a class file, as far as the rewriter needs it: the constant pool, the
//! methods with the byte range of their `Code` attribute, where the methods table starts
//! and ends, and the source file's name.

use super::cpool::ConstPool;
use super::error::RewriteError;
use super::reader::{u16_at, Reader};

pub(crate) const ACC_PRIVATE: u16 = 0x0002;
pub(crate) const ACC_STATIC: u16 = 0x0008;
pub(crate) const ACC_SYNCHRONIZED: u16 = 0x0020;
pub(crate) const ACC_BRIDGE: u16 = 0x0040;
pub(crate) const ACC_INTERFACE: u16 = 0x0200;
pub(crate) const ACC_STRICT: u16 = 0x0800;
pub(crate) const ACC_SYNTHETIC: u16 = 0x1000;
const ACC_NATIVE: u16 = 0x0100;
const ACC_ABSTRACT: u16 = 0x0400;

pub(crate) struct MethodInfo {
    pub access: u16,
    pub name: u16,
    pub desc: u16,
    /// Byte range of the whole Code attribute (header included).
    pub code: Option<(usize, usize)>,
}

impl MethodInfo {
    /// The body of the Code attribute (after its name and length), if the method has one.
    pub fn code_body<'b>(&self, bytes: &'b [u8]) -> Option<&'b [u8]> {
        self.code.map(|(start, end)| &bytes[start + 6..end])
    }
}

pub(crate) struct ClassInfo<'a> {
    pub cp: ConstPool<'a>,
    pub major: u16,
    pub access: u16,
    /// Byte offsets of the methods_count field and of the end of the methods table.
    pub methods_count_at: usize,
    pub methods_end: usize,
    /// The Utf8 "Code" of the pool, if a method has code.
    pub code_name: Option<u16>,
    pub this_class: u16,
    pub name: String,
    pub methods: Vec<MethodInfo>,
    pub source_file: Option<String>,
}

impl<'a> ClassInfo<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, RewriteError> {
        let magic = super::reader::u32_at(bytes, 0)?;
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
            methods.push(parse_method(&mut r, &cp, &mut code_name)?);
        }
        let methods_end = r.pos;
        let source_file = parse_source_file(&mut r, &cp)?;
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

/// A class's name and the names of its superclass and interfaces: what has to be defined
/// before it when classes are defined one by one, without a search path to find them.
pub(crate) fn name_and_supertypes(bytes: &[u8]) -> Result<(String, Vec<String>), RewriteError> {
    let magic = super::reader::u32_at(bytes, 0)?;
    if magic != 0xCAFE_BABE {
        return Err(RewriteError::BadMagic(magic));
    }
    let cp = ConstPool::parse(bytes)?;
    let name_of = |index: u16| -> Result<String, RewriteError> {
        Ok(cp.utf8(cp.class_name_index(index)?)?.into_owned())
    };
    let mut r = Reader::new(bytes, cp.end);
    let _access = r.u16()?;
    let name = name_of(r.u16()?)?;
    let mut supertypes = Vec::new();
    let super_class = r.u16()?;
    if super_class != 0 {
        supertypes.push(name_of(super_class)?);
    }
    for _ in 0..r.u16()? {
        supertypes.push(name_of(r.u16()?)?);
    }
    Ok((name, supertypes))
}

/// One entry of the methods table; `code_name` gets the pool's Utf8 "Code".
fn parse_method(
    r: &mut Reader,
    cp: &ConstPool,
    code_name: &mut Option<u16>,
) -> Result<MethodInfo, RewriteError> {
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
            *code_name = Some(an);
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
    Ok(MethodInfo {
        access,
        name,
        desc,
        code,
    })
}

/// The class attributes: the name of the SourceFile, if any.
fn parse_source_file(r: &mut Reader, cp: &ConstPool) -> Result<Option<String>, RewriteError> {
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
    Ok(source_file)
}

fn skip_attributes(r: &mut Reader) -> Result<(), RewriteError> {
    let n = r.u16()?;
    for _ in 0..n {
        r.skip(2)?;
        let len = r.u32()? as usize;
        r.skip(len)?;
    }
    Ok(())
}

/// `finalize()V` whose code is a lone `return`. HotSpot registers every new instance of a
/// class for finalization unless the class's `finalize()V` is exactly that (its "empty
/// finalizer" rule, checked on the bytes it loads): instrumenting such a method would make
/// every allocation of the class, and of its subclasses, a finalizer registration
/// (jython's `PyObject` has one: 6× its allocation cost and objects kept for a GC cycle
/// more). So it loads unchanged; only explicit calls to it (`super.finalize()`) go uncounted.
pub(crate) fn is_empty_finalizer(name: &str, desc: &[u8], code_attr: &[u8]) -> bool {
    // Code attribute body: max_stack u16, max_locals u16, code_length u32, code.
    name == "finalize"
        && desc == b"()V"
        && code_attr.get(4..8) == Some(&[0, 0, 0, 1])
        && code_attr.get(8) == Some(&0xb1)
}
