//! `jpctl top`'s rendering: pure functions from [`TopState`] to a frame. No I/O;
//! only the rows that fit are formatted.

mod functions;
mod header;
mod help;
mod interrupts;
mod jvm;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders};
use ratatui::Frame;

use super::state::{PaneId, TopState};

/// Draws the whole screen.
pub fn render(frame: &mut Frame<'_>, state: &TopState) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(6),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    header::render_header(frame, head, state);
    // Panes stacked; the kernel functions (and the JVM methods, once there is
    // a JVM) get the larger share of the height.
    let panes = state.panes();
    let heights: Vec<Constraint> = panes
        .iter()
        .map(|p| match p {
            PaneId::Interrupts => Constraint::Fill(2),
            PaneId::Functions | PaneId::Jvm => Constraint::Fill(3),
        })
        .collect();
    let areas = Layout::vertical(heights).split(body);
    for (pane, area) in panes.into_iter().zip(areas.iter()) {
        render_pane(frame, *area, pane, state);
    }
    header::render_footer(frame, foot, state);
    if state.ui.help {
        help::render(frame, frame.area());
    }
}

fn render_pane(frame: &mut Frame<'_>, area: Rect, pane: PaneId, state: &TopState) {
    match pane {
        PaneId::Functions => functions::render(frame, area, state),
        PaneId::Interrupts => interrupts::render(frame, area, state),
        PaneId::Jvm => jvm::render(frame, area, state),
    }
}

/// A pane's frame; the focused pane (the one `s`, arrows and PgUp/PgDn act on)
/// has a bold, highlighted border.
fn pane_block<'a>(title: String, focused: bool) -> Block<'a> {
    let style = if focused {
        Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED)
    } else {
        Style::default()
    };
    let border = if focused {
        Style::default().add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    };
    Block::default()
        .borders(Borders::ALL)
        .border_style(border)
        .title(ratatui::text::Span::styled(title, style))
}

/// Rows that fit in a bordered table of height `area_height` with a header row.
fn visible_rows(area_height: u16) -> usize {
    usize::from(area_height.saturating_sub(3))
}

fn header_style() -> Style {
    Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
}

/// A rate with a fixed width: 0.5, 12.3, 4567, 1.2M, 3.4G.
fn rate(x: f64) -> String {
    if x <= 0.0 {
        "0".to_string()
    } else if x < 100.0 {
        format!("{x:.1}")
    } else if x < 1e6 {
        format!("{x:.0}")
    } else if x < 1e9 {
        format!("{:.1}M", x / 1e6)
    } else {
        format!("{:.1}G", x / 1e9)
    }
}
