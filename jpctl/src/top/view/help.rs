use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

const KEYS: [(&str, &str); 16] = [
    ("q  Esc  Ctrl-C", "quit"),
    ("?  h", "this help (any key closes it)"),
    ("Tab", "focus the next pane"),
    ("s", "next sort column of the focused pane"),
    ("/", "filter rows by text (Enter keeps, Esc clears)"),
    ("space  p", "pause / resume the display"),
    ("z", "zero the counts locally (jpd keeps its own)"),
    ("+  -", "refresh interval x2 / ÷2 (250 ms..10 s)"),
    ("Up Down j k", "scroll the focused pane"),
    ("PgUp PgDn Home", "scroll by a page, to the top"),
    ("[  ]", "previous / next JVM in the JVM pane"),
    ("share", "of non-idle (kernel+user) samples"),
    ("load", "samples per byte of function (readprofile)"),
    ("bc/s", "JVM bytecodes per second; share: of the JVM's"),
    ("cpu%", "JVM CPU in the method's own contexts, of one CPU"),
    (
        "off%",
        "JVM time off CPU in the method's own contexts, of one thread",
    ),
];

/// The key reference, centred over the screen.
pub(super) fn render(frame: &mut Frame<'_>, area: Rect) {
    let height = (KEYS.len() as u16 + 2).min(area.height);
    let width = 72.min(area.width);
    let [_, mid, _] = Layout::vertical([
        Constraint::Fill(1),
        Constraint::Length(height),
        Constraint::Fill(1),
    ])
    .areas(area);
    let [_, popup, _] = Layout::horizontal([
        Constraint::Fill(1),
        Constraint::Length(width),
        Constraint::Fill(1),
    ])
    .areas(mid);
    let lines: Vec<Line<'_>> = KEYS
        .iter()
        .map(|(k, what)| Line::from(format!(" {k:<16}{what}")))
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" jp top: keys ")
        .title_style(Style::default().add_modifier(Modifier::BOLD));
    frame.render_widget(Clear, popup);
    frame.render_widget(Paragraph::new(lines).block(block), popup);
}
