//! `chat`, `retry`, `compact` and `clear`: run turns and conversation commands with Ctrl-C
//! wired to cancellation and the agent's turn lock held.
//!
//! One-shot: one turn (or `/compact`, `/clear` given as the text), exit code 0 (completed), 130
//! (cancelled) or 1 (failed/blocked/refused). Session: one line at a time from stdin until
//! `/exit` or EOF; `/compact` and `/clear` typed as a whole line run between turns; Ctrl-C
//! cancels the running turn, and at the prompt leaves. SIGTERM and SIGHUP cancel the running
//! turn like Ctrl-C and then leave (exit 143, 129). The lock is held for each line and
//! released between lines, and the history is re-read before each line, so `cicy-agent
//! compact|clear` from another terminal can run between two turns of a session; while a turn
//! runs, they are refused with a message that says they were NOT executed.
//!
//! Memory (DESIGN.md §8): a one-shot process first flushes a memory buffer that became due
//! while no process ran; a session's memory timer flushes the buffer while it waits for a line.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Result;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use cicy::agent::{AgentError, Session};
use cicy::compact::{self, CompactError};
use cicy::event::{Emitter, EventKind, TurnOutcome};
use cicy::gateway::GatewayError;
use cicy::home::Home;
use cicy::lock::{LockError, TurnLock};
use cicy::memory::FlushReason;
use cicy::turn;

use super::print;

pub(super) fn emitter(id: &str, json: bool) -> Emitter {
    if json {
        Emitter::new(id, print::json)
    } else {
        let printer = print::Human::default();
        Emitter::new(id, move |ev| printer.print(ev))
    }
}

fn exit_code(o: TurnOutcome) -> ExitCode {
    match o {
        TurnOutcome::Completed => ExitCode::SUCCESS,
        TurnOutcome::Cancelled => ExitCode::from(130),
        TurnOutcome::Blocked | TurnOutcome::Failed => ExitCode::from(1),
    }
}

pub(super) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// What the signal watcher shares with the command it interrupts.
#[derive(Default)]
struct State {
    /// The token a signal cancels; `None` between turns (a signal then leaves at once).
    token: Option<CancellationToken>,
    /// Set by SIGTERM or SIGHUP: the exit code (143, 129) to leave with once the cancelled
    /// section has ended, so its cancel marker is written and its tools are killed first.
    exit: Option<u8>,
}

type Current = Arc<Mutex<State>>;

/// On SIGINT (Ctrl-C), SIGTERM and SIGHUP cancels whatever token is current; with none current,
/// exits the process at once (130, 143, 129). After SIGTERM or SIGHUP the process also exits
/// when the cancelled section ends (see [`unset`]); after SIGINT a session goes on.
fn watch_signals(current: Current) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        loop {
            let code: u8 = tokio::select! {
                Some(()) = int.recv() => 130,
                Some(()) = term.recv() => 143,
                Some(()) = hup.recv() => 129,
                else => break,
            };
            let token = current.lock().ok().and_then(|mut s| {
                if code != 130 {
                    s.exit = Some(code);
                }
                s.token.clone()
            });
            match token {
                Some(t) => t.cancel(),
                None => std::process::exit(code.into()),
            }
        }
    });
    Ok(())
}

/// A fresh token that a signal cancels from now on.
fn arm(current: &Current) -> CancellationToken {
    let token = CancellationToken::new();
    if let Ok(mut s) = current.lock() {
        s.token = Some(token.clone());
    }
    token
}

/// Ends the section [`arm`] began. If SIGTERM or SIGHUP cancelled it, the process exits here
/// with that signal's code: the section has written what a cancel leaves (the marker), and the
/// turn lock is a `flock` the kernel releases.
fn unset(current: &Current) {
    let exit = current.lock().ok().and_then(|mut s| {
        s.token = None;
        s.exit
    });
    if let Some(code) = exit {
        std::process::exit(code.into());
    }
}

/// What a line asks for: the conversation commands must be the whole line.
fn what(line: &str) -> &'static str {
    match line.trim() {
        "/compact" => "/compact",
        "/clear" => "/clear",
        _ => "the message",
    }
}

/// Opens the agent holding its turn lock; `None` (after saying so) when another process holds it.
fn open_locked(home: &Home, id: &str, what: &str, events: &Emitter) -> Result<Option<(Session, TurnLock)>> {
    match Session::open_locked(home, id) {
        Ok((session, lock)) => {
            notes(&session, events);
            Ok(Some((session, lock)))
        }
        Err(AgentError::Lock(e @ LockError::Busy { .. })) => {
            refused(what, &e, events);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

fn refused(what: &str, e: &LockError, events: &Emitter) {
    events.emit(EventKind::Error { kind: "busy".to_string(), message: format!("{what} was NOT executed: {e}") });
}

fn notes(session: &Session, events: &Emitter) {
    for note in &session.restore_notes {
        events.emit(EventKind::System { text: format!("history restored: {note}") });
    }
}

pub fn chat(home: &Home, id: &str, text: Option<String>, json: bool) -> Result<ExitCode> {
    // Model APIs reject empty content, and a stored empty message would be "healed" later.
    if text.as_deref().is_some_and(|t| t.trim().is_empty()) {
        anyhow::bail!("the message is empty: give some text, or leave it out to read messages from stdin");
    }
    let rt = runtime()?;
    rt.block_on(async {
        let events = emitter(id, json);
        let current: Current = Arc::default();
        watch_signals(current.clone())?;
        if let Some(text) = text {
            let Some((mut session, _lock)) = open_locked(home, id, what(&text), &events)? else {
                return Ok(ExitCode::from(1));
            };
            let token = arm(&current);
            flush_memory(&session, None, &events, &token).await;
            unset(&current);
            return run_line(&mut session, &text, &events, &current).await;
        }
        let Some((mut session, lock)) = open_locked(home, id, "chat", &events)? else {
            return Ok(ExitCode::from(1));
        };
        drop(lock);
        if session.current.messages.is_empty() {
            if let Some(g) = session.materials()?.template.meta.greeting.filter(|g| !g.trim().is_empty()) {
                events.emit(EventKind::System { text: g });
            }
        }
        let interactive = std::io::stdin().is_terminal();
        let mut stdin = BufReader::new(tokio::io::stdin());
        // Bytes up to `\n`, decoded lossily: one line that is not UTF-8 must not end the session.
        let mut buf = Vec::new();
        let mut last = ExitCode::SUCCESS;
        let memory = session.memory();
        loop {
            if interactive {
                eprint!("> ");
            }
            // `read_until` keeps what it read in `buf` when the timer wins, so no input is lost;
            // `buf` is cleared only once a whole line is taken.
            let next = tokio::select! {
                biased;
                () = sleep_until(memory.next_due().ok().flatten()) => None,
                n = stdin.read_until(b'\n', &mut buf) => Some(n?),
            };
            if next.is_none() {
                let token = arm(&current);
                let reason = memory.due(SystemTime::now()).ok().flatten().unwrap_or(FlushReason::Idle);
                flush_memory(&session, Some(reason), &events, &token).await;
                unset(&current);
                continue;
            }
            if buf.is_empty() {
                break; // EOF
            }
            let line = String::from_utf8_lossy(&buf).into_owned();
            buf.clear();
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if line == "/exit" {
                break;
            }
            let _lock = match TurnLock::try_acquire(&session.record.workspace, id) {
                Ok(lock) => lock,
                Err(e @ LockError::Busy { .. }) => {
                    refused(what(line), &e, &events);
                    last = ExitCode::from(1);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            session.reload()?;
            notes(&session, &events);
            last = run_line(&mut session, line, &events, &current).await?;
        }
        Ok(last)
    })
}

/// Runs one chat line: `/compact`, `/clear` or a user turn. Holds no lock itself.
async fn run_line(session: &mut Session, line: &str, events: &Emitter, current: &Current) -> Result<ExitCode> {
    match line.trim() {
        "/compact" => compact_now(session, 0, events, current).await,
        "/clear" => clear_now(session, events),
        _ => {
            let token = arm(current);
            let outcome = turn::run_turn(session, line, events, &token).await;
            unset(current);
            Ok(exit_code(outcome?))
        }
    }
}

async fn compact_now(session: &mut Session, keep: usize, events: &Emitter, current: &Current) -> Result<ExitCode> {
    let token = arm(current);
    let result = compact::compact_session(session, keep, events, &token).await;
    unset(current);
    let failed = |message: String| {
        events.emit(EventKind::Error { kind: "compact".to_string(), message });
    };
    match result {
        Ok(done) => {
            let archived = done
                .archive
                .as_ref()
                .and_then(|a| a.current.file_name())
                .map(|n| format!("; the state before is archived as {}", n.to_string_lossy()))
                .unwrap_or_default();
            events.emit(EventKind::System {
                text: format!(
                    "/compact done: {} summary call(s), input {}, output {}, cache write {}, cache read {}{archived}",
                    done.requests,
                    done.usage.input_tokens,
                    done.usage.output_tokens,
                    done.usage.cache_creation_input_tokens,
                    done.usage.cache_read_input_tokens
                ),
            });
            Ok(ExitCode::SUCCESS)
        }
        Err(CompactError::Gateway(GatewayError::Cancelled)) => {
            failed("/compact was cancelled; nothing was changed".to_string());
            Ok(ExitCode::from(130))
        }
        Err(CompactError::History(e)) => Err(e.into()),
        Err(CompactError::Agent(e)) => Err((*e).into()),
        Err(e @ (CompactError::Nothing | CompactError::Gateway(_) | CompactError::Empty | CompactError::TooLarge { .. })) => {
            failed(format!("/compact failed: {e}; nothing was changed"));
            Ok(ExitCode::from(1))
        }
    }
}

fn clear_now(session: &mut Session, events: &Emitter) -> Result<ExitCode> {
    let old = session.clear()?;
    events.emit(EventKind::System {
        text: format!("/clear: new conversation {}; the previous one ({old}) is kept on disk", session.current.conversation_id),
    });
    Ok(ExitCode::SUCCESS)
}

pub fn retry(home: &Home, id: &str, json: bool) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async {
        let events = emitter(id, json);
        let current: Current = Arc::default();
        watch_signals(current.clone())?;
        let Some((mut session, _lock)) = open_locked(home, id, "retry", &events)? else {
            return Ok(ExitCode::from(1));
        };
        let token = arm(&current);
        flush_memory(&session, None, &events, &token).await;
        let outcome = turn::retry_turn(&mut session, &events, &token).await;
        unset(&current);
        match outcome? {
            Some(outcome) => Ok(exit_code(outcome)),
            None => {
                eprintln!("nothing to retry: the last turn of {id} did not end with a failure, cancel or block marker (or it began before the last compaction)");
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// `cicy-agent compact <id>` and `cicy-agent clear <id>`.
pub fn command(home: &Home, id: &str, line: &str, keep: usize, json: bool) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async {
        let events = emitter(id, json);
        let current: Current = Arc::default();
        watch_signals(current.clone())?;
        let Some((mut session, _lock)) = open_locked(home, id, line, &events)? else {
            return Ok(ExitCode::from(1));
        };
        match line {
            "/compact" => compact_now(&mut session, keep, &events, &current).await,
            _ => clear_now(&mut session, &events),
        }
    })
}

/// Flushes the memory buffer: when it is due (`reason` `None`: a one-shot process catching up
/// on a buffer that became due while nothing ran), or always with `Some(reason)` (the resident
/// timer). Returns false when a flush failed; every problem is reported as an event.
async fn flush_memory(session: &Session, reason: Option<FlushReason>, events: &Emitter, cancel: &CancellationToken) -> bool {
    let memory = session.memory();
    let reason = match reason {
        Some(r) => r,
        None => match memory.due(SystemTime::now()) {
            Ok(Some(r)) => r,
            Ok(None) => return true,
            Err(e) => {
                events.emit(EventKind::Error { kind: "memory".into(), message: e.to_string() });
                return false;
            }
        },
    };
    let model = match session.materials() {
        Ok(m) => m.model,
        Err(e) => {
            events.emit(EventKind::Error { kind: "memory".into(), message: format!("cannot flush memory: {e}") });
            return false;
        }
    };
    memory.flush_and_report(&session.aux_target(&model), reason, events, cancel).await
}

/// Sleeps until `at` (not at all when it has passed), or forever when there is nothing to wait
/// for.
async fn sleep_until(at: Option<SystemTime>) {
    match at {
        Some(at) => tokio::time::sleep(at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)).await,
        None => std::future::pending().await,
    }
}
