use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;

use super::{header_style, pane_block, rate, visible_rows};
use crate::output::text::printable;
use crate::top::state::jvm::{JvmMethodRow, JvmRow, JvmState};
use crate::top::state::{PaneId, TopState};

/// Longest main class shown in the title; the rest is cut with `…`.
const MAIN_WIDTH: usize = 28;

/// The selected JVM's methods: share of its bytecodes, bytecodes, bytecodes/s,
/// calls, calls/s, and the method with readable parameter types (no return
/// type). `[` and `]` switch JVMs (named in the title). When jpd's sampler is joined
/// to the JVM, a `cpu%` column (CPU of the method's own contexts per wall-clock time,
/// 100% = one CPU) before the method, and the whole JVM's in the title; when jpd sent
/// time off CPU for the JVM's methods, an `off%` column after it (time off CPU of the
/// method's own contexts per wall-clock time, 100% = one thread off CPU throughout).
pub(super) fn render(frame: &mut Frame<'_>, area: Rect, s: &TopState) {
    let focused = s.ui.focus == PaneId::Jvm;
    let j = &s.jvm;
    let sort = s.ui.jvm_sort.label();
    let title = match j.selected_row() {
        Some(row) => {
            let (pos, n) = j.position();
            let cpu = if row.joined {
                format!(" cpu {}", cpu_percent(row.counts.cpu_rate))
            } else {
                String::new()
            };
            format!(
                " JVM {} {}{}{cpu} ({pos}/{n}, [ ] switch, sort: {sort}) ",
                row.pid,
                short(&printable(&row.main)),
                if row.exited { " exited" } else { "" },
            )
        }
        None => format!(" JVM (none, sort: {sort}) "),
    };
    let cpu = j.selected_row().is_some_and(|r| r.joined);
    let offcpu = j.selected_row().is_some_and(|r| r.offcpu);
    let n = visible_rows(area.height);
    let rows = j.selected_row().into_iter().flat_map(|row| {
        j.order
            .iter()
            .skip(s.ui.scroll[PaneId::Jvm.index()])
            .take(n)
            .filter_map(move |&i| Some(method_row(j, row, row.methods.get(i)?)))
    });
    let mut head = vec![
        Cell::from(Line::from("share").right_aligned()),
        Cell::from(Line::from("bytecodes").right_aligned()),
        Cell::from(Line::from("bc/s").right_aligned()),
        Cell::from(Line::from("calls").right_aligned()),
        Cell::from(Line::from("calls/s").right_aligned()),
    ];
    let mut widths = vec![
        Constraint::Length(6),
        Constraint::Length(12),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(7),
    ];
    if cpu {
        head.push(Cell::from(Line::from("cpu%").right_aligned()));
        widths.push(Constraint::Length(6));
    }
    if offcpu {
        head.push(Cell::from(Line::from("off%").right_aligned()));
        widths.push(Constraint::Length(7));
    }
    head.push(Cell::from("method"));
    widths.push(Constraint::Fill(1));
    let table = Table::new(rows, widths)
        .header(Row::new(head).style(header_style()))
        .block(pane_block(title, focused));
    frame.render_widget(table, area);
}

/// One method's cells; the `cpu%` one only for a joined JVM, `off%` only for a JVM
/// with time off CPU.
fn method_row<'a>(j: &JvmState, row: &JvmRow, m: &'a JvmMethodRow) -> Row<'a> {
    let mut cells = vec![
        Cell::from(Line::from(format!("{:.1}%", j.share(m.counts.bytecodes))).right_aligned()),
        Cell::from(Line::from(m.counts.bytecodes.to_string()).right_aligned()),
        Cell::from(Line::from(rate(m.counts.bytecodes_rate)).right_aligned()),
        Cell::from(Line::from(m.counts.calls.to_string()).right_aligned()),
        Cell::from(Line::from(rate(m.counts.calls_rate)).right_aligned()),
    ];
    if row.joined {
        cells.push(Cell::from(
            Line::from(cpu_percent(m.counts.cpu_rate)).right_aligned(),
        ));
    }
    if row.offcpu {
        cells.push(Cell::from(
            Line::from(cpu_percent(m.counts.offcpu_rate)).right_aligned(),
        ));
    }
    // Without the descriptor's noise: pkg.Class.m(int,java.lang.String[]).
    cells.push(Cell::from(
        printable(&jp_mct::java_signature(&m.name)).into_owned(),
    ));
    Row::new(cells)
}

/// CPU (or off-CPU) ns per wall-clock ns as a percentage of one CPU (or thread).
fn cpu_percent(rate: f64) -> String {
    format!("{:.1}%", 100.0 * rate)
}

fn short(main: &str) -> String {
    if main.chars().count() <= MAIN_WIDTH {
        main.to_string()
    } else {
        let head: String = main.chars().take(MAIN_WIDTH - 1).collect();
        format!("{head}…")
    }
}
