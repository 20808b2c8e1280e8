use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;

use super::{header_style, pane_block, rate, visible_rows};
use crate::output::text::printable;
use crate::top::state::{PaneId, TopState};

/// Hot kernel functions: share of non-idle samples, samples, rate, load.
pub(super) fn render(frame: &mut Frame<'_>, area: Rect, s: &TopState) {
    let focused = s.ui.focus == PaneId::Functions;
    let title = format!(
        " {} ({} shown, sort: {}) ",
        PaneId::Functions.title(),
        s.functions.order.len(),
        s.ui.function_sort.label()
    );
    let n = visible_rows(area.height);
    let rows = s
        .functions
        .order
        .iter()
        .skip(s.ui.scroll[0])
        .take(n)
        .filter_map(|&i| {
            let f = s.functions.rows.get(i)?;
            let name = match &f.module {
                Some(m) => Line::from(printable(&format!("{} [{m}]", f.name)).into_owned()),
                None => Line::from(printable(&f.name).into_owned()),
            };
            Some(Row::new([
                Cell::from(Line::from(format!("{:.1}%", s.share(f.samples))).right_aligned()),
                Cell::from(Line::from(f.samples.to_string()).right_aligned()),
                Cell::from(Line::from(rate(f.rate)).right_aligned()),
                Cell::from(Line::from(format!("{:.4}", f.load())).right_aligned()),
                Cell::from(name),
            ]))
        });
    let header = Row::new([
        Cell::from(Line::from("share").right_aligned()),
        Cell::from(Line::from("samples").right_aligned()),
        Cell::from(Line::from("rate/s").right_aligned()),
        Cell::from(Line::from("load").right_aligned()),
        Cell::from("function"),
    ])
    .style(header_style());
    let widths = [
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Fill(1),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .block(pane_block(title, focused));
    frame.render_widget(table, area);
}
