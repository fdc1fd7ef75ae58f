//! A wake turn inside a job (docs/design.md §10): the turn on the wake message, cryo's in-wake
//! retries of a turn that failed before it sent anything (≤ 10, 1…512 s), the cap on a wake's
//! length (3600 s), then the wake's end (`cicy_runtime::wake::run::finalize`) with the error lines the
//! turn reported.
//!
//! Owns the sink that records a wake turn's error lines and the [`WakeNote`] → event mapping.
//! Must not touch the actor's queues; the claims were made before the job started.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::job::JobCtx;
use super::scheduler::Scheduler;
use cicy_protocol::event::{Emitter, ErrorKind, EventKind, EventSink, TodoAction, TurnOutcome};
use cicy_runtime::agent::{AgentError, Session};
use cicy_runtime::conversation::message::Role;
use cicy_runtime::turn::{self, Steering};
use cicy_runtime::wake::run::{finalize, Ending, Left, Prepared};
use cicy_runtime::wake::state::{Notify, WakeNote, WakeTurn};
use cicy_runtime::wake::todo::todo_line;
use cicy_store::fsutil;

/// cryo: a failed wake turn that sent nothing is run again at most this many times.
pub(super) const MAX_WAKE_RETRIES: u32 = 10;

/// How a wake job ended.
#[derive(Debug)]
pub(super) enum WakeEnd {
    Ran,
    /// The turn could not start or its files could not be written; the wake was still ended
    /// (fallbacks written, todos rescheduled).
    TurnError(AgentError),
    /// The wake's end could not be written (the database or a message file).
    Finalize(cicy_runtime::wake::WakeError),
}

/// The wake's settings (serve options).
#[derive(Debug, Clone, Copy)]
pub struct WakeLimits {
    /// cryo: a wake turn is cancelled after 3600 s.
    pub max_wake: Duration,
    /// cryo: the first in-wake retry waits 1 s, doubling to 512 s.
    pub first_backoff: Duration,
    /// cryo: at most [`MAX_WAKE_RETRIES`] re-runs of a failed wake turn.
    pub retries: u32,
}

impl Default for WakeLimits {
    fn default() -> Self {
        Self { max_wake: Duration::from_secs(3600), first_backoff: Duration::from_secs(1), retries: MAX_WAKE_RETRIES }
    }
}

/// An event sink that passes everything on and keeps the text of each `error` event.
struct Recording {
    inner: Emitter,
    errors: Mutex<Vec<String>>,
}

impl EventSink for Recording {
    fn emit(&self, kind: EventKind) {
        if let EventKind::Error { message, .. } = &kind {
            self.errors.lock().unwrap_or_else(|p| p.into_inner()).push(message.clone());
        }
        self.inner.emit(kind);
    }
}

/// The [`Notify`] of an agent's turns in serve: each note becomes an event, and a todo change
/// reaches the scheduler.
pub(super) fn notifier(id: &str, events: Emitter, scheduler: Scheduler) -> Notify {
    let id = id.to_string();
    let events = Arc::new(events);
    Arc::new(move |note| {
        if matches!(note, WakeNote::Todo { .. }) {
            scheduler.changed(&id);
        }
        events.emit(note_event(note));
    })
}

/// The event of a [`WakeNote`].
pub(super) fn note_event(note: WakeNote) -> EventKind {
    match note {
        WakeNote::Todo { action, id, line } => EventKind::TodoChange { action, id, line },
        WakeNote::MessageOut { from, to, text, file } => EventKind::MessageOut { from, to, text, file },
        WakeNote::MessageIn { from, subject, file } => EventKind::MessageIn { from, subject, file },
        WakeNote::InboxAside { file, why } => EventKind::System { text: format!("inbox: {file} {why}") },
    }
}

/// Runs the wake `p` on `session` and ends it.
pub(super) async fn run(
    ctx: &JobCtx,
    session: &mut Session,
    p: &Prepared,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> WakeEnd {
    events.emit(EventKind::Wake {
        reason: p.reason.as_str().to_string(),
        n: p.n,
        todos: p.todos.iter().map(|t| t.id).collect(),
        messages: p.messages.iter().map(|m| m.name.clone()).collect(),
    });
    for t in &p.todos {
        events.emit(EventKind::TodoChange { action: TodoAction::Claim, id: t.id, line: todo_line(t) });
    }
    for m in &p.messages {
        events.emit(EventKind::MessageIn { from: m.from.clone(), subject: m.subject.clone(), file: m.name.clone() });
    }
    let recording = Arc::new(Recording { inner: ctx.tracker.emitter(), errors: Mutex::new(Vec::new()) });
    let turn_events = Emitter::from_sink(recording.clone());
    let notify = notifier(&ctx.id, ctx.tracker.emitter(), ctx.scheduler.clone());
    let wt =
        Arc::new(WakeTurn::waking(&ctx.home, &ctx.id, &ctx.workspace, p.claim.clone(), notify.clone()).with_after_batch(ctx.after_batch()));
    session.extensions_mut().insert(wt.clone());

    let wake_cancel = cancel.child_token();
    let timer = {
        let (c, max) = (wake_cancel.clone(), ctx.wake_limits.max_wake);
        tokio::spawn(async move {
            tokio::time::sleep(max).await;
            c.cancel();
        })
    };
    let outcome = turn_with_retries(ctx, session, p, &turn_events, &wake_cancel, steering, &wt).await;
    timer.abort();
    if wake_cancel.is_cancelled() && !cancel.is_cancelled() {
        turn_events.emit(EventKind::Error {
            kind: ErrorKind::Wake,
            message: format!("the wake turn was cancelled after {} s (the longest a wake may run)", ctx.wake_limits.max_wake.as_secs()),
        });
    }
    let mut errors = recording.errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if cancel.is_cancelled() {
        // Not the model's fault and no error event of its own: the crash text says why.
        errors.push("the wake was cancelled: serve was stopping, or the turn was aborted".to_string());
    }
    let ending = match &outcome {
        Ok(TurnOutcome::Completed) => Ending::Completed { final_answer: final_answer(session) },
        Ok(_) => Ending::Crashed { errors },
        Err(e) => {
            // The turn could not go on (its files): the reason is not an event, so add it.
            errors.push(e.to_string());
            Ending::Crashed { errors }
        }
    };
    let left = {
        let st = wt.state();
        let tools = &session.conversation().current.tools;
        let tool_less = !tools.iter().any(|t| t == cicy_runtime::wake::tools::REPLY || t == cicy_runtime::wake::tools::SEND);
        Left { claim: st.claim.clone(), sent: st.sent, tool_less }
    };
    session
        .extensions_mut()
        .insert(Arc::new(WakeTurn::in_serve(&ctx.home, &ctx.id, &ctx.workspace, notify.clone()).with_after_batch(ctx.after_batch())));
    let todo_ids: Vec<u32> = p.todos.iter().map(|t| t.id).collect();
    let (home, id, ws) = (ctx.home.clone(), ctx.id.clone(), ctx.workspace.clone());
    let notes = fsutil::blocking(|| finalize(&home, &id, &ws, &todo_ids, &left, &ending));
    ctx.scheduler.changed(&ctx.id);
    match notes {
        Ok(notes) => {
            for n in notes {
                notify(n);
            }
        }
        Err(e) => return WakeEnd::Finalize(e),
    }
    match outcome {
        Ok(_) => WakeEnd::Ran,
        Err(e) => WakeEnd::TurnError(e),
    }
}

/// The wake turn, run again after a failure that happened before it sent anything *(cryo:
/// ≤ 10 re-runs, waiting 1, 2, 4 … 512 s)*; a cancel (the user, shutdown, the wake's cap) ends
/// it at once.
async fn turn_with_retries(
    ctx: &JobCtx,
    session: &mut Session,
    p: &Prepared,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
    wt: &WakeTurn,
) -> Result<TurnOutcome, AgentError> {
    let mut outcome = turn::run_wake_turn(session, &p.message, events, cancel, steering).await?;
    let mut wait = ctx.wake_limits.first_backoff;
    let retries = ctx.wake_limits.retries;
    for attempt in 1..=retries {
        let untouched = wt.state().sent == 0 && wt.state().claim.as_ref().is_none_or(|c| !c.answered);
        if outcome != TurnOutcome::Failed || !untouched || cancel.is_cancelled() {
            break;
        }
        events.emit(EventKind::System {
            text: format!("the wake turn failed before it sent anything; running it again in {} s ({attempt}/{retries})", wait.as_secs()),
        });
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = cancel.cancelled() => break,
        }
        outcome = match turn::retry_turn_with(session, events, cancel, steering).await? {
            Some(o) => o,
            None => break,
        };
        wait *= 2;
    }
    Ok(outcome)
}

/// The text of the turn's last assistant message (the direct-chat reply when the agent called
/// neither `reply` nor `send`).
fn final_answer(session: &Session) -> Option<String> {
    let last = session.conversation().current.messages.last().filter(|m| m.role == Role::Assistant)?;
    let text = last.plain_text();
    (!text.trim().is_empty()).then_some(text)
}
