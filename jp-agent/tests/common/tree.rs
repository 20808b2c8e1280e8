//! Large profiles (real programs, `jdk=true`: millions of contexts, hundreds of
//! levels deep) read into a compact typed tree instead of path maps.

use serde::Deserialize;
use std::io::BufReader;
use std::path::Path;

#[derive(Deserialize)]
pub struct Doc {
    pub format: String,
    pub bba: String,
    pub root: Root,
}

#[derive(Deserialize)]
pub struct Root {
    pub children: Vec<Node>,
}

#[derive(Deserialize)]
pub struct Node {
    pub method: String,
    pub calls: u64,
    pub bytecodes: u64,
    pub children: Vec<Node>,
}

impl Doc {
    /// Reads and validates a `jp-mct/1` file (every node needs all four fields).
    pub fn read(path: &Path) -> Result<Doc, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, f));
        de.disable_recursion_limit();
        let doc = Doc::deserialize(&mut de)
            .and_then(|d| de.end().map(|_| d))
            .map_err(|e| format!("{}: not a valid jp-mct/1 document: {e}", path.display()))?;
        if doc.format != "jp-mct/1" {
            return Err(format!("{}: format is {:?}", path.display(), doc.format));
        }
        Ok(doc)
    }

    /// Calls every node, depth first, with its depth (1 = a root child).
    pub fn visit(&self, mut f: impl FnMut(&Node, usize)) {
        let mut stack: Vec<(&Node, usize)> = self.root.children.iter().map(|n| (n, 1)).collect();
        while let Some((n, d)) = stack.pop() {
            f(n, d);
            stack.extend(n.children.iter().map(|c| (c, d + 1)));
        }
    }
}
