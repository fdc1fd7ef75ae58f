//! Compaction (DESIGN.md §7): `/compact`, automatic compaction before a round, the hard cap.
//!
//! Owns when to compact ([`Settings`], [`before_round`]), what to keep ([`cut`]), the summary
//! ([`summary`]) and applying it ([`apply`]): archive `current.json` / `reply.json` as
//! `current.<unix>.json` / `reply.<unix>.json` (keeping the first and the last
//! `compaction.keep_snapshots` of those), insert the summary message at the cut, heal,
//! persist. No message is deleted: every original message stays in current.json (which is why
//! old snapshots can go), and the summary is a fence (see `conversation::invariants`) where the
//! wire window starts.
//!
//! Representation: the summary is a user message inserted *before* the kept tail, which always
//! starts with an assistant message (or is empty), so the window `summary + tail` alternates
//! and every `tool_use` keeps its result. `/compact` keeps no tail: the summary is appended and
//! the next user message follows it (merged into it on the wire only).
//!
//! Must not touch: memory, AGENTS.md, the registry, the turn's reply items. The aux requests and
//! their answers are never written to the conversation; only the summary message is.

pub mod cut;
pub mod summary;

use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, Session, TurnMaterials};
use crate::config::CompactionConfig;
use crate::conversation::history::{Archive, CurrentFile, HistoryError, HistoryStore, ReplyFile};
use crate::conversation::invariants;
use crate::conversation::message::{Message, Usage, SUMMARY_PREFIX};
use crate::event::{Emitter, EventKind};
use crate::gateway::{GatewayError, ToolSpec};
use crate::prompt::window_start;

/// Why a compaction did not happen. In every case the history and its files are unchanged.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error("nothing to compact: the window holds no messages besides an earlier summary")]
    Nothing,
    #[error("the summary call failed: {0}")]
    Gateway(#[from] GatewayError),
    #[error("the summary came back empty")]
    Empty,
    #[error("the summaries of the parts no longer fit one request of ~{chunk_tokens} tokens, even after {levels} rounds of merging")]
    TooLarge { chunk_tokens: u64, levels: usize },
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error(transparent)]
    Agent(Box<AgentError>),
}

/// Compaction thresholds for one agent: config.yaml's `compaction:` and the context window of
/// its model (role meta.yaml `context_window`, else the config's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub config: CompactionConfig,
    /// Tokens.
    pub context_window: u64,
}

impl Settings {
    pub fn new(config: &CompactionConfig, role_context_window: Option<u64>) -> Self {
        Self { config: *config, context_window: role_context_window.filter(|w| *w > 0).unwrap_or(config.context_window) }
    }

    /// Estimated tokens above which a window is compacted (cicy: 85 % of the context window).
    pub fn trigger_tokens(&self) -> u64 {
        self.context_window * u64::from(self.config.context_percent) / 100
    }

    /// Estimated tokens the kept tail may hold: half the context window, so the window after a
    /// compaction (tail + a summary of ≤ 4096 tokens) sits well under the trigger.
    pub fn tail_tokens(&self) -> u64 {
        self.context_window / 2
    }

    /// Estimated tokens of transcript one summary request may carry: half the context window
    /// (so an estimate off by 2× still fits), and never more than the window minus the
    /// summary's 4096 output tokens and ~1000 of prompt; at least 1000.
    pub fn chunk_tokens(&self) -> u64 {
        let room = self.context_window.saturating_sub(u64::from(summary::MAX_TOKENS) + 1000);
        (self.context_window / 2).min(room).max(1000)
    }
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    /// Messages in the window (from the last summary) before and after.
    pub before: usize,
    pub after: usize,
    /// The snapshot taken first (`None` only when current.json did not exist yet).
    pub archive: Option<Archive>,
    /// Of the summary calls.
    pub usage: Usage,
    /// Summary calls made (0 for the hard cap's mechanical cut).
    pub requests: usize,
}

/// `/compact`, `cicy-agent compact`: summarizes the window except its last `keep` messages
/// (0: all of it; the cut moves so no tool pair is split) and inserts the summary. The caller
/// makes sure no turn is running (the turn lock).
///
/// Errors: see [`CompactError`]; after any error nothing has changed.
pub async fn compact_session(
    session: &mut Session,
    keep: usize,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Compacted, CompactError> {
    let m = session.materials().map_err(|e| CompactError::Agent(Box::new(e)))?;
    let settings = Settings::new(&session.config.compaction, m.template.meta.context_window);
    let msgs = &session.current.messages;
    let ws = window_start(msgs);
    let cut = cut::choose(msgs, ws, keep, u64::MAX).ok_or(CompactError::Nothing)?;
    let done = summarize_and_apply(session, &m.model, &settings, cut, events, cancel).await?;
    events.emit(EventKind::Compacted { before: done.before, after: done.after });
    Ok(done)
}

async fn summarize_and_apply(
    session: &mut Session,
    model: &str,
    settings: &Settings,
    cut: usize,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Compacted, CompactError> {
    let ws = window_start(&session.current.messages);
    let call = summary::Call {
        client: &session.client,
        model,
        session_id: &session.current.conversation_id,
        chunk_tokens: settings.chunk_tokens(),
    };
    let mut progress = |text: String| events.emit(EventKind::System { text });
    let s = summary::summarize(&call, &session.current.messages[ws..cut], &mut progress, cancel).await?;
    let mut done = apply(&session.store, &mut session.current, cut, &s.text, settings.config.keep_snapshots)?;
    done.usage = s.usage;
    done.requests = s.requests;
    Ok(done)
}

/// The bookkeeping of a compaction, after the summary exists: archive the files as they are on
/// disk (then delete archives but the first and the last `keep_snapshots`), insert
/// `SUMMARY_PREFIX + summary` as a user message at `cut` (with the next display id), heal,
/// persist current.json. `cut` must come from [`cut::choose`].
pub fn apply(
    store: &HistoryStore,
    current: &mut CurrentFile,
    cut: usize,
    summary: &str,
    keep_snapshots: usize,
) -> Result<Compacted, HistoryError> {
    let before = current.messages.len() - window_start(&current.messages);
    let archive = store.archive(&current.conversation_id)?;
    // Old snapshots only cost disk; failing to delete one must not fail the compaction.
    if let Err(e) = store.prune_archives(&current.conversation_id, keep_snapshots) {
        tracing::warn!(error = %e, "cannot delete old compaction snapshots");
    }
    current.max_history_id += 1;
    let mut msg = Message::user_text(format!("{SUMMARY_PREFIX}{}", summary.trim()));
    msg.id = Some(current.max_history_id);
    current.messages.insert(cut.min(current.messages.len()), msg);
    invariants::heal(&mut current.messages);
    store.save_current(current)?;
    let after = current.messages.len() - window_start(&current.messages);
    Ok(Compacted { before, after, archive, usage: Usage::default(), requests: 0 })
}

/// Automatic compaction across the rounds of one turn.
#[derive(Debug, Default)]
pub struct AutoState {
    /// A summary failed this turn: do not try again before the next turn (each try may cost
    /// up to 90 s); the hard cap still applies.
    failed: bool,
}

/// Before a round: when the window has more than `max_messages` messages or more than
/// `context_percent` % of the context window in estimated tokens, summarize all but the last
/// `keep_recent` messages (fewer when those alone exceed half the context window).
///
/// When that is off or fails and the window is still over the hard cap (or over the whole
/// context window), a mechanical cut keeps the tail and puts a notice where the summary would
/// be, so the turn goes on instead of sending a request the gateway must refuse; a
/// [`EventKind::System`] says so. Aux usage is added to `reply`. Errors only when the history
/// cannot be written; a cancelled summary returns `Ok` and leaves the cancel to the caller.
pub async fn before_round(
    session: &mut Session,
    m: &TurnMaterials,
    tools: &[ToolSpec],
    reply: &mut ReplyFile,
    state: &mut AutoState,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<(), AgentError> {
    let settings = Settings::new(&session.config.compaction, m.template.meta.context_window);
    let msgs = &session.current.messages;
    let ws = window_start(msgs);
    let count = msgs.len() - ws;
    let tokens = window_tokens(&m.template.system_md, tools, &msgs[ws..]);
    let c = &settings.config;
    if count <= c.max_messages && tokens <= settings.trigger_tokens() {
        return Ok(());
    }
    let Some(cut) = cut::choose(msgs, ws, c.keep_recent, settings.tail_tokens()) else {
        return Ok(());
    };
    let mut failure = None;
    if c.auto && !state.failed {
        events.emit(EventKind::System {
            text: format!(
                "compacting: the window has {count} messages and ~{tokens} tokens (limits {} messages, {} tokens)",
                c.max_messages,
                settings.trigger_tokens()
            ),
        });
        match summarize_and_apply(session, &m.model, &settings, cut, events, cancel).await {
            Ok(done) => {
                reply.add_usage(&done.usage);
                events.emit(EventKind::Compacted { before: done.before, after: done.after });
                return Ok(());
            }
            Err(CompactError::History(e)) => return Err(e.into()),
            Err(CompactError::Gateway(GatewayError::Cancelled)) => return Ok(()),
            Err(e) => {
                state.failed = true;
                events.emit(EventKind::System { text: format!("automatic compaction failed: {e}; nothing was changed") });
                failure = Some(e.to_string());
            }
        }
    }
    if count > c.hard_cap || tokens > settings.context_window {
        let why = failure.unwrap_or_else(|| "automatic compaction is off".to_string());
        let n = cut - ws;
        let notice = format!("({n} earlier messages could not be summarized ({why}). They are kept in the history files but are no longer sent.)");
        let done = apply(&session.store, &mut session.current, cut, &notice, c.keep_snapshots)?;
        events.emit(EventKind::System {
            text: format!("the window was over the hard cap ({count} messages, ~{tokens} tokens): set {n} earlier messages aside without a summary"),
        });
        events.emit(EventKind::Compacted { before: done.before, after: done.after });
    }
    Ok(())
}

/// Estimated tokens of a request carrying `window`: system text, tool definitions, messages.
pub fn window_tokens(system_md: &str, tools: &[ToolSpec], window: &[Message]) -> u64 {
    let tools: u64 = tools
        .iter()
        .map(|t| cut::estimate_tokens(&t.name) + cut::estimate_tokens(&t.description) + cut::estimate_tokens(&t.input_schema.to_string()))
        .sum();
    cut::estimate_tokens(system_md) + tools + window.iter().map(cut::message_tokens).sum::<u64>()
}
