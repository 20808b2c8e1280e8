//! From the JVM store's answers to the API's JVM messages. Pure functions over
//! copies taken under the store's lock, so the lock is held only for the copy.

use std::collections::HashMap;
use std::sync::Arc;

use jp_mct::Mct;
use jp_proto::v1 as pb;
use tonic::Status;

use super::kernel::unix_ms;
use crate::store::jvm::sink::UsdtStatus;
use crate::store::jvm::{IngestStats, JvmSummary, MethodTotals};

/// Bytes per chunk of an export stream (well below gRPC's 4 MiB default limit).
pub const EXPORT_CHUNK: usize = 1 << 20;

pub fn summary(s: &JvmSummary) -> pb::JvmSummary {
    pb::JvmSummary {
        pid: s.pid,
        ns_pid: s.ns_pid,
        main: s.main.clone(),
        jdk_version: s.jdk_version.clone(),
        bba: s.bba.clone(),
        threads_live: s.threads_live,
        threads_total: s.threads_total,
        calls: s.calls,
        bytecodes: s.bytecodes,
        attached_since_unix_ms: unix_ms(Some(s.attached_since)),
        exited_unix_ms: unix_ms(s.exited_at),
        complete: s.complete,
        incomplete_reason: s.incomplete_reason.clone(),
        records_lost: s.records_lost,
        records_malformed: s.records_malformed,
        nodes: s.nodes,
        methods: s.methods,
        records: s.records,
        limit_drops: s.limit_drops,
        ring_rate_limited: s.ring_rate_limited,
        ring_full: s.ring_full,
        finished: s.finished,
        agent_version: s.agent_version.clone(),
        jvm_start_unix_ms: s.jvm_start_unix_ms,
        cmdline: s.cmdline.clone(),
        memory_bytes: s.memory_bytes,
        cpu: s
            .cpu
            .iter()
            .map(|&(kind, user_ns, kernel_ns)| pb::JvmCpuKind {
                kind: kind.to_string(),
                user_ns,
                kernel_ns,
            })
            .collect(),
        cpu_pending_ns: s.cpu_pending_ns,
        cpu_unresolved_ns: s.cpu_unresolved_ns,
        cpu_read_failed_ns: s.cpu_read_failed_ns,
        cpu_contexts_ns: s.cpu_contexts_ns,
        publishing_threads: s.publishing_threads,
        // The agent's state is read from the process, for `ListJvms` with `all` only.
        agent_state: pb::JvmAgentState::Unspecified as i32,
        window_id: 0,
        uid: None,
        attach_disabled: false,
    }
}

pub fn list(jvms: &[JvmSummary]) -> pb::JvmList {
    pb::JvmList {
        jvms: jvms.iter().map(summary).collect(),
    }
}

pub fn status(s: &IngestStats) -> pb::JvmStatus {
    pb::JvmStatus {
        jvms_attached: s.jvms_running,
        jvms_exited: s.jvms_exited,
        records: s.records,
        bytes: s.bytes,
        malformed: s.malformed.total(),
        malformed_by_reason: s
            .malformed
            .by_reason()
            .into_iter()
            .map(|(reason, records)| pb::JvmMalformed {
                reason: reason.to_string(),
                records,
            })
            .collect(),
        lost: s.lost,
        ring_full: s.kernel.ring_full,
        faults: s.kernel.fault,
        too_long: s.kernel.too_long,
        fired: s.kernel.fired,
        nodes: s.nodes,
        memory_bytes: s.memory_bytes,
        gaps: s.gaps,
        resync_requests: s.resync_requests,
        limit_drops: s.limit_drops,
        jvm_limit_drops: s.jvm_limit_drops,
        events: s.events,
        thread_nodes: s.thread_nodes,
        collector: s.collector.as_ref().map(collector),
        offcpu_dropped: s.offcpu.map(|c| pb::OffcpuDropped {
            over_cap: c.over_cap,
            orphans: c.orphans,
            stale: c.stale,
            read_failed: c.read_failed,
            lost: c.lost,
        }),
    }
}

fn collector(c: &UsdtStatus) -> pb::UsdtCollector {
    pb::UsdtCollector {
        files: c
            .files
            .iter()
            .map(|f| pb::UsdtFile {
                path: f.path.clone(),
                probe_sites: u32::try_from(f.sites).unwrap_or(u32::MAX),
                processes: u32::try_from(f.users.len()).unwrap_or(u32::MAX),
                idle: f.idle,
            })
            .collect(),
        refused: c
            .refused
            .iter()
            .map(|r| pb::UsdtRefusedFile {
                path: r.path.clone(),
                reason: r.reason.clone(),
            })
            .collect(),
        processes: u32::try_from(c.processes.len()).unwrap_or(u32::MAX),
        scans: c.scans,
        last_scan_us: u64::try_from(c.last_scan.as_micros()).unwrap_or(u64::MAX),
        generations_written: c.generations_written,
        errors: c.errors,
        last_error: c.last_error.clone(),
    }
}

/// NOT_FOUND for a pid the store holds nothing of, naming the pids it does hold.
pub fn not_found(pid: u32, known: &[u32]) -> Status {
    let held = if known.is_empty() {
        "jpd holds no JVM profile".to_string()
    } else {
        let pids: Vec<String> = known.iter().map(u32::to_string).collect();
        format!("jpd holds JVM pids {}", pids.join(", "))
    };
    Status::not_found(format!(
        "no JVM with pid {pid}: {held} (see `jpctl jvm list`)"
    ))
}

/// Checks a profile request's limits.
pub fn check_profile_request(r: &pb::GetJvmProfileRequest) -> Result<(), Status> {
    if !(0.0..=1.0).contains(&r.min_share) {
        return Err(Status::invalid_argument(format!(
            "min_share must be a fraction in [0, 1], got {}",
            r.min_share
        )));
    }
    Ok(())
}

/// Method ids of one answer: the order of first use.
#[derive(Default)]
struct MethodTable {
    ids: HashMap<(Arc<str>, Option<Arc<str>>), u32>,
    methods: Vec<pb::JvmMethod>,
}

impl MethodTable {
    fn id(&mut self, name: &Arc<str>, file: &Option<Arc<str>>) -> u32 {
        let next = u32::try_from(self.methods.len()).unwrap_or(u32::MAX);
        let methods = &mut self.methods;
        *self
            .ids
            .entry((Arc::clone(name), file.clone()))
            .or_insert_with(|| {
                methods.push(pb::JvmMethod {
                    id: next,
                    name: name.to_string(),
                    file: file.as_deref().map(str::to_string),
                });
                next
            })
    }
}

/// Each context's own times (ns) by node index of a merged tree; a vector is empty when
/// that time is not measured for the JVM (read as 0).
#[derive(Clone, Debug, Default)]
pub struct NodeTimes {
    /// CPU (user and kernel mode), when the kernel sampler is joined to the JVM.
    pub cpu: Vec<u64>,
    /// Time off CPU, when the scheduler program measures the JVM (kernel.offcpu).
    pub offcpu: Vec<u64>,
}

/// One time per node: its own, and with everything below it (empty: 0 everywhere).
struct Summed {
    own: Vec<u64>,
    inclusive: Vec<u64>,
}

impl Summed {
    fn own(&self, i: usize) -> u64 {
        self.own.get(i).copied().unwrap_or(0)
    }

    fn inclusive(&self, i: usize) -> u64 {
        self.inclusive.get(i).copied().unwrap_or(0)
    }
}

/// Per node of a tree: its subtree's nodes and calls, and its CPU and off-CPU time.
struct Subtrees {
    size: Vec<u64>,
    calls: Vec<u64>,
    cpu: Summed,
    offcpu: Summed,
}

impl Subtrees {
    fn of(t: &Mct, times: &NodeTimes) -> Subtrees {
        let n = t.nodes.len();
        let mut size = vec![1u64; n];
        let mut calls: Vec<u64> = t.nodes.iter().map(|x| x.calls).collect();
        let own = |v: &[u64]| -> Vec<u64> {
            if v.is_empty() {
                return Vec::new();
            }
            (0..n).map(|i| v.get(i).copied().unwrap_or(0)).collect()
        };
        let (cpu, offcpu) = (own(&times.cpu), own(&times.offcpu));
        let mut inclusive = [cpu.clone(), offcpu.clone()];
        // Children have larger indexes than their parents.
        for i in (1..n).rev() {
            if let Some(p) = t.nodes[i].parent.filter(|&p| p < i) {
                size[p] += size[i];
                calls[p] = calls[p].wrapping_add(calls[i]);
                for v in inclusive.iter_mut().filter(|v| !v.is_empty()) {
                    v[p] = v[p].saturating_add(v[i]);
                }
            }
        }
        let [inclusive_cpu, inclusive_offcpu] = inclusive;
        Subtrees {
            size,
            calls,
            cpu: Summed {
                own: cpu,
                inclusive: inclusive_cpu,
            },
            offcpu: Summed {
                own: offcpu,
                inclusive: inclusive_offcpu,
            },
        }
    }

    /// Adds node `i`'s whole subtree (of `bytecodes`) to `cut`.
    fn cut(&self, cut: &mut Option<pb::JvmCut>, i: usize, bytecodes: u64) {
        let c = cut.get_or_insert_with(pb::JvmCut::default);
        c.subtrees += 1;
        c.nodes += self.size[i];
        c.calls = c.calls.wrapping_add(self.calls[i]);
        c.bytecodes = c.bytecodes.wrapping_add(bytecodes);
        c.cpu_ns = c.cpu_ns.saturating_add(self.cpu.inclusive(i));
        c.offcpu_ns = c.offcpu_ns.saturating_add(self.offcpu.inclusive(i));
    }
}

/// The tree in pre-order (jp-mct's output order), without the subtrees that are
/// deeper than `max_depth` (0: no limit) or hold less than `min_share` of the
/// bytecodes. Both limits only ever cut whole subtrees (a child is never deeper
/// than, nor holds more than, its parent), and each cut is summed on its parent.
/// `times`: each context's own CPU and off-CPU time, where measured; the cut stays by
/// bytecodes (what the tree is of), the times are summed along.
pub fn profile(
    jvm: &JvmSummary,
    t: &Mct,
    times: &NodeTimes,
    max_depth: u32,
    min_share: f64,
) -> pb::JvmProfile {
    pb::JvmProfile {
        jvm: Some(summary(jvm)),
        ..tree_profile(t, times, max_depth, min_share)
    }
}

/// [`profile`] without the JVM's summary (a window's tree has its own).
pub fn tree_profile(t: &Mct, times: &NodeTimes, max_depth: u32, min_share: f64) -> pb::JvmProfile {
    let n = t.nodes.len();
    let inclusive = t.inclusive_bytecodes();
    let sub = Subtrees::of(t, times);
    let total = inclusive.first().copied().unwrap_or(0);
    let threshold = min_share * total as f64;
    let keep = |i: usize, depth: u32| {
        (max_depth == 0 || depth < max_depth)
            && (min_share <= 0.0 || inclusive[i] as f64 >= threshold)
    };
    let ranks = t.name_ranks();
    let mut table = MethodTable::default();
    let mut out = pb::JvmProfile {
        total_nodes: n.saturating_sub(1) as u64,
        max_depth,
        min_share,
        ..Default::default()
    };
    // Children of `parent` at `depth`: kept ones onto the stack (reversed, so they
    // pop in order), cut ones summed into `cut`.
    let mut stack: Vec<(usize, u32)> = Vec::new();
    let push_children = |parent: usize,
                         depth: u32,
                         cut: &mut Option<pb::JvmCut>,
                         stack: &mut Vec<(usize, u32)>,
                         cut_nodes: &mut u64| {
        let kids = t.sorted_children_ranked(parent, &ranks);
        for &c in kids.iter().rev() {
            if keep(c, depth) {
                stack.push((c, depth));
            } else {
                sub.cut(cut, c, inclusive[c]);
                *cut_nodes += sub.size[c];
            }
        }
    };
    let mut root_cut = None;
    let mut cut_nodes = 0u64;
    push_children(0, 0, &mut root_cut, &mut stack, &mut cut_nodes);
    while let Some((i, depth)) = stack.pop() {
        let node = &t.nodes[i];
        let mut cut = None;
        push_children(i, depth + 1, &mut cut, &mut stack, &mut cut_nodes);
        out.nodes.push(pb::JvmNode {
            method_id: table.id(&node.method, &node.file),
            depth,
            calls: node.calls,
            bytecodes: node.bytecodes,
            inclusive_bytecodes: inclusive[i],
            cut,
            cpu_ns: sub.cpu.own(i),
            inclusive_cpu_ns: sub.cpu.inclusive(i),
            offcpu_ns: sub.offcpu.own(i),
            inclusive_offcpu_ns: sub.offcpu.inclusive(i),
        });
    }
    out.root_cut = root_cut;
    out.cut_nodes = cut_nodes;
    out.methods = table.methods;
    out
}

/// Sorts `methods` by `order` (descending, then by name) and keeps `limit` (0: all).
pub fn top(
    jvm: &JvmSummary,
    mut methods: Vec<MethodTotals>,
    order: pb::JvmTopOrder,
    limit: u32,
) -> pb::JvmTop {
    let key = |m: &MethodTotals| match order {
        pb::JvmTopOrder::Bytecodes => m.exclusive_bytecodes,
        pb::JvmTopOrder::Calls => m.calls,
        pb::JvmTopOrder::Inclusive => m.inclusive_bytecodes,
        pb::JvmTopOrder::Cpu => m.cpu_ns,
        pb::JvmTopOrder::Offcpu => m.offcpu_ns,
        pb::JvmTopOrder::Wall => m.cpu_ns.saturating_add(m.offcpu_ns),
    };
    methods.sort_by(|a, b| {
        key(b)
            .cmp(&key(a))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.file.cmp(&b.file))
    });
    let total = u32::try_from(methods.len()).unwrap_or(u32::MAX);
    if limit > 0 {
        methods.truncate(limit as usize);
    }
    pb::JvmTop {
        jvm: Some(summary(jvm)),
        order: order as i32,
        methods: methods
            .iter()
            .map(|m| pb::JvmMethodTotals {
                name: m.name.to_string(),
                file: m.file.as_deref().map(str::to_string),
                calls: m.calls,
                bytecodes: m.exclusive_bytecodes,
                inclusive_bytecodes: m.inclusive_bytecodes,
                cpu_ns: m.cpu_ns,
                inclusive_cpu_ns: m.inclusive_cpu_ns,
                offcpu_ns: m.offcpu_ns,
                wall_ns: m.cpu_ns.saturating_add(m.offcpu_ns),
            })
            .collect(),
        total_methods: total,
        offcpu_idle_hidden_ns: 0,
    }
}

/// The whole tree in `format`, written by jp-mct's writers (the agent's own); pprof,
/// OTLP and JSON carry CPU per context when the kernel sampler is joined to the JVM
/// (`cpu`). OTLP names the JVM's resource from `jvm`, with the operator's attributes
/// (`otlp_extra`).
pub fn export(
    t: &Mct,
    cpu: Option<&jp_mct::MctCpu>,
    format: pb::JvmExportFormat,
    jvm: Option<crate::export::otlp::JvmIdentity<'_>>,
    otlp_extra: &std::collections::BTreeMap<String, String>,
) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    match format {
        pb::JvmExportFormat::Json => jp_mct::write_json_cpu(t, cpu, &mut v)?,
        pb::JvmExportFormat::Pprof => {
            let options = jp_mct::PprofOptions { cpu, time: None };
            crate::export::mct_pprof::write_pprof(t, options, &mut v)?
        }
        pb::JvmExportFormat::Folded => crate::export::mct_pprof::write_folded(t, &mut v)?,
        pb::JvmExportFormat::Tree => jp_mct::write_tree(t, &mut v)?,
        pb::JvmExportFormat::Otlp => {
            let options = jp_mct::PprofOptions { cpu, time: None };
            crate::export::otlp::write_mct(t, options, jvm, otlp_extra, &mut v)?
        }
    }
    Ok(v)
}

/// `data` as a stream's chunks; the last one says the total size. An empty file
/// is one empty last chunk.
pub fn chunks(data: &[u8]) -> Vec<pb::JvmExportChunk> {
    let total = data.len() as u64;
    let mut out: Vec<pb::JvmExportChunk> = data
        .chunks(EXPORT_CHUNK)
        .map(|c| pb::JvmExportChunk {
            data: c.to_vec(),
            ..pb::JvmExportChunk::default()
        })
        .collect();
    if out.is_empty() {
        out.push(pb::JvmExportChunk::default());
    }
    if let Some(last) = out.last_mut() {
        last.last = true;
        last.total_bytes = total;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_data_and_the_last_says_its_size() {
        let data: Vec<u8> = (0..EXPORT_CHUNK * 2 + 5).map(|i| i as u8).collect();
        let c = chunks(&data);
        let sizes: Vec<(usize, bool, u64)> = c
            .iter()
            .map(|c| (c.data.len(), c.last, c.total_bytes))
            .collect();
        assert_eq!(
            sizes,
            [
                (EXPORT_CHUNK, false, 0),
                (EXPORT_CHUNK, false, 0),
                (5, true, data.len() as u64)
            ]
        );
        let joined: Vec<u8> = c.into_iter().flat_map(|c| c.data).collect();
        assert_eq!(joined, data);
        let empty = chunks(&[]);
        assert_eq!(
            empty,
            [pb::JvmExportChunk {
                last: true,
                ..pb::JvmExportChunk::default()
            }]
        );
    }

    #[test]
    fn not_found_names_the_known_pids() {
        let s = not_found(5, &[]);
        assert_eq!(s.code(), tonic::Code::NotFound);
        assert_eq!(
            s.message(),
            "no JVM with pid 5: jpd holds no JVM profile (see `jpctl jvm list`)"
        );
        let s = not_found(5, &[1, 22]);
        assert_eq!(
            s.message(),
            "no JVM with pid 5: jpd holds JVM pids 1, 22 (see `jpctl jvm list`)"
        );
    }

    #[test]
    fn min_share_must_be_a_fraction() {
        let r = |min_share| pb::GetJvmProfileRequest {
            pid: 1,
            max_depth: 0,
            min_share,
            ..Default::default()
        };
        assert!(check_profile_request(&r(0.0)).is_ok());
        assert!(check_profile_request(&r(1.0)).is_ok());
        assert!(check_profile_request(&r(-0.1)).is_err());
        assert!(check_profile_request(&r(f64::NAN)).is_err());
    }
}
