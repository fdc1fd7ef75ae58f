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
use crate::gateway::{CallOptions, GatewayError, GatewayEvent, Response, StopReason};
use crate::prompt::{self, PromptInputs};
use crate::tools::ToolContext;

/// cicy: a round that fails after the gateway's retries is re-run at most 2 more times.
pub const ROUND_RERUNS: u32 = 2;

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
        let id = cur.push(Message::assistant(vec![ContentBlock::text(o.marker())]));
        reply.items.push(cur.messages[cur.messages.len() - 1].clone());
        debug_assert_eq!(Some(id), reply.items.last().and_then(|x| x.id));
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
        // §8 write loop: only buffer here; the caller flushes once the user has the answer.
        session.memory().record_turn(&text, &reply.items, events);
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
        running_dir: Some(crate::tools::reaper::records_dir(&session.record.workspace)),
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
        let mut resp = match send_with_reruns(session, &prompt, &opts, events, cancel).await {
            Ok(r) => r,
            Err(GatewayError::Cancelled) => return Ok(Some(Outcome::Cancelled)),
            Err(e) => {
                let outcome = match &e {
                    GatewayError::Status { status, .. } if (400..500).contains(status) => Outcome::Blocked,
                    _ => Outcome::Failed,
                };
                events.emit(EventKind::Error { kind: error_kind(&e).to_string(), message: e.to_string() });
                return Ok(Some(outcome));
            }
        };
        resp.rename_ids_used_in(&session.current.messages);
        reply.add_usage(&resp.usage);
        reply.prefix_sha256 = resp.prefix_sha256.clone();
        reply.last_stop_reason = resp.stop_reason.as_ref().map(|r| r.as_str().to_string());
        events.emit(EventKind::Usage {
            input: resp.usage.input_tokens,
            output: resp.usage.output_tokens,
            cache_creation: resp.usage.cache_creation_input_tokens,
            cache_read: resp.usage.cache_read_input_tokens,
            prefix_sha256: resp.prefix_sha256.clone(),
        });
        let content: Vec<ContentBlock> = resp.content.iter().filter(|b| !b.is_empty()).cloned().collect();
        let calls: Vec<(String, String, serde_json::Value)> = content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, name, input } => Some((id.clone(), name.clone(), input.clone())),
                _ => None,
            })
            .collect();
        if calls.is_empty() && !content.iter().any(|b| matches!(b, ContentBlock::Text { .. })) {
            events.emit(EventKind::NoAnswerText);
        }
        if !content.is_empty() {
            append(session, reply, Message::assistant(content))?;
        }
        if resp.stop_reason == Some(StopReason::MaxTokens) {
            events.emit(EventKind::System {
                text: format!("the answer was cut off at max_tokens ({}); set max_tokens in the role's meta.yaml to allow longer answers", m.max_tokens),
            });
        }
        if calls.is_empty() {
            return Ok(None);
        }
        // A response cut at the output limit still runs its complete calls (the cut one is
        // rejected by the gateway's normalisation), so the model can go on in smaller pieces.
        let run_them = matches!(resp.stop_reason, Some(StopReason::ToolUse | StopReason::MaxTokens)) && !final_round;
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
                    resp.stop_reason.as_ref().map_or("none", StopReason::as_str)
                ))
            } else if let Some(refused) = rejected_output(&resp, id, m.max_tokens, events) {
                refused
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

/// The error result of a call the gateway's normalisation rejected (cut off at the output
/// limit, input not a JSON object): it is not run, and the user is told why.
fn rejected_output(resp: &Response, id: &str, max_tokens: u32, events: &Emitter) -> Option<crate::tools::ToolOutput> {
    let rejected = resp.rejection(id)?;
    let text = rejected.result_text(max_tokens);
    events.emit(EventKind::System { text: format!("tool call `{}` ({id}) not run: {}", rejected.name, text.trim_start_matches("error: not run: ")) });
    Some(crate::tools::ToolOutput::error(text))
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

/// Sends one round; a failure after the gateway's own retries is re-run up to
/// [`ROUND_RERUNS`] times from the same history (nothing of a failed round was appended).
async fn send_with_reruns(
    session: &Session,
    prompt: &crate::gateway::Prompt,
    opts: &CallOptions,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Response, GatewayError> {
    let mut attempt = 0;
    loop {
        let mut streamed_text = false;
        let mut on_event = |ev: GatewayEvent| match ev {
            GatewayEvent::TextDelta(text) => {
                streamed_text = true;
                events.emit(EventKind::TextDelta { text })
            }
            GatewayEvent::ThinkingDelta(text) => events.emit(EventKind::ThinkingDelta { text }),
            GatewayEvent::Retry { attempt, delay_ms, reason } => {
                events.emit(EventKind::Retry { attempt, delay_ms, reason })
            }
        };
        let result = session.client.send(prompt, opts, &mut on_event, cancel).await;
        match result {
            Ok(resp) => {
                if resp.content.iter().any(|b| matches!(b, ContentBlock::Text { .. })) {
                    events.emit(EventKind::TextEnd);
                }
                return Ok(resp);
            }
            Err(GatewayError::Cancelled) => return Err(GatewayError::Cancelled),
            Err(e @ GatewayError::Status { should_retry: Some(false), .. }) => return Err(e),
            Err(e @ GatewayError::Status { status, .. }) if (400..500).contains(&status) && status != 408 && status != 409 && status != 429 => {
                return Err(e)
            }
            // The gateway layer already tried this connection 1 + max_retries times.
            Err(e @ GatewayError::Connect { .. }) => return Err(e),
            Err(e) if attempt < ROUND_RERUNS => {
                attempt += 1;
                if streamed_text {
                    // Close the partial answer so the re-run's text does not run on from it.
                    events.emit(EventKind::TextEnd);
                }
                events.emit(EventKind::System {
                    text: format!("round failed ({e}); running it again ({attempt}/{ROUND_RERUNS})"),
                });
            }
            Err(e) => return Err(e),
        }
    }
}

fn error_kind(e: &GatewayError) -> &'static str {
    match e {
        GatewayError::Connect { .. } => "connect",
        GatewayError::Status { .. } => "http_status",
        GatewayError::StreamError { .. } => "stream_error",
        GatewayError::Incomplete(_) => "incomplete_stream",
        GatewayError::Decode(_) => "decode",
        GatewayError::Timeout(_) => "timeout",
        GatewayError::Cancelled => "cancelled",
    }
}
