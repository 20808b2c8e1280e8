//! Off-CPU time per exact context: the scheduler program's periods of a JVM's joined
//! threads, counted under the merged node each thread was in when it went off CPU, by
//! reason (the kernel function it blocked in, or the run queue). Wall time per context
//! is this plus the context's CPU.
//!
//! As CPU samples (`cpu`), a period names (stream, wire node id), and may wait for its
//! node's definition: resolved when it arrives, or counted as unresolved after
//! [`super::cpu::PENDING_FOR`].
use std::collections::HashMap;
use std::time::SystemTime;

use jp_common::wire::unmounted;
use jp_common::{offcpu_reason, OffcpuRecord};

use super::cpu::PENDING_FOR;

/// Keys waiting at most (per JVM); more are counted as unresolved at once.
const MAX_PENDING: usize = 1 << 14;

/// The scheduler program's counters for the whole host, summed over CPUs since attach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffcpuCounters {
    /// Switch-outs not timed because of `offcpu_max_switches_per_cpu_per_second`.
    pub over_cap: u64,
    /// Switch-ins of joined threads without their switch-out (jpd started, or the thread
    /// was joined, while it was off CPU): counted, not timed.
    pub orphans: u64,
    /// Switch-ins of another task with the switch-out's ids (a reused thread id): dropped.
    pub stale: u64,
    /// Switch-outs whose context slot could not be read: not timed.
    pub read_failed: u64,
    /// Periods overwritten in the log before jpd read them.
    pub lost: u64,
}

/// Time (ns) and number of periods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Periods {
    pub ns: u64,
    pub n: u64,
}

impl Periods {
    fn add(&mut self, p: Periods) {
        self.ns = self.ns.saturating_add(p.ns);
        self.n += p.n;
    }
}

#[derive(Clone, Copy)]
struct Waiting {
    periods: Periods,
    since: SystemTime,
}

/// A JVM's off-CPU time.
#[derive(Default)]
pub struct ContextOffcpu {
    /// (merged node, reason) → time off CPU from there.
    pub by_node: HashMap<(u32, u64), Periods>,
    /// Reason → time off CPU under resolved contexts below the root (ns; as the views
    /// show per method), for the per-JVM totals by kind (`/metrics`) without a walk of
    /// `by_node`.
    by_reason: HashMap<u64, u64>,
    /// Time whose node was never defined (ns).
    pub unresolved_ns: u64,
    /// (stream, wire id, reason) → time waiting for its node.
    pending: HashMap<(u64, u64, u64), Waiting>,
}

impl ContextOffcpu {
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Time (ns) waiting for its node's definition.
    pub fn pending_ns(&self) -> u64 {
        self.pending.values().map(|w| w.periods.ns).sum()
    }

    /// Time under resolved contexts (ns).
    pub fn on_contexts_ns(&self) -> u64 {
        self.by_node.values().map(|p| p.ns).sum()
    }

    /// Counts `n` periods of `r.ns` in all; `resolve` maps (stream, wire id) to a merged node.
    pub fn add(
        &mut self,
        r: &OffcpuRecord,
        n: u64,
        now: SystemTime,
        resolve: &dyn Fn(u64, u64) -> Option<u32>,
    ) {
        let periods = Periods { ns: r.ns, n };
        let key = (r.stream, r.id, r.reason);
        match resolve(key.0, key.1) {
            Some(node) => self.credit(node, r.reason, periods),
            None if self.pending.len() < MAX_PENDING || self.pending.contains_key(&key) => {
                self.pending
                    .entry(key)
                    .or_insert(Waiting {
                        periods: Periods::default(),
                        since: now,
                    })
                    .periods
                    .add(periods);
            }
            None => self.unresolved_ns = self.unresolved_ns.saturating_add(r.ns),
        }
    }

    /// Resolves what waited and can be resolved now; what waited too long is unresolved.
    pub fn retry(&mut self, now: SystemTime, resolve: &dyn Fn(u64, u64) -> Option<u32>) {
        if self.pending.is_empty() {
            return;
        }
        for (key, w) in std::mem::take(&mut self.pending) {
            match resolve(key.0, key.1) {
                Some(node) => self.credit(node, key.2, w.periods),
                None if now.duration_since(w.since).unwrap_or_default() >= PENDING_FOR => {
                    self.unresolved_ns = self.unresolved_ns.saturating_add(w.periods.ns);
                }
                None => {
                    self.pending.insert(key, w);
                }
            }
        }
    }

    fn credit(&mut self, node: u32, reason: u64, periods: Periods) {
        self.by_node.entry((node, reason)).or_default().add(periods);
        // The root is no method's context: no view shows its time.
        if node != 0 {
            let r = self.by_reason.entry(reason).or_default();
            *r = r.saturating_add(periods.ns);
        }
    }

    /// mid → time off CPU (ns) in the method's own contexts; `links` gives a node's
    /// (parent, mid). Reads only the contexts with time off CPU, as the CPU's.
    pub fn self_by_method(&self, links: &dyn Fn(u32) -> Option<[u32; 2]>) -> HashMap<u32, u64> {
        let mut out: HashMap<u32, u64> = HashMap::new();
        for (&(node, _), p) in &self.by_node {
            match links(node) {
                Some([_, mid]) if node != 0 && p.ns > 0 => {
                    let t = out.entry(mid).or_default();
                    *t = t.saturating_add(p.ns);
                }
                _ => {}
            }
        }
        out
    }

    /// (reason, time off CPU under resolved contexts below the root (ns)), by reason.
    pub fn by_reason(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.by_reason.iter().map(|(&r, &ns)| (r, ns)).collect();
        v.sort_unstable();
        v
    }

    pub fn memory_bytes(&self) -> usize {
        self.by_node.capacity() * 40 + self.pending.capacity() * 56 + self.by_reason.capacity() * 24
    }
}

/// What an operator calls a reason: the kind of wait, from the kernel function a thread
/// blocked in (`function`, as `Symbols::name_of` names it) or the reason's code.
pub fn reason_kind(reason: u64, function: &str) -> &'static str {
    match reason {
        offcpu_reason::RUN_QUEUE => return "run_queue",
        offcpu_reason::UNKNOWN => return "other",
        _ => {}
    }
    if let Some(why) = unmounted_why(reason) {
        return unmounted_kind(why);
    }
    let f = function.split(' ').next().unwrap_or(function);
    const KINDS: [(&str, &[&str]); 5] = [
        (
            "lock",
            &[
                "futex",
                "__mutex_lock",
                "mutex_lock",
                "rwsem",
                "rt_mutex",
                "percpu_rwsem",
            ],
        ),
        (
            "sleep",
            &[
                "do_nanosleep",
                "hrtimer_nanosleep",
                "msleep",
                "usleep",
                "clock_nanosleep",
            ],
        ),
        (
            "page_fault",
            &[
                "handle_mm_fault",
                "do_fault",
                "filemap_fault",
                "do_swap_page",
                "__do_fault",
                "exc_page_fault",
                "lock_folio_or_retry",
                "__folio_lock_or_retry",
            ],
        ),
        (
            "network",
            &[
                "sk_wait",
                "inet_csk_accept",
                "tcp_",
                "udp_",
                "unix_",
                "sock_",
                "skb_",
                "inet_",
                "ep_poll",
                "do_epoll",
                "do_select",
                "do_sys_poll",
                "wait_woken",
                "__skb_wait",
                "sk_stream_wait",
                "do_poll",
            ],
        ),
        (
            "disk",
            &[
                "folio_wait",
                "wait_on_page",
                "__folio_lock",
                "blk",
                "bio",
                "submit_bio",
                "iomap_dio",
                "__blkdev_direct",
                "blkdev",
                "jbd2",
                "ext4_",
                "xfs_",
                "btrfs_",
                "bit_wait_io",
                "__filemap",
                "filemap_",
                "io_",
                "nvme",
                "wait_on_buffer",
                "__wait_on_buffer",
                "dio_",
                "__iomap",
            ],
        ),
    ];
    for (kind, prefixes) in KINDS {
        if prefixes.iter().any(|p| f.starts_with(p)) {
            return kind;
        }
    }
    "other"
}

/// The name of a reason's frame: the kernel function, or what the code stands for.
pub fn reason_function(reason: u64, function_of: &dyn Fn(u64) -> String) -> String {
    match reason {
        offcpu_reason::RUN_QUEUE => "(waiting for a CPU)".to_string(),
        offcpu_reason::UNKNOWN => "(kernel stack unread)".to_string(),
        r => match unmounted_why(r) {
            Some(why) => unmounted_frame(why).to_string(),
            None => function_of(r),
        },
    }
}

/// The `wire::unmounted` code of a virtual thread's time off its carriers (the agent's).
fn unmounted_why(reason: u64) -> Option<u64> {
    let why = reason.checked_sub(offcpu_reason::UNMOUNTED)?;
    (why > 0 && why < unmounted::END).then_some(why)
}

/// The kind of a virtual thread's wait off its carriers, the same as a platform thread's
/// that waits the same way: a park is a futex wait there ("lock": `java.util.concurrent`
/// locks, queues, futures alike), a monitor or `Object.wait` too; a yield waits for a
/// carrier as a preempted thread waits for a CPU ("run_queue"); only `Thread.sleep`,
/// which the scheduler sees as a futex wait, is told apart here ("sleep").
fn unmounted_kind(why: u64) -> &'static str {
    match why {
        unmounted::PARKED | unmounted::MONITOR | unmounted::OBJECT_WAIT => "lock",
        unmounted::SLEEP => "sleep",
        unmounted::YIELD => "run_queue",
        _ => "other",
    }
}

/// The leaf frame of a virtual thread's wait off its carriers (its kind's detail).
fn unmounted_frame(why: u64) -> &'static str {
    match why {
        unmounted::PARKED => "(virtual thread parked)",
        unmounted::SLEEP => "(virtual thread sleeping)",
        unmounted::MONITOR => "(virtual thread blocked on a monitor)",
        unmounted::OBJECT_WAIT => "(virtual thread in Object.wait)",
        unmounted::YIELD => "(virtual thread waiting for a carrier)",
        _ => "(virtual thread unmounted)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(stream: u64, id: u64, reason: u64, ns: u64) -> OffcpuRecord {
        OffcpuRecord {
            tgid: 1,
            _pad: 0,
            id,
            stream,
            ns,
            reason,
        }
    }

    #[test]
    fn periods_wait_for_their_node_and_expire_counted() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut off = ContextOffcpu::default();
        let none = |_: u64, _: u64| None;
        off.add(&record(7, 3, 0xffff_1000, 500), 2, t0, &none);
        off.add(&record(7, 4, offcpu_reason::RUN_QUEUE, 30), 1, t0, &none);
        assert_eq!(off.pending_ns(), 530);
        let some = |s: u64, id: u64| (s == 7 && id == 3).then_some(42);
        off.retry(t0 + Duration::from_secs(1), &some);
        assert_eq!(off.by_node[&(42, 0xffff_1000)], Periods { ns: 500, n: 2 });
        assert_eq!(off.pending_ns(), 30);
        off.retry(t0 + PENDING_FOR, &some);
        assert_eq!((off.pending_ns(), off.unresolved_ns), (0, 30));
        off.add(&record(7, 3, 0xffff_1000, 100), 1, t0, &some);
        assert_eq!(off.by_node[&(42, 0xffff_1000)], Periods { ns: 600, n: 3 });
        assert_eq!(off.on_contexts_ns(), 600);
    }

    /// The totals by reason follow `by_node` (resolved at once or later), the root's
    /// time left out as in every view.
    #[test]
    fn totals_by_reason_are_the_resolved_time_below_the_root() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut off = ContextOffcpu::default();
        let resolve = |_: u64, id: u64| match id {
            3 => Some(42),
            4 => Some(0),
            _ => None,
        };
        off.add(&record(7, 3, 0xffff_1000, 500), 2, t0, &resolve);
        off.add(&record(7, 3, offcpu_reason::RUN_QUEUE, 30), 1, t0, &resolve);
        off.add(&record(7, 4, 0xffff_1000, 1_000), 1, t0, &resolve);
        off.add(&record(7, 5, 0xffff_1000, 70), 1, t0, &resolve);
        assert_eq!(
            off.by_reason(),
            [(offcpu_reason::RUN_QUEUE, 30), (0xffff_1000, 500)]
        );
        let later = |_: u64, id: u64| (id == 5).then_some(43);
        off.retry(t0 + Duration::from_secs(1), &later);
        assert_eq!(
            off.by_reason(),
            [(offcpu_reason::RUN_QUEUE, 30), (0xffff_1000, 570)]
        );
    }

    #[test]
    fn reasons_sort_into_kinds_an_operator_knows() {
        assert_eq!(reason_kind(0xffff, "futex_wait_queue"), "lock");
        assert_eq!(reason_kind(0xffff, "do_nanosleep"), "sleep");
        assert_eq!(reason_kind(0xffff, "sk_wait_data"), "network");
        assert_eq!(reason_kind(0xffff, "ep_poll"), "network");
        assert_eq!(reason_kind(0xffff, "folio_wait_bit_common"), "disk");
        assert_eq!(reason_kind(0xffff, "iomap_dio_rw"), "disk");
        assert_eq!(reason_kind(0xffff, "handle_mm_fault"), "page_fault");
        assert_eq!(reason_kind(offcpu_reason::RUN_QUEUE, ""), "run_queue");
        assert_eq!(reason_kind(offcpu_reason::UNKNOWN, ""), "other");
        assert_eq!(reason_kind(0xffff, "pipe_read"), "other");
        assert_eq!(reason_kind(0xffff, "nvme_poll [nvme]"), "disk");
    }

    /// A virtual thread's time off its carriers is named by the agent's `why`, never by a
    /// kernel symbol; a code beyond the known ones is a kernel address as any other.
    #[test]
    fn virtual_threads_waits_off_their_carriers_have_kinds_and_frames() {
        let named = |why: u64| {
            let r = offcpu_reason::UNMOUNTED + why;
            let f = reason_function(r, &|_| "kernel_symbol".to_string());
            (reason_kind(r, &f), f)
        };
        assert_eq!(
            named(unmounted::SLEEP),
            ("sleep", "(virtual thread sleeping)".into())
        );
        assert_eq!(
            named(unmounted::PARKED),
            ("lock", "(virtual thread parked)".into())
        );
        assert_eq!(named(unmounted::MONITOR).0, "lock");
        assert_eq!(named(unmounted::OBJECT_WAIT).0, "lock");
        assert_eq!(
            named(unmounted::YIELD),
            ("run_queue", "(virtual thread waiting for a carrier)".into())
        );
        assert_eq!(named(unmounted::OTHER).0, "other");
        assert_eq!(named(0), ("other", "kernel_symbol".into()));
        assert_eq!(named(unmounted::END), ("other", "kernel_symbol".into()));
    }
}
