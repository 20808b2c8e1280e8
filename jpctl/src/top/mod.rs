//! `jpctl top`: a live view of jpd's Watch stream.
//!
//! [`state`] turns deltas and keys into totals, rates and UI settings; [`view`]
//! draws a frame from the state; this module owns the terminal and the event
//! loop. The terminal is restored on every way out: normal quit, an error (the
//! guard's `Drop`), a panic (the hook), and SIGTERM/SIGHUP/SIGINT/SIGQUIT (the loop exits).

pub mod state;
pub mod view;

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use crossterm::event::{self, Event, KeyEventKind};
use jp_proto::v1::WatchRequest;
use ratatui::DefaultTerminal;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::client::{status_message, Client};
use state::{Action, TopState};

/// Raw mode and the alternate screen for as long as it lives.
struct TerminalGuard {
    terminal: DefaultTerminal,
}

impl TerminalGuard {
    fn enter() -> anyhow::Result<TerminalGuard> {
        if !std::io::stdout().is_terminal() {
            anyhow::bail!("jpctl top needs a terminal on stdout (use `jpctl kernel` or `jpctl irq` in scripts)");
        }
        // ratatui::try_init also installs a panic hook that restores the terminal
        // before the panic message is printed.
        let terminal = match ratatui::try_init() {
            Ok(t) => t,
            Err(e) => {
                // Raw mode may already be on when the alternate screen failed.
                let _ = ratatui::try_restore();
                return Err(e).context("cannot set up the terminal");
            }
        };
        Ok(TerminalGuard { terminal })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        // Nothing more can be done if restoring fails; the shell's `reset` will.
        let _ = ratatui::try_restore();
    }
}

/// Reads terminal events on a plain thread (crossterm's reads block) and hands
/// them to the async loop; ends when the loop drops the receiver.
fn spawn_input_thread() -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        while !tx.is_closed() {
            match event::poll(Duration::from_millis(100)) {
                Ok(true) => match event::read() {
                    Ok(ev) => {
                        if tx.blocking_send(ev).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                },
                Ok(false) => {}
                Err(_) => break,
            }
        }
    });
    rx
}

async fn watch(
    client: &mut Client,
    interval_ms: u32,
) -> anyhow::Result<tonic::Streaming<jp_proto::v1::WatchUpdate>> {
    let stream = client
        .watch(WatchRequest { interval_ms })
        .await
        .map_err(|s| anyhow::anyhow!(status_message(&s)))?
        .into_inner();
    Ok(stream)
}

pub async fn run(mut client: Client, interval_ms: u32) -> anyhow::Result<()> {
    let mut state = TopState::new(interval_ms);
    let mut stream = watch(&mut client, state.ui.interval_ms).await?;
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut quit = signal(SignalKind::quit()).context("SIGQUIT handler")?;
    let mut guard = TerminalGuard::enter()?;
    let mut input = spawn_input_thread();
    loop {
        guard
            .terminal
            .draw(|f| view::render(f, &state))
            .context("cannot draw")?;
        tokio::select! {
            msg = stream.message() => match msg {
                Ok(Some(u)) => state.apply(&u),
                Ok(None) => anyhow::bail!("jpd ended the watch stream (did it shut down?)"),
                Err(s) => anyhow::bail!("watch stream failed: {}", status_message(&s)),
            },
            ev = input.recv() => match ev {
                Some(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                    match state.handle_key(k) {
                        Action::Quit => break,
                        Action::ChangeInterval => {
                            stream = watch(&mut client, state.ui.interval_ms).await?;
                            state.begin_restarted_stream();
                        }
                        Action::None => {}
                    }
                }
                Some(_) => {} // resize and others: the next draw adapts
                None => anyhow::bail!("lost the terminal's input"),
            },
            _ = term.recv() => break,
            _ = hup.recv() => break,
            _ = int.recv() => break,
            _ = quit.recv() => break,
        }
    }
    drop(guard);
    Ok(())
}
