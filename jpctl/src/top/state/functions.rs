//! The kernel functions pane's state: per function, its samples since start (or the
//! last zero) and its rate over the last update, from the Watch stream's kernel deltas.
//!
//! Function ids are per Watch stream; rows are keyed by name and module so that a
//! restarted stream (new ids) lands on the same rows.

use std::collections::HashMap;

use jp_proto::v1::{FunctionDelta, FunctionInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionSort {
    Samples,
    Rate,
    Load,
    Name,
}

impl FunctionSort {
    pub fn next(self) -> Self {
        match self {
            FunctionSort::Samples => FunctionSort::Rate,
            FunctionSort::Rate => FunctionSort::Load,
            FunctionSort::Load => FunctionSort::Name,
            FunctionSort::Name => FunctionSort::Samples,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            FunctionSort::Samples => "samples",
            FunctionSort::Rate => "rate",
            FunctionSort::Load => "load",
            FunctionSort::Name => "name",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FunctionRow {
    pub name: String,
    pub module: Option<String>,
    pub size: u64,
    /// Since start or the last zero.
    pub samples: u64,
    /// Samples per second over the last update.
    pub rate: f64,
    pending: u64,
    /// Lower-cased "name [module]" for the filter.
    search: String,
}

impl FunctionRow {
    /// readprofile's load: samples per byte of function.
    pub fn load(&self) -> f64 {
        if self.size == 0 {
            0.0
        } else {
            self.samples as f64 / self.size as f64
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct FunctionsState {
    pub rows: Vec<FunctionRow>,
    /// Indexes into `rows`: filtered and sorted.
    pub order: Vec<usize>,
    by_key: HashMap<(String, Option<String>), usize>,
    // Ids are per Watch stream; cleared when a stream starts.
    by_id: HashMap<u32, usize>,
}

impl FunctionsState {
    /// Call when a Watch stream starts: its ids are new.
    pub fn begin_stream(&mut self) {
        self.by_id.clear();
    }

    /// The stream's new names.
    pub fn register(&mut self, new: &[FunctionInfo]) {
        for f in new {
            let key = (f.name.clone(), f.module.clone());
            let idx = match self.by_key.get(&key) {
                Some(&i) => i,
                None => {
                    let search = match &f.module {
                        Some(m) => format!("{} [{}]", f.name, m).to_lowercase(),
                        None => f.name.to_lowercase(),
                    };
                    self.rows.push(FunctionRow {
                        name: f.name.clone(),
                        module: f.module.clone(),
                        size: f.size,
                        search,
                        ..Default::default()
                    });
                    self.by_key.insert(key, self.rows.len() - 1);
                    self.rows.len() - 1
                }
            };
            if let Some(row) = self.rows.get_mut(idx) {
                row.size = f.size;
            }
            self.by_id.insert(f.id, idx);
        }
    }

    /// One update's deltas over `secs`; while `paused` they wait for [`Self::resume`].
    pub fn add(&mut self, deltas: &[FunctionDelta], secs: f64, paused: bool) {
        if !paused {
            for r in &mut self.rows {
                r.rate = 0.0;
            }
        }
        for d in deltas {
            let Some(r) = self.by_id.get(&d.id).and_then(|&i| self.rows.get_mut(i)) else {
                continue;
            };
            if paused {
                r.pending += d.samples;
            } else {
                r.samples += d.samples;
                r.rate = super::per_second(d.samples, secs);
            }
        }
    }

    pub fn clear_totals(&mut self) {
        for r in &mut self.rows {
            (r.samples, r.pending, r.rate) = (0, 0, 0.0);
        }
    }

    /// What arrived while paused joins the totals.
    pub fn resume(&mut self) {
        for r in &mut self.rows {
            r.samples += std::mem::take(&mut r.pending);
        }
    }

    /// Functions without samples (since the last zero) are not shown.
    pub fn refresh_order(&mut self, filter: &str, by: FunctionSort) {
        super::order_rows(
            &mut self.order,
            &self.rows,
            |r| r.samples > 0 && super::keep(filter, &r.search),
            |a, b| {
                let o = match by {
                    FunctionSort::Samples => b.samples.cmp(&a.samples),
                    FunctionSort::Rate => b.rate.total_cmp(&a.rate),
                    FunctionSort::Load => b.load().total_cmp(&a.load()),
                    FunctionSort::Name => a.name.cmp(&b.name),
                };
                o.then_with(|| b.samples.cmp(&a.samples))
                    .then_with(|| a.name.cmp(&b.name))
            },
        );
    }
}
