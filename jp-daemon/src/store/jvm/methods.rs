//! A JVM's method table as its METHODS records define it: method id → the name and
//! file the agent itself writes into its `out=` file.

use std::collections::HashMap;
use std::sync::Arc;

use jp_common::wire::MethodDef;
use jp_mct::MethodInfo;

use super::LimitKind;

/// String bytes charged to the JVM and the limit on them.
pub(crate) struct StringBudget {
    pub used: usize,
    pub limit: usize,
}

impl StringBudget {
    /// Charges `add` bytes after giving back `free`; false (nothing charged) over the
    /// limit.
    pub fn charge(&mut self, free: usize, add: usize) -> bool {
        let next = self.used.saturating_sub(free).saturating_add(add);
        if next > self.limit {
            return false;
        }
        self.used = next;
        true
    }
}

/// The method table as a snapshot holds it.
pub(crate) type NameMap = Arc<HashMap<u32, MethodInfo>>;

/// The method's name and file in `map`; `?MID` when jpd has no name for it.
pub(crate) fn info_in(map: &HashMap<u32, MethodInfo>, mid: u32) -> MethodInfo {
    map.get(&mid).cloned().unwrap_or_else(|| MethodInfo {
        name: Arc::from(format!("?{mid}")),
        file: None,
    })
}

#[derive(Default)]
pub(crate) struct MethodNames {
    /// Shared with snapshots; a METHODS record after a snapshot copies it (method
    /// definitions are rare: class loading and re-sends).
    map: NameMap,
    /// Methods arrive class by class: consecutive methods share the file's string.
    last_file: Option<Arc<str>>,
    /// Bytes of the names and files in `map` (kept so that the size is O(1) to tell).
    info_bytes: usize,
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// `pkg.Class.name(DESC)` as the agent's method table names it.
fn display_name(def: &MethodDef<'_>) -> String {
    let class = lossy(def.class).replace('/', ".");
    format!("{class}.{}{}", lossy(def.name), lossy(def.descriptor))
}

/// The source file with its package directory, as the agent writes it: the wire carries
/// it that way, and a bare file name gets the class's package prepended.
fn file_path(def: &MethodDef<'_>) -> Option<String> {
    if def.source_file.is_empty() {
        return None;
    }
    let src = lossy(def.source_file);
    if src.contains('/') {
        return Some(src.into_owned());
    }
    let class = lossy(def.class).replace('.', "/");
    Some(match class.rfind('/') {
        Some(i) => format!("{}/{src}", &class[..i]),
        None => src.into_owned(),
    })
}

fn info_bytes(i: &MethodInfo) -> usize {
    i.name.len() + i.file.as_ref().map_or(0, |f| f.len())
}

impl MethodNames {
    /// Defines (or redefines: ids are stable, a re-send repeats them) one method.
    pub fn define(
        &mut self,
        def: &MethodDef<'_>,
        max_methods: usize,
        budget: &mut StringBudget,
    ) -> Result<(), LimitKind> {
        let name: Arc<str> = Arc::from(display_name(def));
        let file: Option<Arc<str>> = file_path(def).map(|f| match &self.last_file {
            Some(last) if **last == *f => last.clone(),
            _ => Arc::from(f),
        });
        let info = MethodInfo { name, file };
        let old = self.map.get(&def.mid);
        if old == Some(&info) {
            return Ok(());
        }
        if old.is_none() && self.map.len() >= max_methods {
            return Err(LimitKind::Methods);
        }
        if !budget.charge(old.map_or(0, info_bytes), info_bytes(&info)) {
            return Err(LimitKind::StringBytes);
        }
        self.info_bytes = self
            .info_bytes
            .saturating_sub(old.map_or(0, info_bytes))
            .saturating_add(info_bytes(&info));
        self.last_file.clone_from(&info.file);
        Arc::make_mut(&mut self.map).insert(def.mid, info);
        Ok(())
    }

    /// The method is defined.
    pub fn contains(&self, mid: u32) -> bool {
        self.map.contains_key(&mid)
    }

    /// The method's name and file; `?MID` when jpd has no name for it.
    pub fn info(&self, mid: u32) -> MethodInfo {
        info_in(&self.map, mid)
    }

    /// The table as it is now (shared, O(1)).
    pub fn snapshot(&self) -> NameMap {
        Arc::clone(&self.map)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// O(1): read for every record (the store's byte budget).
    pub fn memory_bytes(&self) -> usize {
        // Table entries (key, two fat pointers, control byte) plus the strings and their
        // Arc headers (16 bytes each).
        self.map.capacity() * (4 + 4 + 16 + 16 + 1) + self.info_bytes + self.map.len() * 32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def<'a>(class: &'a [u8], source: &'a [u8]) -> MethodDef<'a> {
        MethodDef {
            mid: 3,
            class,
            name: b"f",
            descriptor: b"([Ljava/lang/String;)V",
            source_file: source,
        }
    }

    #[test]
    fn names_like_the_agent() {
        let mut m = MethodNames::default();
        let mut b = StringBudget {
            used: 0,
            limit: 1000,
        };
        m.define(&def(b"a.b.C$D", b"a/b/C.java"), 10, &mut b)
            .unwrap();
        let i = m.info(3);
        assert_eq!(&*i.name, "a.b.C$D.f([Ljava/lang/String;)V");
        assert_eq!(i.file.as_deref(), Some("a/b/C.java"));
        // An internal class name and a bare source file give the same.
        m.define(&def(b"a/b/C$D", b"C.java"), 10, &mut b).unwrap();
        assert_eq!(m.info(3), i);
        assert_eq!(b.used, i.name.len() + 10);
        m.define(&def(b"Top", b""), 10, &mut b).unwrap();
        assert_eq!(m.info(3).file, None);
        assert_eq!(&*m.info(4).name, "?4");
    }

    #[test]
    fn limits() {
        let mut m = MethodNames::default();
        let mut b = StringBudget { used: 0, limit: 30 };
        assert_eq!(
            m.define(&def(b"a.b.C$D", b"a/b/C.java"), 10, &mut b),
            Err(LimitKind::StringBytes)
        );
        assert_eq!(b.used, 0);
        m.define(&def(b"C", b""), 10, &mut b).unwrap();
        let mut other = def(b"C", b"");
        other.mid = 4;
        assert_eq!(m.define(&other, 1, &mut b), Err(LimitKind::Methods));
    }
}
