//! `jpctl top`'s state: totals and rates built from jpd's Watch deltas, and the
//! UI's settings (focus, sort, filter, pause). No I/O: the event loop feeds it
//! updates and keys, the views read it.
//!
//! Row orders (sorted, filtered) are recomputed when data or settings change, not
//! when a frame is drawn.
//!
//! Each pane's rows are a state of their own, as in tokio-console's `state/`:
//! [`functions`], [`interrupts`] and [`jvm`] each take their part of a Watch message,
//! pause, resume, zero and order their rows. [`TopState`] holds them with what the
//! panes share (samples by mode, the UI settings) and routes messages and keys.

pub mod functions;
pub mod interrupts;
pub mod jvm;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use jp_proto::v1::{KernelDelta, ModeSamples, WatchUpdate};

pub use functions::{FunctionSort, FunctionsState};
pub use interrupts::{InterruptsState, IrqSort};
pub use jvm::{JvmSort, JvmState};

/// The panes, in Tab order. A new source adds a variant here, a state module and a
/// view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaneId {
    Functions,
    Interrupts,
    /// Methods of one profiled JVM; shown once jpd reports a JVM.
    Jvm,
}

impl PaneId {
    pub const ALL: [PaneId; 3] = [PaneId::Functions, PaneId::Interrupts, PaneId::Jvm];

    pub fn title(self) -> &'static str {
        match self {
            PaneId::Functions => "Kernel functions",
            PaneId::Interrupts => "Interrupts",
            PaneId::Jvm => "JVM",
        }
    }

    pub fn index(self) -> usize {
        PaneId::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }
}

/// Samples by mode; `total` is kernel + user + idle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modes {
    pub total: u64,
    pub kernel: u64,
    pub user: u64,
    pub idle: u64,
}

impl Modes {
    fn add(&mut self, m: &ModeSamples) {
        self.total += m.total;
        self.kernel += m.kernel;
        self.user += m.user;
        self.idle += m.idle;
    }
    fn add_modes(&mut self, m: &Modes) {
        self.total += m.total;
        self.kernel += m.kernel;
        self.user += m.user;
        self.idle += m.idle;
    }
    pub fn busy(&self) -> u64 {
        self.kernel + self.user
    }
}

/// What the event loop must do after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Restart the Watch stream with the state's new interval.
    ChangeInterval,
}

pub const MIN_INTERVAL_MS: u32 = 250;
pub const MAX_INTERVAL_MS: u32 = 10_000;

#[derive(Clone, Debug)]
pub struct Ui {
    pub focus: PaneId,
    pub function_sort: FunctionSort,
    pub irq_sort: IrqSort,
    pub jvm_sort: JvmSort,
    /// Lower-cased filter text; empty = no filter.
    pub filter: String,
    /// Typing a filter after `/`.
    pub editing_filter: bool,
    pub paused: bool,
    pub help: bool,
    pub interval_ms: u32,
    /// `z` was pressed: totals count from a local baseline (jpd is not reset).
    pub zeroed: bool,
    /// First visible row of each pane, by `PaneId::ALL` index.
    pub scroll: [usize; PaneId::ALL.len()],
}

#[derive(Clone, Debug)]
pub struct TopState {
    /// The kernel functions pane's rows.
    pub functions: FunctionsState,
    /// The interrupts pane's IRQ handler and softirq rows.
    pub interrupts: InterruptsState,
    /// Profiled JVMs and the JVM pane's rows.
    pub jvm: JvmState,
    /// Samples since start or the last zero.
    pub modes: Modes,
    /// Samples in the last update, for the header's rate.
    pub last_modes: Modes,
    pending_modes: Modes,
    pub unknown_samples: u64,
    pub shift: u32,
    /// Cumulative, as jpd reports it.
    pub events_lost: u64,
    /// Updates applied on the current stream.
    pub updates: u64,
    /// Seconds the last update covered.
    pub last_elapsed_s: f64,
    pub ui: Ui,
    /// The next stream is a restart: its first message (counts since jpd's reset)
    /// only brings names, as those counts are already in our totals.
    restarted: bool,
}

impl TopState {
    pub fn new(interval_ms: u32) -> TopState {
        TopState {
            functions: FunctionsState::default(),
            interrupts: InterruptsState::default(),
            jvm: JvmState::default(),
            modes: Modes::default(),
            last_modes: Modes::default(),
            pending_modes: Modes::default(),
            unknown_samples: 0,
            shift: 0,
            events_lost: 0,
            updates: 0,
            last_elapsed_s: 0.0,
            ui: Ui {
                focus: PaneId::Functions,
                function_sort: FunctionSort::Samples,
                irq_sort: IrqSort::Rate,
                jvm_sort: JvmSort::BytecodeRate,
                filter: String::new(),
                editing_filter: false,
                paused: false,
                help: false,
                interval_ms: interval_ms.clamp(MIN_INTERVAL_MS, MAX_INTERVAL_MS),
                zeroed: false,
                scroll: [0; PaneId::ALL.len()],
            },
            restarted: false,
        }
    }

    /// Call before reading a new Watch stream (after an interval change).
    pub fn begin_restarted_stream(&mut self) {
        self.restarted = true;
    }

    /// The panes on screen, in Tab order: the JVM pane once jpd reported a JVM.
    pub fn panes(&self) -> Vec<PaneId> {
        PaneId::ALL
            .into_iter()
            .filter(|p| *p != PaneId::Jvm || !self.jvm.jvms.is_empty())
            .collect()
    }

    fn next_pane(&self) -> PaneId {
        let panes = self.panes();
        let i = panes.iter().position(|p| *p == self.ui.focus).unwrap_or(0);
        panes
            .get((i + 1) % panes.len().max(1))
            .copied()
            .unwrap_or(PaneId::Functions)
    }

    /// Applies one Watch message.
    pub fn apply(&mut self, u: &WatchUpdate) {
        if u.seq == 0 {
            self.functions.begin_stream();
            self.interrupts.begin_stream();
            self.jvm.begin_stream();
            self.updates = 0;
        }
        let counts_known = u.seq == 0 && std::mem::take(&mut self.restarted);
        if u.reset && u.seq > 0 {
            // Someone reset jpd: the deltas below count from that reset. JVM
            // counts are not reset by jpd.
            self.clear_totals();
        }
        if let Some(j) = &u.jvm {
            self.jvm
                .apply(j, u.elapsed_ns, !counts_known, self.ui.paused);
        }
        if let Some(k) = &u.kernel {
            self.functions.register(&k.new_functions);
            self.interrupts.register(&k.new_irqs);
            self.shift = k.shift;
            self.events_lost = k.events_lost;
            if !counts_known {
                self.add_deltas(k, u.elapsed_ns);
            }
        }
        if !self.panes().contains(&self.ui.focus) {
            self.ui.focus = PaneId::Functions;
        }
        self.updates += 1;
        self.refresh_order();
    }

    fn add_deltas(&mut self, k: &KernelDelta, elapsed_ns: u64) {
        let paused = self.ui.paused;
        let secs = elapsed_ns as f64 / 1e9;
        let mut m = Modes::default();
        if let Some(s) = &k.samples {
            m.add(s);
        }
        if paused {
            self.pending_modes.add_modes(&m);
        } else {
            self.modes.add_modes(&m);
            self.last_modes = m;
            self.last_elapsed_s = secs;
            self.unknown_samples += k.unknown_samples;
        }
        self.functions.add(&k.functions, secs, paused);
        self.interrupts.add(&k.irqs, &k.softirqs, secs, paused);
    }

    /// Local zero: totals restart from now; jpd keeps counting for other clients.
    pub fn zero(&mut self) {
        self.clear_totals();
        self.jvm.zero();
        self.ui.zeroed = true;
        self.refresh_order();
    }

    fn clear_totals(&mut self) {
        self.modes = Modes::default();
        self.pending_modes = Modes::default();
        self.unknown_samples = 0;
        self.last_modes = Modes::default();
        self.functions.clear_totals();
        self.interrupts.clear_totals();
    }

    pub fn set_paused(&mut self, paused: bool) {
        if self.ui.paused && !paused {
            // Resume: what arrived while paused joins the totals (rates stay those
            // of the last update shown).
            let pm = std::mem::take(&mut self.pending_modes);
            self.modes.add_modes(&pm);
            self.jvm.resume();
            self.functions.resume();
            self.interrupts.resume();
            self.ui.paused = false;
            self.refresh_order();
        } else {
            self.ui.paused = paused;
        }
    }

    /// Share of non-idle samples, in percent.
    pub fn share(&self, samples: u64) -> f64 {
        let busy = self.modes.busy();
        if busy == 0 {
            0.0
        } else {
            100.0 * samples as f64 / busy as f64
        }
    }

    /// Recomputes the filtered, sorted row orders.
    pub fn refresh_order(&mut self) {
        let filter = self.ui.filter.as_str();
        self.functions.refresh_order(filter, self.ui.function_sort);
        self.interrupts.refresh_order(filter, self.ui.irq_sort);
        self.jvm.refresh_order(filter, self.ui.jvm_sort);
        let lens = [
            self.functions.order.len(),
            self.interrupts.irq_order.len(),
            self.jvm.order.len(),
        ];
        for (s, len) in self.ui.scroll.iter_mut().zip(lens) {
            *s = (*s).min(len.saturating_sub(1));
        }
    }

    fn focus_index(&self) -> usize {
        self.ui.focus.index()
    }

    /// Keys → state changes; the returned action is for the event loop.
    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        if ctrl_c {
            return Action::Quit;
        }
        if self.ui.editing_filter {
            match key.code {
                KeyCode::Enter => self.ui.editing_filter = false,
                KeyCode::Esc => {
                    self.ui.editing_filter = false;
                    self.ui.filter.clear();
                    self.refresh_order();
                }
                KeyCode::Backspace => {
                    self.ui.filter.pop();
                    self.refresh_order();
                }
                KeyCode::Char(c) => {
                    self.ui.filter.extend(c.to_lowercase());
                    self.refresh_order();
                }
                _ => {}
            }
            return Action::None;
        }
        if self.ui.help {
            // Any key closes the help; q still quits.
            self.ui.help = false;
            return if matches!(key.code, KeyCode::Char('q')) {
                Action::Quit
            } else {
                Action::None
            };
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char('?') | KeyCode::Char('h') => self.ui.help = true,
            KeyCode::Tab | KeyCode::BackTab => self.ui.focus = self.next_pane(),
            KeyCode::Char('s') => {
                match self.ui.focus {
                    PaneId::Functions => self.ui.function_sort = self.ui.function_sort.next(),
                    PaneId::Interrupts => self.ui.irq_sort = self.ui.irq_sort.next(),
                    PaneId::Jvm => {
                        let row = self.jvm.selected_row();
                        let (cpu, offcpu) = row.map_or((false, false), |j| (j.joined, j.offcpu));
                        self.ui.jvm_sort = self.ui.jvm_sort.next(cpu, offcpu);
                    }
                }
                self.refresh_order();
            }
            KeyCode::Char(']') | KeyCode::Char('[') => {
                self.jvm.switch(if key.code == KeyCode::Char(']') {
                    1
                } else {
                    -1
                });
                self.ui.scroll[PaneId::Jvm.index()] = 0;
                self.refresh_order();
            }
            KeyCode::Char('/') => {
                self.ui.editing_filter = true;
                self.ui.filter.clear();
                self.refresh_order();
            }
            KeyCode::Char(' ') | KeyCode::Char('p') => self.set_paused(!self.ui.paused),
            KeyCode::Char('z') => self.zero(),
            KeyCode::Char('+') | KeyCode::Char('=') => {
                return self.set_interval(self.ui.interval_ms * 2)
            }
            KeyCode::Char('-') => return self.set_interval(self.ui.interval_ms / 2),
            KeyCode::Down | KeyCode::Char('j') => self.scroll(1),
            KeyCode::Up | KeyCode::Char('k') => self.scroll(-1),
            KeyCode::PageDown => self.scroll(10),
            KeyCode::PageUp => self.scroll(-10),
            KeyCode::Home => self.ui.scroll[self.focus_index()] = 0,
            _ => {}
        }
        Action::None
    }

    fn set_interval(&mut self, ms: u32) -> Action {
        let ms = ms.clamp(MIN_INTERVAL_MS, MAX_INTERVAL_MS);
        if ms == self.ui.interval_ms {
            return Action::None;
        }
        self.ui.interval_ms = ms;
        Action::ChangeInterval
    }

    fn scroll(&mut self, by: isize) {
        let i = self.focus_index();
        let len = match self.ui.focus {
            PaneId::Functions => self.functions.order.len(),
            PaneId::Interrupts => self.interrupts.irq_order.len(),
            PaneId::Jvm => self.jvm.order.len(),
        };
        let cur = self.ui.scroll[i] as isize;
        self.ui.scroll[i] = (cur + by).clamp(0, len.saturating_sub(1) as isize) as usize;
    }
}

/// `d` per second over `secs` (0 for an empty interval).
fn per_second(d: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        d as f64 / secs
    } else {
        0.0
    }
}

/// Whether a row's lower-cased `search` text passes the filter.
fn keep(filter: &str, search: &str) -> bool {
    filter.is_empty() || search.contains(filter)
}

/// `order` becomes the indexes of the `rows` to show, sorted.
fn order_rows<R>(
    order: &mut Vec<usize>,
    rows: &[R],
    show: impl Fn(&R) -> bool,
    cmp: impl Fn(&R, &R) -> std::cmp::Ordering,
) {
    order.clear();
    order.extend((0..rows.len()).filter(|&i| show(&rows[i])));
    order.sort_by(|&a, &b| cmp(&rows[a], &rows[b]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_proto::v1::{FunctionDelta, FunctionInfo, IrqHandlerDelta, IrqHandlerInfo, Softirq};

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    fn first() -> WatchUpdate {
        WatchUpdate {
            seq: 0,
            elapsed_ns: 2_000_000_000,
            reset: false,
            kernel: Some(KernelDelta {
                samples: Some(ModeSamples {
                    total: 100,
                    kernel: 30,
                    user: 10,
                    idle: 60,
                }),
                shift: 4,
                new_functions: vec![
                    FunctionInfo {
                        id: 0,
                        name: "read_iter_zero".into(),
                        module: None,
                        address: 0x1000,
                        size: 100,
                    },
                    FunctionInfo {
                        id: 1,
                        name: "e1000_intr".into(),
                        module: Some("e1000".into()),
                        address: 0x9000,
                        size: 50,
                    },
                ],
                functions: vec![
                    FunctionDelta { id: 0, samples: 20 },
                    FunctionDelta { id: 1, samples: 10 },
                ],
                new_irqs: vec![IrqHandlerInfo {
                    id: 0,
                    irq: 11,
                    handler: "virtio1-req.0".into(),
                    function: "vring_interrupt".into(),
                    function_module: None,
                }],
                irqs: vec![IrqHandlerDelta {
                    id: 0,
                    count: 40,
                    time_ns: 4000,
                }],
                softirqs: vec![Softirq {
                    name: "TIMER".into(),
                    vector: 1,
                    count: 8,
                    time_ns: 800,
                }],
                unknown_samples: 0,
                events_lost: 0,
            }),
            jvm: None,
        }
    }

    fn second() -> WatchUpdate {
        WatchUpdate {
            seq: 1,
            elapsed_ns: 500_000_000,
            reset: false,
            kernel: Some(KernelDelta {
                samples: Some(ModeSamples {
                    total: 10,
                    kernel: 5,
                    user: 0,
                    idle: 5,
                }),
                shift: 4,
                functions: vec![FunctionDelta { id: 1, samples: 15 }],
                irqs: vec![IrqHandlerDelta {
                    id: 0,
                    count: 5,
                    time_ns: 100,
                }],
                softirqs: vec![Softirq {
                    name: "TIMER".into(),
                    vector: 1,
                    count: 2,
                    time_ns: 10,
                }],
                ..Default::default()
            }),
            jvm: None,
        }
    }

    fn names(s: &TopState) -> Vec<&str> {
        s.functions
            .order
            .iter()
            .map(|&i| s.functions.rows[i].name.as_str())
            .collect()
    }

    #[test]
    fn deltas_accumulate_and_rates_cover_the_last_update() {
        let mut s = TopState::new(1000);
        s.apply(&first());
        assert_eq!(
            s.modes,
            Modes {
                total: 100,
                kernel: 30,
                user: 10,
                idle: 60
            }
        );
        assert_eq!(names(&s), ["read_iter_zero", "e1000_intr"]);
        assert_eq!(s.functions.rows[0].rate, 10.0);
        s.apply(&second());
        assert_eq!(
            s.modes,
            Modes {
                total: 110,
                kernel: 35,
                user: 10,
                idle: 65
            }
        );
        assert_eq!(s.last_modes.total, 10);
        assert_eq!(names(&s), ["e1000_intr", "read_iter_zero"]);
        let e = &s.functions.rows[1];
        assert_eq!((e.samples, e.rate), (25, 30.0));
        assert_eq!(s.functions.rows[0].rate, 0.0, "no delta = no rate");
        assert_eq!(e.load(), 0.5);
        assert_eq!(s.share(25), 100.0 * 25.0 / 45.0);
        let irq = &s.interrupts.irqs[0].counts;
        assert_eq!(
            (irq.count, irq.time_ns, irq.rate, irq.time_rate),
            (45, 4100, 10.0, 200.0)
        );
        let timer = &s.interrupts.softirqs[0].counts;
        assert_eq!((timer.count, timer.rate), (10, 4.0));
    }

    #[test]
    fn pause_holds_counts_until_resumed() {
        let mut s = TopState::new(1000);
        s.apply(&first());
        s.handle_key(key(' '));
        assert!(s.ui.paused);
        s.apply(&second());
        assert_eq!(s.functions.rows[1].samples, 10);
        assert_eq!(s.modes.total, 100);
        s.handle_key(key('p'));
        assert!(!s.ui.paused);
        assert_eq!(s.functions.rows[1].samples, 25);
        assert_eq!(s.modes.total, 110);
        assert_eq!(s.interrupts.irqs[0].counts.count, 45);
    }

    #[test]
    fn zero_is_local_and_reset_from_jpd_clears_totals() {
        let mut s = TopState::new(1000);
        s.apply(&first());
        s.handle_key(key('z'));
        assert!(s.ui.zeroed);
        assert_eq!(s.modes, Modes::default());
        assert!(names(&s).is_empty());
        s.apply(&second());
        assert_eq!(names(&s), ["e1000_intr"]);
        assert_eq!(s.functions.rows[1].samples, 15);
        let mut r = second();
        r.seq = 2;
        r.reset = true;
        s.apply(&r);
        assert_eq!(
            s.functions.rows[1].samples, 15,
            "counts restart at the reset"
        );
        assert_eq!(s.modes.total, 10);
    }

    #[test]
    fn restarted_stream_takes_names_but_not_counts_again() {
        let mut s = TopState::new(1000);
        s.apply(&first());
        assert_eq!(s.handle_key(key('+')), Action::ChangeInterval);
        assert_eq!(s.ui.interval_ms, 2000);
        s.begin_restarted_stream();
        let mut again = first();
        // A new stream numbers names afresh.
        let k = again.kernel.as_mut().unwrap();
        k.new_functions[0].id = 7;
        k.functions[0].id = 7;
        s.apply(&again);
        assert_eq!(s.functions.rows.len(), 2);
        assert_eq!(s.functions.rows[0].samples, 20);
        let mut next = second();
        next.kernel.as_mut().unwrap().functions = vec![FunctionDelta { id: 7, samples: 1 }];
        s.apply(&next);
        assert_eq!(s.functions.rows[0].samples, 21);
    }

    #[test]
    fn interval_is_clamped() {
        let mut s = TopState::new(1000);
        assert_eq!(s.handle_key(key('-')), Action::ChangeInterval);
        assert_eq!(s.handle_key(key('-')), Action::ChangeInterval);
        assert_eq!(s.handle_key(key('-')), Action::None);
        assert_eq!(s.ui.interval_ms, MIN_INTERVAL_MS);
    }

    #[test]
    fn filter_sort_focus_help_quit() {
        let mut s = TopState::new(1000);
        s.apply(&first());
        s.handle_key(key('/'));
        for c in "E1000".chars() {
            s.handle_key(key(c));
        }
        assert_eq!(s.ui.filter, "e1000");
        assert_eq!(names(&s), ["e1000_intr"]);
        assert!(s.interrupts.irq_order.is_empty());
        s.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert!(!s.ui.editing_filter);
        assert_eq!(s.handle_key(key('q')), Action::Quit);
        let mut s = TopState::new(1000);
        s.apply(&first());
        s.handle_key(key('s'));
        assert_eq!(s.ui.function_sort, FunctionSort::Rate);
        s.handle_key(key('s'));
        assert_eq!(s.ui.function_sort, FunctionSort::Load);
        assert_eq!(
            names(&s),
            ["read_iter_zero", "e1000_intr"],
            "0.2 vs 0.2 load: by samples"
        );
        s.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
        assert_eq!(s.ui.focus, PaneId::Interrupts);
        s.handle_key(key('s'));
        assert_eq!(s.ui.irq_sort, IrqSort::Count);
        assert_eq!(s.ui.function_sort, FunctionSort::Load);
        s.handle_key(key('?'));
        assert!(s.ui.help);
        assert_eq!(s.handle_key(key('x')), Action::None);
        assert!(!s.ui.help);
        assert_eq!(
            s.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
        assert_eq!(
            s.handle_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
            Action::Quit
        );
    }
}
