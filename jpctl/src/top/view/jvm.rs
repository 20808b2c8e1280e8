use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;

use super::{header_style, pane_block, rate, visible_rows};
use crate::top::state::{PaneId, TopState};

/// Longest main class shown in the title; the rest is cut with `…`.
const MAIN_WIDTH: usize = 28;

/// The selected JVM's methods: share of its bytecodes, bytecodes, bytecodes/s,
/// calls, calls/s, and the method with readable parameter types (no return
/// type). `[` and `]` switch JVMs (named in the title).
pub(super) fn render(frame: &mut Frame<'_>, area: Rect, s: &TopState) {
    let focused = s.ui.focus == PaneId::Jvm;
    let j = &s.jvm;
    let title = match j.selected_row() {
        Some(row) => {
            let (pos, n) = j.position();
            format!(
                " JVM {} {}{} ({pos}/{n}, [ ] switch, sort: {}) ",
                row.pid,
                short(&row.main),
                if row.exited { " exited" } else { "" },
                s.ui.jvm_sort.label()
            )
        }
        None => format!(" JVM (none, sort: {}) ", s.ui.jvm_sort.label()),
    };
    let n = visible_rows(area.height);
    let rows = j.selected_row().into_iter().flat_map(|row| {
        j.order
            .iter()
            .skip(s.ui.scroll[PaneId::Jvm.index()])
            .take(n)
            .filter_map(move |&i| {
                let m = row.methods.get(i)?;
                Some(Row::new([
                    Cell::from(Line::from(format!("{:.1}%", j.share(m.bytecodes))).right_aligned()),
                    Cell::from(Line::from(m.bytecodes.to_string()).right_aligned()),
                    Cell::from(Line::from(rate(m.bytecodes_rate)).right_aligned()),
                    Cell::from(Line::from(m.calls.to_string()).right_aligned()),
                    Cell::from(Line::from(rate(m.calls_rate)).right_aligned()),
                    // Without the descriptor's noise: pkg.Class.m(int,java.lang.String[]).
                    Cell::from(jp_mct::java_signature(&m.name)),
                ]))
            })
    });
    let header = Row::new([
        Cell::from(Line::from("share").right_aligned()),
        Cell::from(Line::from("bytecodes").right_aligned()),
        Cell::from(Line::from("bc/s").right_aligned()),
        Cell::from(Line::from("calls").right_aligned()),
        Cell::from(Line::from("calls/s").right_aligned()),
        Cell::from("method"),
    ])
    .style(header_style());
    let widths = [
        Constraint::Length(6),
        Constraint::Length(12),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Fill(1),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .block(pane_block(title, focused));
    frame.render_widget(table, area);
}

fn short(main: &str) -> String {
    if main.chars().count() <= MAIN_WIDTH {
        main.to_string()
    } else {
        let head: String = main.chars().take(MAIN_WIDTH - 1).collect();
        format!("{head}…")
    }
}
