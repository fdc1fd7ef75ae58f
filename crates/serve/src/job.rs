//! One piece of work a resident agent runs in its own task: a turn, a retry, `/compact`,
//! `/clear` (docs/design.md §9 "Agents"), a wake (§10, `super::wake_job`), an idle-autonomy job
//! (§13, `super::intent_job`), and the memory flush after a run (§8).
//!
//! Owns taking the §7 turn lock for the work, opening or re-reading the session under it (so
//! a CLI process's compaction between two turns is seen, and tool groups a crash left running
//! are killed), and giving the session back to the actor with how the work ended. The memory
//! flush runs without the turn lock and without the session, so a chat that arrives meanwhile
//! starts at once. Must not touch the actor's queues or HTTP.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use super::tracker::Tracker;
use cicy_gateway::GatewayClient;
use cicy_memory::Memory;
use cicy_protocol::event::{Emitter, EventKind, TurnOutcome};
use cicy_runtime::agent::{AgentError, Session};
use cicy_runtime::command::{self, CommandEnd};
use cicy_runtime::turn::{self, Steering};
use cicy_store::fsutil;
use cicy_store::home::Home;
use cicy_store::lock::{LockError, TurnLock};
use cicy_store::registry::AgentRecord;

/// What a job does.
#[derive(Debug, Clone)]
pub(super) enum Work {
    Turn(String),
    Retry,
    Compact {
        keep: usize,
    },
    Clear,
    /// A wake (docs/design.md §10) whose todos and conversation are already claimed.
    Wake(Box<cicy_runtime::wake::run::Prepared>),
    /// An intent or routine an idle tick picked (docs/design.md §13), and who preempts it.
    Auto(Box<cicy_runtime::autonomy::tick::AutoJob>, super::intent_job::Preemption),
}

/// How a job ended.
pub(super) enum JobEnd {
    /// Another process (a CLI run) holds the turn lock: nothing ran; try again later.
    LockBusy,
    /// The session could not be opened or re-read.
    Open(AgentError),
    Turn(Result<TurnOutcome, AgentError>),
    /// `Ok(None)`: nothing to retry.
    Retry(Result<Option<TurnOutcome>, AgentError>),
    Compact(Result<CommandEnd, AgentError>),
    /// The new conversation's id.
    Clear(Result<String, AgentError>),
    Wake(super::wake_job::WakeEnd),
    Auto(super::intent_job::AutoEnd),
}

/// A finished job: the session back (if it could be opened) and how the work ended.
pub(super) struct JobOut {
    pub session: Option<Session>,
    pub end: JobEnd,
}

/// What every job of one agent shares.
#[derive(Clone)]
pub(super) struct JobCtx {
    pub home: Home,
    pub id: String,
    pub record: AgentRecord,
    pub workspace: PathBuf,
    pub http: reqwest::Client,
    pub tracker: Arc<Tracker>,
    pub scheduler: super::scheduler::Scheduler,
    pub wake_limits: super::wake_job::WakeLimits,
    pub drained: super::drain::DrainTargets,
    /// Where the agent's `ask_user` questions wait for `POST /api/agents/{id}/respond`.
    pub questions: Arc<cicy_tools::ask::Questions>,
}

impl JobCtx {
    /// The hook every turn of this agent runs after a tool batch: the outbox drain.
    pub(super) fn after_batch(&self) -> cicy_runtime::wake::state::AfterBatch {
        super::drain::after_batch(self.tracker.emitter(), self.drained.clone())
    }
}

/// Runs `work` holding the turn lock.
pub(super) async fn run(ctx: JobCtx, session: Option<Session>, work: Work, cancel: CancellationToken, steering: Steering) -> JobOut {
    let lock = match fsutil::blocking(|| TurnLock::try_acquire(&ctx.workspace, &ctx.id)) {
        Ok(lock) => lock,
        Err(LockError::Busy { .. }) => return JobOut { session, end: JobEnd::LockBusy },
        Err(e) => return JobOut { session, end: JobEnd::Open(e.into()) },
    };
    let events = ctx.tracker.emitter();
    let mut session = match fsutil::blocking(|| open_or_reload(&ctx, session)) {
        Ok(s) => s,
        Err(e) => return JobOut { session: None, end: JobEnd::Open(e) },
    };
    for reaped in &session.notes().reaped {
        events.emit(EventKind::System { text: reaped.to_string() });
    }
    for note in &session.notes().restored {
        events.emit(EventKind::System { text: format!("history restored: {note}") });
    }
    session.extensions_mut().insert(Arc::new(
        cicy_runtime::wake::state::WakeTurn::in_serve(
            &ctx.home,
            &ctx.id,
            &ctx.workspace,
            super::wake_job::notifier(&ctx.id, ctx.tracker.emitter(), ctx.scheduler.clone()),
        )
        .with_after_batch(ctx.after_batch()),
    ));
    // A user can always answer through the route while serve runs (docs/design.md §12).
    session.extensions_mut().insert(ctx.questions.clone());
    let end = match work {
        Work::Wake(p) => JobEnd::Wake(super::wake_job::run(&ctx, &mut session, &p, &events, &cancel, &steering).await),
        Work::Auto(job, preemption) => {
            JobEnd::Auto(super::intent_job::run(&ctx, &mut session, &job, &preemption, &events, &cancel, &steering).await)
        }
        Work::Turn(text) => JobEnd::Turn(turn::run_turn_with(&mut session, &text, &events, &cancel, &steering).await),
        Work::Retry => JobEnd::Retry(turn::retry_turn_with(&mut session, &events, &cancel, &steering).await),
        Work::Compact { keep } => JobEnd::Compact(command::compact(&mut session, keep, &events, &cancel).await),
        Work::Clear => {
            cicy_runtime::turn::session_end(&session, &events, &cancel).await;
            JobEnd::Clear(
                fsutil::blocking(|| command::clear(&mut session, &events)).map(|_| session.conversation().current.conversation_id.clone()),
            )
        }
    };
    drop(lock);
    JobOut { session: Some(session), end }
}

/// Opens the session (a resident one: the shared HTTP client) or re-reads the history of the
/// open one; either way tool groups a crash left running are reaped. Call holding the lock.
fn open_or_reload(ctx: &JobCtx, session: Option<Session>) -> Result<Session, AgentError> {
    match session {
        Some(mut s) => {
            s.reload()?;
            Ok(s)
        }
        None => {
            let mut s = Session::open_resident(&ctx.home, ctx.record.clone(), &ctx.http)?;
            s.reap();
            Ok(s)
        }
    }
}

/// What a memory flush needs, taken from the session so the flush can run beside a turn.
pub(super) struct FlushCtx {
    pub memory: Memory,
    pub client: GatewayClient,
    pub model: String,
    pub id: String,
}

impl FlushCtx {
    pub(super) fn of(session: &Session) -> Self {
        let model = if session.conversation().current.model.is_empty() {
            session.materials().map(|m| m.model).unwrap_or_default()
        } else {
            session.conversation().current.model.clone()
        };
        Self { memory: session.memory(), client: session.client().clone(), model, id: session.agent().record.id.clone() }
    }

    /// Whether the buffer is due now (a file read).
    pub(super) fn due(&self) -> bool {
        fsutil::blocking(|| matches!(self.memory.due(SystemTime::now()), Ok(Some(_))))
    }

    /// Flushes a due buffer (docs/design.md §8), reporting through `events`; never holds the turn lock.
    pub(super) async fn flush(self, events: Emitter, cancel: CancellationToken) {
        if self.model.is_empty() {
            return;
        }
        let aux = cicy_memory::AuxTarget { client: &self.client, model: &self.model, agent_id: &self.id };
        self.memory.flush_if_due(&aux, None, &events, &cancel).await;
    }
}
