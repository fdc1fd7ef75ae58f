//! The Anthropic Messages wire style: request encoding and the streaming response accumulator.
//!
//! Owns: the exact bytes of a `POST /v1/messages` body (and its cache-prefix digest, which every
//! style reports), and the translation of Anthropic Messages streaming events back into a
//! [`Response`](super::Response). Must not touch: HTTP, SSE framing (`sse.rs`), retries (`retry.rs`), or how the
//! [`Prompt`] was assembled (`crate::prompt`).
//!
//! Format source: Anthropic Messages API and its streaming events (`message_start`,
//! `content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`, `ping`, `error`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::response::{Draft, Part, StopReason, StreamAccumulator};
use super::sse::SseEvent;
use super::{
    json_u64, merge_usage, truncate, wire_messages, wire_tool_id, wire_tool_name, write_json, EncodedRequest, GatewayError, GatewayEvent,
    Prompt,
};
use cicy_protocol::message::{ContentBlock, Role, Usage};

/// The cache breakpoint object put as the last key of a cached element.
const CACHE_CONTROL: &str = "cache_control";

/// Encodes `prompt` as an Anthropic Messages streaming request body.
///
/// Messages go through `gateway::wire_messages`: no unsigned thinking block and no thinking-only
/// message is sent.
///
/// Key order is fixed: `{"model","max_tokens","stream":true,"tools"?,"system","messages"}`;
/// `tools` is omitted when empty; `system` is always an array of `{type:"text",text}` blocks.
/// Every element with `cache: true` (and the last tool when `tools_cache`) gets
/// `"cache_control":{"type":"ephemeral"}` as its last key. No map with unspecified order is
/// involved (serde_json's `preserve_order` keeps tool schemas and inputs as given), so the same
/// Prompt always gives the same bytes.
///
/// `prefix_sha256` covers the bytes up to and including the end of the last cache_control
/// object. Its position is recorded while writing, so a tool input that happens to contain a
/// `cache_control` key cannot be mistaken for a breakpoint.
pub fn encode(prompt: &Prompt, model: &str, max_tokens: u32) -> EncodedRequest {
    let mut w = Writer { out: Vec::with_capacity(4096), breakpoint_end: None };
    w.raw("{\"model\":");
    w.json(model);
    w.raw(",\"max_tokens\":");
    w.json(&max_tokens);
    w.raw(",\"stream\":true");
    if !prompt.tools.is_empty() {
        w.raw(",\"tools\":[");
        let last = prompt.tools.len() - 1;
        for (i, tool) in prompt.tools.iter().enumerate() {
            if i > 0 {
                w.raw(",");
            }
            let mut obj = Map::new();
            obj.insert("name".into(), Value::String(tool.name.clone()));
            obj.insert("description".into(), Value::String(tool.description.clone()));
            obj.insert("input_schema".into(), tool.input_schema.clone());
            w.element(obj, prompt.tools_cache && i == last);
        }
        w.raw("]");
    }
    w.raw(",\"system\":[");
    for (i, block) in prompt.system.iter().enumerate() {
        if i > 0 {
            w.raw(",");
        }
        let mut obj = Map::new();
        obj.insert("type".into(), Value::String("text".into()));
        obj.insert("text".into(), Value::String(block.text.clone()));
        w.element(obj, block.cache);
    }
    w.raw("],\"messages\":[");
    for (i, (role, blocks)) in wire_messages(prompt).into_iter().enumerate() {
        if i > 0 {
            w.raw(",");
        }
        w.raw("{\"role\":");
        w.json(role_str(role));
        w.raw(",\"content\":[");
        for (j, block) in blocks.into_iter().enumerate() {
            if j > 0 {
                w.raw(",");
            }
            w.element(block_json(&block.block), block.cache);
        }
        w.raw("]}");
    }
    w.raw("]}");
    let end = w.breakpoint_end.unwrap_or(w.out.len());
    let prefix_sha256 = sha256_hex(&w.out[..end]);
    EncodedRequest { body: w.out, prefix_sha256 }
}

/// The wire name of a role.
pub(crate) fn role_str(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// One canonical block in Anthropic form, keys in the documented order
/// (`tool_result` content is a plain string; `is_error` only when true; `signature` only when
/// non-empty; ids and tool names through `wire_tool_id` / `wire_tool_name`).
fn block_json(block: &ContentBlock) -> Map<String, Value> {
    let mut obj = Map::new();
    match block {
        ContentBlock::Text { text } => {
            obj.insert("type".into(), "text".into());
            obj.insert("text".into(), Value::String(text.clone()));
        }
        ContentBlock::ToolUse { id, name, input } => {
            obj.insert("type".into(), "tool_use".into());
            obj.insert("id".into(), Value::String(wire_tool_id(id)));
            obj.insert("name".into(), Value::String(wire_tool_name(name)));
            obj.insert("input".into(), input.clone());
        }
        ContentBlock::ToolResult { tool_use_id, content, is_error } => {
            obj.insert("type".into(), "tool_result".into());
            obj.insert("tool_use_id".into(), Value::String(wire_tool_id(tool_use_id)));
            obj.insert("content".into(), Value::String(content.clone()));
            if *is_error {
                obj.insert("is_error".into(), Value::Bool(true));
            }
        }
        ContentBlock::Thinking { thinking, signature } => {
            obj.insert("type".into(), "thinking".into());
            obj.insert("thinking".into(), Value::String(thinking.clone()));
            if !signature.is_empty() {
                obj.insert("signature".into(), Value::String(signature.clone()));
            }
        }
    }
    obj
}

/// Lowercase hex sha256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Body writer that remembers where the last cache breakpoint ended.
struct Writer {
    out: Vec<u8>,
    breakpoint_end: Option<usize>,
}

impl Writer {
    fn raw(&mut self, s: &str) {
        self.out.extend_from_slice(s.as_bytes());
    }

    fn json<T: serde::Serialize + ?Sized>(&mut self, v: &T) {
        write_json(&mut self.out, v);
    }

    /// Writes one object; with `cache`, `cache_control` is its last key and the breakpoint ends
    /// just before the object's closing brace.
    fn element(&mut self, mut obj: Map<String, Value>, cache: bool) {
        if cache {
            obj.insert(CACHE_CONTROL.into(), json!({"type": "ephemeral"}));
        }
        self.json(&Value::Object(obj));
        if cache {
            self.breakpoint_end = Some(self.out.len() - 1);
        }
    }
}

// ---- Streaming response ------------------------------------------------------------------------

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        /// `input` of `content_block_start`, used when every fragment is empty.
        start_input: Value,
        /// Concatenated `input_json_delta.partial_json` fragments.
        json: String,
        /// `content_block_stop` arrived.
        stopped: bool,
    },
    /// A block type the canonical form has no place for (e.g. `redacted_thinking`).
    Ignored,
}

/// Accumulates Anthropic Messages streaming events into a [`Response`](super::Response).
///
/// Driven through [`StreamAccumulator`]. The response is
/// complete only at `message_stop`; before that `finish` returns [`GatewayError::Incomplete`]
/// and no block at all (so no tool ever runs on unfinished JSON). Tool input is checked by the
/// shared normalisation (`response.rs`), not here: a stream cut at `max_tokens` inside a tool
/// call still gives its text.
#[derive(Debug, Default)]
pub struct Accumulator {
    /// In the order their `content_block_start` (or first delta) arrived, which is the order
    /// the user saw them. A second start with an index already used opens a new block: what was
    /// streamed into the first one stays.
    blocks: Vec<Block>,
    /// The event `index` → the position in `blocks` of the latest block opened with it.
    by_index: BTreeMap<u64, usize>,
    stop_reason: Option<StopReason>,
    usage: Usage,
    content_started: bool,
    stopped: bool,
    events: u64,
    last_kind: String,
}

impl Accumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles one event; text and thinking deltas are passed to `emit` as they arrive.
    ///
    /// The type is the JSON `type` (or the `event:` name when the JSON has none). Ignored:
    /// `ping`, empty data, `[DONE]`, unknown types, anything after `message_stop`.
    /// Errors: `error` → [`GatewayError::StreamError`] with the error's `type` as kind;
    /// unparsable JSON in a known event, a delta of the wrong kind, or tool input for a block
    /// that never started → [`GatewayError::Decode`].
    fn handle(&mut self, ev: &SseEvent, emit: &mut dyn FnMut(GatewayEvent)) -> Result<(), GatewayError> {
        let data = ev.data.trim();
        if self.stopped || data.is_empty() || data == "[DONE]" || ev.event == "ping" {
            return Ok(());
        }
        let json: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            // An error event whose body is not JSON is still an error; its text is the message.
            Err(_) if ev.event == "error" => {
                return Err(GatewayError::StreamError { kind: "error".into(), message: truncate(data, 500) });
            }
            Err(e) if is_known(&ev.event) => {
                return Err(GatewayError::Decode(format!("`{}` event is not JSON: {e}", ev.event)));
            }
            Err(_) => return Ok(()),
        };
        let kind = json.get("type").and_then(Value::as_str).unwrap_or(&ev.event).to_string();
        self.events += 1;
        self.last_kind.clone_from(&kind);
        if ev.event == "error" || kind == "error" {
            return Err(stream_error(&json));
        }
        let index = json.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind.as_str() {
            "message_start" => {
                if let Some(u) = json.get("message").and_then(|m| m.get("usage")) {
                    merge_usage(&mut self.usage, &usage_of(u));
                }
            }
            "content_block_start" => {
                self.content_started = true;
                let cb = json.get("content_block").unwrap_or(&Value::Null);
                let block = match cb.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = str_field(cb, "text");
                        if !text.is_empty() {
                            emit(GatewayEvent::TextDelta(text.clone()));
                        }
                        Block::Text(text)
                    }
                    Some("thinking") => {
                        let thinking = str_field(cb, "thinking");
                        if !thinking.is_empty() {
                            emit(GatewayEvent::ThinkingDelta(thinking.clone()));
                        }
                        Block::Thinking { thinking, signature: str_field(cb, "signature") }
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: str_field(cb, "id"),
                        name: str_field(cb, "name"),
                        start_input: cb.get("input").cloned().unwrap_or(Value::Null),
                        json: String::new(),
                        stopped: false,
                    },
                    other => {
                        tracing::debug!(block_type = ?other, "ignoring content block type");
                        Block::Ignored
                    }
                };
                self.open(index, block);
            }
            "content_block_delta" => {
                self.content_started = true;
                let delta = json.get("delta").unwrap_or(&Value::Null);
                self.apply_delta(index, delta, emit)?;
            }
            "content_block_stop" => {
                if let Some(Block::ToolUse { stopped, .. }) = self.by_index.get(&index).and_then(|&p| self.blocks.get_mut(p)) {
                    *stopped = true;
                }
            }
            "message_delta" => {
                if let Some(r) = json.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    self.stop_reason = Some(StopReason::parse(r));
                }
                if let Some(u) = json.get("usage") {
                    merge_usage(&mut self.usage, &usage_of(u));
                }
            }
            "message_stop" => self.stopped = true,
            other => tracing::debug!(event = other, "ignoring unknown stream event"),
        }
        Ok(())
    }

    /// Appends `block` and makes it the one `index` refers to from now on.
    fn open(&mut self, index: u64, block: Block) -> &mut Block {
        let at = self.blocks.len();
        self.blocks.push(block);
        self.by_index.insert(index, at);
        &mut self.blocks[at]
    }

    fn apply_delta(&mut self, index: u64, delta: &Value, emit: &mut dyn FnMut(GatewayEvent)) -> Result<(), GatewayError> {
        let dtype = delta.get("type").and_then(Value::as_str).unwrap_or("");
        let block = match (dtype, self.by_index.get(&index).copied()) {
            (_, Some(at)) => &mut self.blocks[at],
            // A text or thinking delta without its start is tolerated; tool input is not (no id).
            ("text_delta", None) => self.open(index, Block::Text(String::new())),
            ("thinking_delta" | "signature_delta", None) => {
                self.open(index, Block::Thinking { thinking: String::new(), signature: String::new() })
            }
            ("input_json_delta", None) => {
                return Err(GatewayError::Decode(format!("input_json_delta for block {index}, which never started")));
            }
            (_, None) => return Ok(()),
        };
        match (dtype, block) {
            ("text_delta", Block::Text(text)) => {
                let piece = str_field(delta, "text");
                text.push_str(&piece);
                if !piece.is_empty() {
                    emit(GatewayEvent::TextDelta(piece));
                }
            }
            ("thinking_delta", Block::Thinking { thinking, .. }) => {
                let piece = str_field(delta, "thinking");
                thinking.push_str(&piece);
                if !piece.is_empty() {
                    emit(GatewayEvent::ThinkingDelta(piece));
                }
            }
            ("signature_delta", Block::Thinking { signature, .. }) => {
                signature.push_str(&str_field(delta, "signature"));
            }
            ("input_json_delta", Block::ToolUse { json, .. }) => json.push_str(&str_field(delta, "partial_json")),
            (_, Block::Ignored) => {}
            ("text_delta" | "thinking_delta" | "signature_delta" | "input_json_delta", _) => {
                return Err(GatewayError::Decode(format!("{dtype} does not fit content block {index}")));
            }
            _ => tracing::debug!(delta_type = dtype, "ignoring unknown delta type"),
        }
        Ok(())
    }

    /// The streamed parts in order. Errors: [`GatewayError::Incomplete`] when `message_stop`
    /// never came (no blocks are returned then).
    fn draft(self) -> Result<Draft, GatewayError> {
        if !self.stopped {
            let inside_tool = self.blocks.iter().find_map(|b| match b {
                Block::ToolUse { name, stopped: false, .. } => Some(name.clone()),
                _ => None,
            });
            let why = match inside_tool {
                Some(name) => format!("no message_stop; cut off inside tool_use `{name}`"),
                None if self.events == 0 => "no event received".to_string(),
                None => format!("no message_stop after {} events, last `{}`", self.events, self.last_kind),
            };
            return Err(GatewayError::Incomplete(why));
        }
        let parts = self
            .blocks
            .into_iter()
            .filter_map(|block| match block {
                Block::Text(text) => Some(Part::Block(ContentBlock::Text { text })),
                Block::Thinking { thinking, signature } => Some(Part::Block(ContentBlock::Thinking { thinking, signature })),
                Block::ToolUse { id, name, start_input, json, .. } => {
                    // No fragments: the start's input is the input, unless it is the usual
                    // empty placeholder (then nothing streamed, which the normalisation judges).
                    let placeholder = start_input.is_null() || start_input.as_object().is_some_and(Map::is_empty);
                    let input = if json.trim().is_empty() && !placeholder { start_input.to_string() } else { json };
                    Some(Part::Call { id, name, input })
                }
                Block::Ignored => None,
            })
            .collect();
        Ok(Draft { parts, stop_reason: self.stop_reason, usage: self.usage })
    }
}

impl StreamAccumulator for Accumulator {
    fn on_event(&mut self, ev: &SseEvent, emit: &mut dyn FnMut(GatewayEvent)) -> Result<(), GatewayError> {
        self.handle(ev, emit)
    }

    /// True once any content block started or a delta arrived: from then on a failure is not
    /// retried (the caller may have shown part of the answer).
    fn content_started(&self) -> bool {
        self.content_started
    }

    /// True after `message_stop`: nothing more is needed from the stream.
    fn is_done(&self) -> bool {
        self.stopped
    }

    /// Same as `is_done` for this style (the response is complete exactly at `message_stop`).
    fn is_complete(&self) -> bool {
        self.stopped
    }

    fn into_draft(self: Box<Self>) -> Result<Draft, GatewayError> {
        self.draft()
    }
}

fn is_known(event: &str) -> bool {
    matches!(
        event,
        "message_start" | "content_block_start" | "content_block_delta" | "content_block_stop" | "message_delta" | "message_stop"
    )
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// Anthropic usage object → [`Usage`] (absent or null numbers count as 0).
fn usage_of(u: &Value) -> Usage {
    Usage {
        input_tokens: json_u64(u, "input_tokens"),
        output_tokens: json_u64(u, "output_tokens"),
        cache_creation_input_tokens: json_u64(u, "cache_creation_input_tokens"),
        cache_read_input_tokens: json_u64(u, "cache_read_input_tokens"),
    }
}

/// `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` →
/// `StreamError { kind: "overloaded_error", message: "Overloaded" }`.
pub(crate) fn stream_error(json: &Value) -> GatewayError {
    let err = json.get("error").unwrap_or(json);
    let kind = err
        .get("type")
        .and_then(Value::as_str)
        .filter(|k| *k != "error")
        .or_else(|| err.get("code").and_then(Value::as_str))
        .unwrap_or("error")
        .to_string();
    let message = match err.get("message") {
        Some(Value::String(m)) => m.clone(),
        _ => match err {
            Value::String(s) => s.clone(),
            other => truncate(&other.to_string(), 500),
        },
    };
    GatewayError::StreamError { kind, message }
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
pub(crate) mod tests;
