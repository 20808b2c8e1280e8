//! `jpctl top` rendered headless at 80×24 with ratatui's TestBackend, from a
//! state built out of synthetic Watch messages.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use jp_proto::v1::{
    FunctionDelta, FunctionInfo, IrqHandlerDelta, IrqHandlerInfo, JvmActivity, JvmDelta, JvmMethod,
    JvmMethodDelta, JvmSummary, KernelDelta, ModeSamples, Softirq, WatchUpdate,
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
        jvm: None,
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

fn jvm_summary(pid: u32, main: &str) -> JvmSummary {
    JvmSummary {
        pid,
        main: main.into(),
        jdk_version: "17.0.9".into(),
        bba: "default".into(),
        ..Default::default()
    }
}

fn jvm_method(id: u32, name: &str) -> JvmMethod {
    JvmMethod {
        id,
        name: name.into(),
        file: None,
    }
}

fn md(id: u32, calls: u64, bytecodes: u64) -> JvmMethodDelta {
    JvmMethodDelta {
        id,
        calls,
        bytecodes,
        cpu_ns: 0,
        offcpu_ns: 0,
    }
}

/// Two JVMs and their history so far: Paper ran g, f and main; Server ran handle.
fn jvm_first() -> WatchUpdate {
    let mut u = update();
    u.elapsed_ns = 2_000_000_000;
    u.jvm = Some(JvmDelta {
        new_jvms: vec![jvm_summary(4242, "Paper"), jvm_summary(5151, "app.jar")],
        exited: vec![],
        new_methods: vec![
            jvm_method(0, "Paper.g(I)V"),
            jvm_method(1, "Paper.f()V"),
            jvm_method(2, "Paper.main([Ljava/lang/String;)V"),
            jvm_method(3, "app.Server.handle()V"),
        ],
        jvms: vec![
            JvmActivity {
                pid: 4242,
                calls: 12,
                bytecodes: 600,
                methods: vec![md(0, 10, 450), md(1, 1, 100), md(2, 1, 50)],
                methods_elapsed_ns: 0,
                cpu_ns: 0,
            },
            JvmActivity {
                pid: 5151,
                calls: 7,
                bytecodes: 3_000_000,
                methods: vec![md(3, 7, 3_000_000)],
                methods_elapsed_ns: 0,
                cpu_ns: 0,
            },
        ],
        removed: vec![],
    });
    u
}

/// 0.5 s later: only f ran in Paper (a new context of a known method).
fn jvm_second() -> WatchUpdate {
    WatchUpdate {
        seq: 1,
        elapsed_ns: 500_000_000,
        reset: false,
        kernel: None,
        jvm: Some(JvmDelta {
            jvms: vec![JvmActivity {
                pid: 4242,
                calls: 5,
                bytecodes: 400,
                methods: vec![md(1, 5, 400)],
                methods_elapsed_ns: 500_000_000,
                cpu_ns: 0,
            }],
            ..Default::default()
        }),
    }
}

/// A row inside a full-width pane at 80 columns.
fn boxed(content: &str) -> String {
    format!("│{content:<78}│")
}

/// A pane's top border with its title at 80 columns.
fn titled(title: &str) -> String {
    let fill = 78 - title.chars().count() - 1;
    format!("┌{title}{}┐", "─".repeat(fill + 1))
}

fn jvm_pane(sc: &[String]) -> Vec<String> {
    let top = sc
        .iter()
        .position(|l| l.starts_with("┌ JVM"))
        .unwrap_or_else(|| panic!("no JVM pane:\n{}", sc.join("\n")));
    sc[top..23].to_vec()
}

#[test]
fn jvm_pane_rates_sorting_and_switching_at_80x24() {
    let mut s = TopState::new(1000);
    s.apply(&jvm_first());
    let sc = screen(&s);
    assert!(sc.iter().all(|l| l.chars().count() == 80));
    // History only: no rates yet (ties by bytecodes); share of the JVM's 600.
    assert_eq!(
        jvm_pane(&sc),
        [
            titled(" JVM 4242 Paper (1/2, [ ] switch, sort: bc/s) "),
            boxed(" share    bytecodes    bc/s      calls calls/s method"),
            boxed(" 75.0%          450       0         10       0 Paper.g(int)"),
            boxed(" 16.7%          100       0          1       0 Paper.f()"),
            boxed("  8.3%           50       0          1       0 Paper.main(java.lang.String[])"),
            boxed(""),
            boxed(""),
            format!("└{}┘", "─".repeat(78)),
        ]
    );
    // The kernel panes are still there, above.
    line_with(&sc, "Kernel functions (4 shown, sort: samples)");
    line_with(&sc, "virtio1-req.0");

    // 0.5 s later only f ran: 400 bytecodes → 800/s; the others' rates drop to 0.
    s.apply(&jvm_second());
    s.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
    s.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
    let sc = screen(&s);
    assert_eq!(
        sc[23].trim_end(),
        "q quit ? help Tab pane s sort:bc/s / filter +- interval space pause z zero"
    );
    assert_eq!(
        jvm_pane(&sc)[2..5],
        [
            boxed(" 50.0%          500     800          6    10.0 Paper.f()"),
            boxed(" 45.0%          450       0         10       0 Paper.g(int)"),
            boxed("  5.0%           50       0          1       0 Paper.main(java.lang.String[])"),
        ]
    );
    // s on the focused JVM pane: calls/s, then bytecodes, calls, name.
    s.handle_key(key('s'));
    s.handle_key(key('s'));
    let sc = screen(&s);
    assert_eq!(
        jvm_pane(&sc)[0],
        titled(" JVM 4242 Paper (1/2, [ ] switch, sort: bytecodes) ")
    );
    assert_eq!(
        jvm_pane(&sc)[2],
        boxed(" 50.0%          500     800          6    10.0 Paper.f()")
    );
    s.handle_key(key('s'));
    assert_eq!(
        jvm_pane(&screen(&s))[2],
        boxed(" 45.0%          450       0         10       0 Paper.g(int)")
    );
    assert_eq!(s.ui.function_sort, jpctl::top::state::FunctionSort::Samples);

    // ] shows the next JVM, [ goes back (wrapping).
    s.handle_key(key(']'));
    let p = jvm_pane(&screen(&s));
    assert_eq!(
        p[0],
        titled(" JVM 5151 app.jar (2/2, [ ] switch, sort: calls) ")
    );
    assert_eq!(
        p[2],
        boxed("100.0%      3000000       0          7       0 app.Server.handle()")
    );
    assert_eq!(p[3], boxed(""));
    s.handle_key(key(']'));
    assert!(jvm_pane(&screen(&s))[0].starts_with("┌ JVM 4242 Paper (1/2"));
    s.handle_key(key('['));
    assert!(jvm_pane(&screen(&s))[0].starts_with("┌ JVM 5151 app.jar (2/2"));
}

#[test]
fn no_jvm_pane_until_jpd_reports_a_jvm() {
    let mut s = TopState::new(1000);
    s.apply(&update());
    let sc = screen(&s);
    assert!(!sc.iter().any(|l| l.contains("JVM")), "{}", sc.join("\n"));
    // Tab cycles the two kernel panes only.
    s.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
    s.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
    assert_eq!(s.ui.focus, jpctl::top::state::PaneId::Functions);
    s.handle_key(key(']'));
    assert_eq!(s.jvm.selected, None);
}

#[test]
fn exited_and_removed_jvms() {
    let mut s = TopState::new(1000);
    s.apply(&jvm_first());
    let mut u = jvm_second();
    u.jvm = Some(JvmDelta {
        exited: vec![4242],
        ..Default::default()
    });
    s.apply(&u);
    assert_eq!(
        jvm_pane(&screen(&s))[0],
        titled(" JVM 4242 Paper exited (1/2, [ ] switch, sort: bc/s) ")
    );
    // Retention over: the selection moves to the JVM that is left.
    let mut u = jvm_second();
    u.seq = 2;
    u.jvm = Some(JvmDelta {
        removed: vec![4242],
        ..Default::default()
    });
    s.apply(&u);
    let p = jvm_pane(&screen(&s));
    assert_eq!(
        p[0],
        titled(" JVM 5151 app.jar (1/1, [ ] switch, sort: bc/s) ")
    );
    // A filter applies to methods too.
    for c in "/handle".chars() {
        s.handle_key(key(c));
    }
    assert!(jvm_pane(&screen(&s))[2].contains("app.Server.handle()"));
    s.handle_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
    for c in "/paper".chars() {
        s.handle_key(key(c));
    }
    assert_eq!(jvm_pane(&screen(&s))[2], boxed(""));
}

#[test]
fn help_names_the_jvm_keys() {
    let mut s = TopState::new(1000);
    s.apply(&jvm_first());
    s.handle_key(key('?'));
    let sc = screen(&s);
    assert!(line_with(&sc, "previous / next JVM in the JVM pane").contains(" [  ] "));
    line_with(&sc, "JVM bytecodes per second");
    // Small terminals still draw with three panes.
    for (w, h) in [(20, 5), (1, 1), (80, 3), (40, 12)] {
        screen_of(&s, w, h);
    }
}

/// `jvm_first` and `jvm_second` from a jpd whose sampler is joined to Paper: in the
/// 0.5 s, f's contexts used 0.3 s of CPU and g's 0.1 s, the JVM 0.45 s.
fn jvm_joined() -> [WatchUpdate; 2] {
    let mut first = jvm_first();
    if let Some(d) = first.jvm.as_mut() {
        d.new_jvms[0].cpu = vec![jp_proto::v1::JvmCpuKind {
            kind: "app".into(),
            user_ns: 1_000_000,
            kernel_ns: 0,
        }];
        d.jvms[0].cpu_ns = 1_000_000;
    }
    let mut second = jvm_second();
    if let Some(d) = second.jvm.as_mut() {
        d.jvms[0].cpu_ns = 450_000_000;
        d.jvms[0].methods = vec![
            JvmMethodDelta {
                cpu_ns: 300_000_000,
                ..md(1, 5, 400)
            },
            JvmMethodDelta {
                cpu_ns: 100_000_000,
                ..md(0, 0, 0)
            },
        ];
    }
    [first, second]
}

#[test]
fn jvm_pane_shows_cpu_of_a_joined_jvm_only_and_sorts_by_it_at_80x24() {
    let mut s = TopState::new(1000);
    let [first, second] = jvm_joined();
    s.apply(&first);
    s.apply(&second);
    let p = jvm_pane(&screen(&s));
    assert_eq!(
        p[..5],
        [
            titled(" JVM 4242 Paper cpu 90.0% (1/2, [ ] switch, sort: bc/s) "),
            boxed(" share    bytecodes    bc/s      calls calls/s   cpu% method"),
            boxed(" 50.0%          500     800          6    10.0  60.0% Paper.f()"),
            boxed(" 45.0%          450       0         10       0  20.0% Paper.g(int)"),
            boxed("  5.0%           50       0          1       0   0.0% Paper.main(java.lang.Str"),
        ]
    );
    // s on the JVM pane: cpu% comes right after bc/s for a joined JVM.
    s.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
    s.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
    s.handle_key(key('s'));
    let p = jvm_pane(&screen(&s));
    assert_eq!(
        p[0],
        titled(" JVM 4242 Paper cpu 90.0% (1/2, [ ] switch, sort: cpu%) ")
    );
    assert_eq!(
        p[3],
        boxed(" 45.0%          450       0         10       0  20.0% Paper.g(int)")
    );
    // The other JVM is not joined: no CPU column, and its screen is as before.
    s.handle_key(key(']'));
    let p = jvm_pane(&screen(&s));
    assert_eq!(
        p[..3],
        [
            titled(" JVM 5151 app.jar (2/2, [ ] switch, sort: cpu%) "),
            boxed(" share    bytecodes    bc/s      calls calls/s method"),
            boxed("100.0%      3000000       0          7       0 app.Server.handle()"),
        ]
    );
}
