//! `chat` and `retry`: run turns with Ctrl-C wired to cancellation.
//!
//! One-shot: one turn, exit code 0 (completed), 130 (cancelled) or 1 (failed/blocked); a
//! memory buffer that became due while no process ran is flushed first (DESIGN.md §8).
//! Session: one turn per stdin line until `/exit` or EOF; Ctrl-C cancels the running turn (or
//! memory flush), and at the prompt leaves. While waiting for a line, the memory timer flushes
//! the buffer when it is due (after the configured idle period).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Result;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use cicy::agent::Session;
use cicy::event::{Emitter, EventKind, TurnOutcome};
use cicy::home::Home;
use cicy::memory::FlushReason;
use cicy::turn;

use super::print;

pub(super) fn emitter(id: &str, json: bool) -> Emitter {
    if json {
        Emitter::new(id, print::json)
    } else {
        Emitter::new(id, print::human)
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

/// Cancels whatever token is current on each Ctrl-C; with none current, exits the process.
fn watch_ctrl_c(current: Arc<Mutex<Option<CancellationToken>>>) {
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            let token = current.lock().ok().and_then(|g| g.clone());
            match token {
                Some(t) => t.cancel(),
                None => std::process::exit(130),
            }
        }
    });
}

fn open(home: &Home, id: &str, events: &Emitter) -> Result<Session> {
    let session = Session::open(home, id)?;
    for note in &session.restore_notes {
        events.emit(EventKind::System { text: format!("history restored: {note}") });
    }
    Ok(session)
}

pub fn chat(home: &Home, id: &str, text: Option<String>, json: bool) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async {
        let events = emitter(id, json);
        let mut session = open(home, id, &events)?;
        let current = Arc::new(Mutex::new(None::<CancellationToken>));
        watch_ctrl_c(current.clone());
        if let Some(text) = text {
            let token = CancellationToken::new();
            set(&current, Some(token.clone()));
            flush_memory(&session, None, &events, &token).await;
            let outcome = turn::run_turn(&mut session, &text, &events, &token).await?;
            return Ok(exit_code(outcome));
        }
        if session.current.messages.is_empty() {
            if let Some(g) = session.materials()?.template.meta.greeting.filter(|g| !g.trim().is_empty()) {
                events.emit(EventKind::System { text: g });
            }
        }
        let interactive = std::io::stdin().is_terminal();
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        let mut last = ExitCode::SUCCESS;
        let memory = session.memory();
        loop {
            if interactive {
                eprint!("> ");
            }
            // `next_line` is cancel-safe: a line that arrives while the timer wins is kept.
            let next = tokio::select! {
                biased;
                () = sleep_until(memory.next_due().ok().flatten()) => None,
                line = lines.next_line() => Some(line?),
            };
            let Some(next) = next else {
                let token = CancellationToken::new();
                set(&current, Some(token.clone()));
                let reason = memory.due(SystemTime::now()).ok().flatten().unwrap_or(FlushReason::Idle);
                flush_memory(&session, Some(reason), &events, &token).await;
                set(&current, None);
                continue;
            };
            let Some(line) = next else { break };
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if line == "/exit" {
                break;
            }
            let token = CancellationToken::new();
            set(&current, Some(token.clone()));
            let outcome = turn::run_turn(&mut session, line, &events, &token).await;
            set(&current, None);
            last = exit_code(outcome?);
        }
        Ok(last)
    })
}

pub fn retry(home: &Home, id: &str, json: bool) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async {
        let events = emitter(id, json);
        let mut session = open(home, id, &events)?;
        let current = Arc::new(Mutex::new(None::<CancellationToken>));
        watch_ctrl_c(current.clone());
        let token = CancellationToken::new();
        set(&current, Some(token.clone()));
        flush_memory(&session, None, &events, &token).await;
        match turn::retry_turn(&mut session, &events, &token).await? {
            Some(outcome) => Ok(exit_code(outcome)),
            None => {
                eprintln!("nothing to retry: the last turn of {id} did not end with a failure, cancel or block marker");
                Ok(ExitCode::from(1))
            }
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

fn set(current: &Arc<Mutex<Option<CancellationToken>>>, token: Option<CancellationToken>) {
    if let Ok(mut g) = current.lock() {
        *g = token;
    }
}
