//! The turn loop (docs/design.md §6.1–6.2).
//!
//! Owns one turn: append the user text, run rounds (assemble → send → stream → run tools) until
//! a tool-free answer or the round budget, write the history before every round, end every
//! abnormal turn with an outcome marker, and report progress as [`EventKind`]s. The steps of a
//! round are in `round`, the tool calls in `tools`, the send and its re-runs in `send`, the
//! checks of what fits the context window in `fit`, the texts a caller steers a running turn
//! with and its interrupt in `steer`, the sub-agents of the `task` tool in `subagent`. Before
//! each round it lets `crate::compact` compact the history if it has grown too large. The
//! role's hooks (`crate::hooks`, docs/design.md §12) are asked at fixed points; what they change is
//! changed before it is stored. It knows nothing of the terminal or HTTP; the caller supplies
//! the emitter and the cancel token.

mod fit;
mod round;
mod send;
mod session_end;
mod steer;
mod subagent;
mod tools;

use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, Session, TurnMaterials};
use crate::compact::cut::turn_start;
use crate::conversation::history::{CurrentFile, CurrentStatus, ReplyFile, ReplyStatus};
use crate::conversation::message::{Content, ContentBlock, Message, Role};
use crate::event::{preview, Emitter, ErrorKind, EventKind, TurnOutcome, PROMPT_PREVIEW_CHARS};
use crate::fsutil;
use crate::hooks::{Hooks, TurnIds};
use crate::wake::state::WakeTurn;

pub use send::ROUND_RERUNS;
pub use session_end::session_end;
pub use steer::{SteerFull, Steering, INTERRUPTED_RESULT};
pub use tools::tool_context;
pub use tools::CANCELLED_RESULT;

pub use crate::conversation::outcome::{marker_of, Outcome};

fn outcome_event(o: Outcome) -> TurnOutcome {
    match o {
        Outcome::Cancelled => TurnOutcome::Cancelled,
        Outcome::Blocked => TurnOutcome::Blocked,
        Outcome::Failed => TurnOutcome::Failed,
    }
}

/// Removes the last turn if it ended with a `generation failed` or `blocked` marker: a new
/// question replaces a turn whose request failed or was refused (a refused request, e.g. one
/// over the context window, would otherwise be sent again with every later question). A
/// cancelled turn stays: what ran, ran.
fn pop_failed_turn(session: &mut Session) {
    let msgs = &mut session.conversation_mut().current.messages;
    if !matches!(msgs.last().and_then(marker_of), Some(Outcome::Failed | Outcome::Blocked)) {
        return;
    }
    if let Some(start) = turn_start(msgs) {
        msgs.truncate(start);
    }
}

/// Who wrote a new turn's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Author {
    /// A person's prompt (a chat, a steer or queued inputs that start a turn): announced by a
    /// `prompt` event, so every client shows it, not only the one that sent it.
    User,
    /// cicy's own: a wake's message, an intent's. Their `wake` and `autonomy` events say what
    /// started them; the text is in the history.
    Runtime,
}

/// Where a turn starts: a new user message, or the unfinished turn already in the history.
enum Start {
    New(String, Author),
    /// A sub-agent's one message (`task`, docs/design.md §12): as `New`, but nothing goes to memory
    /// and no `before_prompt` hook is asked (the parent's tool call already was).
    Sub(String),
    Resume {
        history_id: u64,
        text: String,
    },
}

/// Runs one user turn ([`run_turn_with`] without steering).
pub async fn run_turn(session: &mut Session, text: &str, events: &Emitter, cancel: &CancellationToken) -> Result<TurnOutcome, AgentError> {
    run_turn_with(session, text, events, cancel, &Steering::default()).await
}

/// Runs one user turn. Errors are returned only for what stops a turn from starting or its
/// files from being written; gateway failures end the turn with an outcome instead.
/// A blank `text` is [`AgentError::BlankMessage`] before anything is written or sent: it would
/// leave no message to send, and both APIs refuse empty text. Texts pushed on `steering` while
/// the turn runs go into the user message after the next batch of tool results; what is still
/// queued when the turn ends (its last answer had no tool calls) stays there for the caller.
pub async fn run_turn_with(
    session: &mut Session,
    text: &str,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> Result<TurnOutcome, AgentError> {
    run_new_turn(session, text, Author::User, None, events, cancel, steering).await
}

/// Runs a wake's turn (docs/design.md §10) on serve's wake message `text`: [`run_turn_with`], but
/// the message is cicy's, not a person's, so no `prompt` event announces it.
pub async fn run_wake_turn(
    session: &mut Session,
    text: &str,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> Result<TurnOutcome, AgentError> {
    run_new_turn(session, text, Author::Runtime, None, events, cancel, steering).await
}

/// Runs an idle-autonomy intent as a model turn (docs/design.md §13): [`run_turn_with`] with at most
/// `max_rounds` rounds (or the role's `max_tool_rounds` if that is smaller). The actor preempts
/// it with [`Steering::request_yield`], so it stops at its next round boundary.
pub async fn run_intent_turn(
    session: &mut Session,
    text: &str,
    max_rounds: u32,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> Result<TurnOutcome, AgentError> {
    run_new_turn(session, text, Author::Runtime, Some(max_rounds), events, cancel, steering).await
}

/// A new user turn on `text`, with at most `max_rounds` rounds when given (never more than the
/// role's `max_tool_rounds`).
async fn run_new_turn(
    session: &mut Session,
    text: &str,
    author: Author,
    max_rounds: Option<u32>,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> Result<TurnOutcome, AgentError> {
    if text.trim().is_empty() {
        return Err(AgentError::BlankMessage);
    }
    let mut materials = session.materials()?;
    if let Some(max) = max_rounds {
        let rounds = materials.template.max_tool_rounds().min(max.max(1));
        materials.template.meta.max_tool_rounds = Some(rounds);
    }
    pop_failed_turn(session);
    run_user_turn(session, Start::New(text.to_string(), author), materials, events, cancel, steering).await
}

/// [`retry_turn_with`] without steering.
pub async fn retry_turn(session: &mut Session, events: &Emitter, cancel: &CancellationToken) -> Result<Option<TurnOutcome>, AgentError> {
    retry_turn_with(session, events, cancel, &Steering::default()).await
}

/// `cicy-agent retry`: when the last turn ended with an outcome marker (failed, blocked or
/// cancelled), removes the marker and continues that turn from where it stopped: its user
/// message and any tool rounds that completed stay and are not run again. `Ok(None)` when there
/// is nothing to retry (no marker, or the turn began before the last compaction). `steering`
/// works as in [`run_turn_with`].
pub async fn retry_turn_with(
    session: &mut Session,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> Result<Option<TurnOutcome>, AgentError> {
    let materials = session.materials()?;
    let msgs = &session.conversation().current.messages;
    if msgs.last().and_then(marker_of).is_none() {
        return Ok(None);
    }
    let Some(start) = turn_start(&msgs[..msgs.len() - 1]) else {
        return Ok(None);
    };
    let (history_id, text) = (msgs[start].id.unwrap_or(0), msgs[start].plain_text());
    session.conversation_mut().current.messages.pop();
    let start = Start::Resume { history_id, text };
    run_user_turn(session, start, materials, events, cancel, steering).await.map(Some)
}

/// Runs a sub-agent's turn (`task`, docs/design.md §12) on `session`, a [`Session::subagent`], with
/// the materials its spawner made: as [`run_turn`], except that nothing is recorded to long-term
/// memory (CMDC: a sub-agent does not share its parent's memory).
async fn run_subagent_turn(
    session: &mut Session,
    text: &str,
    materials: TurnMaterials,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<TurnOutcome, AgentError> {
    run_user_turn(session, Start::Sub(text.to_string()), materials, events, cancel, &Steering::default()).await
}

async fn run_user_turn(
    session: &mut Session,
    start: Start,
    mut m: TurnMaterials,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> Result<TurnOutcome, AgentError> {
    attach_plain_wake(session);
    crate::compact::ask_window(session, &m, events, cancel).await;
    // The answer's reserve follows a small window as the summary's does (a quarter of it), so
    // a model with a few thousand tokens of context can still take a message.
    let window = crate::compact::settings(session, &m).context_window;
    m.max_tokens = m.max_tokens.min(u32::try_from(window / 4).unwrap_or(u32::MAX)).max(1);
    let turn_id = uuid::Uuid::new_v4().to_string();
    let ids = TurnIds {
        agent_id: &session.agent().record.id,
        conv_id: &session.conversation().current.conversation_id,
        turn_id: &turn_id,
        workspace: &session.agent().record.workspace,
    };
    let role_dir = session.agent().home.roles_dir().join(&m.template.slug);
    let hooks = Hooks::new(&m.template.meta.hooks, role_dir, || tools::tool_context(session, &m, cancel, events), events, ids);
    // A hook may refuse or change the prompt before anything of the turn is written.
    let start = match start {
        Start::New(text, author) => match hooks.before_prompt(session.conversation().current.messages.is_empty(), &text).await {
            Ok(text) => Start::New(text, author),
            Err(denied) => {
                let message = format!("the prompt was refused by hook {}: {}", denied.command, denied.reason);
                events.emit(EventKind::Error { kind: ErrorKind::Hook, message });
                events.emit(EventKind::TurnEnded { outcome: TurnOutcome::Blocked });
                return Ok(TurnOutcome::Blocked);
            }
        },
        other => other,
    };
    let cur = &mut session.conversation_mut().current;
    cur.model = m.model.clone();
    cur.tools = m.template.tools.clone();
    cur.system = m.template.system_md.trim().to_string();
    cur.status = CurrentStatus::Running;
    let remember = !matches!(start, Start::Sub(_));
    let announce = matches!(start, Start::New(_, Author::User));
    let (history_id, text) = match start {
        Start::New(text, _) | Start::Sub(text) => {
            cur.prompts += 1;
            (cur.push(Message::user_text(text.as_str())), text)
        }
        Start::Resume { history_id, text } => (history_id, text),
    };
    let now = fsutil::now_rfc3339();
    let mut reply = ReplyFile {
        turn_id,
        history_id,
        status: ReplyStatus::Working,
        started_at: now.clone(),
        updated_at: now,
        ..ReplyFile::idle(&cur.conversation_id, &m.model)
    };
    session.conversation_mut().save_turn(&reply)?;
    events.emit(EventKind::TurnStarted { turn_id: reply.turn_id.clone(), conv_id: session.conversation().current.conversation_id.clone() });
    if announce {
        events.emit(EventKind::Prompt { text: preview(&text, PROMPT_PREVIEW_CHARS) });
    }
    // MCP tools are listed here, once per turn, as listing is async (see `crate::mcp`); after
    // the user message is stored, so a slow server start loses nothing.
    m.tools.extend(session.mcp().tools(&m.template.meta.mcp_servers, events, cancel).await);

    let outcome = round::rounds(&mut round::Turn { session, m: &m, reply: &mut reply, events, cancel, steering, hooks: &hooks }).await?;
    if let Some(o) = outcome {
        end_with_marker(&mut session.conversation_mut().current, &mut reply, o);
    }
    reply.status = match outcome {
        None => ReplyStatus::Completed,
        Some(Outcome::Cancelled) => ReplyStatus::Cancelled,
        Some(Outcome::Blocked | Outcome::Failed) => ReplyStatus::Failed,
    };
    reply.updated_at = fsutil::now_rfc3339();
    session.conversation_mut().current.status = CurrentStatus::Idle;
    session.conversation_mut().save_turn(&reply)?;
    if outcome.is_none() && remember {
        // §8 write loop: only buffer here; the caller flushes once the user has the answer.
        session.memory().record_turn(&text, &reply.items, events);
        crate::checkpoint::auto::after_turn(
            &session.agent().record.workspace,
            session.conversation().current.prompts,
            steering.len(),
            events,
        );
    }
    let ended = outcome.map(outcome_event).unwrap_or(TurnOutcome::Completed);
    hooks.after_turn(ended, &reply).await;
    events.emit(EventKind::TurnEnded { outcome: ended });
    Ok(ended)
}

/// Appends the outcome marker. After a partial answer a failed round kept, the marker ends that
/// message instead, so roles still alternate and `marker_of` finds it.
/// The wake turn a turn's tools share with its runner (docs/design.md §10): serve attaches its
/// own before each turn it runs; anywhere else (the in-process CLI) the session gets a plain one
/// at its first turn and keeps it, so todos and `send` work there too.
fn attach_plain_wake(session: &mut Session) {
    if session.extensions().get::<Arc<WakeTurn>>().is_none() {
        let agent = session.agent();
        let plain = Arc::new(WakeTurn::plain(&agent.home, &agent.record.id, &agent.record.workspace));
        session.extensions_mut().insert(plain);
    }
}

fn end_with_marker(cur: &mut CurrentFile, reply: &mut ReplyFile, o: Outcome) {
    let marker = ContentBlock::text(o.marker());
    match cur.messages.last_mut() {
        Some(last) if last.role == Role::Assistant => {
            let mut blocks = last.content.to_blocks();
            blocks.push(marker);
            last.content = Content::Blocks(blocks);
            let last = last.clone();
            match reply.items.last_mut() {
                Some(item) if item.id == last.id => *item = last,
                _ => reply.items.push(last),
            }
        }
        _ => {
            let id = cur.push(Message::assistant(vec![marker]));
            reply.items.push(cur.messages[cur.messages.len() - 1].clone());
            debug_assert_eq!(Some(id), reply.items.last().and_then(|x| x.id));
        }
    }
}
