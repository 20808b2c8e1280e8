//! The global method table: id → (class, name, descriptor, source file). Ids are handed out in
//! request order (class-load order), one per (class, name, descriptor): a class loaded again by
//! another loader or retransformed gets the same ids, so trees merge by method.

use crate::classfile::MethodIds;
use crate::mct::MethodInfo;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodEntry {
    /// Internal class name (`a/b/C$D`).
    pub class: String,
    pub name: String,
    pub descriptor: String,
    pub source_file: Option<String>,
}

impl MethodEntry {
    /// `a.b.C$D.name(DESC)`.
    pub fn display_name(&self) -> String {
        format!(
            "{}.{}{}",
            self.class.replace('/', "."),
            self.name,
            self.descriptor
        )
    }

    /// `a/b/Source.java`: the source file in its package directory.
    pub fn file_path(&self) -> Option<String> {
        let src = self.source_file.as_ref()?;
        Some(match self.class.rfind('/') {
            Some(i) => format!("{}/{src}", &self.class[..i]),
            None => src.clone(),
        })
    }
}

/// Class and name of the overflow pseudo-method (see [`MethodTable::overflow_id`]).
pub const OVERFLOW_CLASS: &str = "jp";
pub const OVERFLOW_NAME: &str = "[new contexts over max_contexts]";

#[derive(Default)]
pub struct MethodTable {
    ids: HashMap<(String, String, String), u32>,
    entries: Vec<MethodEntry>,
}

impl MethodTable {
    pub fn id(&mut self, class: &str, name: &str, descriptor: &str, source: Option<&str>) -> u32 {
        let key = (class.to_string(), name.to_string(), descriptor.to_string());
        if let Some(&id) = self.ids.get(&key) {
            if let (Some(e), Some(s)) = (self.entries.get_mut(id as usize), source) {
                if e.source_file.is_none() {
                    e.source_file = Some(s.to_string());
                }
            }
            return id;
        }
        let id = self.entries.len() as u32;
        self.entries.push(MethodEntry {
            class: key.0.clone(),
            name: key.1.clone(),
            descriptor: key.2.clone(),
            source_file: source.map(str::to_string),
        });
        self.ids.insert(key, id);
        id
    }

    /// The id of a method already in the table (a rewrite gave it one), without adding it.
    pub fn find(&self, class: &str, name: &str, descriptor: &str) -> Option<u32> {
        self.ids
            .get(&(class.to_string(), name.to_string(), descriptor.to_string()))
            .copied()
    }

    /// The pseudo-method of overflow nodes, where new calling contexts fold once a context
    /// limit is reached (`max_contexts`). `[` cannot start a JVM method name, so no real
    /// method shares it; writers and jpd show it as `jp.[new contexts over max_contexts]`.
    pub fn overflow_id(&mut self) -> u32 {
        self.id(OVERFLOW_CLASS, OVERFLOW_NAME, "", None)
    }

    pub fn get(&self, id: i32) -> Option<&MethodEntry> {
        usize::try_from(id).ok().and_then(|i| self.entries.get(i))
    }

    pub fn info(&self, id: i32) -> MethodInfo {
        match self.get(id) {
            Some(e) => MethodInfo {
                name: e.display_name().into(),
                file: e.file_path().map(Into::into),
            },
            None => MethodInfo {
                name: format!("unknown-method-{id}").into(),
                file: None,
            },
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

static TABLE: Mutex<Option<MethodTable>> = Mutex::new(None);

/// The process-wide table (a poisoned lock is recovered: the table stays consistent because
/// every update is a single push + insert).
pub fn table() -> MutexGuard<'static, Option<MethodTable>> {
    crate::sync::lock(&TABLE)
}

/// [`MethodIds`] over the global table, locking per request so that parallel class loading
/// only serializes on the id lookups.
pub struct GlobalIds;

impl MethodIds for GlobalIds {
    fn method_id(
        &mut self,
        class: &str,
        name: &str,
        descriptor: &str,
        source_file: Option<&str>,
    ) -> u32 {
        let mut t = table();
        t.get_or_insert_with(MethodTable::default)
            .id(class, name, descriptor, source_file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_and_stable() {
        let mut t = MethodTable::default();
        assert_eq!(t.id("a/B", "f", "()V", Some("B.java")), 0);
        assert_eq!(t.id("a/B", "g", "(I)V", None), 1);
        assert_eq!(t.id("a/B", "f", "()V", None), 0);
        assert_eq!(t.len(), 2);
        assert_eq!(t.find("a/B", "g", "(I)V"), Some(1));
        assert_eq!(t.find("a/B", "h", "(I)V"), None);
        assert_eq!(&*t.info(1).name, "a.B.g(I)V");
        assert_eq!(t.info(0).file.as_deref(), Some("a/B.java"));
        assert_eq!(&*t.info(7).name, "unknown-method-7");
        assert_eq!(&*t.info(-1).name, "unknown-method--1");
    }
}
