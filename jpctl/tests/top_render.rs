//! `jpctl top` rendered headless at 80×24 with ratatui's TestBackend, from a
//! state built out of synthetic Watch messages.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use jp_proto::v1::{
    FunctionDelta, FunctionInfo, IrqHandlerDelta, IrqHandlerInfo, KernelDelta, ModeSamples,
    Softirq, WatchUpdate,
};
use jpctl::top::state::TopState;
use jpctl::top::view;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn update() -> WatchUpdate {
    let f = |id, name: &str, module: Option<&str>, size| FunctionInfo {
        id,
        name: name.into(),
        module: module.map(Into::into),
        address: 0xffff_ffff_8100_0000 + u64::from(id) * 0x100,
        size,
    };
    WatchUpdate {
        seq: 0,
        elapsed_ns: 1_000_000_000,
        reset: false,
        kernel: Some(KernelDelta {
            samples: Some(ModeSamples {
                total: 2000,
                kernel: 900,
                user: 100,
                idle: 1000,
            }),
            shift: 4,
            new_functions: vec![
                f(0, "clear_user_rep_good", None, 64),
                f(1, "read_iter_zero", None, 128),
                f(2, "write_null", None, 32),
                f(3, "vring_interrupt", Some("virtio_ring"), 256),
            ],
            functions: vec![
                FunctionDelta {
                    id: 0,
                    samples: 500,
                },
                FunctionDelta {
                    id: 1,
                    samples: 250,
                },
                FunctionDelta {
                    id: 2,
                    samples: 100,
                },
                FunctionDelta { id: 3, samples: 50 },
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
                count: 120,
                time_ns: 360_000,
            }],
            softirqs: vec![
                Softirq {
                    name: "TIMER".into(),
                    vector: 1,
                    count: 250,
                    time_ns: 50_000,
                },
                Softirq {
                    name: "RCU".into(),
                    vector: 9,
                    count: 40,
                    time_ns: 9_000,
                },
            ],
            unknown_samples: 0,
            events_lost: 0,
        }),
    }
}

fn screen(state: &TopState) -> Vec<String> {
    screen_of(state, 80, 24)
}

fn screen_of(state: &TopState, w: u16, h: u16) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| view::render(f, state)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect()
}

fn line_with<'a>(screen: &'a [String], needle: &str) -> &'a str {
    screen
        .iter()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not on screen:\n{}", screen.join("\n")))
}

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

#[test]
fn functions_irqs_and_shares_at_80x24() {
    let mut s = TopState::new(1000);
    s.apply(&update());
    let sc = screen(&s);
    // Header: totals and mode shares.
    assert!(
        sc[0].starts_with("jp top  every 1.00s  shift 4  lost 0"),
        "{}",
        sc[0]
    );
    assert_eq!(
        sc[1].trim_end(),
        "samples 2000 (2000/s)  kernel 45.0%  user 5.0%  idle 50.0%"
    );
    // Functions: share of the 1000 non-idle samples, samples, rate, load; by samples.
    let l = line_with(&sc, "clear_user_rep_good");
    assert!(
        l.starts_with("│ 50.0%       500     500   7.8125 clear_user_rep_good"),
        "{l}"
    );
    let l = line_with(&sc, "read_iter_zero");
    assert!(
        l.contains(" 25.0%       250     250   1.9531 read_iter_zero"),
        "{l}"
    );
    let l = line_with(&sc, "vring_interrupt [virtio_ring]");
    assert!(
        l.contains("  5.0%        50    50.0   0.1953 vring_interrupt [virtio_ring]"),
        "{l}"
    );
    let order: Vec<usize> = [
        "clear_user_rep_good",
        "read_iter_zero",
        "write_null",
        "[virtio_ring]",
    ]
    .iter()
    .map(|n| sc.iter().position(|l| l.contains(n)).unwrap())
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "not sorted by samples: {order:?}"
    );
    // IRQ handler with its rate and time; softirqs by rate.
    let l = line_with(&sc, "virtio1-req.0");
    assert!(l.contains("│  11     120  360.0 us virtio1-req.0"), "{l}");
    assert!(line_with(&sc, "TIMER").contains("TIMER         250    50.0 us"));
    assert!(
        sc.iter().position(|l| l.contains("TIMER")) < sc.iter().position(|l| l.contains("RCU "))
    );
    // Footer names the keys; everything fits in 80 columns.
    assert!(
        sc[23].trim_end()
            == "q quit ? help Tab pane s sort:samples / filter +- interval space pause z zero",
        "{}",
        sc[23]
    );
    assert!(sc.iter().all(|l| l.chars().count() == 80));
}

#[test]
fn help_overlay_after_question_mark() {
    let mut s = TopState::new(1000);
    s.apply(&update());
    s.handle_key(key('?'));
    let sc = screen(&s);
    line_with(&sc, "jp top: keys");
    assert!(line_with(&sc, "zero the counts locally").contains(" z "));
    assert!(line_with(&sc, "pause / resume").contains("space  p"));
    line_with(&sc, "quit");
    s.handle_key(key('x'));
    let sc = screen(&s);
    assert!(
        !sc.iter().any(|l| l.contains("jp top: keys")),
        "help closes on any key"
    );
}

#[test]
fn filter_applies_to_every_pane() {
    let mut s = TopState::new(1000);
    s.apply(&update());
    for c in "/read".chars() {
        s.handle_key(key(c));
    }
    let sc = screen(&s);
    line_with(&sc, "read_iter_zero");
    assert!(
        !sc.iter().any(|l| l.contains("clear_user_rep_good")),
        "filtered out:\n{}",
        sc.join("\n")
    );
    assert!(!sc.iter().any(|l| l.contains("virtio1-req.0")));
    assert!(sc[23].starts_with("filter: read_"), "{}", sc[23]);
    line_with(&sc, "Kernel functions (1 shown, sort: samples)");
    s.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    let sc = screen(&s);
    assert!(sc[23].starts_with("[filter: read] q quit"), "{}", sc[23]);
}

#[test]
fn pause_and_zero_are_shown() {
    let mut s = TopState::new(1000);
    s.apply(&update());
    s.handle_key(key(' '));
    s.handle_key(key('z'));
    let sc = screen(&s);
    assert!(
        sc[0].contains("PAUSED") && sc[0].contains("zeroed (local)"),
        "{}",
        sc[0]
    );
    assert!(
        !sc.iter().any(|l| l.contains("clear_user_rep_good")),
        "zero empties the table"
    );
}

#[test]
fn wide_terminal_shows_the_handler_function_and_tiny_one_does_not_panic() {
    let mut s = TopState::new(1000);
    s.apply(&update());
    let sc = screen_of(&s, 120, 40);
    let l = line_with(&sc, "virtio1-req.0");
    assert!(
        l.contains("virtio1-req.0") && l.contains("vring_interrupt"),
        "{l}"
    );
    assert!(sc.iter().all(|l| l.chars().count() == 120));
    // Too small to be useful, but drawing must not fail.
    for (w, h) in [(20, 5), (1, 1), (80, 3)] {
        screen_of(&s, w, h);
    }
    s.handle_key(key('?'));
    screen_of(&s, 30, 8);
}
