//! JVM trees as the agent's `out=` file and `jpctl jvm export --format json` write them
//! (`jp-mct/1` JSON): read, stripped of the CPU keys jpd adds, and compared node by node.

use std::path::Path;

use serde_json::Value;

pub fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Without the CPU keys jpd adds when its kernel sampler is joined to the JVM (the
/// agent's file has none).
pub fn strip_cpu(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("cpu");
            m.remove("cpu_unit");
            m.values_mut().for_each(strip_cpu);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_cpu),
        _ => {}
    }
}

/// Node-by-node comparison with a readable list of the first differences.
pub fn assert_same_tree(what: &str, agent: &Value, jpd: &Value) {
    if agent == jpd {
        return;
    }
    let mut diffs = Vec::new();
    diff(&mut diffs, "", agent, jpd);
    panic!(
        "{what}: jpd's tree differs from the agent's out= file in {} places, first ones:\n{}",
        diffs.len(),
        diffs
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn diff(out: &mut Vec<String>, path: &str, a: &Value, b: &Value) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => diff(out, &format!("{path}/{k}"), v, w),
                    None => out.push(format!("{path}/{k}: only in the agent's file")),
                }
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                out.push(format!("{path}/{k}: only in jpd's"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                out.push(format!("{path}: {} vs {} entries", x.len(), y.len()));
            }
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                let label = v
                    .get("method")
                    .and_then(Value::as_str)
                    .map_or_else(|| i.to_string(), str::to_string);
                diff(out, &format!("{path}[{label}]"), v, w);
            }
        }
        _ if a != b => out.push(format!("{path}: agent {a} jpd {b}")),
        _ => {}
    }
}
