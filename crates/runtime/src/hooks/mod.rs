//! Hooks (docs/design.md §12, CMDC's 13 hook points): programs a role's `meta.yaml` names, run at
//! fixed points of a turn, that may allow, deny, modify, inject, skip or switch the model.
//!
//! Owns the per-turn hook state ([`Hooks`]: the round, a switched model, the injects used, the
//! calls a `before_tool` blocked, an abort) and one method per hook point that builds the
//! hook's stdin and turns the chain's [`Decision`] into what the turn loop needs. The meta.yaml
//! types are `config`, one process `runner`, the order and combination `chain`.
//! Must not touch: stored messages. A hook's modification is applied to a value *before* the
//! turn loop stores it (the prompt text, a response's tool inputs, a tool result, a steer), never
//! to a message already in the history, so the cached prompt prefix stays byte-stable.
//!
//! What a deny does: at `before_tool` the call is not run and its result is
//! `error: blocked by hook <cmd>: <reason>` (the turn goes on); at `session_start`,
//! `before_prompt` and `before_steering` the prompt or steer is refused; anywhere else the turn is
//! aborted ([`Hooks::aborted`]) and ends `blocked`.

pub mod chain;
pub use cicy_config::hooks as config;
pub mod runner;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{json, Map, Value};

pub use chain::{Decision, Denied};
pub use config::{HookName, HookSpec, HooksConfig, OnError};

use crate::conversation::history::ReplyFile;
use crate::conversation::message::ContentBlock;
use crate::event::{Emitter, ErrorKind, EventKind, TurnOutcome};
use crate::tools::{ToolContext, ToolOutput};

/// CMDC `max_reviews`: at most 3 `before_finish` injects per turn; a 4th is ignored.
pub const MAX_FINISH_INJECTS: u32 = 3;

/// What every hook of a turn runs with.
pub struct Context {
    pub config: HooksConfig,
    /// `$CICY_HOME/roles/<slug>/` when the role has a folder there (where relative commands are
    /// looked up first, see [`runner::resolve`]).
    pub role_dir: Option<PathBuf>,
    /// The turn's tool context: workspace (the hook's cwd), hidden and added variables, cancel,
    /// the reaper's records.
    pub tools: ToolContext,
    pub events: Emitter,
    agent_id: String,
    conv_id: String,
    turn_id: String,
    workspace: String,
}

#[derive(Debug, Default)]
struct State {
    round: u32,
    model: Option<String>,
    finish_injects: u32,
    /// Call id → the result text of a call a `before_tool` hook blocked.
    blocked: Vec<(String, String)>,
    aborted: Option<(HookName, Denied)>,
}

/// The hooks of one turn. [`Hooks::none`] (a role without hooks) starts no process and costs
/// nothing at any hook point.
pub struct Hooks {
    cx: Option<Context>,
    state: Mutex<State>,
}

/// Who runs a turn, for the hooks' stdin.
#[derive(Debug, Clone, Copy)]
pub struct TurnIds<'a> {
    pub agent_id: &'a str,
    pub conv_id: &'a str,
    pub turn_id: &'a str,
    pub workspace: &'a Path,
}

impl Hooks {
    /// No hooks.
    pub fn none() -> Self {
        Self { cx: None, state: Mutex::default() }
    }

    /// The hooks of `config` for one turn; `tools` is made only when some hook is configured
    /// (it prepares the outbox shim).
    pub fn new(config: &HooksConfig, role_dir: PathBuf, tools: impl FnOnce() -> ToolContext, events: &Emitter, ids: TurnIds<'_>) -> Self {
        if config.is_empty() {
            return Self::none();
        }
        let cx = Context {
            config: config.clone(),
            role_dir: role_dir.is_dir().then_some(role_dir),
            tools: tools(),
            events: events.clone(),
            agent_id: ids.agent_id.to_string(),
            conv_id: ids.conv_id.to_string(),
            turn_id: ids.turn_id.to_string(),
            workspace: ids.workspace.display().to_string(),
        };
        Self { cx: Some(cx), state: Mutex::default() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every unlock leaves the state consistent, so a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The round the next hooks report (0-based, as `round_started`).
    pub fn set_round(&self, round: u32) {
        self.state().round = round;
    }

    /// The model of the coming requests: the last `switch_model` of this turn, else `model`.
    pub fn model(&self, model: &str) -> String {
        self.state().model.clone().unwrap_or_else(|| model.to_string())
    }

    /// Whether any hook of `name` is configured.
    pub fn has(&self, name: HookName) -> bool {
        self.cx.as_ref().is_some_and(|cx| !cx.config.get(name).is_empty())
    }

    /// Whether a hook aborted the turn (the turn then ends `blocked`).
    pub fn aborted(&self) -> bool {
        self.state().aborted.is_some()
    }

    /// Runs the chain of `name` with stdin `{hook, agent_id, conv_id, turn_id, round,
    /// workspace}` + `extra`; `None` when no hook of `name` is configured.
    async fn run(&self, name: HookName, tool: Option<&str>, extra: Value) -> Option<Decision> {
        let cx = self.cx.as_ref().filter(|cx| !cx.config.get(name).is_empty())?;
        let round = self.state().round;
        let fixed = [
            ("hook", json!(name.as_str())),
            ("agent_id", json!(cx.agent_id)),
            ("conv_id", json!(cx.conv_id)),
            ("turn_id", json!(cx.turn_id)),
            ("round", json!(round)),
            ("workspace", json!(cx.workspace)),
        ];
        let mut payload: Map<String, Value> = fixed.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        if let Value::Object(extra) = extra {
            payload.extend(extra);
        }
        Some(chain::run(cx, name, tool, payload).await)
    }

    /// A deny where only an abort is left: recorded, reported as `error {kind: "hook"}`.
    fn abort_on(&self, name: HookName, d: &Decision) {
        let (Some(denied), Some(cx)) = (&d.denied, &self.cx) else { return };
        let mut state = self.state();
        if state.aborted.is_none() {
            cx.events.emit(EventKind::Error {
                kind: ErrorKind::Hook,
                message: format!("the turn was aborted by hook {} at {}: {}", denied.command, name.as_str(), denied.reason),
            });
            state.aborted = Some((name, denied.clone()));
        }
    }

    /// `session_start` (the first turn of a conversation) then `before_prompt`: the user text as
    /// it will be stored — modified, with the injects appended after a blank line each.
    /// Errors: the hook that refused the prompt.
    pub async fn before_prompt(&self, first_of_conversation: bool, text: &str) -> Result<String, Denied> {
        if first_of_conversation {
            if let Some(denied) = self.run(HookName::SessionStart, None, json!({})).await.and_then(|d| d.denied) {
                return Err(denied);
            }
        }
        let Some(d) = self.run(HookName::BeforePrompt, None, json!({"text": text})).await else {
            return Ok(text.to_string());
        };
        if let Some(denied) = d.denied {
            return Err(denied);
        }
        let mut text = d.modified.as_ref().and_then(Value::as_str).unwrap_or(text).to_string();
        for inject in d.injects {
            text = format!("{text}\n\n{inject}");
        }
        Ok(text)
    }

    /// `before_request`: a `switch_model` sets the model of this and the coming requests of the
    /// turn; a deny aborts.
    pub async fn before_request(&self, model: &str, message_count: usize, current_json: &Path) {
        let extra = json!({"model": model, "message_count": message_count, "current_json": current_json.display().to_string()});
        self.decide_model(HookName::BeforeRequest, None, extra).await;
    }

    /// `after_response` with the response's calls and stop reason: a `switch_model` sets the
    /// model of the coming requests; a deny aborts.
    pub async fn after_response(&self, content: &[ContentBlock], stop_reason: Option<&str>) {
        let extra = json!({"tool_calls": tool_calls(content), "stop_reason": stop_reason, "text": answer_text(content)});
        self.decide_model(HookName::AfterResponse, None, extra).await;
    }

    async fn decide_model(&self, name: HookName, tool: Option<&str>, extra: Value) {
        if let Some(d) = self.run(name, tool, extra).await {
            if let Some(model) = &d.model {
                self.state().model = Some(model.clone());
            }
            self.abort_on(name, &d);
        }
    }

    /// `before_tool` for every call of a response the turn will run, before the response is
    /// stored: a modified input is written into `content` (so the history holds what ran), a
    /// deny keeps the call from running ([`Hooks::take_blocked`]).
    pub async fn before_tools(&self, content: &mut [ContentBlock]) {
        for block in content.iter_mut() {
            let ContentBlock::ToolUse { id, name, input } = block else { continue };
            let extra = json!({"tool": {"id": id, "name": name, "input": input}});
            let Some(d) = self.run(HookName::BeforeTool, Some(name), extra).await else { continue };
            if let Some(denied) = d.denied {
                let text = format!("error: blocked by hook {}: {}", denied.command, denied.reason);
                self.state().blocked.push((id.clone(), text));
            } else if let Some(modified) = d.modified {
                *input = modified;
            }
        }
    }

    /// The result of call `id` when a `before_tool` hook blocked it.
    pub fn take_blocked(&self, id: &str) -> Option<ToolOutput> {
        let mut state = self.state();
        let at = state.blocked.iter().position(|(b, _)| b == id)?;
        Some(ToolOutput::error(state.blocked.remove(at).1))
    }

    /// `on_tool_error` (when `out` is an error; `skip` ends that chain, the error stands) then
    /// `after_tool`: the result to store, modified. A deny at either aborts the turn.
    pub async fn after_tool(&self, id: &str, name: &str, input: &Value, out: ToolOutput, duration_ms: u64) -> ToolOutput {
        let tool = json!({"id": id, "name": name, "input": input});
        if out.is_error {
            let extra = json!({"tool": tool, "result": {"content": out.content, "is_error": true, "duration_ms": duration_ms}, "error": out.content, "attempt": 1});
            if let Some(d) = self.run(HookName::OnToolError, Some(name), extra).await {
                self.abort_on(HookName::OnToolError, &d);
            }
        }
        let extra = json!({"tool": tool, "result": {"content": out.content, "is_error": out.is_error, "duration_ms": duration_ms}});
        let Some(d) = self.run(HookName::AfterTool, Some(name), extra).await else { return out };
        self.abort_on(HookName::AfterTool, &d);
        match d.modified {
            Some(Value::String(content)) => ToolOutput { content, is_error: out.is_error },
            Some(Value::Object(o)) => ToolOutput {
                content: o.get("content").and_then(Value::as_str).map_or(out.content, str::to_string),
                is_error: o.get("is_error").and_then(Value::as_bool).unwrap_or(out.is_error),
            },
            _ => out,
        }
    }

    /// `after_tool_batch` with the response's calls and their results; a deny aborts.
    pub async fn after_tool_batch(&self, calls: &[ContentBlock], results: &[ContentBlock], stop_reason: Option<&str>) {
        let mut list = tool_calls(calls);
        for call in &mut list {
            let result = results.iter().find_map(|r| match r {
                ContentBlock::ToolResult { tool_use_id, content, is_error } if call["id"] == *tool_use_id => {
                    Some(json!({"content": content, "is_error": is_error}))
                }
                _ => None,
            });
            call["result"] = result.unwrap_or(Value::Null);
        }
        if let Some(d) = self.run(HookName::AfterToolBatch, None, json!({"tool_calls": list, "stop_reason": stop_reason})).await {
            self.abort_on(HookName::AfterToolBatch, &d);
        }
    }

    /// `before_finish` with the answer that would end the turn: the text of a user message to
    /// add (the injects joined by a blank line) so the turn goes on, at most
    /// [`MAX_FINISH_INJECTS`] times per turn (a later inject is ignored, with a `system`
    /// event); a deny aborts.
    pub async fn before_finish(&self, text: &str) -> Option<String> {
        let d = self.run(HookName::BeforeFinish, None, json!({"text": text})).await?;
        self.abort_on(HookName::BeforeFinish, &d);
        if d.injects.is_empty() || d.denied.is_some() {
            return None;
        }
        let mut state = self.state();
        if state.finish_injects >= MAX_FINISH_INJECTS {
            if let Some(cx) = &self.cx {
                cx.events
                    .emit(EventKind::System { text: format!("a before_finish inject was ignored: at most {MAX_FINISH_INJECTS} per turn") });
            }
            return None;
        }
        state.finish_injects += 1;
        Some(d.injects.join("\n\n"))
    }

    /// `before_compact` (`reason`: `threshold` or `refused`, the gateway refused the window):
    /// whether a hook skipped this compaction. A deny aborts.
    pub async fn before_compact(&self, reason: &str, message_count: usize) -> bool {
        let Some(d) = self.run(HookName::BeforeCompact, None, json!({"reason": reason, "message_count": message_count})).await else {
            return false;
        };
        self.abort_on(HookName::BeforeCompact, &d);
        d.skipped
    }

    /// `before_steering` for one steer text about to go into a round's user message: the text
    /// to deliver (modified), or `Err` when a hook refused it (it is dropped).
    pub async fn before_steering(&self, text: String) -> Result<String, Denied> {
        let Some(d) = self.run(HookName::BeforeSteering, None, json!({"text": text})).await else { return Ok(text) };
        if let Some(denied) = d.denied {
            return Err(denied);
        }
        Ok(d.modified.as_ref().and_then(Value::as_str).map_or(text, str::to_string))
    }

    /// `after_turn` (alias `on_turn_end`) with the outcome (`completed`, `cancelled`, `blocked`,
    /// `failed`) and the turn's token usage from `reply` (`{input_tokens, output_tokens,
    /// cache_creation_input_tokens, cache_read_input_tokens}`); on every path, after the history
    /// is written.
    pub async fn after_turn(&self, outcome: TurnOutcome, reply: &ReplyFile) {
        let usage = json!({
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "cache_creation_input_tokens": reply.cache_creation_input_tokens,
            "cache_read_input_tokens": reply.cache_read_input_tokens,
        });
        self.run(HookName::AfterTurn, None, json!({"outcome": outcome, "usage": usage})).await;
    }

    /// `session_end`: the conversation ends (`/clear`), with `reason` `clear` and its
    /// `message_count`. Nothing a hook answers changes that (only `allow` is allowed).
    pub async fn session_end(&self, message_count: usize) {
        self.run(HookName::SessionEnd, None, json!({"reason": "clear", "message_count": message_count})).await;
    }
}

/// `[{id, name, input}]` of the `tool_use` blocks in `content`.
fn tool_calls(content: &[ContentBlock]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(json!({"id": id, "name": name, "input": input})),
            _ => None,
        })
        .collect()
}

/// The text blocks of an answer, concatenated.
fn answer_text(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
