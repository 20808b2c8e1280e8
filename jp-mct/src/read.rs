//! Reads `jp-mct/1` JSON back into an [`Mct`] (what [`super::write_json`] writes, keys in any
//! order, unknown keys skipped). Iterative, like the writer: deep recursions make deep trees,
//! deeper than a recursive JSON parser's stack allows.

use super::{Mct, MctCpu, MctError, MethodInfo};
use std::collections::HashMap;
use std::sync::Arc;

mod cpu;

/// Parses a whole `jp-mct/1` document. Errors name the line and what was expected, and say
/// "truncated" when the text ends early (a file copied while the agent was writing it).
pub fn read_json(text: &[u8]) -> Result<Mct, MctError> {
    read_json_cpu(text).map(|(t, _)| t)
}

/// As [`read_json`], with the CPU per context a document of jpd's carries (`None`
/// without its `cpu_unit`); see `read/cpu.rs` for what it can say of time off CPU.
pub fn read_json_cpu(text: &[u8]) -> Result<(Mct, Option<MctCpu>), MctError> {
    let mut r = Reader {
        b: text,
        pos: 0,
        cpu: MctCpu::default(),
        has_cpu: false,
    };
    let t = r.document()?;
    let mut cpu = std::mem::take(&mut r.cpu);
    cpu.user_ns.resize(t.nodes.len(), 0);
    Ok((t, r.has_cpu.then_some(cpu)))
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    /// What the CPU keys said, and whether the document has any (`cpu_unit`).
    cpu: MctCpu,
    has_cpu: bool,
}

/// An open JSON container while reading nodes: a `children` array (of `parent`'s children)
/// or a node's object.
enum Open {
    Children { parent: usize, started: bool },
    Node { node: usize, started: bool },
}

impl Reader<'_> {
    fn err(&self, what: &str) -> MctError {
        if self.pos >= self.b.len() {
            return MctError(format!(
                "truncated jp-mct/1 JSON: the text ends (byte {}) where {what} was expected",
                self.b.len()
            ));
        }
        let line = 1 + self.b[..self.pos].iter().filter(|&&c| c == b'\n').count();
        let found: String =
            String::from_utf8_lossy(&self.b[self.pos..(self.pos + 20).min(self.b.len())])
                .chars()
                .take(12)
                .collect();
        MctError(format!(
            "not jp-mct/1 JSON: line {line}: expected {what}, found {found:?}"
        ))
    }

    /// Moves past the bytes `keep` accepts: blanks, a count's digits, a literal.
    fn skip_while(&mut self, keep: impl Fn(u8) -> bool) {
        while self.b.get(self.pos).is_some_and(|&c| keep(c)) {
            self.pos += 1;
        }
    }

    fn ws(&mut self) {
        self.skip_while(|c| matches!(c, b' ' | b'\n' | b'\r' | b'\t'));
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), MctError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("'{}'", c as char)))
        }
    }

    /// After a container's first member: a `,` is required before the next one.
    fn separator(&mut self, started: bool) -> Result<(), MctError> {
        if started {
            self.expect(b',')?;
        }
        Ok(())
    }

    fn document(&mut self) -> Result<Mct, MctError> {
        self.expect(b'{')?;
        let mut format: Option<String> = None;
        let mut bba: Option<String> = None;
        let mut tree: Option<Mct> = None;
        let mut started = false;
        while self.peek() != Some(b'}') {
            self.separator(started)?;
            started = true;
            let key = self.string()?;
            self.expect(b':')?;
            match key.as_str() {
                "format" => format = Some(self.string()?),
                "bba" => bba = Some(self.string()?),
                "root" => tree = Some(self.root()?),
                "cpu_unit" => {
                    self.string()?;
                    self.has_cpu = true;
                }
                "offcpu_idle_hidden_ns" => self.cpu.offcpu_idle_hidden_ns = self.number()?,
                _ => self.skip_value()?,
            }
        }
        self.expect(b'}')?;
        if self.peek().is_some() {
            return Err(self.err("the end of the text after the profile"));
        }
        match format.as_deref() {
            Some("jp-mct/1") => {}
            Some(f) => {
                return Err(MctError(format!(
                    "not a jp-mct/1 profile: its format is {f:?}"
                )))
            }
            None => {
                return Err(MctError(
                    "not a jp-mct/1 profile: no \"format\": \"jp-mct/1\" key (an agent out= file or `jpctl jvm export --format json` has one)".into(),
                ))
            }
        }
        let mut t = tree.ok_or_else(|| MctError("jp-mct/1 JSON without a \"root\"".into()))?;
        t.bba = bba.ok_or_else(|| MctError("jp-mct/1 JSON without a \"bba\"".into()))?;
        Ok(t)
    }

    fn root(&mut self) -> Result<Mct, MctError> {
        let mut t = Mct::new("");
        self.expect(b'{')?;
        let mut started = false;
        while self.peek() != Some(b'}') {
            self.separator(started)?;
            started = true;
            let key = self.string()?;
            self.expect(b':')?;
            match key.as_str() {
                "children" => self.nodes(&mut t)?,
                "offcpu" => {
                    let mut cpu = std::mem::take(&mut self.cpu);
                    let read = self.node_offcpu(0, &mut cpu);
                    self.cpu = cpu;
                    read?;
                }
                _ => self.skip_value()?,
            }
        }
        self.expect(b'}')?;
        Ok(t)
    }

    /// The root's `children` array and everything below it.
    fn nodes(&mut self, t: &mut Mct) -> Result<(), MctError> {
        // Methods repeat across contexts: one shared name each.
        let mut names: HashMap<String, Arc<str>> = HashMap::new();
        self.expect(b'[')?;
        let mut stack = vec![Open::Children {
            parent: 0,
            started: false,
        }];
        while let Some(top) = stack.last_mut() {
            match top {
                Open::Children { parent, started } => {
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        stack.pop();
                        continue;
                    }
                    let was_started = *started;
                    *started = true;
                    let parent = *parent;
                    self.separator(was_started)?;
                    self.expect(b'{')?;
                    let node = t.add(parent, MethodInfo::default(), 0, 0);
                    stack.push(Open::Node {
                        node,
                        started: false,
                    });
                }
                Open::Node { node, started } => {
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        stack.pop();
                        continue;
                    }
                    let was_started = *started;
                    *started = true;
                    let node = *node;
                    self.separator(was_started)?;
                    let key = self.string()?;
                    self.expect(b':')?;
                    match key.as_str() {
                        "method" => {
                            let m = self.string()?;
                            let name = names
                                .entry(m)
                                .or_insert_with_key(|k| Arc::from(k.as_str()))
                                .clone();
                            t.nodes[node].method = name;
                        }
                        "file" if self.peek() != Some(b'n') => {
                            t.nodes[node].file = Some(Arc::from(self.string()?.as_str()));
                        }
                        "calls" => t.nodes[node].calls = self.number()?,
                        "bytecodes" => t.nodes[node].bytecodes = self.number()?,
                        "cpu" | "offcpu" => {
                            let mut cpu = std::mem::take(&mut self.cpu);
                            let read = if key == "cpu" {
                                self.node_cpu(node, &mut cpu)
                            } else {
                                self.node_offcpu(node, &mut cpu)
                            };
                            self.cpu = cpu;
                            read?;
                        }
                        "children" => {
                            self.expect(b'[')?;
                            stack.push(Open::Children {
                                parent: node,
                                started: false,
                            });
                        }
                        _ => self.skip_value()?,
                    }
                }
            }
        }
        Ok(())
    }

    fn number(&mut self) -> Result<u64, MctError> {
        self.ws();
        let start = self.pos;
        self.skip_while(|c| c.is_ascii_digit());
        std::str::from_utf8(&self.b[start..self.pos])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                self.pos = start;
                self.err("a count (an unsigned integer)")
            })
    }

    fn string(&mut self) -> Result<String, MctError> {
        self.expect(b'"').map_err(|_| self.err("a string"))?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&c) = self.b.get(self.pos) else {
                return Err(self.err("the end of a string"));
            };
            self.pos += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.b.get(self.pos) else {
                        return Err(self.err("an escape"));
                    };
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let ch = self.unicode_escape()?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.err("a JSON escape")),
                    }
                }
                _ => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("UTF-8 text"))
    }

    fn hex4(&mut self) -> Result<u32, MctError> {
        let digits = self
            .b
            .get(self.pos..self.pos + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.err("four hex digits"))?;
        self.pos += 4;
        Ok(digits)
    }

    fn unicode_escape(&mut self) -> Result<char, MctError> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi)
            && self.b.get(self.pos..self.pos + 2) == Some(b"\\u")
        {
            self.pos += 2;
            let lo = self.hex4()?;
            0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF)
        } else {
            hi
        };
        Ok(char::from_u32(code).unwrap_or('\u{FFFD}'))
    }

    /// Skips any JSON value (keys this reader does not know), counting brackets.
    fn skip_value(&mut self) -> Result<(), MctError> {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                None => return Err(self.err("a value")),
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'{' | b'[') => {
                    self.pos += 1;
                    depth += 1;
                }
                Some(b'}' | b']') if depth > 0 => {
                    self.pos += 1;
                    depth -= 1;
                }
                Some(b',' | b':') if depth > 0 => self.pos += 1,
                // A number or a literal (true, false, null): its whole run of characters.
                Some(c) if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' => {
                    self.skip_while(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.')
                    });
                }
                Some(_) => return Err(self.err("a value")),
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::paper_tree;
    use super::super::write_json;
    use super::*;

    fn round_trip(t: &Mct) -> Vec<u8> {
        let mut v = Vec::new();
        write_json(t, &mut v).unwrap();
        v
    }

    #[test]
    fn reads_what_the_writer_wrote() {
        let bytes = round_trip(&paper_tree());
        let back = read_json(&bytes).unwrap();
        assert_eq!(back.bba, "precise");
        assert_eq!(back.nodes.len(), 7);
        // Written again, the tree gives the same bytes: same contexts, same counts.
        assert_eq!(round_trip(&back), bytes);
    }

    #[test]
    fn deep_trees_do_not_overflow() {
        let mut t = Mct::new("default");
        let mut p = 0;
        for i in 0..200_000 {
            p = t.add(
                p,
                MethodInfo {
                    name: format!("R.r{}()V", i % 3).into(),
                    file: None,
                },
                1,
                2,
            );
        }
        let back = read_json(&round_trip(&t)).unwrap();
        assert_eq!(back.nodes.len(), 200_001);
        assert_eq!(back.nodes[200_000].bytecodes, 2);
    }

    #[test]
    fn truncated_and_foreign_json_say_what_they_are() {
        let bytes = round_trip(&paper_tree());
        let e = read_json(&bytes[..bytes.len() / 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated"), "{e}");
        let e = read_json(br#"{"samples": {"total": 3}, "functions": []}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a jp-mct/1 profile"), "{e}");
        let e = read_json(b"hello").unwrap_err().to_string();
        assert!(e.contains("not jp-mct/1 JSON: line 1"), "{e}");
        let e = read_json(
            br#"{"format": "jp-mct/1", "bba": "x", "root": {"children": [{"calls": -1}]}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("a count"), "{e}");
    }

    #[test]
    fn unknown_keys_and_escapes() {
        let t = read_json(
            br#"{"format": "jp-mct/1", "extra": [1, {"a": "}"}], "bba": "d",
                "root": {"children": [{"children": [], "method": "a\"\u00e9\ud83d\ude00", "x": null, "bytecodes": 4, "calls": 2}]}}"#,
        )
        .unwrap();
        assert_eq!(&*t.nodes[1].method, "a\"é😀");
        assert_eq!((t.nodes[1].calls, t.nodes[1].bytecodes), (2, 4));
    }
}
