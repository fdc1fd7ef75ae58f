//! The turn loop (DESIGN.md §6.1–6.2).
//!
//! Owns one turn: append the user text, run rounds (assemble → send → stream → run tools) until
//! a tool-free answer or the round budget, write the history before every round, end every
//! abnormal turn with an outcome marker, and report progress as [`EventKind`]s. Before each round
//! it lets `crate::compact` compact the history if it has grown too large. It knows nothing
//! of the terminal or HTTP; the caller supplies the emitter and the cancel token.

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, Session, TurnMaterials};
use crate::compact;
use crate::conversation::history::{ReplyFile, ReplyStatus};
use crate::conversation::message::{Content, ContentBlock, Message, Role};
use crate::event::{preview, Emitter, EventKind, TurnOutcome, TOOL_RESULT_PREVIEW_CHARS};
use crate::fsutil;
use crate::gateway::{CallOptions, GatewayError, GatewayEvent, Response, RoundFailure};
use crate::prompt::{self, PromptInputs};
use crate::tools::ToolContext;

/// cicy: a round whose stream failed after content began is re-run at most 2 times (decided,
/// like every retry, by `gateway::retry`).
pub use crate::gateway::retry::ROUND_RERUNS;

/// The result text of a tool call that the user cancelled.
pub const CANCELLED_RESULT: &str = "error: cancelled by user";

pub use crate::conversation::outcome::{marker_of, Outcome};

fn outcome_event(o: Outcome) -> TurnOutcome {
    match o {
        Outcome::Cancelled => TurnOutcome::Cancelled,
        Outcome::Blocked => TurnOutcome::Blocked,
        Outcome::Failed => TurnOutcome::Failed,
    }
}

/// Index of the user message that started the last turn: the last user message that is
/// neither only tool results nor a compact summary. `None` when that turn began before the
/// last summary: compaction folded its start into the summary, so it cannot be cut out.
fn last_turn_start(messages: &[Message]) -> Option<usize> {
    let start = messages.iter().rposition(|m| {
        m.role == Role::User
            && !m.is_summary()
            && match &m.content {
                Content::Text(_) => true,
                Content::Blocks(b) => b.iter().any(|x| !matches!(x, ContentBlock::ToolResult { .. })),
            }
    })?;
    let fence = messages.iter().rposition(Message::is_summary);
    fence.is_none_or(|f| start > f).then_some(start)
}

/// Removes the last turn if it ended with a `generation failed` or `blocked` marker: a new
/// question replaces a turn whose request failed or was refused (a refused request, e.g. one
/// over the context window, would otherwise be sent again with every later question). A
/// cancelled turn stays: what ran, ran.
fn pop_failed_turn(session: &mut Session) {
    let msgs = &mut session.current.messages;
    if !matches!(msgs.last().and_then(marker_of), Some(Outcome::Failed | Outcome::Blocked)) {
        return;
    }
    if let Some(start) = last_turn_start(msgs) {
        msgs.truncate(start);
    }
}

/// Where a turn starts: a new user message, or the unfinished turn already in the history.
enum Start<'a> {
    New(&'a str),
    Resume { history_id: u64, text: String },
}

/// Runs one user turn. Errors are returned only for what stops a turn from starting or its
/// files from being written; gateway failures end the turn with an outcome instead.
pub async fn run_turn(
    session: &mut Session,
    text: &str,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<TurnOutcome, AgentError> {
    let materials = session.materials()?;
    pop_failed_turn(session);
    run_user_turn(session, Start::New(text), materials, events, cancel).await
}

/// `cicy-agent retry`: when the last turn ended with an outcome marker (failed, blocked or
/// cancelled), removes the marker and continues that turn from where it stopped: its user
/// message and any tool rounds that completed stay and are not run again. `Ok(None)` when there
/// is nothing to retry (no marker, or the turn began before the last compaction).
pub async fn retry_turn(
    session: &mut Session,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Option<TurnOutcome>, AgentError> {
    let materials = session.materials()?;
    let msgs = &session.current.messages;
    if msgs.last().and_then(marker_of).is_none() {
        return Ok(None);
    }
    let Some(start) = last_turn_start(&msgs[..msgs.len() - 1]) else {
        return Ok(None);
    };
    let (history_id, text) = (msgs[start].id.unwrap_or(0), msgs[start].plain_text());
    session.current.messages.pop();
    let start = Start::Resume { history_id, text };
    run_user_turn(session, start, materials, events, cancel).await.map(Some)
}

async fn run_user_turn(
    session: &mut Session,
    start: Start<'_>,
    m: TurnMaterials,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<TurnOutcome, AgentError> {
    let cur = &mut session.current;
    cur.model = m.model.clone();
    cur.tools = m.template.tools.clone();
    cur.system = m.template.system_md.trim().to_string();
    cur.status = "running".to_string();
    let (history_id, text) = match start {
        Start::New(text) => {
            cur.prompts += 1;
            (cur.push(Message::user_text(text)), text.to_string())
        }
        Start::Resume { history_id, text } => (history_id, text),
    };
    let now = fsutil::now_rfc3339();
    let mut reply = ReplyFile {
        turn_id: uuid::Uuid::new_v4().to_string(),
        history_id,
        status: ReplyStatus::Working,
        started_at: now.clone(),
        updated_at: now,
        ..ReplyFile::idle(&cur.conversation_id, &m.model)
    };
    session.store.save_current(&mut session.current)?;
    session.store.save_reply(&reply)?;
    events.emit(EventKind::TurnStarted {
        turn_id: reply.turn_id.clone(),
        conv_id: session.current.conversation_id.clone(),
    });

    let outcome = rounds(session, &m, &mut reply, events, cancel).await?;
    if let Some(o) = outcome {
        let cur = &mut session.current;
        let marker = ContentBlock::text(o.marker());
        match cur.messages.last_mut() {
            // The partial answer a failed round kept: the marker ends that message, so roles
            // still alternate and `marker_of` finds it.
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
    reply.status = match outcome {
        None => ReplyStatus::Completed,
        Some(Outcome::Cancelled) => ReplyStatus::Cancelled,
        Some(Outcome::Blocked | Outcome::Failed) => ReplyStatus::Failed,
    };
    reply.updated_at = fsutil::now_rfc3339();
    session.current.status = "idle".to_string();
    session.store.save_current(&mut session.current)?;
    session.store.save_reply(&reply)?;
    if outcome.is_none() {
        // §8 write loop: buffer this turn and flush when due. Reports through events, never fails the turn.
        session.memory().after_turn(&session.aux_target(&m.model), &text, &reply.items, events, cancel).await;
    }
    let ended = outcome.map(outcome_event).unwrap_or(TurnOutcome::Completed);
    events.emit(EventKind::TurnEnded { outcome: ended });
    Ok(ended)
}

/// Runs the rounds of a turn; `Ok(None)` when it ended normally.
async fn rounds(
    session: &mut Session,
    m: &TurnMaterials,
    reply: &mut ReplyFile,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Option<Outcome>, AgentError> {
    let max_rounds = m.template.max_tool_rounds();
    let specs = m.tools.specs();
    let tool_ctx = ToolContext {
        workspace: session.record.workspace.clone(),
        skills_dir: session.home.skills_dir(),
        cancel: cancel.clone(),
        hidden_env: vec![crate::config::ENV_API_KEY.to_string(), session.config.api_key_env.clone()],
    };
    let opts = CallOptions {
        model: m.model.clone(),
        max_tokens: m.max_tokens,
        session_id: session.current.conversation_id.clone(),
        aux: None,
        timeout: None,
    };
    let mut auto_compact = compact::AutoState::default();
    for round in 0..max_rounds {
        if cancel.is_cancelled() {
            return Ok(Some(Outcome::Cancelled));
        }
        events.emit(EventKind::RoundStarted { round });
        compact::before_round(session, m, &specs, reply, &mut auto_compact, events, cancel).await?;
        if cancel.is_cancelled() {
            return Ok(Some(Outcome::Cancelled));
        }
        let final_round = round + 1 == max_rounds;
        let prompt = prompt::assemble(&PromptInputs {
            system_md: &m.template.system_md,
            skills: &m.skills,
            tools: &specs,
            final_round,
            history: &session.current.messages,
            agents_md: &m.agents_md,
            memory_md: &m.memory_md,
        });
        session.store.save_current(&mut session.current)?;
        let resp = match send_with_reruns(session, &prompt, &opts, events, cancel).await {
            Ok(r) => r,
            Err(RoundFailure { error: GatewayError::Cancelled, .. }) => return Ok(Some(Outcome::Cancelled)),
            Err(RoundFailure { error: e, partial, .. }) => {
                let outcome = match &e {
                    // A rate limit or a timeout that outlasted the budget is a failure, not a refusal.
                    GatewayError::Status { status: 408 | 409 | 429, .. } => Outcome::Failed,
                    GatewayError::Status { status, .. } if (400..500).contains(status) => Outcome::Blocked,
                    GatewayError::NoKey { .. } | GatewayError::NotFound { .. } => Outcome::Blocked,
                    _ => Outcome::Failed,
                };
                events.emit(EventKind::Error { kind: error_kind(&e).to_string(), message: e.to_string() });
                if !partial.trim().is_empty() {
                    // What the reader saw stays in the history, marked; the outcome marker ends
                    // this message (see `run_user_turn`) and the prompt leaves it out.
                    let cut = ContentBlock::text(format!("[cut off: {e}]"));
                    append(session, reply, Message::assistant(vec![ContentBlock::text(partial), cut]))?;
                }
                return Ok(Some(outcome));
            }
        };
        reply.add_usage(&resp.usage);
        reply.prefix_sha256 = resp.prefix_sha256.clone();
        reply.last_stop_reason = resp.stop_reason.clone();
        events.emit(EventKind::Usage {
            input: resp.usage.input_tokens,
            output: resp.usage.output_tokens,
            cache_creation: resp.usage.cache_creation_input_tokens,
            cache_read: resp.usage.cache_read_input_tokens,
            prefix_sha256: resp.prefix_sha256.clone(),
        });
        let content: Vec<ContentBlock> = resp.content.into_iter().filter(|b| !b.is_empty()).collect();
        let calls: Vec<(String, String, serde_json::Value)> = content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, name, input } => Some((id.clone(), name.clone(), input.clone())),
                _ => None,
            })
            .collect();
        if content.is_empty() {
            events.emit(EventKind::System { text: "the model answered with no content at all".to_string() });
        } else {
            append(session, reply, Message::assistant(content))?;
        }
        if resp.stop_reason.as_deref() == Some("max_tokens") {
            events.emit(EventKind::System {
                text: format!("the answer was cut off at max_tokens ({}); set max_tokens in the role's meta.yaml to allow longer answers", m.max_tokens),
            });
        }
        if calls.is_empty() {
            return Ok(None);
        }
        let run_them = resp.stop_reason.as_deref() == Some("tool_use") && !final_round;
        let mut results = Vec::with_capacity(calls.len());
        let mut cancelled = false;
        for (id, name, input) in &calls {
            let output = if cancelled || cancel.is_cancelled() {
                cancelled = true;
                crate::tools::ToolOutput::error(CANCELLED_RESULT)
            } else if final_round {
                crate::tools::ToolOutput::error(format!(
                    "error: not run: this turn's budget of {max_rounds} rounds is used up"
                ))
            } else if !run_them {
                crate::tools::ToolOutput::error(format!(
                    "error: not run: the response ended with stop_reason `{}`",
                    resp.stop_reason.as_deref().unwrap_or("none")
                ))
            } else {
                events.emit(EventKind::ToolStarted { id: id.clone(), name: name.clone(), input: input.clone() });
                let started = Instant::now();
                let out = m.tools.run(name, input, &tool_ctx).await;
                let out = if cancel.is_cancelled() {
                    cancelled = true;
                    crate::tools::ToolOutput::error(out.content)
                } else {
                    out
                };
                events.emit(EventKind::ToolFinished {
                    id: id.clone(),
                    name: name.clone(),
                    result: preview(&out.content, TOOL_RESULT_PREVIEW_CHARS),
                    is_error: out.is_error,
                    duration_ms: started.elapsed().as_millis() as u64,
                });
                out
            };
            results.push(ContentBlock::ToolResult { tool_use_id: id.clone(), content: output.content, is_error: output.is_error });
        }
        append(session, reply, Message::user_blocks(results))?;
        if cancelled {
            return Ok(Some(Outcome::Cancelled));
        }
        if !run_them {
            return Ok(None);
        }
    }
    Ok(None)
}

/// Appends a message to the history and the reply snapshot, and persists the snapshot so a
/// crash before the next round loses nothing.
fn append(session: &mut Session, reply: &mut ReplyFile, msg: Message) -> Result<(), AgentError> {
    let cur = &mut session.current;
    cur.push(msg);
    reply.items.push(cur.messages[cur.messages.len() - 1].clone());
    reply.updated_at = fsutil::now_rfc3339();
    session.store.save_reply(reply)?;
    Ok(())
}

/// Sends one round through the gateway's one retry layer (`gateway::retry` decides every retry
/// and re-run; nothing of a failed round was appended) and reports its progress as events. A
/// `Retry` after answer text was shown means that text is discarded: it is closed (`text_end`)
/// and marked `[retrying]` so it does not read as one answer with the re-run's. A failure
/// closes shown text too; the error carries it so the turn can keep it.
async fn send_with_reruns(
    session: &Session,
    prompt: &crate::gateway::Prompt,
    opts: &CallOptions,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Response, RoundFailure> {
    let mut text_open = false;
    let mut on_event = |ev: GatewayEvent| match ev {
        GatewayEvent::TextDelta(text) => {
            text_open = true;
            events.emit(EventKind::TextDelta { text })
        }
        GatewayEvent::ThinkingDelta(text) => events.emit(EventKind::ThinkingDelta { text }),
        GatewayEvent::Retry { attempt, delay_ms, reason } => {
            if std::mem::take(&mut text_open) {
                events.emit(EventKind::TextEnd);
                events.emit(EventKind::System {
                    text: "[retrying] the answer above was cut off and is discarded; the round is sent again".to_string(),
                });
            }
            events.emit(EventKind::Retry { attempt, delay_ms, reason })
        }
    };
    let result = session.client.send_round(prompt, opts, &mut on_event, cancel).await;
    let shown = match &result {
        Ok(resp) => resp.content.iter().any(|b| matches!(b, ContentBlock::Text { .. })),
        Err(_) => text_open,
    };
    if shown {
        events.emit(EventKind::TextEnd);
    }
    result
}

fn error_kind(e: &GatewayError) -> &'static str {
    match e {
        GatewayError::Connect { .. } => "connect",
        GatewayError::Status { .. } | GatewayError::NotFound { .. } => "http_status",
        GatewayError::NoKey { .. } => "no_api_key",
        GatewayError::StreamError { .. } => "stream_error",
        GatewayError::Incomplete(_) => "incomplete_stream",
        GatewayError::Decode(_) => "decode",
        GatewayError::Timeout(_) => "timeout",
        GatewayError::Cancelled => "cancelled",
    }
}
