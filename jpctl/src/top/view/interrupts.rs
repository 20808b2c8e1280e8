use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;

use super::{header_style, pane_block, rate, visible_rows};
use crate::output::duration_ns;
use crate::output::text::printable;
use crate::top::state::{PaneId, TopState};

/// Softirq table width: name, rate/s, time/s and borders.
const SOFTIRQ_WIDTH: u16 = 32;
/// Below this inner width the handlers table leaves out the function column.
const WIDE_HANDLERS: u16 = 60;

/// IRQ handlers (left) and softirq vectors (right), one pane for focus purposes.
pub(super) fn render(frame: &mut Frame<'_>, area: Rect, s: &TopState) {
    let focused = s.ui.focus == PaneId::Interrupts;
    let [left, right] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(SOFTIRQ_WIDTH)]).areas(area);
    handlers(frame, left, s, focused);
    softirqs(frame, right, s, focused);
}

fn handlers(frame: &mut Frame<'_>, area: Rect, s: &TopState, focused: bool) {
    let wide = area.width.saturating_sub(2) >= WIDE_HANDLERS;
    let title = format!(" IRQ handlers (sort: {}) ", s.ui.irq_sort.label());
    let n = visible_rows(area.height);
    let rows = s
        .interrupts
        .irq_order
        .iter()
        .skip(s.ui.scroll[1])
        .take(n)
        .filter_map(|&i| {
            let r = s.interrupts.irqs.get(i)?;
            let mut cells = vec![
                Cell::from(Line::from(r.irq.to_string()).right_aligned()),
                Cell::from(Line::from(rate(r.counts.rate)).right_aligned()),
                Cell::from(Line::from(duration_ns(r.counts.time_ns)).right_aligned()),
                Cell::from(printable(&r.handler).into_owned()),
            ];
            if wide {
                cells.push(Cell::from(printable(&r.function).into_owned()));
            }
            Some(Row::new(cells))
        });
    let mut header = vec![
        Cell::from(Line::from("irq").right_aligned()),
        Cell::from(Line::from("rate/s").right_aligned()),
        Cell::from(Line::from("time").right_aligned()),
        Cell::from("handler"),
    ];
    let mut widths = vec![
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Fill(1),
    ];
    if wide {
        header.push(Cell::from("function"));
        widths.push(Constraint::Fill(1));
    }
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(header_style()))
        .block(pane_block(title, focused));
    frame.render_widget(table, area);
}

fn softirqs(frame: &mut Frame<'_>, area: Rect, s: &TopState, focused: bool) {
    let n = visible_rows(area.height);
    let rows = s.interrupts.softirq_order.iter().take(n).filter_map(|&i| {
        let r = s.interrupts.softirqs.get(i)?;
        Some(Row::new([
            Cell::from(printable(&r.name).into_owned()),
            Cell::from(Line::from(rate(r.counts.rate)).right_aligned()),
            Cell::from(Line::from(duration_ns(r.counts.time_ns)).right_aligned()),
        ]))
    });
    let header = Row::new([
        Cell::from("softirq"),
        Cell::from(Line::from("rate/s").right_aligned()),
        Cell::from(Line::from("time").right_aligned()),
    ])
    .style(header_style());
    let widths = [
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(10),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .block(pane_block(" Softirqs ".to_string(), focused));
    frame.render_widget(table, area);
}
