use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::output::percent;
use crate::top::state::{PaneId, TopState};

pub(super) fn render_header(frame: &mut Frame<'_>, area: Rect, s: &TopState) {
    let m = &s.modes;
    let per_s = if s.last_elapsed_s > 0.0 {
        s.last_modes.total as f64 / s.last_elapsed_s
    } else {
        0.0
    };
    let mut first = vec![
        Span::styled("jp top", Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  every {:.2}s  shift {}  lost {}",
            f64::from(s.ui.interval_ms) / 1000.0,
            s.shift,
            s.events_lost
        )),
    ];
    if s.ui.paused {
        first.push(Span::styled(
            "  PAUSED",
            Style::default().add_modifier(Modifier::REVERSED),
        ));
    }
    if s.ui.zeroed {
        first.push(Span::raw("  zeroed (local)"));
    }
    let second = Line::from(format!(
        "samples {} ({:.0}/s)  kernel {:.1}%  user {:.1}%  idle {:.1}%",
        m.total,
        per_s,
        percent(m.kernel, m.total),
        percent(m.user, m.total),
        percent(m.idle, m.total)
    ));
    frame.render_widget(Paragraph::new(vec![Line::from(first), second]), area);
}

pub(super) fn render_footer(frame: &mut Frame<'_>, area: Rect, s: &TopState) {
    let line = if s.ui.editing_filter {
        Line::from(vec![
            Span::styled("filter: ", Style::default().add_modifier(Modifier::BOLD)),
            Span::raw(s.ui.filter.as_str()),
            Span::styled("_", Style::default().add_modifier(Modifier::SLOW_BLINK)),
            Span::raw("  (Enter keeps, Esc clears)"),
        ])
    } else {
        let sort = match s.ui.focus {
            PaneId::Functions => s.ui.function_sort.label(),
            PaneId::Interrupts => s.ui.irq_sort.label(),
            PaneId::Jvm => s.ui.jvm_sort.label(),
        };
        let mut spans = Vec::with_capacity(2);
        if !s.ui.filter.is_empty() {
            // First, so that a narrow terminal cuts key hints, not the filter.
            spans.push(Span::styled(
                format!("[filter: {}] ", s.ui.filter),
                Style::default().add_modifier(Modifier::BOLD),
            ));
        }
        spans.push(Span::raw(format!(
            "q quit ? help Tab pane s sort:{sort} / filter +- interval space pause z zero"
        )));
        Line::from(spans)
    };
    frame.render_widget(Paragraph::new(line), area);
}
