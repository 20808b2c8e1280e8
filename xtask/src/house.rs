//! `cargo xtask house`: the rules that keep the code a newcomer can change, checked on
//! the tree as it is (and by a unit test, so `cargo xtask test` fails when one breaks):
//!
//! - no function in a crate's `src/` longer than [`MAX_FN_LINES`] lines, test code
//!   aside (files named `tests.rs`, `#[cfg(test)]` modules and the files they load);
//! - no file in a crate's `src/` longer than [`MAX_FILE_LINES`] lines;
//! - no `too_many_arguments` allowance: a long argument list wants a type;
//! - no text naming a tracker issue, a work session or a helper: the repository speaks
//!   of features, and the tracker is not in it (the journal names an investigation by
//!   its topic and date).
//!
//! The function scan reads rustfmt's layout (the test command checks formatting first):
//! a function's body ends at the first `}` at the indentation its `fn` line has.
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

pub const MAX_FN_LINES: usize = 150;
pub const MAX_FILE_LINES: usize = 800;

#[derive(Debug, PartialEq, Eq)]
pub enum Breach {
    LongFunction {
        file: PathBuf,
        line: usize,
        name: String,
        lines: usize,
    },
    LongFile {
        file: PathBuf,
        lines: usize,
    },
    ArgumentAllowance {
        file: PathBuf,
        line: usize,
    },
    HistoryReference {
        file: PathBuf,
        line: usize,
        text: String,
    },
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Breach::LongFunction {
                file,
                line,
                name,
                lines,
            } => write!(
                f,
                "{}:{line}: fn {name} is {lines} lines (at most {MAX_FN_LINES})",
                file.display()
            ),
            Breach::LongFile { file, lines } => write!(
                f,
                "{}: {lines} lines (at most {MAX_FILE_LINES} in src/)",
                file.display()
            ),
            Breach::ArgumentAllowance { file, line } => write!(
                f,
                "{}:{line}: a too_many_arguments allowance (pass a type instead)",
                file.display()
            ),
            Breach::HistoryReference { file, line, text } => write!(
                f,
                "{}:{line}: names the tracker's history ({text:?}); name the feature (in docs/journal/, the investigation's topic and date)",
                file.display()
            ),
        }
    }
}

/// `cargo xtask house`: prints every breach and fails if there is one.
pub fn run() -> Result<()> {
    let breaches = check(&crate::cmd::root())?;
    for b in &breaches {
        println!("{b}");
    }
    if !breaches.is_empty() {
        bail!("{} breach(es) of the house rules", breaches.len());
    }
    println!("house rules: all kept");
    Ok(())
}

/// Every breach in the git-tracked (and untracked, not ignored) files under `root`.
pub fn check(root: &Path) -> Result<Vec<Breach>> {
    let files = tracked_files(root)?;
    let mut breaches = Vec::new();
    let test_files = test_module_files(root, &files);
    for rel in &files {
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else {
            continue; // binary fixtures and the like
        };
        let path = rel.as_path();
        breaches.extend(history_references(path, &text));
        if rel.extension().is_some_and(|e| e == "rs") {
            breaches.extend(argument_allowances(path, &text));
            if in_crate_src(path) {
                let lines = text.lines().count();
                if lines > MAX_FILE_LINES {
                    breaches.push(Breach::LongFile {
                        file: rel.clone(),
                        lines,
                    });
                }
                if !is_test_file(path, &test_files) {
                    breaches.extend(long_functions(path, &text));
                }
            }
        }
    }
    Ok(breaches)
}

fn tracked_files(root: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("git")
        .current_dir(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output()
        .context("cannot run git ls-files")?;
    if !out.status.success() {
        bail!("git ls-files failed in {}", root.display());
    }
    let mut files: Vec<PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| PathBuf::from(String::from_utf8_lossy(s).into_owned()))
        .filter(|p| root.join(p).is_file())
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// A path of the form `<crate>/src/...` (any depth of crate folder).
fn in_crate_src(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "src")
}

fn is_test_file(path: &Path, test_files: &BTreeSet<PathBuf>) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
        || path.ancestors().any(|a| test_files.contains(a))
}

/// Files and folders that `#[cfg(test)] mod name;` declarations load.
fn test_module_files(root: &Path, files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for rel in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
    {
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else {
            continue;
        };
        let dir = module_dir(rel);
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim() != "#[cfg(test)]" {
                continue;
            }
            let Some(next) = lines.next() else { break };
            let decl = next.trim().trim_start_matches("pub(crate) ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                out.insert(dir.join(format!("{name}.rs")));
                out.insert(dir.join(name));
            }
        }
    }
    out
}

/// The folder in which `mod x;` of this file looks for `x.rs` or `x/`.
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => parent,
        _ => match file.file_stem() {
            Some(stem) => parent.join(stem),
            None => parent,
        },
    }
}

fn argument_allowances(path: &Path, text: &str) -> Vec<Breach> {
    let needle = concat!("too_many", "_arguments");
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains("allow(") && l.contains(needle))
        .map(|(i, _)| Breach::ArgumentAllowance {
            file: path.to_path_buf(),
            line: i + 1,
        })
        .collect()
}

/// The word "issue" or "session" (either case, singular or plural) followed by a number,
/// with or without `#`: a tracker number or a work session, which mean nothing to a
/// reader of the repository.
fn history_references(path: &Path, text: &str) -> Vec<Breach> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lower = line.to_ascii_lowercase();
        for word in ["issue", "session"] {
            if let Some(at) = numbered_word(&lower, word).or_else(|| named_helper(&lower)) {
                let end = (at + 24).min(line.len());
                let text = line.get(at..end).unwrap_or(line).to_string();
                out.push(Breach::HistoryReference {
                    file: path.to_path_buf(),
                    line: i + 1,
                    text,
                });
                break;
            }
        }
    }
    out
}

/// Where a work helper is named (the word, a space, then its quoted name), if it is.
fn named_helper(lower: &str) -> Option<usize> {
    lower.find(concat!("help", "er \""))
}

/// Where `word` (or its plural) stands as a word followed by a number, if it does.
fn numbered_word(lower: &str, word: &str) -> Option<usize> {
    let bytes = lower.as_bytes();
    let mut from = 0;
    while let Some(pos) = lower[from..].find(word) {
        let at = from + pos;
        from = at + word.len();
        let starts_word = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
        if !starts_word {
            continue;
        }
        let mut rest = &lower[at + word.len()..];
        rest = rest.strip_prefix('s').unwrap_or(rest);
        let Some(rest) = rest.strip_prefix(' ') else {
            continue;
        };
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(at);
        }
    }
    None
}

/// Functions with bodies longer than [`MAX_FN_LINES`], `#[cfg(test)] mod … { }` blocks
/// skipped.
fn long_functions(path: &Path, text: &str) -> Vec<Breach> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim() == "#[cfg(test)]" {
            if let Some(next) = lines.get(i + 1) {
                if next.trim_start().starts_with("mod ") && next.trim_end().ends_with('{') {
                    i = block_end(&lines, i + 1).map_or(lines.len(), |e| e + 1);
                    continue;
                }
            }
        }
        if let Some(name) = fn_name(line) {
            if let Some(end) = body_end(&lines, i) {
                let n = end - i + 1;
                if n > MAX_FN_LINES {
                    out.push(Breach::LongFunction {
                        file: path.to_path_buf(),
                        line: i + 1,
                        name: name.to_string(),
                        lines: n,
                    });
                }
            }
        }
        i += 1;
    }
    out
}

/// The function's name if `line` opens a function item.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in ["pub(crate) ", "pub(super) ", "pub "] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    for qualifier in [
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
        "extern \"system\" ",
    ] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    (end > 0).then(|| &rest[..end])
}

/// The line of the function's closing brace, None for a declaration without a body or
/// a body on one line.
fn body_end(lines: &[&str], start: usize) -> Option<usize> {
    for (j, line) in lines.iter().enumerate().skip(start) {
        let t = line.trim_end();
        if t.ends_with(';') && !t.contains('{') {
            return None;
        }
        if t.ends_with('{') {
            return block_end(lines, start).filter(|&e| e > j);
        }
        if t.ends_with('}') && j == start {
            return None;
        }
    }
    None
}

/// The first line after `start` that is a lone `}` at `start`'s indentation.
fn block_end(lines: &[&str], start: usize) -> Option<usize> {
    let indent = lines[start].len() - lines[start].trim_start().len();
    let close = format!("{}}}", " ".repeat(indent));
    lines
        .iter()
        .enumerate()
        .skip(start + 1)
        .find(|(_, l)| l.trim_end() == close)
        .map(|(j, _)| j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> String {
        (0..n).map(|i| format!("    let x{i} = {i};\n")).collect()
    }

    #[test]
    fn a_function_over_the_limit_is_named_with_its_length() {
        let text = format!("pub fn long() {{\n{}}}\n\nfn short() {{\n}}\n", body(149));
        let found = long_functions(Path::new("a/src/x.rs"), &text);
        assert_eq!(
            found,
            vec![Breach::LongFunction {
                file: "a/src/x.rs".into(),
                line: 1,
                name: "long".into(),
                lines: 151,
            }]
        );
        let text = format!("fn fits() {{\n{}}}\n", body(148));
        assert!(long_functions(Path::new("a/src/x.rs"), &text).is_empty());
    }

    #[test]
    fn methods_multi_line_signatures_and_test_modules_are_read_as_rustfmt_lays_them_out() {
        let text = format!(
            "impl A {{\n    pub(crate) async fn m(\n        a: u32,\n    ) -> u32\n    where\n        u32: Copy,\n    {{\n{}    }}\n    fn decl(&self);\n}}\n#[cfg(test)]\nmod tests {{\n    fn t() {{\n{}    }}\n}}\n",
            body(160),
            body(300)
        );
        let found = long_functions(Path::new("a/src/x.rs"), &text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            matches!(&found[0], Breach::LongFunction { name, line: 2, lines: 167, .. } if name == "m")
        );
    }

    #[test]
    fn history_is_named_by_number_not_by_the_word_alone() {
        let says = |t: &str| !history_references(Path::new("f"), t).is_empty();
        assert!(says(concat!("CPU per context (iss", "ue 13)")));
        assert!(says(concat!("Iss", "ues 11 and 13")));
        assert!(says(concat!("see iss", "ue #4")));
        assert!(says(concat!("Sess", "ion 12 took")));
        assert!(says(concat!("(help", "er \"agentfast\", 2026-12-01)")));
        assert!(!says("an issue with the session's socket"));
        assert!(!says("tissue 3"));
        assert!(!says("the session 'a' of 2"));
    }

    #[test]
    fn cfg_test_module_files_are_found_beside_their_parent() {
        assert_eq!(module_dir(Path::new("c/src/lib.rs")), Path::new("c/src"));
        assert_eq!(
            module_dir(Path::new("c/src/store/jvm.rs")),
            Path::new("c/src/store/jvm")
        );
    }

    /// The repository itself keeps the rules.
    #[test]
    fn the_house_keeps_its_rules() {
        let breaches = check(&crate::cmd::root()).unwrap();
        let list: Vec<String> = breaches.iter().map(|b| b.to_string()).collect();
        assert!(list.is_empty(), "house rules broken:\n{}", list.join("\n"));
    }
}
