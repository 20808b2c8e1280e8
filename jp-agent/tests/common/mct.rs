//! Method Call Trees read from `jp-mct/1` JSON, flattened into maps keyed by the
//! calling-context path, and compared with readable reports.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A calling context: method names from the thread root down to the node.
pub type Path = Vec<String>;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub calls: u64,
    pub bytecodes: u64,
    /// Oracle only: an exception was thrown in or passed through this context.
    pub exc: bool,
}

#[derive(Clone, Debug)]
pub struct Mct {
    pub bba: String,
    pub nodes: BTreeMap<Path, Counts>,
}

pub fn show_path(p: &[String]) -> String {
    p.join(" → ")
}

impl Mct {
    /// Parses and validates a `jp-mct/1` document (structure, types, no duplicate children).
    pub fn parse(text: &str) -> Result<Mct, String> {
        let mut de = serde_json::Deserializer::from_str(text);
        de.disable_recursion_limit();
        let v = <serde_json::Value as serde::Deserialize>::deserialize(&mut de)
            .and_then(|v| de.end().map(|_| v))
            .map_err(|e| format!("not valid JSON: {e}"))?;
        if v.get("format").and_then(|f| f.as_str()) != Some("jp-mct/1") {
            return Err(format!(
                "\"format\" is not \"jp-mct/1\": {:?}",
                v.get("format")
            ));
        }
        let bba = v
            .get("bba")
            .and_then(|b| b.as_str())
            .ok_or("missing string \"bba\"")?
            .to_string();
        let root = v.get("root").ok_or("missing \"root\"")?;
        let mut nodes = BTreeMap::new();
        walk(root, &mut Vec::new(), &mut nodes)?;
        Ok(Mct { bba, nodes })
    }

    pub fn get(&self, path: &[&str]) -> Option<Counts> {
        let p: Path = path.iter().map(|s| s.to_string()).collect();
        self.nodes.get(&p).copied()
    }

    /// Children (by method name) of the root: the first instrumented methods of each thread.
    pub fn root_methods(&self) -> Vec<&str> {
        self.nodes
            .keys()
            .filter(|p| p.len() == 1)
            .map(|p| p[0].as_str())
            .collect()
    }

    pub fn total_calls(&self) -> u64 {
        self.nodes.values().map(|c| c.calls).sum()
    }

    pub fn total_bytecodes(&self) -> u64 {
        self.nodes.values().map(|c| c.bytecodes).sum()
    }

    /// Sums of calls and bytecodes over all contexts whose last method is `method`.
    pub fn method_totals(&self, method: &str) -> (u64, u64) {
        self.nodes
            .iter()
            .filter(|(p, _)| p.last().map(|m| m.as_str()) == Some(method))
            .fold((0, 0), |(c, b), (_, n)| (c + n.calls, b + n.bytecodes))
    }

    /// The tree as indented text, for failure messages.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (p, c) in &self.nodes {
            let _ = writeln!(
                s,
                "{}{} calls={} bytecodes={}{}",
                "  ".repeat(p.len() - 1),
                p[p.len() - 1],
                c.calls,
                c.bytecodes,
                if c.exc { " (exception)" } else { "" }
            );
        }
        s
    }
}

fn walk(
    node: &serde_json::Value,
    path: &mut Path,
    out: &mut BTreeMap<Path, Counts>,
) -> Result<(), String> {
    let kids = node
        .get("children")
        .and_then(|c| c.as_array())
        .ok_or_else(|| format!("node {} has no \"children\" array", show_path(path)))?;
    for k in kids {
        let method = k
            .get("method")
            .and_then(|m| m.as_str())
            .ok_or_else(|| format!("a child of {} has no string \"method\"", show_path(path)))?;
        let num = |key: &str| {
            k.get(key).and_then(|n| n.as_u64()).ok_or_else(|| {
                format!(
                    "node {} → {method}: \"{key}\" is not an unsigned integer",
                    show_path(path)
                )
            })
        };
        let counts = Counts {
            calls: num("calls")?,
            bytecodes: num("bytecodes")?,
            exc: k.get("exc").and_then(|e| e.as_bool()).unwrap_or(false),
        };
        path.push(method.to_string());
        if out.insert(path.clone(), counts).is_some() {
            return Err(format!("duplicate child: {}", show_path(path)));
        }
        walk(k, path, out)?;
        path.pop();
    }
    Ok(())
}

/// How bytecode counts of the agent must relate to the oracle's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Every node equal (bba=precise, or any BBA for a program without exceptions).
    Exact,
    /// bba=default: equal where no exception crossed the context, never fewer elsewhere.
    ExactUnlessException,
}

/// Compares node by node; returns one line per difference (empty: the trees agree).
pub fn compare(expected: &Mct, actual: &Mct, rule: Rule) -> Vec<String> {
    let mut diffs = Vec::new();
    for (p, e) in &expected.nodes {
        match actual.nodes.get(p) {
            None => diffs.push(format!(
                "missing in agent: {}  (oracle calls={} bytecodes={})",
                show_path(p),
                e.calls,
                e.bytecodes
            )),
            Some(a) => {
                let bc_ok = match rule {
                    Rule::Exact => a.bytecodes == e.bytecodes,
                    Rule::ExactUnlessException if e.exc => a.bytecodes >= e.bytecodes,
                    Rule::ExactUnlessException => a.bytecodes == e.bytecodes,
                };
                if a.calls != e.calls || !bc_ok {
                    diffs.push(format!(
                        "{}: oracle calls={} bytecodes={}{} | agent calls={} bytecodes={}",
                        show_path(p),
                        e.calls,
                        e.bytecodes,
                        if e.exc {
                            " (exception: agent may over-count under bba=default)"
                        } else {
                            ""
                        },
                        a.calls,
                        a.bytecodes
                    ));
                }
            }
        }
    }
    for (p, a) in &actual.nodes {
        if !expected.nodes.contains_key(p) {
            diffs.push(format!(
                "extra in agent: {}  (agent calls={} bytecodes={})",
                show_path(p),
                a.calls,
                a.bytecodes
            ));
        }
    }
    diffs
}
