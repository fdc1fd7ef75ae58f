//! The tool calls of one response (docs/design.md §6.1 step 5, §6.2 cancel).
//!
//! Owns deciding, per call, whether it runs ([`Plan`]), running one call ([`run_call`]) and
//! persisting each result the moment it exists: the results go into ONE user message that is
//! appended at the first result and grows with each later one, and reply.json is written after
//! every result. A crash mid-round therefore keeps every finished result; only calls that had
//! not finished get the synthetic result when the history is restored (see
//! `conversation::invariants::heal`), so the model is never told a command that ran did not.
//! A steer's interrupt (`super::steer`) ends the running call and keeps the rest of the batch
//! from starting, each with the interrupted result.
//! Must not touch: the request, compaction, the steering queue.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::round::{append, Turn};
use super::steer::{Steering, INTERRUPTED_RESULT};
use super::subagent::Spawner;
use crate::agent::{AgentError, Session, TurnMaterials};
use crate::conversation::message::{Content, ContentBlock, Message};
use crate::event::{preview, Emitter, EventKind, TOOL_RESULT_PREVIEW_CHARS};
use crate::fsutil;
use crate::gateway::{Response, StopReason};
use crate::tools::ask_user::User;
use crate::tools::task::Spawn;
use crate::tools::{ToolContext, ToolOutput};
use crate::wake::state::WakeTurn;

pub use crate::tools::CANCELLED_RESULT;

/// The result text of a call not run because a hook aborted the turn earlier in its batch.
pub(super) const ABORTED_RESULT: &str = "error: not run: a hook aborted the turn";

/// One `tool_use` of a response.
pub(super) struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// Whether a response's calls run.
pub(super) enum Plan {
    Run,
    /// The final round offers no tools: none of its calls run.
    BudgetUsedUp {
        max_rounds: u32,
    },
    /// The response did not stop for its tool calls (e.g. `end_turn` with a call in it).
    Stopped {
        stop_reason: Option<StopReason>,
    },
}

impl Plan {
    /// A response cut at the output limit still runs its complete calls (the cut one is
    /// rejected by the gateway's normalisation), so the model can go on in smaller pieces.
    pub(super) fn for_round(final_round: bool, max_rounds: u32, stop_reason: Option<StopReason>) -> Self {
        match (final_round, &stop_reason) {
            (true, _) => Plan::BudgetUsedUp { max_rounds },
            (false, Some(StopReason::ToolUse | StopReason::MaxTokens)) => Plan::Run,
            (false, _) => Plan::Stopped { stop_reason },
        }
    }
}

/// How the calls of a response ended; every call got a result either way.
pub(super) enum Ran {
    All,
    /// The plan ran none of them; the turn ends.
    NotRun,
    Cancelled,
}

/// Gives every call a result, in order, persisting each as it is made. A steer's interrupt
/// (see `super::steer`) stops the running call and keeps the later ones from starting.
pub(super) async fn run_calls(t: &mut Turn<'_>, calls: &[ToolCall], plan: &Plan, resp: &Response) -> Result<Ran, AgentError> {
    let ctx = tool_context(t.session, t.m, t.cancel, t.events);
    let steering = t.steering.clone();
    let _batch = steering.begin_batch();
    let mut cancelled = false;
    for (i, call) in calls.iter().enumerate() {
        let output = if cancelled || t.cancel.is_cancelled() {
            cancelled = true;
            ToolOutput::error(CANCELLED_RESULT)
        } else {
            match plan {
                Plan::BudgetUsedUp { max_rounds } => {
                    ToolOutput::error(format!("error: not run: this turn's budget of {max_rounds} rounds is used up"))
                }
                Plan::Stopped { stop_reason } => ToolOutput::error(format!(
                    "error: not run: the response ended with stop_reason `{}`",
                    stop_reason.as_ref().map_or("none", StopReason::as_str)
                )),
                Plan::Run => {
                    let (out, was_cancelled) = run_planned(t.m, t.events, call, &ctx, resp, &steering, t.hooks).await;
                    cancelled = was_cancelled;
                    out
                }
            }
        };
        let result = ContentBlock::ToolResult { tool_use_id: call.id.clone(), content: output.content, is_error: output.is_error };
        if i == 0 {
            append(t, Message::user_blocks(vec![result]))?;
        } else {
            extend_last(t, vec![result])?;
        }
    }
    Ok(match (cancelled, plan) {
        (true, _) => Ran::Cancelled,
        (false, Plan::Run) => Ran::All,
        (false, Plan::BudgetUsedUp { .. } | Plan::Stopped { .. }) => Ran::NotRun,
    })
}

/// Runs one call of a batch the plan runs, unless a steer interrupted the batch or the gateway
/// rejected the call; also returns whether the user cancelled the turn meanwhile.
async fn run_planned(
    m: &TurnMaterials,
    events: &Emitter,
    call: &ToolCall,
    ctx: &ToolContext,
    resp: &Response,
    steering: &Steering,
    hooks: &crate::hooks::Hooks,
) -> (ToolOutput, bool) {
    if let Some(blocked) = hooks.take_blocked(&call.id).or_else(|| hooks.aborted().then(|| ToolOutput::error(ABORTED_RESULT))) {
        report_end(call, &blocked, report_start(call, events), events);
        return (blocked, false);
    }
    let Some(token) = steering.start_call(&ctx.cancel) else {
        return (ToolOutput::error(INTERRUPTED_RESULT), false);
    };
    if let Some(refused) = rejected_output(resp, &call.id, m.max_tokens, events) {
        steering.end_call();
        return (refused, false);
    }
    let started = report_start(call, events);
    let out = m.tools.run(&call.name, &call.input, &ToolContext { cancel: token, ..ctx.clone() }).await;
    let interrupted = steering.end_call();
    let cancelled = ctx.cancel.is_cancelled();
    let out = if cancelled {
        ToolOutput::error(out.content)
    } else if interrupted {
        ToolOutput::error(INTERRUPTED_RESULT)
    } else {
        hooks.after_tool(&call.id, &call.name, &call.input, out, started.elapsed().as_millis() as u64).await
    };
    report_end(call, &out, started, events);
    (out, cancelled)
}

/// The error result of a call the gateway's normalisation rejected (cut off at the output
/// limit, input not a JSON object): it is not run, and the user is told why.
fn rejected_output(resp: &Response, id: &str, max_tokens: u32, events: &Emitter) -> Option<ToolOutput> {
    let rejected = resp.rejection(id)?;
    let text = rejected.result_text(max_tokens);
    events.emit(EventKind::System {
        text: format!("tool call `{}` ({id}) not run: {}", rejected.name, text.trim_start_matches("error: not run: ")),
    });
    Some(ToolOutput::error(text))
}

/// Reports that a call starts; returns when, for its duration.
fn report_start(call: &ToolCall, events: &Emitter) -> Instant {
    events.emit(EventKind::ToolStarted { id: call.id.clone(), name: call.name.clone(), input: call.input.clone() });
    Instant::now()
}

/// Reports a call's end with the result the model will read.
fn report_end(call: &ToolCall, out: &ToolOutput, started: Instant, events: &Emitter) {
    events.emit(EventKind::ToolFinished {
        id: call.id.clone(),
        name: call.name.clone(),
        result: preview(&out.content, TOOL_RESULT_PREVIEW_CHARS),
        is_error: out.is_error,
        duration_ms: started.elapsed().as_millis() as u64,
    });
}

/// The context every tool call of a turn runs with (and its hooks, `crate::hooks`).
pub fn tool_context(session: &Session, m: &TurnMaterials, cancel: &tokio_util::sync::CancellationToken, events: &Emitter) -> ToolContext {
    let mut extensions = http::Extensions::new();
    if let Some(wake) = session.extensions().get::<Arc<WakeTurn>>() {
        extensions.insert(wake.clone());
    }
    if m.tools.has(crate::autonomy::wish_tool::NAME) {
        extensions.insert(Arc::new(crate::autonomy::wish_tool::WishJudge {
            home: session.agent().home.root().to_path_buf(),
            client: session.client().clone(),
            model: m.model.clone(),
            agent_id: session.agent().record.id.clone(),
        }));
    }
    ToolContext {
        workspace: session.agent().record.workspace.clone(),
        skills_dir: session.agent().home.skills_dir(),
        cancel: cancel.clone(),
        hidden_env: vec![crate::config::ENV_API_KEY.to_string(), session.settings().api_key_env.clone()],
        // Once per tool batch: the shim is (re)written here when missing or stale.
        env: crate::fsutil::blocking(|| crate::outbox::shim::prepare(&session.agent().record.workspace, &session.agent().record.id)),
        running_dir: Some(crate::tools::reaper::records_dir(&session.agent().record.workspace)),
        events: Some(events.clone()),
        // Only where `task` is offered: a sub-agent's tools never have it (no nesting).
        subagent: m.tools.has(crate::tools::task::NAME).then(|| Arc::new(Spawner::new(session, m)) as Arc<dyn Spawn>),
        user: session.extensions().get::<Arc<crate::ask::Questions>>().cloned().map(|questions| User {
            questions,
            timeout: m.template.meta.ask_user_timeout_secs.map_or(crate::tools::ask_user::DEFAULT_TIMEOUT, std::time::Duration::from_secs),
        }),
        skill_guard: crate::tools::skill_guard::Guard::for_batch(
            &session.conversation().current.messages,
            &session.agent().home.skills_dir(),
            &session.agent().record.workspace,
            m.template.meta.skill_guard,
        ),
        extensions,
    }
}

/// Adds `blocks` to the last message (the round's results message, in the history and the
/// reply snapshot) and writes reply.json.
pub(super) fn extend_last(t: &mut Turn<'_>, blocks: Vec<ContentBlock>) -> Result<(), AgentError> {
    let in_history = t.session.conversation_mut().current.messages.last_mut();
    let in_reply = t.reply.items.last_mut();
    for m in in_history.into_iter().chain(in_reply) {
        let mut all = m.content.to_blocks();
        all.extend(blocks.iter().cloned());
        m.content = Content::Blocks(all);
    }
    t.reply.updated_at = fsutil::now_rfc3339();
    t.session.conversation().save_reply(t.reply)?;
    Ok(())
}
