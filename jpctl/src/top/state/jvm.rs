//! The JVM pane's state: per profiled JVM, its methods with totals and rates built
//! from the Watch stream's JVM deltas, and which JVM the pane shows.
//!
//! Method ids are per Watch stream and shared by all JVMs; rows are keyed by name
//! so that a restarted stream (new ids) lands on the same rows.
//!
//! CPU (jpd's kernel sampler joined to the agent's contexts) is kept like the counts;
//! a JVM is "joined" once jpd said so (its summary's CPU) or sent CPU for it, and only
//! then does the pane show CPU (and offer it as a sort key). Time off CPU (jpd's
//! scheduler program) likewise: a JVM shows it once jpd sent some for one of its methods.

use std::collections::HashMap;

use jp_proto::v1::{JvmDelta, JvmSummary};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JvmSort {
    /// Bytecodes per second over the last update.
    BytecodeRate,
    /// CPU of the method's own contexts per wall-clock time (joined JVMs only).
    CpuRate,
    /// Time off CPU of the method's own contexts per wall-clock time (JVMs with time
    /// off CPU only).
    OffcpuRate,
    CallRate,
    /// Totals since the JVM was first seen (or the last local zero).
    Bytecodes,
    Calls,
    Name,
}

impl JvmSort {
    /// The next sort key; `cpu`: the shown JVM is joined (CPU is a key at all);
    /// `offcpu`: it has time off CPU (a key then, after CPU).
    pub fn next(self, cpu: bool, offcpu: bool) -> Self {
        match self {
            JvmSort::BytecodeRate if cpu => JvmSort::CpuRate,
            JvmSort::BytecodeRate | JvmSort::CpuRate if offcpu => JvmSort::OffcpuRate,
            JvmSort::BytecodeRate | JvmSort::CpuRate | JvmSort::OffcpuRate => JvmSort::CallRate,
            JvmSort::CallRate => JvmSort::Bytecodes,
            JvmSort::Bytecodes => JvmSort::Calls,
            JvmSort::Calls => JvmSort::Name,
            JvmSort::Name => JvmSort::BytecodeRate,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            JvmSort::BytecodeRate => "bc/s",
            JvmSort::CpuRate => "cpu%",
            JvmSort::OffcpuRate => "off%",
            JvmSort::CallRate => "calls/s",
            JvmSort::Bytecodes => "bytecodes",
            JvmSort::Calls => "calls",
            JvmSort::Name => "name",
        }
    }
}

/// A JVM's or a method's counts: totals since the JVM was first seen on the stream (or
/// the last local zero), their rates over the last update, and what arrived while paused.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub calls: u64,
    pub bytecodes: u64,
    /// CPU (ns): a method's own contexts, or all of a JVM's threads.
    pub cpu_ns: u64,
    /// Per second over the last update.
    pub calls_rate: f64,
    pub bytecodes_rate: f64,
    /// CPU ns per wall-clock ns over the last update (1.0: one CPU busy).
    pub cpu_rate: f64,
    /// Time off CPU (ns) of a method's own contexts, and per wall-clock ns over the last
    /// update (1.0: one thread off CPU all the time). 0 for a JVM's own tally.
    pub offcpu_ns: u64,
    pub offcpu_rate: f64,
    /// (calls, bytecodes, cpu ns, off-CPU ns) received while paused.
    pending: [u64; 4],
}

impl Tally {
    /// `[calls, bytecodes, cpu ns, off-CPU ns]` more. Not paused, the rates become
    /// theirs over `rate_over` ns when given (0 ns: no known time, rate 0).
    fn add(&mut self, delta: [u64; 4], rate_over: Option<u64>, paused: bool) {
        if paused {
            for (p, d) in self.pending.iter_mut().zip(delta) {
                *p += d;
            }
            return;
        }
        self.take(delta);
        if let Some(ns) = rate_over {
            let [calls, bytecodes, cpu_ns, offcpu_ns] = delta;
            self.calls_rate = per_s(calls, ns);
            self.bytecodes_rate = per_s(bytecodes, ns);
            self.cpu_rate = per_ns(cpu_ns, ns);
            self.offcpu_rate = per_ns(offcpu_ns, ns);
        }
    }

    fn take(&mut self, [calls, bytecodes, cpu_ns, offcpu_ns]: [u64; 4]) {
        self.calls += calls;
        self.bytecodes += bytecodes;
        self.cpu_ns += cpu_ns;
        self.offcpu_ns += offcpu_ns;
    }

    /// Rates drop to 0: nothing ran.
    fn stop(&mut self) {
        (self.calls_rate, self.bytecodes_rate) = (0.0, 0.0);
        (self.cpu_rate, self.offcpu_rate) = (0.0, 0.0);
    }

    /// What arrived while paused joins the totals.
    fn resume(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.take(pending);
    }

    fn zero(&mut self) {
        *self = Tally::default();
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct JvmMethodRow {
    /// `pkg.Class.name(DESCRIPTOR)`.
    pub name: String,
    pub file: Option<String>,
    /// The CPU is the method's own contexts'.
    pub counts: Tally,
    /// Lower-cased name for the filter.
    search: String,
}

/// `x` per second over `ns`; 0 without a known time.
fn per_s(x: u64, ns: u64) -> f64 {
    if ns > 0 {
        x as f64 * 1e9 / ns as f64
    } else {
        0.0
    }
}

/// `x` ns per wall-clock ns over `ns`; 0 without a known time.
fn per_ns(x: u64, ns: u64) -> f64 {
    if ns > 0 {
        x as f64 / ns as f64
    } else {
        0.0
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct JvmRow {
    pub pid: u32,
    /// Main class or jar.
    pub main: String,
    pub jdk_version: String,
    pub exited: bool,
    /// The CPU is all the JVM's threads'.
    pub counts: Tally,
    /// jpd's kernel sampler is joined to this JVM: its CPU fields mean something.
    pub joined: bool,
    /// jpd sent time off CPU for this JVM's methods: their off-CPU fields mean something.
    pub offcpu: bool,
    pub methods: Vec<JvmMethodRow>,
    method_by_name: HashMap<String, usize>,
}

impl JvmRow {
    fn from_summary(s: &JvmSummary) -> JvmRow {
        JvmRow {
            pid: s.pid,
            main: s.main.clone(),
            jdk_version: s.jdk_version.clone(),
            exited: s.exited_unix_ms != 0,
            joined: !s.cpu.is_empty(),
            ..Default::default()
        }
    }

    fn method(&mut self, name: &str, file: Option<&String>) -> &mut JvmMethodRow {
        let idx = match self.method_by_name.get(name) {
            Some(&i) => i,
            None => {
                self.methods.push(JvmMethodRow {
                    name: name.to_string(),
                    file: file.cloned(),
                    search: name.to_lowercase(),
                    ..Default::default()
                });
                self.method_by_name
                    .insert(name.to_string(), self.methods.len() - 1);
                self.methods.len() - 1
            }
        };
        &mut self.methods[idx]
    }
}

#[derive(Clone, Debug, Default)]
pub struct JvmState {
    /// Sorted by pid.
    pub jvms: Vec<JvmRow>,
    /// The pid the pane shows; None until a JVM is seen.
    pub selected: Option<u32>,
    /// Indexes into the selected JVM's `methods`: filtered and sorted.
    pub order: Vec<usize>,
    /// Method names by this stream's ids.
    names: HashMap<u32, (String, Option<String>)>,
}

impl JvmState {
    /// A new Watch stream numbers methods afresh.
    pub fn begin_stream(&mut self) {
        self.names.clear();
    }

    pub fn selected_row(&self) -> Option<&JvmRow> {
        let pid = self.selected?;
        self.jvms.iter().find(|j| j.pid == pid)
    }

    /// Position of the selected JVM (1-based) and the number of JVMs.
    pub fn position(&self) -> (usize, usize) {
        let pos = self
            .selected
            .and_then(|p| self.jvms.iter().position(|j| j.pid == p))
            .map_or(0, |i| i + 1);
        (pos, self.jvms.len())
    }

    /// Applies one message's JVM part. `counts`: false for the first message of a
    /// restarted stream (its counts are totals we already hold); `paused`: counts
    /// wait in pending until resumed.
    pub fn apply(&mut self, d: &JvmDelta, elapsed_ns: u64, counts: bool, paused: bool) {
        // First: a reused pid is removed and then new in the same message.
        for pid in &d.removed {
            self.jvms.retain(|j| j.pid != *pid);
        }
        for s in &d.new_jvms {
            match self.jvms.iter_mut().find(|j| j.pid == s.pid) {
                Some(j) => {
                    j.main.clone_from(&s.main);
                    j.jdk_version.clone_from(&s.jdk_version);
                    j.exited = s.exited_unix_ms != 0;
                    j.joined |= !s.cpu.is_empty();
                }
                None => {
                    let at = self.jvms.partition_point(|j| j.pid < s.pid);
                    self.jvms.insert(at, JvmRow::from_summary(s));
                }
            }
        }
        for m in &d.new_methods {
            self.names.insert(m.id, (m.name.clone(), m.file.clone()));
        }
        for pid in &d.exited {
            if let Some(j) = self.jvms.iter_mut().find(|j| j.pid == *pid) {
                j.exited = true;
            }
        }
        if counts {
            self.add_counts(d, elapsed_ns, paused);
        }
        self.fix_selection();
    }

    /// Totals and rates. A JVM's first activity on the stream is its history: it
    /// adds to the totals but is no rate. Method deltas come with the time they
    /// cover (jpd computes them less often for big JVMs): method rates change only
    /// when new method deltas arrive, or drop to 0 when the JVM was idle.
    fn add_counts(&mut self, d: &JvmDelta, elapsed_ns: u64, paused: bool) {
        if !paused {
            for j in &mut self.jvms {
                j.counts.stop();
                let idle = d.jvms.iter().all(|a| a.pid != j.pid);
                if idle {
                    j.methods.iter_mut().for_each(|m| m.counts.stop());
                }
            }
        }
        for a in &d.jvms {
            let first = d.new_jvms.iter().any(|s| s.pid == a.pid);
            let Some(j) = self.jvms.iter_mut().find(|j| j.pid == a.pid) else {
                continue;
            };
            j.joined |= a.cpu_ns > 0 || a.methods.iter().any(|m| m.cpu_ns > 0);
            j.offcpu |= a.methods.iter().any(|m| m.offcpu_ns > 0);
            // A JVM's first activity is its history: totals, no rate.
            let rate_over = (!first).then_some(elapsed_ns);
            j.counts
                .add([a.calls, a.bytecodes, a.cpu_ns, 0], rate_over, paused);
            if !paused && a.methods_elapsed_ns > 0 {
                j.methods.iter_mut().for_each(|m| m.counts.stop());
            }
            for md in &a.methods {
                let Some((name, file)) = self.names.get(&md.id) else {
                    continue;
                };
                // (0 ns: the JVM's history, no rate.)
                j.method(name, file.as_ref()).counts.add(
                    [md.calls, md.bytecodes, md.cpu_ns, md.offcpu_ns],
                    Some(a.methods_elapsed_ns),
                    paused,
                );
            }
        }
    }

    /// Keeps the selection on an existing JVM: when the selected JVM went away
    /// (or none was selected yet), the first running one, else the first.
    fn fix_selection(&mut self) {
        let exists = self
            .selected
            .is_some_and(|p| self.jvms.iter().any(|j| j.pid == p));
        if !exists {
            self.selected = self
                .jvms
                .iter()
                .find(|j| !j.exited)
                .or(self.jvms.first())
                .map(|j| j.pid);
        }
    }

    /// Shows the next (`by` = 1) or previous (-1) JVM, wrapping around.
    pub fn switch(&mut self, by: isize) {
        let n = self.jvms.len();
        if n == 0 {
            return;
        }
        let cur = self
            .selected
            .and_then(|p| self.jvms.iter().position(|j| j.pid == p))
            .unwrap_or(0);
        let next = (cur as isize + by).rem_euclid(n as isize) as usize;
        self.selected = Some(self.jvms[next].pid);
    }

    /// Resume: what arrived while paused joins the totals.
    pub fn resume(&mut self) {
        for j in &mut self.jvms {
            j.counts.resume();
            j.methods.iter_mut().for_each(|m| m.counts.resume());
        }
    }

    /// Local zero: totals and rates restart from now.
    pub fn zero(&mut self) {
        for j in &mut self.jvms {
            j.counts.zero();
            j.methods.iter_mut().for_each(|m| m.counts.zero());
        }
    }

    /// Share of the selected JVM's bytecodes, in percent.
    pub fn share(&self, bytecodes: u64) -> f64 {
        match self.selected_row() {
            Some(j) if j.counts.bytecodes > 0 => {
                100.0 * bytecodes as f64 / j.counts.bytecodes as f64
            }
            _ => 0.0,
        }
    }

    /// Recomputes the selected JVM's row order. Methods without counts (since
    /// the last zero) are not shown.
    pub fn refresh_order(&mut self, filter: &str, by: JvmSort) {
        self.order.clear();
        let Some(pid) = self.selected else {
            return;
        };
        let Some(j) = self.jvms.iter().find(|j| j.pid == pid) else {
            return;
        };
        let ms = &j.methods;
        self.order.extend((0..ms.len()).filter(|&i| {
            let c = &ms[i].counts;
            (c.bytecodes > 0 || c.calls > 0 || c.cpu_ns > 0 || c.offcpu_ns > 0)
                && (filter.is_empty() || ms[i].search.contains(filter))
        }));
        self.order.sort_by(|&a, &b| {
            let (a, b) = (&ms[a], &ms[b]);
            let o = match by {
                JvmSort::BytecodeRate => {
                    b.counts.bytecodes_rate.total_cmp(&a.counts.bytecodes_rate)
                }
                JvmSort::CpuRate => b.counts.cpu_rate.total_cmp(&a.counts.cpu_rate),
                JvmSort::OffcpuRate => b.counts.offcpu_rate.total_cmp(&a.counts.offcpu_rate),
                JvmSort::CallRate => b.counts.calls_rate.total_cmp(&a.counts.calls_rate),
                JvmSort::Bytecodes => b.counts.bytecodes.cmp(&a.counts.bytecodes),
                JvmSort::Calls => b.counts.calls.cmp(&a.counts.calls),
                JvmSort::Name => a.name.cmp(&b.name),
            };
            o.then_with(|| b.counts.bytecodes.cmp(&a.counts.bytecodes))
                .then_with(|| a.name.cmp(&b.name))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_proto::v1::{JvmActivity, JvmMethod, JvmMethodDelta};

    fn first() -> JvmDelta {
        JvmDelta {
            new_jvms: vec![JvmSummary {
                pid: 9,
                main: "M".into(),
                ..Default::default()
            }],
            new_methods: vec![JvmMethod {
                id: 3,
                name: "M.run()V".into(),
                file: None,
            }],
            jvms: vec![JvmActivity {
                pid: 9,
                calls: 4,
                bytecodes: 100,
                methods: vec![JvmMethodDelta {
                    id: 3,
                    calls: 4,
                    bytecodes: 100,
                    cpu_ns: 0,
                    offcpu_ns: 0,
                }],
                // The JVM's history: no time known.
                methods_elapsed_ns: 0,
                cpu_ns: 0,
            }],
            ..Default::default()
        }
    }

    fn more(id: u32) -> JvmDelta {
        JvmDelta {
            jvms: vec![JvmActivity {
                pid: 9,
                calls: 1,
                bytecodes: 10,
                methods: vec![JvmMethodDelta {
                    id,
                    calls: 1,
                    bytecodes: 10,
                    cpu_ns: 0,
                    offcpu_ns: 0,
                }],
                methods_elapsed_ns: 500_000_000,
                cpu_ns: 0,
            }],
            ..Default::default()
        }
    }

    fn run(s: &JvmState) -> (u64, u64, f64) {
        let m = &s.jvms[0].methods[0];
        (m.counts.calls, m.counts.bytecodes, m.counts.bytecodes_rate)
    }

    #[test]
    fn totals_rates_pause_and_zero() {
        let mut s = JvmState::default();
        s.apply(&first(), 2_000_000_000, true, false);
        assert_eq!(s.selected, Some(9));
        // The first activity is the JVM's history: totals, no rate.
        assert_eq!(run(&s), (4, 100, 0.0));
        assert_eq!(s.jvms[0].counts.bytecodes_rate, 0.0);
        s.apply(&more(3), 1_000_000_000, true, true);
        assert_eq!(run(&s), (4, 100, 0.0), "paused: held back");
        s.resume();
        assert_eq!(run(&s), (5, 110, 0.0));
        assert_eq!(
            (s.jvms[0].counts.calls, s.jvms[0].counts.bytecodes),
            (5, 110)
        );
        s.zero();
        assert_eq!(run(&s), (0, 0, 0.0));
        s.refresh_order("", JvmSort::BytecodeRate);
        assert!(s.order.is_empty(), "nothing since the zero");
        s.apply(&more(3), 500_000_000, true, false);
        assert_eq!(run(&s), (1, 10, 20.0));
        assert_eq!(s.jvms[0].counts.bytecodes_rate, 20.0);
        assert_eq!(s.share(10), 100.0);
    }

    #[test]
    fn method_rates_last_until_new_method_deltas_or_idleness() {
        let mut s = JvmState::default();
        s.apply(&first(), 1_000_000_000, true, false);
        s.apply(&more(3), 1_000_000_000, true, false);
        assert_eq!(run(&s), (5, 110, 20.0), "10 bytecodes over 0.5 s");
        assert_eq!(
            s.jvms[0].counts.bytecodes_rate, 10.0,
            "10 over the 1 s message"
        );
        // jpd sent the JVM's totals but computed no method deltas this time.
        let mut totals_only = more(3);
        totals_only.jvms[0].methods.clear();
        totals_only.jvms[0].methods_elapsed_ns = 0;
        s.apply(&totals_only, 250_000_000, true, false);
        assert_eq!(run(&s), (5, 110, 20.0), "the method rate stands");
        assert_eq!(s.jvms[0].counts.bytecodes_rate, 40.0);
        assert_eq!(s.jvms[0].counts.bytecodes, 120);
        // Method deltas over 4 s that do not name the method: its rate is 0.
        let mut other = more(3);
        other.jvms[0].methods.clear();
        other.jvms[0].methods_elapsed_ns = 4_000_000_000;
        s.apply(&other, 1_000_000_000, true, false);
        assert_eq!(run(&s), (5, 110, 0.0));
        s.apply(&more(3), 1_000_000_000, true, false);
        assert_eq!(run(&s).2, 20.0);
        // The JVM left out of a message was idle.
        s.apply(&JvmDelta::default(), 1_000_000_000, true, false);
        assert_eq!(run(&s).2, 0.0);
        assert_eq!(s.jvms[0].counts.bytecodes_rate, 0.0);
    }

    #[test]
    fn a_restarted_stream_renumbers_but_does_not_recount() {
        let mut s = JvmState::default();
        s.apply(&first(), 1_000_000_000, true, false);
        s.begin_stream();
        let mut again = first();
        again.new_methods[0].id = 0;
        again.jvms[0].methods[0].id = 0;
        s.apply(&again, 1_000_000_000, false, false);
        assert_eq!(s.jvms.len(), 1);
        assert_eq!(s.jvms[0].methods.len(), 1);
        assert_eq!(run(&s).0, 4);
        s.apply(&more(0), 1_000_000_000, true, false);
        assert_eq!(run(&s), (5, 110, 20.0));
        // An id this stream never named is ignored, not guessed.
        s.apply(&more(3), 1_000_000_000, true, false);
        assert_eq!(run(&s).0, 5);
    }

    #[test]
    fn switching_wraps_and_a_reused_pid_starts_afresh() {
        let mut s = JvmState::default();
        let mut d = first();
        d.new_jvms.push(JvmSummary {
            pid: 3,
            ..Default::default()
        });
        d.new_jvms.push(JvmSummary {
            pid: 1,
            exited_unix_ms: 5,
            ..Default::default()
        });
        s.apply(&d, 1, true, false);
        assert_eq!(s.jvms.iter().map(|j| j.pid).collect::<Vec<_>>(), [1, 3, 9]);
        assert!(s.jvms[0].exited);
        assert_eq!(s.selected, Some(3), "the first running JVM by pid");
        s.switch(1);
        assert_eq!((s.selected, s.position()), (Some(9), (3, 3)));
        s.switch(1);
        assert_eq!(s.selected, Some(1));
        s.switch(-1);
        assert_eq!(s.selected, Some(9));
        // pid 9 is now another process: removed, then new, in one message.
        let reused = JvmDelta {
            removed: vec![9],
            new_jvms: vec![JvmSummary {
                pid: 9,
                main: "Other".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        s.apply(&reused, 1, true, false);
        let j = s.selected_row().unwrap();
        assert_eq!(
            (j.pid, j.main.as_str(), j.counts.bytecodes),
            (9, "Other", 0)
        );
        assert!(j.methods.is_empty());
    }

    /// `first()` from a joined jpd: the JVM's CPU so far, 30 ms of it in M.run.
    fn first_joined() -> JvmDelta {
        let mut d = first();
        d.new_jvms[0].cpu = vec![jp_proto::v1::JvmCpuKind {
            kind: "app".into(),
            user_ns: 40_000_000,
            kernel_ns: 0,
        }];
        d.jvms[0].cpu_ns = 40_000_000;
        d.jvms[0].methods[0].cpu_ns = 30_000_000;
        d
    }

    /// `more(id)` with CPU: 0.25 s of M.run over the 0.5 s of the method deltas, 0.3 s
    /// of the whole JVM.
    fn more_cpu(id: u32) -> JvmDelta {
        let mut d = more(id);
        d.jvms[0].cpu_ns = 300_000_000;
        d.jvms[0].methods[0].cpu_ns = 250_000_000;
        d
    }

    /// (total, rate) of M.run's CPU and of the JVM's.
    fn cpu(s: &JvmState) -> [(u64, f64); 2] {
        let j = &s.jvms[0];
        [
            (j.methods[0].counts.cpu_ns, j.methods[0].counts.cpu_rate),
            (j.counts.cpu_ns, j.counts.cpu_rate),
        ]
    }

    #[test]
    fn cpu_totals_rates_pause_and_zero_like_the_counts() {
        let mut s = JvmState::default();
        s.apply(&first(), 1_000_000_000, true, false);
        assert!(!s.jvms[0].joined, "no CPU from jpd: not joined");
        s.apply(&more_cpu(3), 1_000_000_000, true, false);
        assert!(s.jvms[0].joined, "CPU arrived: joined");
        // 0.25 s over 0.5 s of method deltas; 0.3 s over the 1 s message.
        assert_eq!(cpu(&s), [(250_000_000, 0.5), (300_000_000, 0.3)]);
        s.apply(&more_cpu(3), 1_000_000_000, true, true);
        assert_eq!(cpu(&s), [(250_000_000, 0.5), (300_000_000, 0.3)], "paused");
        s.resume();
        assert_eq!(cpu(&s)[0].0, 500_000_000);
        assert_eq!(cpu(&s)[1].0, 600_000_000);
        // Idle: rates drop, totals stay.
        s.apply(&JvmDelta::default(), 1_000_000_000, true, false);
        assert_eq!(cpu(&s), [(500_000_000, 0.0), (600_000_000, 0.0)]);
        s.zero();
        assert_eq!(cpu(&s), [(0, 0.0), (0, 0.0)]);
        assert!(s.jvms[0].joined, "a zero does not unjoin");
        // A method with CPU only (no calls, no bytecodes since the zero) is shown.
        let mut only_cpu = more_cpu(3);
        only_cpu.jvms[0].methods[0].calls = 0;
        only_cpu.jvms[0].methods[0].bytecodes = 0;
        s.apply(&only_cpu, 1_000_000_000, true, false);
        s.refresh_order("", JvmSort::CpuRate);
        assert_eq!(s.order, [0]);
    }

    #[test]
    fn a_restarted_stream_does_not_recount_cpu() {
        let mut s = JvmState::default();
        s.apply(&first_joined(), 1_000_000_000, true, false);
        // The history: totals, no rate; joined from the summary.
        assert_eq!(cpu(&s), [(30_000_000, 0.0), (40_000_000, 0.0)]);
        assert!(s.jvms[0].joined);
        s.begin_stream();
        let mut again = first_joined();
        again.new_methods[0].id = 0;
        again.jvms[0].methods[0].id = 0;
        s.apply(&again, 1_000_000_000, false, false);
        assert_eq!(cpu(&s), [(30_000_000, 0.0), (40_000_000, 0.0)]);
        s.apply(&more_cpu(0), 1_000_000_000, true, false);
        assert_eq!(cpu(&s), [(280_000_000, 0.5), (340_000_000, 0.3)]);
    }

    #[test]
    fn cpu_is_a_sort_key_of_joined_jvms_only() {
        let cycle = |cpu: bool| {
            let mut v = vec![JvmSort::BytecodeRate];
            while v.len() < 7 {
                let next = v[v.len() - 1].next(cpu, false);
                v.push(next);
            }
            v
        };
        use JvmSort::*;
        assert_eq!(
            cycle(false),
            [
                BytecodeRate,
                CallRate,
                Bytecodes,
                Calls,
                Name,
                BytecodeRate,
                CallRate
            ]
        );
        assert_eq!(
            cycle(true),
            [
                BytecodeRate,
                CpuRate,
                CallRate,
                Bytecodes,
                Calls,
                Name,
                BytecodeRate
            ]
        );
        // Two methods: the one with more CPU first, though it ran fewer bytecodes.
        let mut s = JvmState::default();
        let mut d = first_joined();
        d.new_methods.push(JvmMethod {
            id: 4,
            name: "M.spin()V".into(),
            file: None,
        });
        s.apply(&d, 1_000_000_000, true, false);
        let mut m = more_cpu(3);
        m.jvms[0].methods.push(JvmMethodDelta {
            id: 4,
            calls: 1,
            bytecodes: 5,
            cpu_ns: 400_000_000,
            offcpu_ns: 0,
        });
        s.apply(&m, 1_000_000_000, true, false);
        let names = |s: &JvmState| -> Vec<String> {
            let j = &s.jvms[0];
            s.order.iter().map(|&i| j.methods[i].name.clone()).collect()
        };
        s.refresh_order("", JvmSort::CpuRate);
        assert_eq!(names(&s), ["M.spin()V", "M.run()V"]);
        s.refresh_order("", JvmSort::BytecodeRate);
        assert_eq!(names(&s), ["M.run()V", "M.spin()V"]);
    }

    /// Time off CPU: totals and rates like the CPU's, the JVM marked once some arrives,
    /// and off% a sort key after cpu% only then.
    #[test]
    fn offcpu_rates_and_sort_key_follow_the_time_off_cpu() {
        use JvmSort::*;
        assert_eq!(CpuRate.next(true, true), OffcpuRate);
        assert_eq!(BytecodeRate.next(false, true), OffcpuRate);
        assert_eq!(OffcpuRate.next(true, true), CallRate);
        assert_eq!(CpuRate.next(true, false), CallRate);
        let mut s = JvmState::default();
        let mut d = first_joined();
        d.new_methods.push(JvmMethod {
            id: 4,
            name: "M.sleep()V".into(),
            file: None,
        });
        s.apply(&d, 1_000_000_000, true, false);
        assert!(!s.jvms[0].offcpu);
        let mut m = more_cpu(3);
        m.jvms[0].methods.push(JvmMethodDelta {
            id: 4,
            calls: 1,
            bytecodes: 1,
            cpu_ns: 0,
            offcpu_ns: 400_000_000,
        });
        s.apply(&m, 1_000_000_000, true, false);
        assert!(s.jvms[0].offcpu);
        let sleep = &s.jvms[0].methods[1].counts;
        // 0.4 s over the 0.5 s of the method deltas.
        assert_eq!((sleep.offcpu_ns, sleep.offcpu_rate), (400_000_000, 0.8));
        s.refresh_order("", OffcpuRate);
        assert_eq!(s.order, [1, 0]);
        s.apply(&JvmDelta::default(), 1_000_000_000, true, false);
        assert_eq!(s.jvms[0].methods[1].counts.offcpu_rate, 0.0, "idle");
        s.zero();
        assert_eq!(s.jvms[0].methods[1].counts.offcpu_ns, 0);
    }
}
