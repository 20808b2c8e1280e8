//! Watch deltas, tokio-console style: a name is sent once with an id, in the first
//! message that needs it; after that only ids and the change since the previous
//! message travel. One [`WatchState`] per stream.
//!
//! The counts are since the last reset ([`crate::store::kernel::KernelStore::kernel_view`]);
//! deltas are "since my last read" as the stores' read side defines them
//! ([`crate::store::read`]): saturating, and a reset restarts every reading from 0.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use jp_proto::v1 as pb;

use super::kernel::{handler_function, profile_of};
use crate::store::kernel::softirq_name;
use crate::store::kernel::{KernelView, ModeCounts};
use crate::store::read::Since;

/// Interval a client gets when it asks for 0.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1000);
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
pub const MAX_INTERVAL: Duration = Duration::from_millis(60_000);

pub fn interval(ms: u32) -> Duration {
    if ms == 0 {
        DEFAULT_INTERVAL
    } else {
        Duration::from_millis(u64::from(ms)).clamp(MIN_INTERVAL, MAX_INTERVAL)
    }
}

/// A name's id, and its counters at the previous message (since the last reset).
#[derive(Default)]
struct Seen<const N: usize> {
    id: u32,
    prev: Since<N>,
}

/// What one stream has sent so far.
pub struct WatchState {
    seq: u64,
    last: Option<Instant>,
    /// Where the first message's counts start: jpd's start or the last reset.
    origin: SystemTime,
    reset_at: Option<SystemTime>,
    /// Samples by function.
    functions: HashMap<(String, Option<String>), Seen<1>>,
    /// Count and time by (irq, handler), and by softirq vector.
    irqs: HashMap<(u32, String), Seen<2>>,
    softirqs: HashMap<u32, Since<2>>,
    modes: ModeCounts,
    unknown: Since<1>,
}

fn next_id<K, const N: usize>(m: &HashMap<K, Seen<N>>) -> u32 {
    u32::try_from(m.len()).unwrap_or(u32::MAX)
}

impl WatchState {
    /// `started`: when jpd started, the origin of counts that were never reset.
    pub fn new(started: SystemTime) -> WatchState {
        WatchState {
            seq: 0,
            last: None,
            origin: started,
            reset_at: None,
            functions: HashMap::new(),
            irqs: HashMap::new(),
            softirqs: HashMap::new(),
            modes: ModeCounts::default(),
            unknown: Since::default(),
        }
    }

    /// The message for `view` taken at `now`.
    pub fn next(&mut self, view: &KernelView, now: Instant) -> pb::WatchUpdate {
        let first = self.seq == 0;
        let reset = !first && view.reset_at != self.reset_at;
        if first || reset {
            // Deltas from here count from the reset (or from the start).
            self.modes = ModeCounts::default();
            self.unknown.restart();
            self.functions.values_mut().for_each(|s| s.prev.restart());
            self.irqs.values_mut().for_each(|s| s.prev.restart());
            self.softirqs.values_mut().for_each(Since::restart);
        }
        let elapsed = match self.last {
            Some(last) if !reset => now.saturating_duration_since(last),
            _ => {
                let origin = view.reset_at.unwrap_or(self.origin);
                SystemTime::now().duration_since(origin).unwrap_or_default()
            }
        };
        self.reset_at = view.reset_at;
        self.last = Some(now);
        let update = pb::WatchUpdate {
            seq: self.seq,
            elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            reset,
            kernel: Some(self.kernel_delta(view)),
            // Filled by the service from the JVM store (see `jvm_watch`).
            jvm: None,
        };
        self.seq += 1;
        update
    }

    fn kernel_delta(&mut self, view: &KernelView) -> pb::KernelDelta {
        let c = &view.counts;
        let m = &c.modes;
        let dm = m.since(&self.modes);
        self.modes = *m;
        let mut out = pb::KernelDelta {
            samples: Some(super::kernel::modes(&dm)),
            shift: view.status.shift,
            events_lost: view.status.events_lost,
            ..Default::default()
        };

        let profile = profile_of(view, pb::ProfileSource::Timer);
        [out.unknown_samples] = self.unknown.advance([profile.unknown]);
        for f in &profile.functions {
            let key = (f.name.clone(), f.module.clone());
            let id = next_id(&self.functions);
            let seen = self.functions.entry(key).or_insert_with(|| {
                out.new_functions.push(pb::FunctionInfo {
                    id,
                    name: f.name.clone(),
                    module: f.module.clone(),
                    address: f.addr,
                    size: f.len,
                });
                Seen {
                    id,
                    ..Seen::default()
                }
            });
            let [d] = seen.prev.advance([f.samples]);
            if d > 0 {
                out.functions.push(pb::FunctionDelta {
                    id: seen.id,
                    samples: d,
                });
            }
        }

        let symbols = view.symbols.as_deref();
        let mut irqs: Vec<_> = c.irqs.iter().collect();
        irqs.sort_by(|a, b| a.0.cmp(b.0));
        for ((irq, handler), h) in irqs {
            let id = next_id(&self.irqs);
            let seen = self.irqs.entry((*irq, handler.clone())).or_insert_with(|| {
                let (function, function_module) = handler_function(symbols, h.function_addr);
                out.new_irqs.push(pb::IrqHandlerInfo {
                    id,
                    irq: *irq,
                    handler: handler.clone(),
                    function,
                    function_module,
                });
                Seen {
                    id,
                    ..Seen::default()
                }
            });
            let [dc, dt] = seen.prev.advance([h.count, h.time_ns]);
            if dc > 0 || dt > 0 {
                out.irqs.push(pb::IrqHandlerDelta {
                    id: seen.id,
                    count: dc,
                    time_ns: dt,
                });
            }
        }

        let mut vectors: Vec<_> = c.softirqs.iter().collect();
        vectors.sort_by_key(|(v, _)| **v);
        for (&vector, s) in vectors {
            let [dc, dt] = self
                .softirqs
                .entry(vector)
                .or_default()
                .advance([s.count, s.time_ns]);
            if dc > 0 || dt > 0 {
                out.softirqs.push(pb::Softirq {
                    name: softirq_name(vector),
                    vector,
                    count: dc,
                    time_ns: dt,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::kernel::symbols::test_symbols;
    use crate::store::kernel::{
        CollectorStatus, IrqHandlerCounts, KernelCounts, KernelStore, SoftirqCounts,
    };

    fn counts(zero: u64, clear: u64, e1000: u64, irq: u64, timer: u64) -> KernelCounts {
        let mut c = KernelCounts {
            modes: ModeCounts {
                kernel: zero + clear + e1000,
                user: 5,
                idle: 50,
            },
            ..KernelCounts::default()
        };
        c.buckets.insert(0, zero); // read_iter_zero
        c.buckets.insert(0x10, clear); // clear_user_rep_good
        c.other_ips.insert(0xffff_ffff_c000_1004, e1000);
        c.irqs.insert(
            (11, "virtio1-req.0".into()),
            IrqHandlerCounts {
                count: irq,
                unhandled: 0,
                time_ns: irq * 1000,
                function_addr: 0xffff_ffff_8100_0200,
            },
        );
        c.softirqs.insert(
            1,
            SoftirqCounts {
                count: timer,
                time_ns: timer * 10,
            },
        );
        c
    }

    fn store() -> Arc<KernelStore> {
        let store = KernelStore::new();
        store.publish_symbols(Arc::new(test_symbols()));
        store
    }

    trait PublishCounts {
        fn publish_counts(&self, c: KernelCounts);
    }

    impl PublishCounts for KernelStore {
        fn publish_counts(&self, c: KernelCounts) {
            self.publish(
                c,
                CollectorStatus {
                    shift: 4,
                    ..Default::default()
                },
            );
        }
    }

    fn fdelta(u: &pb::WatchUpdate) -> Vec<(u32, u64)> {
        u.kernel
            .as_ref()
            .unwrap()
            .functions
            .iter()
            .map(|d| (d.id, d.samples))
            .collect()
    }

    #[test]
    fn names_once_then_ids_and_deltas() {
        let store = store();
        let mut w = WatchState::new(SystemTime::now());
        let t0 = Instant::now();
        store.publish_counts(counts(10, 4, 0, 3, 7));
        let u0 = w.next(&store.kernel_view(), t0);
        assert_eq!((u0.seq, u0.reset), (0, false));
        let k = u0.kernel.as_ref().unwrap();
        let names: Vec<(u32, &str)> = k
            .new_functions
            .iter()
            .map(|f| (f.id, f.name.as_str()))
            .collect();
        assert_eq!(names, [(0, "read_iter_zero"), (1, "clear_user_rep_good")]);
        assert_eq!(fdelta(&u0), [(0, 10), (1, 4)]);
        assert_eq!(
            k.samples,
            Some(pb::ModeSamples {
                total: 69,
                kernel: 14,
                user: 5,
                idle: 50
            })
        );
        assert_eq!(k.new_irqs.len(), 1);
        assert_eq!(k.new_irqs[0].function, "vring_interrupt");
        assert_eq!(
            k.irqs,
            [pb::IrqHandlerDelta {
                id: 0,
                count: 3,
                time_ns: 3000
            }]
        );
        assert_eq!(k.softirqs[0].name, "TIMER");
        assert_eq!((k.softirqs[0].count, k.softirqs[0].time_ns), (7, 70));

        store.publish_counts(counts(12, 4, 6, 3, 9));
        let u1 = w.next(&store.kernel_view(), t0 + Duration::from_millis(500));
        assert_eq!((u1.seq, u1.reset, u1.elapsed_ns), (1, false, 500_000_000));
        let k = u1.kernel.as_ref().unwrap();
        // Only the new function's name; unchanged counters are left out.
        assert_eq!(k.new_functions.len(), 1);
        assert_eq!(k.new_functions[0].id, 2);
        assert_eq!(k.new_functions[0].name, "e1000_intr");
        assert_eq!(k.new_functions[0].module.as_deref(), Some("e1000"));
        let mut d = fdelta(&u1);
        d.sort();
        assert_eq!(d, [(0, 2), (2, 6)]);
        assert_eq!(
            k.samples,
            Some(pb::ModeSamples {
                total: 8,
                kernel: 8,
                user: 0,
                idle: 0
            })
        );
        assert!(k.new_irqs.is_empty() && k.irqs.is_empty());
        assert_eq!(k.softirqs.len(), 1);
        assert_eq!(k.softirqs[0].count, 2);
    }

    #[test]
    fn a_reset_restarts_deltas_but_keeps_ids() {
        let store = store();
        let mut w = WatchState::new(SystemTime::now());
        let t0 = Instant::now();
        store.publish_counts(counts(10, 4, 0, 3, 7));
        w.next(&store.kernel_view(), t0);
        store.reset();
        store.publish_counts(counts(13, 4, 0, 5, 7));
        let u = w.next(&store.kernel_view(), t0 + Duration::from_secs(1));
        assert!(u.reset);
        let k = u.kernel.as_ref().unwrap();
        assert!(k.new_functions.is_empty(), "names were sent already");
        assert_eq!(fdelta(&u), [(0, 3)]);
        assert_eq!(
            k.irqs,
            [pb::IrqHandlerDelta {
                id: 0,
                count: 2,
                time_ns: 2000
            }]
        );
        assert_eq!(
            k.samples,
            Some(pb::ModeSamples {
                total: 3,
                kernel: 3,
                user: 0,
                idle: 0
            })
        );
        let u = w.next(&store.kernel_view(), t0 + Duration::from_secs(2));
        assert!(!u.reset);
        assert!(fdelta(&u).is_empty());
    }

    #[test]
    fn intervals_are_clamped() {
        assert_eq!(interval(0), Duration::from_secs(1));
        assert_eq!(interval(5), Duration::from_millis(100));
        assert_eq!(interval(250), Duration::from_millis(250));
        assert_eq!(interval(u32::MAX), Duration::from_secs(60));
    }
}
