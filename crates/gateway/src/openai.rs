//! The OpenAI chat-completions wire style: request encoding and the streaming accumulator.
//!
//! Owns: the translation of a canonical [`Prompt`] into a `POST /v1/chat/completions` body and
//! of `chat.completion.chunk` events back into canonical blocks. Must not touch: HTTP, SSE
//! framing (`sse.rs`), retries, or the prompt assembly.
//!
//! Format source: OpenAI Chat Completions API, streaming (`stream: true`,
//! `stream_options.include_usage`), as also served by llama.cpp's server and LiteLLM.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::response::{Draft, Part, StopReason, StreamAccumulator};
use super::sse::SseEvent;
use super::{
    anthropic, json_u64, merge_usage, truncate, wire_messages, wire_tool_id, wire_tool_name, write_json, EncodedRequest, GatewayError,
    GatewayEvent, Prompt,
};
use cicy_protocol::message::{ContentBlock, Role, Usage};

/// Encodes `prompt` as an OpenAI chat-completions streaming body.
///
/// Key order: `{"model","max_tokens","stream":true,"stream_options":{"include_usage":true},
/// "tools"?,"messages"}`. Translation (cicy's choices, fixed so the bytes are stable):
/// - system blocks → one `{"role":"system","content":"<texts joined with \n\n>"}` first
///   (omitted when there are none);
/// - a user message → its `tool_result` blocks as `{"role":"tool","tool_call_id","content"}`
///   messages first, then its text blocks as ONE user message whose content is always the array
///   form `[{"type":"text","text":…}]` (block boundaries such as `<role>`/`<memories>` are kept);
/// - an assistant message → `{"role":"assistant","content":<texts joined with \n\n, or null when
///   there is none and there are tool calls>,"tool_calls"?:[{"id","type":"function","function":
///   {"name","arguments":"<input as compact JSON>"}}]}`;
/// - ids and tool names go through `wire_tool_id` / `wire_tool_name`;
/// - thinking blocks and cache flags are dropped (the style has neither), and so is a
///   message left empty by that (`gateway::wire_messages`);
/// - tools → `{"type":"function","function":{"name","description","parameters"}}`.
///
/// `prefix_sha256` is [`anthropic::encode`]'s digest, so it compares across styles.
pub fn encode(prompt: &Prompt, model: &str, max_tokens: u32) -> EncodedRequest {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    body.insert("max_tokens".into(), Value::from(max_tokens));
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if !prompt.tools.is_empty() {
        let tools = prompt
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let mut messages = Vec::new();
    if !prompt.system.is_empty() {
        let text = prompt.system.iter().map(|b| b.text.as_str()).collect::<Vec<_>>().join("\n\n");
        messages.push(json!({"role": "system", "content": text}));
    }
    for (role, blocks) in wire_messages(prompt) {
        let blocks = blocks.into_iter().map(|b| &b.block);
        match role {
            Role::User => {
                let mut parts = Vec::new();
                for block in blocks {
                    match block {
                        ContentBlock::ToolResult { tool_use_id, content, .. } => {
                            messages.push(json!({"role": "tool", "tool_call_id": wire_tool_id(tool_use_id), "content": content}));
                        }
                        ContentBlock::Text { text } => parts.push(json!({"type": "text", "text": text})),
                        ContentBlock::ToolUse { .. } | ContentBlock::Thinking { .. } => {}
                    }
                }
                if !parts.is_empty() {
                    messages.push(json!({"role": "user", "content": parts}));
                }
            }
            Role::Assistant => {
                let mut texts = Vec::new();
                let mut calls = Vec::new();
                for block in blocks {
                    match block {
                        ContentBlock::Text { text } => texts.push(text.as_str()),
                        ContentBlock::ToolUse { id, name, input } => calls.push(json!({
                            "id": wire_tool_id(id), "type": "function", "function": {"name": wire_tool_name(name), "arguments": input.to_string()}
                        })),
                        ContentBlock::ToolResult { .. } | ContentBlock::Thinking { .. } => {}
                    }
                }
                let content = match (texts.is_empty(), calls.is_empty()) {
                    (true, false) => Value::Null,
                    _ => Value::String(texts.join("\n\n")),
                };
                let mut msg = Map::new();
                msg.insert("role".into(), "assistant".into());
                msg.insert("content".into(), content);
                if !calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(msg));
            }
        }
    }
    body.insert("messages".into(), Value::Array(messages));
    let mut out = Vec::with_capacity(4096);
    write_json(&mut out, &Value::Object(body));
    EncodedRequest { body: out, prefix_sha256: anthropic::encode(prompt, model, max_tokens).prefix_sha256 }
}

// ---- Streaming response ------------------------------------------------------------------------

#[derive(Debug, Default)]
struct ToolCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Debug, Default)]
struct Choice {
    text: String,
    /// By the fragment's `index`.
    tool_calls: BTreeMap<u64, ToolCall>,
    finish_reason: Option<String>,
}

/// Accumulates `chat.completion.chunk` events into a [`Response`](super::Response).
///
/// Complete once a `finish_reason` or `[DONE]` arrived. Done (nothing more to read) at
/// `[DONE]`, or once a usage chunk arrived with or after the `finish_reason`: some servers send
/// neither `[DONE]` nor close the connection, and the client waits only a short grace for the
/// usage chunk after `finish_reason` (`client.rs`).
///
/// Usage: `prompt_tokens` counts cached tokens too, so cicy reports Anthropic's meaning —
/// `input_tokens = prompt_tokens − cached_tokens`, `cache_read_input_tokens = cached_tokens`
/// (`prompt_tokens_details.cached_tokens`), `output_tokens = completion_tokens`,
/// `cache_creation_input_tokens = 0` (the style does not report it). So in both styles
/// input + cache_read + cache_creation is the whole prompt.
#[derive(Debug, Default)]
pub struct Accumulator {
    choices: BTreeMap<u64, Choice>,
    usage: Usage,
    finished: bool,
    /// A usage object arrived in the `finish_reason` chunk or after it.
    final_usage: bool,
    done: bool,
    content_started: bool,
}

impl Accumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles one event; `delta.content` → [`GatewayEvent::TextDelta`], `delta.reasoning_content`
    /// (llama.cpp, DeepSeek) → [`GatewayEvent::ThinkingDelta`] (shown, not kept: the style has no
    /// signed thinking blocks to send back).
    ///
    /// Errors: an `error` object → [`GatewayError::StreamError`]; data that is not JSON →
    /// [`GatewayError::Decode`].
    fn handle(&mut self, ev: &SseEvent, emit: &mut dyn FnMut(GatewayEvent)) -> Result<(), GatewayError> {
        let data = ev.data.trim();
        if self.done || data.is_empty() || ev.event == "ping" {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let json: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(_) if ev.event == "error" => return Err(GatewayError::StreamError { kind: "error".into(), message: truncate(data, 500) }),
            Err(e) => return Err(GatewayError::Decode(format!("chunk is not JSON ({e}): {}", truncate(data, 200)))),
        };
        if json.get("error").is_some_and(|e| !e.is_null()) || ev.event == "error" {
            return Err(anthropic::stream_error(&json));
        }
        for (pos, c) in json.get("choices").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            let choice = self.choices.entry(index).or_default();
            let delta = c.get("delta").unwrap_or(&Value::Null);
            if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.content_started = true;
                choice.text.push_str(text);
                emit(GatewayEvent::TextDelta(text.to_string()));
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(text) = delta.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    self.content_started = true;
                    emit(GatewayEvent::ThinkingDelta(text.to_string()));
                }
            }
            for (tpos, frag) in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
                self.content_started = true;
                merge_tool_fragment(choice, tpos, frag);
            }
            if let Some(reason) = c.get("finish_reason").and_then(Value::as_str) {
                choice.finish_reason = Some(reason.to_string());
                self.finished = true;
            }
        }
        if let Some(u) = json.get("usage").filter(|u| u.is_object()) {
            let prompt = json_u64(u, "prompt_tokens");
            let cached = u.get("prompt_tokens_details").map_or(0, |d| json_u64(d, "cached_tokens"));
            let usage = Usage {
                input_tokens: prompt.saturating_sub(cached),
                output_tokens: json_u64(u, "completion_tokens"),
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: cached,
            };
            merge_usage(&mut self.usage, &usage);
            self.final_usage |= self.finished;
        }
        Ok(())
    }

    /// Per choice (in index order) a text block, then its tool calls (in index order).
    /// Errors: [`GatewayError::Incomplete`] before any `finish_reason`/`[DONE]`;
    /// [`GatewayError::Decode`] when a call has no function name.
    fn draft(self) -> Result<Draft, GatewayError> {
        if !(self.finished || self.done) {
            let why = if self.choices.is_empty() { "no choice received" } else { "no finish_reason" };
            return Err(GatewayError::Incomplete(why.to_string()));
        }
        let stop_reason = self.choices.values().find_map(|c| c.finish_reason.as_deref()).map(StopReason::from_openai);
        let mut parts = Vec::new();
        for (ci, choice) in self.choices {
            parts.push(Part::Block(ContentBlock::Text { text: choice.text }));
            for (ti, call) in choice.tool_calls {
                if call.name.is_empty() {
                    return Err(GatewayError::Decode(format!("tool call {ti} of choice {ci} has no function name")));
                }
                // A call whose id never came still needs one to pair with its result.
                let id = if call.id.is_empty() { format!("call_{ci}_{ti}") } else { call.id };
                parts.push(Part::Call { id, name: call.name, input: call.arguments });
            }
        }
        Ok(Draft { parts, stop_reason, usage: self.usage })
    }
}

impl StreamAccumulator for Accumulator {
    fn on_event(&mut self, ev: &SseEvent, emit: &mut dyn FnMut(GatewayEvent)) -> Result<(), GatewayError> {
        self.handle(ev, emit)
    }

    /// True once any text, reasoning or tool-call fragment arrived (no retry after that).
    fn content_started(&self) -> bool {
        self.content_started
    }

    /// True after `[DONE]`, or once the usage chunk came with or after the `finish_reason`.
    fn is_done(&self) -> bool {
        self.done || (self.finished && self.final_usage)
    }

    /// True after a `finish_reason` or `[DONE]`: EOF now is a normal end.
    fn is_complete(&self) -> bool {
        self.finished || self.done
    }

    fn into_draft(self: Box<Self>) -> Result<Draft, GatewayError> {
        self.draft()
    }
}

/// Merges one `delta.tool_calls[]` fragment, keyed by its `index` (its position in the array when
/// a gateway leaves `index` out). `id` and `name` are kept from the first fragment that has them
/// (they may come late, or only once); `arguments` fragments are concatenated.
fn merge_tool_fragment(choice: &mut Choice, position: usize, frag: &Value) {
    let index = frag.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
    let call = choice.tool_calls.entry(index).or_default();
    if let Some(id) = frag.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        if call.id.is_empty() {
            call.id = id.to_string();
        }
    }
    let function = frag.get("function").unwrap_or(&Value::Null);
    if let Some(name) = function.get("name").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        if call.name.is_empty() {
            call.name = name.to_string();
        }
    }
    if let Some(args) = function.get("arguments").and_then(Value::as_str) {
        call.arguments.push_str(args);
    }
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
