//! `chat` and `retry`: run turns with Ctrl-C wired to cancellation.
//!
//! One-shot: one turn, exit code 0 (completed), 130 (cancelled) or 1 (failed/blocked).
//! Session: one turn per stdin line until `/exit` or EOF; Ctrl-C cancels the running turn, and
//! at the prompt leaves.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use cicy::agent::Session;
use cicy::event::{Emitter, EventKind, TurnOutcome};
use cicy::home::Home;
use cicy::turn;

use super::print;

fn emitter(id: &str, json: bool) -> Emitter {
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

fn runtime() -> Result<tokio::runtime::Runtime> {
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
        loop {
            if interactive {
                eprint!("> ");
            }
            let Some(line) = lines.next_line().await? else { break };
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
        match turn::retry_turn(&mut session, &events, &token).await? {
            Some(outcome) => Ok(exit_code(outcome)),
            None => {
                eprintln!("nothing to retry: the last turn of {id} did not end with a failure, cancel or block marker");
                Ok(ExitCode::from(1))
            }
        }
    })
}

fn set(current: &Arc<Mutex<Option<CancellationToken>>>, token: Option<CancellationToken>) {
    if let Ok(mut g) = current.lock() {
        *g = token;
    }
}
