//! What one JVM reports of itself: its summary for `jvm list`, why what jpd holds is
//! incomplete, its sizes and memory.

use jp_common::wire::STREAM_ENDED;

use std::time::SystemTime;

use super::super::slots::NodeMap;
use super::super::stream::ThreadStream;
use super::super::{JvmSummary, LimitKind};
use super::{EndedThread, Jvm};

impl Jvm {
    /// Thread streams that are threads (the ended-threads snapshot is not one).
    pub fn live_threads(&self) -> u32 {
        let snapshot = u32::from(self.threads.contains_key(&STREAM_ENDED));
        (self.threads.len() as u32).saturating_sub(snapshot)
    }

    pub fn node_count(&self) -> u64 {
        self.tree.len() as u64 - 1
    }

    pub fn thread_slots(&self) -> u64 {
        self.slots.used as u64
    }

    /// Bytes this JVM holds, from the capacities of every structure: O(1) (the
    /// variable-size parts keep running sums), so the store reads it after every record.
    pub fn memory_bytes(&self) -> u64 {
        let entry = |k: usize, v: usize| k + v + 1; // a hash map slot: key, value, control
        let threads = self.thread_bytes
            + self.threads.capacity() * entry(8, std::mem::size_of::<ThreadStream>());
        let ended = self.ended_name_bytes
            + self.ended.capacity() * entry(8, std::mem::size_of::<EndedThread>())
            + self.ended_order.capacity() * 8;
        let ended_maps = self.ended_map_bytes
            + self.ended_node_maps.capacity()
                * entry(8, std::mem::size_of::<(NodeMap, SystemTime)>());
        let hello = self.hello.as_ref().map_or(0, |h| h.bytes());
        (std::mem::size_of::<Jvm>()
            + self.tree.memory_bytes()
            + self.methods.memory_bytes()
            + threads
            + ended
            + ended_maps
            + self.ended_counts.capacity() * entry(4, 16)
            + self.carried.capacity() * entry(8, 0)
            + self.cpu.memory_bytes()
            + self.context.memory_bytes()
            + self.offcpu.memory_bytes()
            + hello) as u64
    }

    pub fn bba_name(&self) -> &'static str {
        match self.hello.as_ref().map(|h| h.bba) {
            Some(0) => "default",
            Some(_) => "precise",
            None => "",
        }
    }

    /// Why what jpd holds is not all the JVM reported; empty when complete.
    pub fn incomplete_reasons(&self) -> Vec<String> {
        let mut why = Vec::new();
        match (self.hello_generation, self.written_generation) {
            (None, _) => why.push("no HELLO yet (method table unknown)".to_string()),
            (Some(h), Some(w)) if h != w => {
                why.push("waiting for the re-send of the latest generation".to_string())
            }
            _ => {}
        }
        if self.hello.is_some() && !self.jvm_synced {
            why.push("method records lost, waiting for a re-send".to_string());
        }
        let waiting = self
            .threads
            .iter()
            .filter(|(&id, t)| id != STREAM_ENDED && !t.synced)
            .count();
        if waiting > 0 {
            why.push(format!("{waiting} threads waiting for a re-send"));
        }
        if self.ended_broken > 0 {
            why.push(format!(
                "{} threads ended with records lost",
                self.ended_broken
            ));
        }
        for k in &self.limits_hit {
            let v = match k {
                LimitKind::Nodes => self.limits.max_nodes_per_jvm,
                LimitKind::Threads => self.limits.max_threads_per_jvm,
                LimitKind::ThreadNodes => self.limits.max_thread_nodes_per_jvm,
                LimitKind::Methods => self.limits.max_methods_per_jvm,
                LimitKind::StringBytes => self.limits.max_string_bytes_per_jvm,
                LimitKind::StoreBytes => self.limits.max_store_bytes >> 20,
            };
            why.push(format!("limit {} = {v} reached, data dropped", k.name()));
        }
        if let Some((at, cause)) = self.loss_marker {
            let mut silent = self
                .threads
                .values()
                .filter(|t| t.last_record <= at)
                .count();
            if !self.finished && self.jvm_last_record <= at {
                silent += 1;
            }
            if silent > 0 {
                why.push(format!(
                    "a record was lost ({cause}); {silent} streams have not sent since"
                ));
            }
        }
        if !self.finished {
            if let Some(h) = &self.hello {
                // Threads jpd knows (synced or waiting: the other reasons cover those).
                let known = u64::from(self.live_threads()) + self.ended_since_hello;
                let missing = h.live_threads.saturating_sub(known);
                if missing > 0 {
                    why.push(format!("{missing} threads not yet reported"));
                }
            }
            if self.exited_at.is_some() {
                why.push("process exited without JVM_END".to_string());
            }
        }
        why
    }

    pub fn summary(&self) -> JvmSummary {
        let why = self.incomplete_reasons();
        let (calls, bytecodes) = self.tree.totals();
        let info = self.info.clone().unwrap_or_default();
        let hello = self.hello.clone().unwrap_or_default();
        let main = hello
            .main
            .split_whitespace()
            .next()
            .map(str::to_string)
            .unwrap_or_else(|| info.cmdline.clone());
        JvmSummary {
            pid: self.tgid,
            ns_pid: info
                .ns_pid
                .or(self.record_pid)
                .filter(|&p| p != self.tgid && p != 0),
            main,
            cmdline: info.cmdline,
            exe: info.exe,
            jdk_version: hello.jdk_version,
            agent_version: hello.agent_version,
            bba: self.bba_name().to_string(),
            granularity: hello.granularity,
            jvm_start_unix_ms: hello.start_time_ms,
            threads_live: self.live_threads(),
            threads_total: (u64::from(self.live_threads()) + self.ended_total) as u32,
            calls,
            bytecodes,
            attached_since: self.attached_since,
            exited_at: self.exited_at,
            finished: self.finished,
            complete: why.is_empty(),
            incomplete_reason: why.join("; "),
            records_lost: self.lost,
            records_malformed: self.malformed.total(),
            limit_drops: self.limit_drops,
            ring_rate_limited: self.ring_rate_limited,
            ring_full: self.ring_full,
            records: self.records,
            nodes: self.node_count(),
            methods: self.methods.len() as u64,
            last_update: self.last_update,
            memory_bytes: self.memory_bytes(),
            cpu: self.cpu_by_kind(),
            cpu_pending_ns: self.cpu.pending() * self.cpu.period_ns,
            cpu_unresolved_ns: self.cpu.unresolved * self.cpu.period_ns,
            cpu_read_failed_ns: self.cpu.read_failed * self.cpu.period_ns,
            cpu_contexts_ns: self.cpu.on_contexts().total() * self.cpu.period_ns,
            offcpu_by_reason: self.offcpu.by_reason(),
            publishing_threads: self
                .threads
                .values()
                .filter(|t| t.context_slot.is_some())
                .count() as u32,
        }
    }

    fn cpu_by_kind(&self) -> Vec<(&'static str, u64, u64)> {
        let p = self.cpu.period_ns;
        if p == 0 {
            return Vec::new();
        }
        self.cpu
            .by_kind()
            .into_iter()
            .map(|(k, s)| (k.name(), s.user * p, s.kernel * p))
            .collect()
    }
}
