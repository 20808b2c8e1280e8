//! Decodes a `usdt_tap=FILE` capture (every record the agent fired, each behind its `u32`
//! little-endian length) with jp-common's checked decoder, checks the protocol the way jpd
//! relies on it, and rebuilds the merged tree exactly as jpd would: per-thread trees from
//! absolute and delta records, merged by calling-context path.

use super::mct::{Counts, Mct, Path};
use jp_common::wire::{self, Hello, MethodIter, Tree, MAX_RECORD};
use std::collections::{BTreeMap, HashMap};

/// The generations the HELLO records of a capture still being written answer, so far (a
/// record cut at the end is left for the next look).
pub fn hello_generations(buf: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(len) = buf.get(at..at + 4) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(rec) = buf.get(at + 4..at + 4 + len) else {
            break;
        };
        at += 4 + len;
        if let Ok(r) = wire::split_record(rec) {
            if r.header.kind == wire::KIND_HELLO {
                out.push(r.header.generation);
            }
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloInfo {
    pub generation: u64,
    pub start_time_ms: u64,
    pub granularity: u64,
    pub bba: u64,
    pub live_threads: u64,
    pub jdk_version: String,
    pub main: String,
    pub agent_version: String,
}

#[derive(Default)]
struct Stream {
    /// Its contributions were replaced by a snapshot of the ended threads.
    dropped: bool,
    synced: bool,
    next_seq: u32,
    ended: bool,
    name: String,
    /// node id → (parent, mid, calls, bytecodes)
    nodes: HashMap<u32, (u32, u32, u64, u64)>,
}

/// What a capture held.
#[derive(Default)]
pub struct Tap {
    pub records: usize,
    pub bytes: usize,
    pub tree_records: usize,
    pub tree_entries: usize,
    /// Records of a full tree after its first (the tree did not fit one record).
    pub absolute_continuations: usize,
    /// Tree records with deltas.
    pub delta_records: usize,
    /// Records per kind (HELLO, METHODS, TREE, JVM_END).
    pub kinds: BTreeMap<u16, usize>,
    pub hellos: Vec<HelloInfo>,
    /// mid → `pkg.Class.name(DESC)`, as the last hello's table says.
    pub methods: HashMap<u32, String>,
    /// Method name → source file (with its package directory; empty if unknown).
    pub sources: HashMap<String, String>,
    /// Thread streams that sent a full tree (RESYNC), per stream, counted over the capture.
    pub resyncs: BTreeMap<u64, usize>,
    pub jvm_end: bool,
    pub pid: u32,
    /// Records of a stream that ended, folded into the next ended-threads snapshot.
    pub snapshots: usize,
    /// Late attach: the records before the hello of this generation were never seen, and
    /// old-generation records of streams not yet re-sent are dropped (as jpd does).
    from_generation: Option<u64>,
    started: bool,
    hello_generation: u64,
    /// Records skipped: before the first hello seen, or stale (see `from_generation`).
    pub skipped: usize,
    streams: BTreeMap<u64, Stream>,
    /// Thread stream → (kernel thread id, context slot address, whether it publishes on
    /// the heap) of its `KIND_THREAD`.
    pub context_slots: BTreeMap<u64, (u32, u64, bool)>,
    /// Virtual threads' time off their carriers (`KIND_UNMOUNTED`), summed over streams by
    /// (the context's method, `"<root>"` for a thread's root, why) → (ns, periods).
    pub unmounted: BTreeMap<(String, u8), (u64, u64)>,
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Tap {
    /// Decodes and checks a whole capture; the error names the record and what is wrong.
    pub fn decode(buf: &[u8]) -> Result<Tap, String> {
        Tap::decode_from(buf, None)
    }

    /// Like [`Tap::decode`], as a tracer that attached when `generation` was written sees it:
    /// nothing before the hello answering it.
    pub fn decode_from(buf: &[u8], generation: Option<u64>) -> Result<Tap, String> {
        let mut t = Tap {
            from_generation: generation,
            started: generation.is_none(),
            ..Tap::default()
        };
        let mut at = 0usize;
        let mut jvm_seq: Option<u32> = None;
        while at < buf.len() {
            let idx = t.records;
            let len_bytes = buf.get(at..at + 4).ok_or(format!(
                "record #{idx}: truncated length prefix at byte {at}"
            ))?;
            let len = u32::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            at += 4;
            let rec = buf.get(at..at + len).ok_or(format!(
                "record #{idx}: {len} bytes announced, file ends first"
            ))?;
            at += len;
            if len > MAX_RECORD {
                return Err(format!("record #{idx}: {len} bytes > MAX_RECORD"));
            }
            t.records += 1;
            t.bytes += len;
            t.record(rec, &mut jvm_seq)
                .map_err(|e| format!("record #{idx} ({len} bytes): {e}"))?;
        }
        if !t.jvm_end {
            return Err("no JVM_END record at the end".into());
        }
        Ok(t)
    }

    fn record(&mut self, rec: &[u8], jvm_seq: &mut Option<u32>) -> Result<(), String> {
        let r = wire::split_record(rec).map_err(|e| format!("split_record: {e}"))?;
        let h = r.header;
        if !self.started {
            if h.kind == wire::KIND_HELLO && Some(h.generation) == self.from_generation {
                self.started = true;
            } else {
                self.skipped += 1;
                return Ok(());
            }
        }
        if self.jvm_end {
            return Err("record after JVM_END".into());
        }
        if h.len as usize != rec.len() {
            return Err("header len differs".into());
        }
        if self.pid == 0 {
            self.pid = h.pid;
        } else if h.pid != self.pid {
            return Err(format!("pid {} after {}", h.pid, self.pid));
        }
        *self.kinds.entry(h.kind).or_default() += 1;
        if h.stream == 0 {
            let want = match (h.kind, *jvm_seq) {
                (wire::KIND_HELLO, _) => 0,
                (_, None) => return Err("JVM stream record before any HELLO".into()),
                (_, Some(n)) => n,
            };
            if h.seq != want {
                return Err(format!("JVM stream seq {} where {want} was due", h.seq));
            }
            *jvm_seq = Some(want + 1);
        }
        match h.kind {
            wire::KIND_HELLO => {
                let x = Hello::decode(r.body).map_err(|e| format!("hello: {e}"))?;
                self.hellos.push(HelloInfo {
                    generation: h.generation,
                    start_time_ms: x.start_time_ms,
                    granularity: x.granularity,
                    bba: x.bba,
                    live_threads: x.live_threads,
                    jdk_version: s(x.jdk_version),
                    main: s(x.main),
                    agent_version: s(x.agent_version),
                });
                // A hello replaces the method table: the whole table follows.
                self.methods.clear();
                self.hello_generation = h.generation;
            }
            wire::KIND_METHODS => {
                for m in MethodIter::new(r.body).map_err(|e| format!("methods: {e}"))? {
                    let m = m.map_err(|e| format!("method entry: {e}"))?;
                    let name = format!("{}.{}{}", s(m.class), s(m.name), s(m.descriptor));
                    if self.methods.insert(m.mid, name.clone()).is_some() {
                        return Err(format!("method {} ({name}) sent twice", m.mid));
                    }
                    self.sources.insert(name.clone(), s(m.source_file));
                }
            }
            wire::KIND_TREE => self.tree(&h, r.body)?,
            wire::KIND_JVM_END => {
                if let Some((id, _)) = self
                    .streams
                    .iter()
                    .find(|(id, st)| **id != wire::STREAM_ENDED && !st.ended && !st.dropped)
                {
                    return Err(format!("JVM_END while thread stream {id} has not ended"));
                }
                self.jvm_end = true;
            }
            wire::KIND_THREAD => {
                let t = wire::ThreadSlot::decode(r.body).map_err(|e| format!("thread: {e}"))?;
                // The agent's cookies are odd (never 0, whatever the random bits).
                if !t.well_formed() || t.heap.is_some_and(|c| c.cookie & 1 == 0) {
                    return Err(format!("thread slot {t:?} of stream {}", h.stream));
                }
                if self.streams.get(&h.stream).is_some_and(|st| st.ended) {
                    return Err(format!("thread slot of stream {} after its end", h.stream));
                }
                self.context_slots
                    .insert(h.stream, (t.os_tid, t.slot, t.heap.is_some()));
            }
            wire::KIND_UNMOUNTED => self.unmounted(&h, r.body)?,
            k => return Err(format!("kind {k}")),
        }
        Ok(())
    }

    /// Its contexts were defined before it, and its stream has not ended.
    fn unmounted(&mut self, h: &wire::RecordHeader, body: &[u8]) -> Result<(), String> {
        let st = self.streams.get(&h.stream).ok_or(format!(
            "unmounted time of stream {} before its tree",
            h.stream
        ))?;
        if st.ended {
            return Err(format!(
                "unmounted time of stream {} after its end",
                h.stream
            ));
        }
        let mut entries = Vec::new();
        wire::Unmounted::decode_each(body, |u| entries.push(u))
            .map_err(|e| format!("unmounted: {e}"))?;
        for u in entries {
            let method = match u.node {
                0 => "<root>".to_string(),
                n => {
                    let &(_, mid, _, _) = st.nodes.get(&n).ok_or(format!(
                        "stream {}: unmounted time under undefined node {n}",
                        h.stream
                    ))?;
                    self.methods.get(&mid).cloned().unwrap_or_default()
                }
            };
            let t = self.unmounted.entry((method, u.why)).or_default();
            t.0 += u.ns;
            t.1 += u.periods;
        }
        Ok(())
    }

    fn tree(&mut self, h: &wire::RecordHeader, body: &[u8]) -> Result<(), String> {
        let t = Tree::decode(body).map_err(|e| format!("tree: {e}"))?;
        self.tree_records += 1;
        let absolute = h.flags & wire::FLAG_ABSOLUTE != 0;
        let resync = h.flags & wire::FLAG_RESYNC != 0;
        let known = self.streams.get(&h.stream).is_some_and(|s| s.synced);
        if !known
            && !resync
            && self.from_generation.is_some()
            && h.generation != self.hello_generation
        {
            // A thread that had not seen the new generation yet: jpd drops these too.
            self.skipped += 1;
            return Ok(());
        }
        if h.stream == wire::STREAM_ENDED {
            // Always a whole snapshot (its first record RESYNC), never ended.
            if !absolute || h.flags & wire::FLAG_END != 0 {
                return Err(format!("ended-threads snapshot with flags {:#x}", h.flags));
            }
            if resync {
                // The snapshot replaces every ended thread's own contribution.
                for (id, st) in self.streams.iter_mut() {
                    if *id != wire::STREAM_ENDED && st.ended {
                        st.dropped = true;
                    }
                }
                self.snapshots += 1;
            }
        }
        let st = self.streams.entry(h.stream).or_default();
        if resync {
            if st.ended {
                return Err(format!("stream {} resyncs after its END", h.stream));
            }
            *st = Stream {
                synced: true,
                ..Stream::default()
            };
            *self.resyncs.entry(h.stream).or_default() += 1;
            if t.thread_name.is_empty() {
                return Err(format!(
                    "stream {}: full tree without a thread name",
                    h.stream
                ));
            }
        } else if !st.synced {
            return Err(format!(
                "stream {}: a record before any full tree",
                h.stream
            ));
        } else if st.ended {
            return Err(format!("stream {}: record after END", h.stream));
        } else if absolute {
            self.absolute_continuations += 1;
        }
        if h.seq != st.next_seq {
            return Err(format!(
                "stream {}: seq {} where {} was due",
                h.stream, h.seq, st.next_seq
            ));
        }
        st.next_seq += 1;
        if !absolute {
            self.delta_records += 1;
        }
        if !t.thread_name.is_empty() {
            st.name = s(t.thread_name);
        }
        for e in t.entries {
            let e = e.map_err(|e| format!("tree entry: {e}"))?;
            self.tree_entries += 1;
            match e.definition {
                Some((parent, mid)) => {
                    if parent != 0 && !st.nodes.contains_key(&parent) {
                        return Err(format!(
                            "stream {}: node {} defined under undefined parent {parent}",
                            h.stream, e.node
                        ));
                    }
                    if !self.methods.contains_key(&mid) {
                        return Err(format!(
                            "stream {}: node {} names method {mid} before it was sent",
                            h.stream, e.node
                        ));
                    }
                    if st.nodes.contains_key(&e.node) {
                        return Err(format!(
                            "stream {}: node {} defined twice",
                            h.stream, e.node
                        ));
                    }
                    st.nodes.insert(e.node, (parent, mid, e.calls, e.bytecodes));
                }
                None => {
                    if absolute {
                        return Err(format!(
                            "stream {}: a full tree must define node {}",
                            h.stream, e.node
                        ));
                    }
                    let n = st.nodes.get_mut(&e.node).ok_or(format!(
                        "stream {}: delta for undefined node {}",
                        h.stream, e.node
                    ))?;
                    n.2 = n.2.checked_add(e.calls).ok_or("calls overflow")?;
                    n.3 = n.3.checked_add(e.bytecodes).ok_or("bytecodes overflow")?;
                }
            }
        }
        if h.flags & wire::FLAG_END != 0 {
            st.ended = true;
        }
        Ok(())
    }

    /// Thread names by stream.
    pub fn thread_names(&self) -> BTreeMap<u64, String> {
        self.streams
            .iter()
            .map(|(id, st)| (*id, st.name.clone()))
            .collect()
    }

    /// The merged tree, as jpd builds it: every thread's tree added by calling-context path.
    pub fn merged(&self, bba: &str) -> Result<Mct, String> {
        let mut nodes: BTreeMap<Path, Counts> = BTreeMap::new();
        for (id, st) in self.streams.iter().filter(|(_, st)| !st.dropped) {
            let mut paths: HashMap<u32, Path> = HashMap::new();
            for &node in st.nodes.keys() {
                let p = self.path(*id, st, node, &mut paths)?;
                let &(_, _, calls, bytecodes) = &st.nodes[&node];
                let c = nodes.entry(p).or_default();
                c.calls += calls;
                c.bytecodes += bytecodes;
            }
        }
        Ok(Mct {
            bba: bba.to_string(),
            nodes,
        })
    }

    fn path(
        &self,
        stream: u64,
        st: &Stream,
        node: u32,
        memo: &mut HashMap<u32, Path>,
    ) -> Result<Path, String> {
        // Iterative: trees can be deep.
        let mut chain = Vec::new();
        let mut at = node;
        while at != 0 && !memo.contains_key(&at) {
            chain.push(at);
            if chain.len() > st.nodes.len() {
                return Err(format!("stream {stream}: cycle through node {node}"));
            }
            at = st.nodes[&at].0;
        }
        let mut p = if at == 0 {
            Vec::new()
        } else {
            memo[&at].clone()
        };
        for &n in chain.iter().rev() {
            let mid = st.nodes[&n].1;
            let name = self
                .methods
                .get(&mid)
                .ok_or(format!("stream {stream}: unknown method {mid}"))?;
            p.push(name.clone());
            memo.insert(n, p.clone());
        }
        Ok(p)
    }
}
