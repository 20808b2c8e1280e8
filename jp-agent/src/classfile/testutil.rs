//! Hand-built class files for the unit tests.

/// Builds a class `T` (super java/lang/Object) with the given methods.
pub(crate) struct ClassBuilder {
    pub major: u16,
    cp: Vec<u8>,
    count: u16,
    methods: Vec<u8>,
    n_methods: u16,
}

/// One exception table entry: (start, end, handler, catch type index).
pub(crate) type Exc = (u16, u16, u16, u16);

/// The Code attribute of a method for [`ClassBuilder::method`].
pub(crate) struct Body<'a> {
    pub max_stack: u16,
    pub max_locals: u16,
    pub code: &'a [u8],
    pub exc: &'a [Exc],
    /// The raw body of a StackMapTable attribute.
    pub frames: Option<&'a [u8]>,
}

impl ClassBuilder {
    pub fn new(major: u16) -> Self {
        let mut b = ClassBuilder {
            major,
            cp: Vec::new(),
            count: 1,
            methods: Vec::new(),
            n_methods: 0,
        };
        b.class("T"); // #2 = Class T (#1 its name)
        b.class("java/lang/Object"); // #4
        b
    }

    pub fn utf8(&mut self, s: &str) -> u16 {
        self.cp.push(1);
        self.cp.extend_from_slice(&(s.len() as u16).to_be_bytes());
        self.cp.extend_from_slice(s.as_bytes());
        self.count += 1;
        self.count - 1
    }

    pub fn class(&mut self, name: &str) -> u16 {
        let u = self.utf8(name);
        self.cp.push(7);
        self.cp.extend_from_slice(&u.to_be_bytes());
        self.count += 1;
        self.count - 1
    }

    pub fn methodref(&mut self, class: &str, name: &str, desc: &str) -> u16 {
        let c = self.class(class);
        let n = self.utf8(name);
        let d = self.utf8(desc);
        self.cp.push(12);
        self.cp.extend_from_slice(&n.to_be_bytes());
        self.cp.extend_from_slice(&d.to_be_bytes());
        self.count += 1;
        self.cp.push(10);
        self.cp.extend_from_slice(&c.to_be_bytes());
        self.cp.extend_from_slice(&(self.count - 1).to_be_bytes());
        self.count += 1;
        self.count - 1
    }

    /// Adds a method with a Code attribute.
    pub fn method(&mut self, access: u16, name: &str, desc: &str, body: Body) {
        let Body {
            max_stack,
            max_locals,
            code,
            exc,
            frames,
        } = body;
        let n = self.utf8(name);
        let d = self.utf8(desc);
        let code_name = self.utf8("Code");
        let smt_name = frames.map(|_| self.utf8("StackMapTable"));
        let m = &mut self.methods;
        m.extend_from_slice(&access.to_be_bytes());
        m.extend_from_slice(&n.to_be_bytes());
        m.extend_from_slice(&d.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        let mut body = Vec::new();
        body.extend_from_slice(&max_stack.to_be_bytes());
        body.extend_from_slice(&max_locals.to_be_bytes());
        body.extend_from_slice(&(code.len() as u32).to_be_bytes());
        body.extend_from_slice(code);
        body.extend_from_slice(&(exc.len() as u16).to_be_bytes());
        for e in exc {
            for v in [e.0, e.1, e.2, e.3] {
                body.extend_from_slice(&v.to_be_bytes());
            }
        }
        match (frames, smt_name) {
            (Some(f), Some(sn)) => {
                body.extend_from_slice(&1u16.to_be_bytes());
                body.extend_from_slice(&sn.to_be_bytes());
                body.extend_from_slice(&(f.len() as u32).to_be_bytes());
                body.extend_from_slice(f);
            }
            _ => body.extend_from_slice(&0u16.to_be_bytes()),
        }
        m.extend_from_slice(&code_name.to_be_bytes());
        m.extend_from_slice(&(body.len() as u32).to_be_bytes());
        m.extend_from_slice(&body);
        self.n_methods += 1;
    }

    pub fn build(&self) -> Vec<u8> {
        let mut out = vec![0xCA, 0xFE, 0xBA, 0xBE, 0, 0];
        out.extend_from_slice(&self.major.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&self.cp);
        out.extend_from_slice(&[0x00, 0x21, 0x00, 0x02, 0x00, 0x04, 0, 0, 0, 0]);
        out.extend_from_slice(&self.n_methods.to_be_bytes());
        out.extend_from_slice(&self.methods);
        out.extend_from_slice(&[0, 0]);
        out
    }
}

/// The Code attribute of method `name` in a class: (max_stack, max_locals, code,
/// exception table, raw StackMapTable body if any).
pub(crate) struct CodeView {
    pub max_stack: u16,
    pub max_locals: u16,
    pub code: Vec<u8>,
    pub exc: Vec<Exc>,
    pub frames: Option<Vec<u8>>,
}

pub(crate) fn code_of(bytes: &[u8], name: &str) -> CodeView {
    use super::reader::Reader;
    cafebabe::parse_class(bytes).expect("cafebabe parses the class");
    let class = super::class::ClassInfo::parse(bytes).expect("class parses");
    let m = class
        .methods
        .iter()
        .find(|m| class.cp.utf8_bytes(m.name).unwrap() == name.as_bytes())
        .expect("method");
    let (start, end) = m.code.expect("code");
    let mut r = Reader::new(&bytes[start + 6..end], 0);
    let max_stack = r.u16().unwrap();
    let max_locals = r.u16().unwrap();
    let len = r.u32().unwrap() as usize;
    let code = r.bytes(len).unwrap().to_vec();
    let n = r.u16().unwrap();
    let exc = (0..n)
        .map(|_| {
            (
                r.u16().unwrap(),
                r.u16().unwrap(),
                r.u16().unwrap(),
                r.u16().unwrap(),
            )
        })
        .collect();
    let mut frames = None;
    for _ in 0..r.u16().unwrap() {
        let an = r.u16().unwrap();
        let len = r.u32().unwrap() as usize;
        let data = r.bytes(len).unwrap();
        if class.cp.utf8_bytes(an).unwrap() == b"StackMapTable" {
            frames = Some(data.to_vec());
        }
    }
    CodeView {
        max_stack,
        max_locals,
        code,
        exc,
        frames,
    }
}
