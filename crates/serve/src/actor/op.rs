//! What is asked of an actor ([`Op`]) and what it answers: the replies each request's sender
//! waits for, and the reasons a request is refused. Plain data: the actor (`super`) makes them,
//! the routes turn them into HTTP answers.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::oneshot;

use cicy_protocol::event::{AgentState, SteerStatus};
use cicy_runtime::agent::AgentError;
use cicy_store::eventlog::{EventLogError, Subscription};

/// A request to an agent's actor; each carries where its answer goes.
pub(crate) enum Op {
    /// `POST /api/cicy/chat`: start a run (the stream follows it) or queue the text.
    Chat {
        text: String,
        reply: oneshot::Sender<Admit>,
    },
    /// `POST /api/agents/{id}/prompt`: like chat without a stream; answers whether it queued.
    Prompt {
        text: String,
        reply: oneshot::Sender<bool>,
    },
    Steer {
        text: String,
        interrupt: bool,
        reply: oneshot::Sender<SteerReply>,
    },
    /// Answers whether a job was running.
    Cancel {
        reply: oneshot::Sender<CancelReply>,
    },
    Retry {
        reply: oneshot::Sender<RetryReply>,
    },
    Clear {
        reply: oneshot::Sender<Result<ClearReply, ClearError>>,
    },
    Compact {
        keep: usize,
        reply: oneshot::Sender<Result<CompactReply, Busy>>,
    },
    Status {
        reply: oneshot::Sender<Status>,
    },
    /// A subscription to the agent's events.
    Subscribe {
        from: EventsFrom,
        reply: oneshot::Sender<Result<Subscription, EventLogError>>,
    },
    /// Opens the session ahead of the first request (serve's boot, one agent at a time).
    Warm {
        reply: oneshot::Sender<()>,
    },
    /// Cancels any job, waits for it (its marker written), closes the event log.
    Shutdown {
        reply: oneshot::Sender<()>,
    },
    /// A todo changed through a route: its event goes on the agent's stream.
    Note {
        note: cicy_runtime::wake::state::WakeNote,
    },
    /// `POST /api/agents/{id}/respond` (docs/design.md §12): answers the open `ask_user` question
    /// `reference`.
    Respond {
        reference: String,
        response: String,
        reply: oneshot::Sender<Result<(), cicy_tools::ask::UnknownRef>>,
    },
}

/// How a chat was taken.
pub(crate) enum Admit {
    /// A run started; the subscription begins just before its first event.
    Started(Subscription),
    /// The agent is busy: the text waits in `pending`.
    Queued,
    /// A command that cannot run now (e.g. `/compact` while busy), with the reason.
    Refused(String),
    /// The event log could not be opened.
    Failed(String),
}

/// The answer to a steer: its `steered` status (`queued`, `prompted` or `rejected_full`).
pub(crate) struct SteerReply {
    pub status: SteerStatus,
}

/// `POST /api/cicy/retry` *(cicy)*.
#[derive(Debug, Serialize)]
pub(crate) struct RetryReply {
    pub success: bool,
    pub started: bool,
    pub reason: Option<String>,
}

/// `POST /api/cicy/clear` *(cicy)*.
#[derive(Debug, Serialize)]
pub(crate) struct ClearReply {
    pub success: bool,
    pub canceled: bool,
    pub conv_id: String,
}

/// Why `POST /api/cicy/clear` did not clear (500).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ClearError {
    #[error("the job stopped")]
    JobStopped,
    #[error("the agent is busy in another process")]
    BusyElsewhere,
    #[error("serve is shutting down")]
    ShuttingDown,
    /// The session could not be opened or the new conversation not written; shared by every
    /// reply waiting for the same clear.
    #[error(transparent)]
    Agent(Arc<AgentError>),
}

/// `POST /api/cicy/compact` **[chosen]**: message counts of the window before and after;
/// `outcome` is `done`, `cancelled` or `failed` (then `after` = `before`).
#[derive(Debug, Serialize)]
pub(crate) struct CompactReply {
    pub success: bool,
    pub outcome: &'static str,
    pub before: usize,
    pub after: usize,
}

/// `/compact` refused because the agent is busy (409).
#[derive(Debug)]
pub(crate) struct Busy;

/// What `POST /api/cicy/cancel` did: whether a job was running, and how many inputs the
/// cancel dropped with it, queued prompts and waiting steers both (docs/design.md §9 abort clears
/// the pending queue and the steering queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CancelReply {
    pub canceled: bool,
    pub dropped: usize,
}

/// A row of `GET /api/agents` (docs/design.md §9). `wake_at` (the earliest pending todo, local
/// minute) and `unanswered` (unresolved reply obligations) are filled in by the route from
/// `cicy.db`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Status {
    pub id: String,
    pub title: String,
    pub role: String,
    pub master_id: Option<String>,
    pub state: AgentState,
    pub busy: bool,
    pub pending: usize,
    pub steering: usize,
    pub wake_at: Option<String>,
    pub last_seq: u64,
    pub unanswered: usize,
}

/// Where a subscription of `GET /api/agents/{id}/events` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventsFrom {
    /// Live, from now.
    Now,
    /// Every event with a seq above this (`Last-Event-ID`).
    After(u64),
    /// The newest this many logged events (`?last=`).
    Last(usize),
}
