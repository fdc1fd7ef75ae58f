//! What one turn's `wake` tools share with whoever runs the turn (docs/design.md §10): the
//! conversation claimed for it and whether it was answered, how many visible messages it sent,
//! and the `sleep_until` that ends it after the current batch of tool calls.
//!
//! Owns only this in-memory state, the notes it passes to its runner (serve emits them as
//! events and reschedules on a todo change) and the runner's hook after each tool batch (serve
//! drains the outbox there). Must not touch: files, the database, the turn loop.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::event::TodoAction;
use crate::home::Home;

/// The conversation a wake claimed (its obligation is committed in `cicy.db`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub obligation_id: i64,
    /// The sender of the claimed messages; `reply` goes to them.
    pub from: String,
    /// `conversation_key` of the claimed messages.
    pub conv: String,
    pub thread: Option<String>,
    pub group: Option<String>,
    /// The most hops among the claimed messages (`crate::messages::route::MAX_HOPS`).
    pub hops: u32,
    /// The `msg` calls among the claimed messages (`crate::messages::coordinate`): the answer
    /// to this claim answers them.
    pub msg_calls: Vec<i64>,
    /// The claimed inbox file names, oldest first.
    pub files: Vec<String>,
    /// A `reply` (or a `send` to `from`) answered it.
    pub answered: bool,
}

/// What a `wake` tool reports to the turn's runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeNote {
    /// A todo was added, done, removed or claimed: the scheduler must look again.
    Todo { action: TodoAction, id: u32, line: String },
    /// A message was written: by the agent, or by serve on its behalf (`from: cicy`).
    MessageOut { from: String, to: String, text: String, file: String },
    /// `inbox receive` claimed messages.
    MessageIn { from: String, subject: String, file: String },
    /// A pending inbox file left `inbox/` without a claim (to `inbox/bad/`, or a claimed one
    /// whose move had failed); `why` says where to and why.
    InboxAside { file: String, why: String },
}

/// The mutable part, behind [`WakeTurn::state`].
#[derive(Debug, Default)]
pub struct WakeState {
    pub claim: Option<Claim>,
    /// Visible messages the agent sent this turn (`reply` and `send`).
    pub sent: u32,
    /// `sleep_until` was accepted: the turn ends after this batch with this assistant text.
    pub end: Option<String>,
}

/// Where a turn's [`WakeNote`]s go.
pub type Notify = Arc<dyn Fn(WakeNote) + Send + Sync>;

/// What runs after every completed batch of tool calls (serve: the outbox drain, docs/design.md §11
/// "Consumer"), on a blocking thread, with the turn's wake state.
pub type AfterBatch = Arc<dyn Fn(&WakeTurn) + Send + Sync>;

/// The wake side of one turn, handed to its tools through `ToolContext::wake`.
pub struct WakeTurn {
    pub home: Home,
    pub agent_id: String,
    pub workspace: PathBuf,
    /// This turn is a wake of `serve` (todo, inbox, recovery): only there may `inbox receive`
    /// claim, as only a wake's end answers what the agent leaves unanswered.
    pub waking: bool,
    state: Mutex<WakeState>,
    notify: Option<Notify>,
    after_batch: Option<AfterBatch>,
}

impl std::fmt::Debug for WakeTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeTurn").field("agent_id", &self.agent_id).field("waking", &self.waking).finish_non_exhaustive()
    }
}

impl WakeTurn {
    /// A turn outside serve (the in-process CLI): todos and `send` work, claims do not.
    pub fn plain(home: &Home, agent_id: &str, workspace: &std::path::Path) -> Self {
        Self {
            home: home.clone(),
            agent_id: agent_id.to_string(),
            workspace: workspace.to_path_buf(),
            waking: false,
            state: Mutex::new(WakeState::default()),
            notify: None,
            after_batch: None,
        }
    }

    /// A turn run by serve; `notify` gets every [`WakeNote`].
    pub fn in_serve(home: &Home, agent_id: &str, workspace: &std::path::Path, notify: Notify) -> Self {
        Self { notify: Some(notify), ..Self::plain(home, agent_id, workspace) }
    }

    /// A wake turn of serve holding `claim`, the conversation its wake claimed.
    pub fn waking(home: &Home, agent_id: &str, workspace: &std::path::Path, claim: Option<Claim>, notify: Notify) -> Self {
        Self {
            waking: true,
            state: Mutex::new(WakeState { claim, ..WakeState::default() }),
            ..Self::in_serve(home, agent_id, workspace, notify)
        }
    }

    /// The state; a poisoned lock (a tool panicked) still gives it, as nothing in it can be
    /// half-updated across a panic.
    pub fn state(&self) -> MutexGuard<'_, WakeState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn note(&self, note: WakeNote) {
        if let Some(n) = &self.notify {
            n(note);
        }
    }

    /// This turn with `f` run after each of its tool batches.
    pub fn with_after_batch(mut self, f: AfterBatch) -> Self {
        self.after_batch = Some(f);
        self
    }

    /// Runs the [`AfterBatch`] hook, if any, on a blocking thread (the turn loop calls it when
    /// a batch of tool calls has finished, before it looks at [`WakeTurn::take_end`]). A hook
    /// that panics is logged; the turn goes on.
    pub async fn after_tool_batch(self: Arc<Self>) {
        let Some(f) = self.after_batch.clone() else { return };
        let agent = self.agent_id.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || f(&self)).await {
            tracing::error!(agent = %agent, error = %e, "the after-batch hook stopped");
        }
    }

    /// Takes the text a `sleep_until` left: the turn ends after the batch that ran it.
    pub fn take_end(&self) -> Option<String> {
        self.state().end.take()
    }
}
