//! Compaction (docs/design.md §7): `/compact`, automatic compaction before a round, the hard cap.
//!
//! Owns when to compact ([`Settings`], [`before_round`]), the context window learned from the
//! gateway ([`window`]), what to keep ([`cut`]; the running turn's user message is carried
//! verbatim when the cut passes it), the summary ([`summary`]) and applying it ([`apply`]):
//! archive `current.json` / `reply.json` as `current.<unix>.json` / `reply.<unix>.json`
//! (keeping the first and the last `compaction.keep_snapshots` of those), insert the summary
//! message at the cut, heal, persist. No message is deleted: every original message stays in
//! current.json (which is why old snapshots can go), and the summary is a fence (see
//! `conversation::invariants`) where the wire window starts.
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
pub mod window;

use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, Session, TurnMaterials};
use crate::config::CompactionConfig;
use crate::conversation::history::{Archive, CurrentFile, HistoryError, HistoryStore, ReplyFile};
use crate::conversation::invariants;
use crate::conversation::message::{Message, Usage, SUMMARY_PREFIX};
use crate::event::{Emitter, EventKind};
use crate::gateway::{GatewayError, Prompt, ToolSpec};
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
/// its model (role meta.yaml `context_window`, else the config's default, lowered to the window
/// learned from the gateway, see [`window`]).
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

    /// The same settings with the context window lowered to `learned` tokens, when given.
    pub fn with_learned(self, learned: Option<u64>) -> Self {
        let context_window = learned.filter(|w| *w > 0).map_or(self.context_window, |w| w.min(self.context_window));
        Self { context_window, ..self }
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

    /// Output tokens a summary may take: [`summary::MAX_TOKENS`], at most a quarter of the
    /// context window (so a small model's window still leaves room for the transcript).
    pub fn summary_max_tokens(&self) -> u32 {
        u32::try_from(self.context_window / 4).map_or(summary::MAX_TOKENS, |q| q.min(summary::MAX_TOKENS))
    }

    /// Estimated tokens of transcript one summary request may carry: half the context window
    /// (so an estimate off by 2× still fits), and never more than the window minus the
    /// summary's output tokens and ~1000 of prompt; at least 256.
    pub fn chunk_tokens(&self) -> u64 {
        let room = self.context_window.saturating_sub(u64::from(self.summary_max_tokens()) + 1000);
        (self.context_window / 2).min(room).max(256)
    }
}

/// The compaction settings of `session`'s model: configured, then lowered to the learned window.
/// A learned-window file that cannot be read is reported on the log and ignored (it only ever
/// lowers the window; the gateway will say so again).
pub fn settings(session: &Session, m: &TurnMaterials) -> Settings {
    let configured = Settings::new(&session.settings().compaction, m.template.meta.context_window);
    let learned = match window::learned(&session.agent().record.workspace, &m.model) {
        Ok(l) => l.map(|l| l.tokens),
        Err(e) => {
            tracing::warn!(error = %e, "ignoring the learned context window");
            None
        }
    };
    configured.with_learned(learned)
}

/// Asks the gateway for the context window of `m`'s model once per gateway (see
/// [`window::ask_gateway`]) and, when it reports one, says so in an [`EventKind::System`] with
/// the window the agent now uses. Called before a turn or `/compact` first needs the window,
/// so every request of an agent asked before its first one is sized for the same window and
/// the cached prompt prefix stays the same from the start. Nothing else is shown: a gateway
/// without `/props` or one that cannot be reached (the request that follows says so) only goes
/// to the log, and so does a record that cannot be read or written, since the window it would
/// lower is only an estimate that the gateway's own refusal corrects.
pub async fn ask_window(session: &Session, m: &TurnMaterials, events: &Emitter, cancel: &CancellationToken) {
    let asked = tokio::select! {
        biased;
        () = cancel.cancelled() => return,
        asked = window::ask_gateway(session.client(), &session.agent().record.workspace, &m.model) => asked,
    };
    match asked {
        Ok(window::Asked::Before) => {}
        Ok(window::Asked::Window { reason, .. }) => {
            let now = settings(session, m).context_window;
            events.emit(EventKind::System {
                text: format!("{reason}; recorded in .cicy/{}: model {} now has a window of {now} tokens", window::FILE_NAME, m.model),
            });
        }
        Ok(window::Asked::NoWindow(why)) => {
            tracing::debug!(gateway = %session.client().base_url_display(), %why, "the gateway reports no context window")
        }
        Ok(window::Asked::Unreached(e)) => tracing::debug!(error = %e, "cannot ask the gateway for its context window"),
        Err(e) => tracing::warn!(error = %e, "cannot record the context window the gateway reports"),
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
/// (0: all of it; the cut moves so no tool pair is split) and inserts the summary. A `keep` of
/// at least the window's messages (its summary not counted) is [`CompactError::Nothing`]. The caller
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
    ask_window(session, &m, events, cancel).await;
    let settings = settings(session, &m);
    let msgs = &session.conversation().current.messages;
    let ws = window_start(msgs);
    // `choose` always summarizes the window's first message (automatic compaction needs that
    // room when the window is over the token trigger); asked to keep at least every message the
    // window holds besides its summary, there is nothing to compact.
    if keep >= msgs[ws..].iter().filter(|m| !m.is_summary()).count() {
        return Err(CompactError::Nothing);
    }
    let cut = cut::choose(msgs, ws, keep, u64::MAX).ok_or(CompactError::Nothing)?;
    let done = summarize_and_apply(session, &m.model, &settings, cut, None, events, cancel).await?;
    events.emit(EventKind::Compacted { before: done.before, after: done.after });
    Ok(done)
}

/// Summarizes `messages[window start..cut]` and applies the summary, with `carried` (the
/// running turn's message, see [`carried_message`]) appended verbatim.
async fn summarize_and_apply(
    session: &mut Session,
    model: &str,
    settings: &Settings,
    cut: usize,
    carried: Option<&str>,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Compacted, CompactError> {
    let ws = window_start(&session.conversation().current.messages);
    let call = summary::Call {
        client: session.client(),
        model,
        session_id: &session.conversation().current.conversation_id,
        chunk_tokens: settings.chunk_tokens(),
        max_tokens: settings.summary_max_tokens(),
    };
    let mut progress = |text: String| events.emit(EventKind::System { text });
    let s = summary::summarize(&call, &session.conversation().current.messages[ws..cut], &mut progress, cancel).await?;
    let conversation = session.conversation_mut();
    let mut done =
        apply(&conversation.store, &mut conversation.current, cut, &with_carried(&s.text, carried), settings.config.keep_snapshots)?;
    done.usage = s.usage;
    done.requests = s.requests;
    Ok(done)
}

/// Opens the verbatim copy of the running turn's message in a summary or notice.
pub const CARRIED_PREFIX: &str = "[The user's message that started the current turn, verbatim:]";

/// Closes it (so no trimming of the summary text can touch the message's own whitespace).
pub const CARRIED_END: &str = "[End of the user's message.]";

/// The text of the running turn's user message when a cut at `cut` would leave it out of the
/// window (summarized or set aside). The compaction then carries it, verbatim, at the end of
/// the summary message, so the question being answered is never summarized away.
pub fn carried_message(messages: &[Message], cut: usize) -> Option<String> {
    cut::last_user_text(messages).filter(|&s| s < cut).map(|s| messages[s].plain_text())
}

fn with_carried(summary: &str, carried: Option<&str>) -> String {
    match carried {
        Some(text) => format!("{}\n\n{CARRIED_PREFIX}\n{text}\n{CARRIED_END}", summary.trim()),
        None => summary.to_string(),
    }
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
    current.number_unnumbered();
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
    /// The gateway refused the last request as over the context window: compact before the
    /// next send whatever the thresholds say.
    forced: bool,
}

impl AutoState {
    /// Makes the next [`before_round`] compact as far as it can, thresholds or not (the gateway
    /// refused a request as over the context window).
    pub fn force_next(&mut self) {
        self.forced = true;
    }
}

/// Before a round: when the window has more than `max_messages` messages or more than
/// `context_percent` % of the context window in estimated tokens (or after
/// [`AutoState::force_next`]), summarize all but the last `keep_recent` messages (fewer when
/// those alone exceed half the context window). When the cut leaves the running turn's user
/// message out of the window, the summary (or notice) carries it verbatim
/// ([`carried_message`]): the question being answered is never summarized away or set aside.
///
/// When that is off or fails and the window is still over the hard cap (or over the whole
/// context window, or the gateway refused it), a mechanical cut keeps the tail and puts a
/// notice where the summary would be, so the turn goes on instead of sending a request the
/// gateway must refuse; a [`EventKind::System`] says so. Aux usage is added to `reply`. Errors
/// only when the history cannot be written; a cancelled summary returns `Ok` and leaves the
/// cancel to the caller.
pub async fn before_round(
    session: &mut Session,
    m: &TurnMaterials,
    tools: &[ToolSpec],
    reply: &mut ReplyFile,
    state: &mut AutoState,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<(), AgentError> {
    let settings = settings(session, m);
    let forced = std::mem::take(&mut state.forced);
    let msgs = &session.conversation().current.messages;
    let ws = window_start(msgs);
    let count = msgs.len() - ws;
    let tokens = window_tokens(&m.template.system_md, tools, &msgs[ws..]);
    let c = &settings.config;
    if !forced && count <= c.max_messages && tokens <= settings.trigger_tokens() {
        return Ok(());
    }
    let Some(cut) = cut::choose(msgs, ws, c.keep_recent, settings.tail_tokens()) else {
        return Ok(());
    };
    let carried = carried_message(msgs, cut);
    let mut failure = None;
    if c.auto && !state.failed {
        let why = if forced {
            format!("the gateway refused the request as over the context window of {} tokens", settings.context_window)
        } else {
            format!(
                "the window has {count} messages and ~{tokens} tokens (limits {} messages, {} tokens)",
                c.max_messages,
                settings.trigger_tokens()
            )
        };
        events.emit(EventKind::System { text: format!("compacting: {why}") });
        match summarize_and_apply(session, &m.model, &settings, cut, carried.as_deref(), events, cancel).await {
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
    if forced || count > c.hard_cap || tokens > settings.context_window {
        let why = failure.unwrap_or_else(|| "automatic compaction is off".to_string());
        // The carried message is still sent: it is not among those set aside.
        let carried_in_window = cut::last_user_text(&session.conversation().current.messages).is_some_and(|s| (ws..cut).contains(&s));
        let n = cut - ws - usize::from(carried_in_window);
        if n == 0 {
            // Only the running turn's own message is over: a notice would set nothing aside.
            return Ok(());
        }
        let notice =
            format!("({n} earlier messages could not be summarized ({why}). They are kept in the history files but are no longer sent.)");
        let conversation = session.conversation_mut();
        let done =
            apply(&conversation.store, &mut conversation.current, cut, &with_carried(&notice, carried.as_deref()), c.keep_snapshots)?;
        let what = if forced { "the gateway refused the window" } else { "the window was over the hard cap" };
        events.emit(EventKind::System {
            text: format!("{what} ({count} messages, ~{tokens} tokens): set {n} earlier messages aside without a summary"),
        });
        events.emit(EventKind::Compacted { before: done.before, after: done.after });
    }
    Ok(())
}

/// When [`before_round`] would compact now (a threshold is passed, or after
/// [`AutoState::force_next`]): the number of messages in the window. What a `before_compact`
/// hook is asked about (docs/design.md §12); it does not change `state`.
pub fn due(session: &Session, m: &TurnMaterials, tools: &[ToolSpec], state: &AutoState) -> Option<usize> {
    let settings = settings(session, m);
    let msgs = &session.conversation().current.messages;
    let count = msgs.len() - window_start(msgs);
    let over = || {
        count > settings.config.max_messages
            || window_tokens(&m.template.system_md, tools, &msgs[window_start(msgs)..]) > settings.trigger_tokens()
    };
    (state.forced || over()).then_some(count)
}

/// Estimated tokens of a request carrying `window`: system text, tool definitions, messages.
pub fn window_tokens(system_md: &str, tools: &[ToolSpec], window: &[Message]) -> u64 {
    cut::estimate_tokens(system_md) + tools_tokens(tools) + window.iter().map(cut::message_tokens).sum::<u64>()
}

/// Estimated tokens of an assembled request as it is sent: every system block, the tool
/// definitions and every message block (so AGENTS.md, the memories and the skills list count).
pub fn prompt_tokens(prompt: &Prompt) -> u64 {
    let system: u64 = prompt.system.iter().map(|b| cut::estimate_tokens(&b.text)).sum();
    let blocks: u64 = prompt.messages.iter().flat_map(|m| &m.blocks).map(|b| cut::block_tokens(&b.block)).sum();
    system + tools_tokens(&prompt.tools) + blocks
}

fn tools_tokens(tools: &[ToolSpec]) -> u64 {
    tools
        .iter()
        .map(|t| cut::estimate_tokens(&t.name) + cut::estimate_tokens(&t.description) + cut::estimate_tokens(&t.input_schema.to_string()))
        .sum()
}
