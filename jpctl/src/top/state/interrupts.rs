//! The interrupts pane's state: per IRQ handler and per softirq vector, counts and time
//! since start (or the last zero) and their rates over the last update, from the Watch
//! stream's kernel deltas.
//!
//! Handler ids are per Watch stream; rows are keyed by IRQ number and handler name so
//! that a restarted stream (new ids) lands on the same rows. Softirqs are keyed by
//! vector.

use std::collections::HashMap;

use jp_proto::v1::{IrqHandlerDelta, IrqHandlerInfo, Softirq};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqSort {
    Rate,
    Count,
    Time,
    Irq,
}

impl IrqSort {
    pub fn next(self) -> Self {
        match self {
            IrqSort::Rate => IrqSort::Count,
            IrqSort::Count => IrqSort::Time,
            IrqSort::Time => IrqSort::Irq,
            IrqSort::Irq => IrqSort::Rate,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            IrqSort::Rate => "rate",
            IrqSort::Count => "count",
            IrqSort::Time => "time",
            IrqSort::Irq => "irq",
        }
    }
}

/// Counts and time since start (or the last zero), their rates over the last update,
/// and what arrived while paused: what an IRQ handler row and a softirq row share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub count: u64,
    pub time_ns: u64,
    /// Per second over the last update.
    pub rate: f64,
    /// Time per second (ns/s) over the last update.
    pub time_rate: f64,
    pending_count: u64,
    pending_time: u64,
}

impl Counts {
    fn add(&mut self, count: u64, time_ns: u64, secs: f64, paused: bool) {
        if paused {
            self.pending_count += count;
            self.pending_time += time_ns;
        } else {
            self.count += count;
            self.time_ns += time_ns;
            self.rate = super::per_second(count, secs);
            self.time_rate = super::per_second(time_ns, secs);
        }
    }

    fn clear_rates(&mut self) {
        (self.rate, self.time_rate) = (0.0, 0.0);
    }

    fn resume(&mut self) {
        self.count += std::mem::take(&mut self.pending_count);
        self.time_ns += std::mem::take(&mut self.pending_time);
    }

    /// Sort order by `by` (IRQ or vector numbers are the caller's).
    fn cmp(&self, other: &Counts, by: IrqSort) -> std::cmp::Ordering {
        match by {
            IrqSort::Rate => other.rate.total_cmp(&self.rate),
            IrqSort::Count => other.count.cmp(&self.count),
            IrqSort::Time => other.time_ns.cmp(&self.time_ns),
            IrqSort::Irq => std::cmp::Ordering::Equal,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct IrqRow {
    pub irq: u32,
    pub handler: String,
    pub function: String,
    /// Handled interrupts and handler time.
    pub counts: Counts,
    search: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SoftirqRow {
    pub name: String,
    pub vector: u32,
    pub counts: Counts,
    search: String,
}

#[derive(Clone, Debug, Default)]
pub struct InterruptsState {
    pub irqs: Vec<IrqRow>,
    pub softirqs: Vec<SoftirqRow>,
    /// Indexes into `irqs` / `softirqs`: filtered and sorted.
    pub irq_order: Vec<usize>,
    pub softirq_order: Vec<usize>,
    irq_by_key: HashMap<(u32, String), usize>,
    // Ids are per Watch stream; cleared when a stream starts.
    irq_by_id: HashMap<u32, usize>,
}

impl InterruptsState {
    /// Call when a Watch stream starts: its ids are new.
    pub fn begin_stream(&mut self) {
        self.irq_by_id.clear();
    }

    /// The stream's new handlers.
    pub fn register(&mut self, new: &[IrqHandlerInfo]) {
        for i in new {
            let key = (i.irq, i.handler.clone());
            let idx = match self.irq_by_key.get(&key) {
                Some(&x) => x,
                None => {
                    let function =
                        crate::output::irq::irq_function(&i.function, i.function_module.as_deref());
                    let search = format!("{} {} {}", i.irq, i.handler, function).to_lowercase();
                    self.irqs.push(IrqRow {
                        irq: i.irq,
                        handler: i.handler.clone(),
                        function,
                        search,
                        ..Default::default()
                    });
                    self.irq_by_key.insert(key, self.irqs.len() - 1);
                    self.irqs.len() - 1
                }
            };
            self.irq_by_id.insert(i.id, idx);
        }
    }

    /// One update's deltas over `secs`; while `paused` they wait for [`Self::resume`].
    pub fn add(&mut self, irqs: &[IrqHandlerDelta], softirqs: &[Softirq], secs: f64, paused: bool) {
        if !paused {
            self.counts_mut().for_each(Counts::clear_rates);
        }
        for d in irqs {
            if let Some(r) = self
                .irq_by_id
                .get(&d.id)
                .and_then(|&i| self.irqs.get_mut(i))
            {
                r.counts.add(d.count, d.time_ns, secs, paused);
            }
        }
        for s in softirqs {
            let idx = match self.softirqs.iter().position(|r| r.vector == s.vector) {
                Some(i) => i,
                None => {
                    self.softirqs.push(SoftirqRow {
                        name: s.name.clone(),
                        vector: s.vector,
                        search: s.name.to_lowercase(),
                        ..Default::default()
                    });
                    self.softirqs.len() - 1
                }
            };
            if let Some(r) = self.softirqs.get_mut(idx) {
                r.counts.add(s.count, s.time_ns, secs, paused);
            }
        }
    }

    fn counts_mut(&mut self) -> impl Iterator<Item = &mut Counts> {
        let irqs = self.irqs.iter_mut().map(|r| &mut r.counts);
        irqs.chain(self.softirqs.iter_mut().map(|r| &mut r.counts))
    }

    pub fn clear_totals(&mut self) {
        self.counts_mut().for_each(|c| *c = Counts::default());
    }

    /// What arrived while paused joins the totals (rates stay those of the last update
    /// shown).
    pub fn resume(&mut self) {
        self.counts_mut().for_each(Counts::resume);
    }

    /// Both tables follow the pane's one sort key.
    pub fn refresh_order(&mut self, filter: &str, by: IrqSort) {
        let keep = |search: &str| super::keep(filter, search);
        super::order_rows(
            &mut self.irq_order,
            &self.irqs,
            |r| keep(&r.search),
            |a, b| {
                let o = match by {
                    IrqSort::Irq => a.irq.cmp(&b.irq),
                    _ => a.counts.cmp(&b.counts, by),
                };
                o.then_with(|| b.counts.count.cmp(&a.counts.count))
                    .then_with(|| a.irq.cmp(&b.irq))
                    .then_with(|| a.handler.cmp(&b.handler))
            },
        );
        super::order_rows(
            &mut self.softirq_order,
            &self.softirqs,
            |r| keep(&r.search),
            |a, b| {
                let o = match by {
                    IrqSort::Irq => a.vector.cmp(&b.vector),
                    _ => a.counts.cmp(&b.counts, by),
                };
                o.then_with(|| a.vector.cmp(&b.vector))
            },
        );
    }
}
