//! The rounds of one turn (docs/design.md §6.1 steps 3–5): [`rounds`] reads as the page of steps it
//! runs, each step a function below it.
//!
//! Owns the round budget, the order of the steps, sending a round (with one re-send after the
//! gateway refuses it as over the context window, and undoing that re-send's compaction when
//! it is refused again), recording usage, appending the answer and keeping the text a failed
//! or cancelled round had shown.
//! Must not touch: how a tool call runs (`super::tools`), how a request is re-run
//! (`super::send`), what fits the window (`super::fit`), what steering texts say
//! (`super::steer`, delivered after each round's tool results).

use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::fit;
use super::send::{error_kind, send_with_reruns};
use super::steer::{self, Steering};
use super::tools::{self, Plan, Ran, ToolCall};
use crate::agent::{AgentError, Session, TurnMaterials};
use crate::compact::{self, AutoState};
use crate::conversation::history::ReplyFile;
use crate::conversation::message::{ContentBlock, Message, Usage};
use crate::conversation::outcome::Outcome;
use crate::event::{Emitter, EventKind};
use crate::fsutil;
use crate::gateway::{overflow, CallOptions, GatewayError, Prompt, Response, RoundFailure, StopReason, ToolSpec};
use crate::prompt::{self, PromptInputs};
use crate::wake::state::WakeTurn;

/// What every step of a turn works on.
pub(super) struct Turn<'a> {
    pub session: &'a mut Session,
    pub m: &'a TurnMaterials,
    pub reply: &'a mut ReplyFile,
    pub events: &'a Emitter,
    pub cancel: &'a CancellationToken,
    pub steering: &'a Steering,
    /// The role's hooks for this turn (docs/design.md §12); a hook's abort ends the turn `blocked`.
    pub hooks: &'a crate::hooks::Hooks,
}

/// Runs the rounds of a turn; `Ok(None)` when it ended normally.
pub(super) async fn rounds(t: &mut Turn<'_>) -> Result<Option<Outcome>, AgentError> {
    let max_rounds = t.m.template.max_tool_rounds();
    let specs = t.m.tools.specs();
    let mut auto_compact = AutoState::default();
    fit::warn_large(t, &specs);
    if let Some(refused) = fit::refuse_too_large(t, &specs, fit::Check::BeforeSending) {
        return Ok(Some(refused));
    }
    for round in 0..max_rounds {
        let final_round = round + 1 == max_rounds;
        t.hooks.set_round(round);
        if let Some(o) = prepare(t, round, &specs, &mut auto_compact).await? {
            return Ok(Some(o));
        }
        let mut resp = match send_round(t, &specs, final_round, &mut auto_compact).await? {
            Sent::Answer(resp) => resp,
            Sent::Ended(o) => return Ok(Some(o)),
        };
        resp.rename_ids_used_in(&t.session.conversation().current.messages);
        record_usage(t, &resp);
        let plan = Plan::for_round(final_round, max_rounds, resp.stop_reason.clone());
        if let Some(o) = hooks_on_answer(t, &mut resp, &plan).await {
            return Ok(Some(o));
        }
        let calls = append_answer(t, &resp.content)?;
        if calls.is_empty() {
            // A `before_finish` inject adds a user message and the turn goes on.
            match t.hooks.before_finish(&resp.text()).await {
                Some(text) if !final_round => append(t, Message::user_text(text))?,
                _ if t.hooks.aborted() => return Ok(Some(Outcome::Blocked)),
                _ => return Ok(None),
            }
            continue;
        }
        match tools::run_calls(t, &calls, &plan, &resp).await? {
            _ if t.hooks.aborted() => return Ok(Some(Outcome::Blocked)),
            Ran::All => {
                if let Some(results) = t.session.conversation().current.messages.last() {
                    t.hooks
                        .after_tool_batch(&resp.content, &results.content.to_blocks(), resp.stop_reason.as_ref().map(StopReason::as_str))
                        .await;
                }
                if t.hooks.aborted() {
                    return Ok(Some(Outcome::Blocked));
                }
                // The runner's hook (serve drains the outbox the batch's commands wrote to).
                let wake = t.session.extensions().get::<Arc<WakeTurn>>().cloned();
                if let Some(wake) = &wake {
                    wake.clone().after_tool_batch().await;
                }
                if let Some(text) = wake.and_then(|w| w.take_end()) {
                    // `sleep_until` (docs/design.md §10): the turn ends after the batch that ran it,
                    // with an assistant message so the next turn's user message alternates.
                    append(t, Message::assistant(vec![ContentBlock::text(text)]))?;
                    return Ok(None);
                }
                fit::warn_large_results(t);
                steer::deliver(t).await?;
            }
            Ran::NotRun => return Ok(None),
            Ran::Cancelled => return Ok(Some(Outcome::Cancelled)),
        }
    }
    Ok(None)
}

/// The `after_response` hooks (they may switch the model or abort), then, when the calls will
/// run, the `before_tool` hooks, before the answer is stored: a modified input is what the
/// history keeps. `Some` when a hook aborted the turn.
async fn hooks_on_answer(t: &mut Turn<'_>, resp: &mut Response, plan: &Plan) -> Option<Outcome> {
    t.hooks.after_response(&resp.content, resp.stop_reason.as_ref().map(StopReason::as_str)).await;
    if matches!(plan, Plan::Run) && !t.hooks.aborted() {
        t.hooks.before_tools(&mut resp.content).await;
    }
    t.hooks.aborted().then_some(Outcome::Blocked)
}

/// Starts round `round`: the cancel check (a yield request ends the turn here too), its event,
/// automatic compaction.
async fn prepare(t: &mut Turn<'_>, round: u32, specs: &[ToolSpec], auto: &mut AutoState) -> Result<Option<Outcome>, AgentError> {
    if t.cancel.is_cancelled() || t.steering.yield_requested() {
        return Ok(Some(Outcome::Cancelled));
    }
    t.events.emit(EventKind::RoundStarted { round });
    compact_unless_skipped(t, specs, auto, "threshold").await?;
    if t.hooks.aborted() {
        return Ok(Some(Outcome::Blocked));
    }
    Ok(t.cancel.is_cancelled().then_some(Outcome::Cancelled))
}

/// Automatic compaction, unless a `before_compact` hook skips it (`reason`: `threshold`, or
/// `refused` when the gateway refused the window). The hooks are asked only when a compaction
/// is due.
async fn compact_unless_skipped(t: &mut Turn<'_>, specs: &[ToolSpec], auto: &mut AutoState, reason: &str) -> Result<(), AgentError> {
    if t.hooks.has(crate::hooks::HookName::BeforeCompact) {
        if let Some(count) = compact::due(t.session, t.m, specs, auto) {
            if t.hooks.before_compact(reason, count).await || t.hooks.aborted() {
                return Ok(());
            }
        }
    }
    compact::before_round(t.session, t.m, specs, t.reply, auto, t.events, t.cancel).await
}

/// How sending a round ended.
enum Sent {
    Answer(Response),
    /// The turn ends with this outcome (the error, if any, was reported).
    Ended(Outcome),
}

/// Assembles and sends the round. When the gateway refuses it as over the context window, the
/// window it states is learned; a message that cannot fit at the gateway's own count is refused
/// as too large at once; otherwise the history is compacted and the round sent once more. When
/// that re-send is refused as over the window too, the compaction is undone
/// ([`undo_compaction`]) and the turn is blocked with an error that says what to do.
async fn send_round(t: &mut Turn<'_>, specs: &[ToolSpec], final_round: bool, auto: &mut AutoState) -> Result<Sent, AgentError> {
    let mut opts = call_options(t.session, t.m);
    // The history before the forced compaction, once the round was refused as over the window.
    let mut before_compaction: Option<Vec<Message>> = None;
    loop {
        let prompt = assemble(t, specs, final_round);
        t.session.conversation_mut().save_current()?;
        let current_json = t.session.conversation().store.dir().join("current.json");
        t.hooks.before_request(&t.hooks.model(&t.m.model), t.session.conversation().current.messages.len(), &current_json).await;
        if t.hooks.aborted() {
            return Ok(Sent::Ended(Outcome::Blocked));
        }
        opts.model = t.hooks.model(&t.m.model);
        let (err, partial) = match send_with_reruns(t.session, &prompt, &opts, t.events, t.cancel).await {
            Ok(resp) => return Ok(Sent::Answer(resp)),
            Err(RoundFailure { error: error @ GatewayError::Cancelled, partial, .. }) => {
                keep_partial(t, partial, &error)?;
                return Ok(Sent::Ended(Outcome::Cancelled));
            }
            Err(RoundFailure { error, partial, .. }) => (error, partial),
        };
        let over = overflow::detect(&err);
        let Some(over) = over.filter(|_| before_compaction.is_none()) else {
            let hint = match (over, before_compaction) {
                (Some(_), Some(before)) => Some(undo_compaction(t, before)),
                _ => None,
            };
            let outcome = report_failure(t.events, &err, hint.as_deref());
            keep_partial(t, partial, &err)?;
            return Ok(Sent::Ended(outcome));
        };
        fit::learn_window(t, &over, &err);
        // Judged at the gateway's own count: a message that cannot fit even alone is refused
        // before any summary request is spent or anything is set aside.
        let counted = fit::Counted::of(&over, &prompt);
        if let Some(refused) = fit::refuse_too_large(t, specs, fit::Check::AfterRefusal(counted)) {
            return Ok(Sent::Ended(refused));
        }
        before_compaction = Some(t.session.conversation().current.messages.clone());
        auto.force_next();
        compact_unless_skipped(t, specs, auto, "refused").await?;
        if t.hooks.aborted() {
            return Ok(Sent::Ended(Outcome::Blocked));
        }
        if t.cancel.is_cancelled() {
            return Ok(Sent::Ended(Outcome::Cancelled));
        }
    }
}

/// After the re-send that followed a forced compaction was refused as over the window too:
/// puts the history back as it was before that compaction (a compaction deletes no message, so
/// nothing is lost), so the summary does not hold this turn's message — the next question
/// replaces the blocked turn (`super::pop_failed_turn`) and never inherits the refused text, and
/// the earlier messages are not set aside for nothing. Returns what the `error` event adds.
fn undo_compaction(t: &mut Turn<'_>, before: Vec<Message>) -> String {
    let still = "the request was still over the context window";
    if t.session.conversation().current.messages == before {
        return format!("{still}; the next question will not carry this message. Send a shorter message, or use /compact or /clear");
    }
    t.session.conversation_mut().current.messages = before;
    t.events
        .emit(EventKind::System { text: "the compaction made for this turn was undone: the history is as it was before it".to_string() });
    format!(
        "{still} after compacting, so the compaction was undone; the next question will not carry this message. Send a shorter message, or use /compact or /clear"
    )
}

fn call_options(session: &Session, m: &TurnMaterials) -> CallOptions {
    CallOptions {
        model: m.model.clone(),
        max_tokens: m.max_tokens,
        session_id: session.conversation().current.conversation_id.clone(),
        aux: None,
        timeout: None,
    }
}

fn assemble(t: &Turn<'_>, specs: &[ToolSpec], final_round: bool) -> Prompt {
    prompt::assemble(&PromptInputs {
        system_md: &t.m.template.system_md,
        skills: &t.m.skills,
        tools: specs,
        final_round,
        history: &t.session.conversation().current.messages,
        agents_md: &t.m.agents_md,
        memory_md: &t.m.memory_md,
    })
}

/// Reports a failed send as an `error` event (`hint` appended after `; `); a 4xx the gateway
/// will refuse again blocks the turn, anything else fails it.
fn report_failure(events: &Emitter, e: &GatewayError, hint: Option<&str>) -> Outcome {
    let message = match hint {
        Some(hint) => format!("{e}; {hint}"),
        None => e.to_string(),
    };
    events.emit(EventKind::Error { kind: error_kind(e), message });
    match e {
        // A rate limit or a timeout that outlasted the budget is a failure, not a refusal.
        GatewayError::Status { status: 408 | 409 | 429, .. } => Outcome::Failed,
        GatewayError::Status { status, .. } if (400..500).contains(status) => Outcome::Blocked,
        GatewayError::NoKey { .. } | GatewayError::NotFound { .. } => Outcome::Blocked,
        _ => Outcome::Failed,
    }
}

/// What the reader saw of a round that failed for good or was cancelled stays in the history,
/// marked `[cut off: <error>]` (`[cut off: cancelled by user]`); the outcome marker ends this
/// message (see `super::end_with_marker`) and the prompt leaves it out.
fn keep_partial(t: &mut Turn<'_>, partial: String, e: &GatewayError) -> Result<(), AgentError> {
    if partial.trim().is_empty() {
        return Ok(());
    }
    let why = match e {
        GatewayError::Cancelled => "cancelled by user".to_string(),
        e => e.to_string(),
    };
    let cut = ContentBlock::text(format!("[cut off: {why}]"));
    append(t, Message::assistant(vec![ContentBlock::text(partial), cut]))
}

fn record_usage(t: &mut Turn<'_>, resp: &Response) {
    t.reply.add_usage(&resp.usage);
    t.reply.prefix_sha256 = resp.prefix_sha256.clone();
    t.reply.last_stop_reason = resp.stop_reason.as_ref().map(|r| r.as_str().to_string());
    t.events.emit(EventKind::Usage {
        input: resp.usage.input_tokens,
        output: resp.usage.output_tokens,
        cache_creation: resp.usage.cache_creation_input_tokens,
        cache_read: resp.usage.cache_read_input_tokens,
        prefix_sha256: resp.prefix_sha256.clone(),
    });
    if resp.stop_reason == Some(StopReason::MaxTokens) {
        t.events.emit(EventKind::System { text: cut_off_notice(&resp.usage, t.m.max_tokens) });
    }
}

/// Why an answer stopped at the output limit. Fewer output tokens than `max_tokens` means the
/// gateway ran out of context window (llama.cpp reports a full context as `length` too), where
/// a larger `max_tokens` would not help.
fn cut_off_notice(usage: &Usage, max_tokens: u32) -> String {
    if usage.output_tokens > 0 && usage.output_tokens < u64::from(max_tokens) {
        return format!(
            "the answer was cut off after {} output tokens, below max_tokens ({max_tokens}): the gateway's context window is full ({} input + {} output tokens); /compact or /clear makes room",
            usage.output_tokens,
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens,
            usage.output_tokens
        );
    }
    format!("the answer was cut off at max_tokens ({max_tokens}); set max_tokens in the role's meta.yaml to allow longer answers")
}

/// Appends the answer's non-empty blocks as one assistant message; returns its tool calls.
fn append_answer(t: &mut Turn<'_>, content: &[ContentBlock]) -> Result<Vec<ToolCall>, AgentError> {
    let content: Vec<ContentBlock> = content.iter().filter(|b| !b.is_empty()).cloned().collect();
    let calls = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(ToolCall { id: id.clone(), name: name.clone(), input: input.clone() }),
            _ => None,
        })
        .collect();
    let calls: Vec<ToolCall> = calls;
    if calls.is_empty() && !content.iter().any(|b| matches!(b, ContentBlock::Text { .. })) {
        t.events.emit(EventKind::NoAnswerText);
    }
    if content.is_empty() {
        return Ok(calls);
    }
    if calls.is_empty() && !t.hooks.has(crate::hooks::HookName::BeforeFinish) {
        // The turn ends right after this, and its end saves history and snapshot together
        // with no await between: a save here would be two more fsyncs for nothing.
        push(t, Message::assistant(content));
    } else {
        append(t, Message::assistant(content))?;
    }
    Ok(calls)
}

/// Appends a message to the history and the reply snapshot, and persists the snapshot so a
/// crash before the next round loses nothing.
pub(super) fn append(t: &mut Turn<'_>, msg: Message) -> Result<(), AgentError> {
    push(t, msg);
    t.session.conversation().save_reply(t.reply)?;
    Ok(())
}

/// Appends a message to the history and the reply snapshot, in memory only.
fn push(t: &mut Turn<'_>, msg: Message) {
    let cur = &mut t.session.conversation_mut().current;
    cur.push(msg);
    t.reply.items.push(cur.messages[cur.messages.len() - 1].clone());
    t.reply.updated_at = fsutil::now_rfc3339();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, cache_read: u64, output: u64) -> Usage {
        Usage { input_tokens: input, output_tokens: output, cache_read_input_tokens: cache_read, ..Usage::default() }
    }

    #[test]
    fn a_cut_below_max_tokens_is_reported_as_a_full_context() {
        assert_eq!(
            cut_off_notice(&usage(5941, 134, 1983), 2048),
            "the answer was cut off after 1983 output tokens, below max_tokens (2048): the gateway's context window is full (6075 input + 1983 output tokens); /compact or /clear makes room"
        );
        assert_eq!(
            cut_off_notice(&usage(100, 0, 2048), 2048),
            "the answer was cut off at max_tokens (2048); set max_tokens in the role's meta.yaml to allow longer answers"
        );
        assert_eq!(
            cut_off_notice(&usage(100, 0, 0), 2048),
            "the answer was cut off at max_tokens (2048); set max_tokens in the role's meta.yaml to allow longer answers"
        );
    }
}
