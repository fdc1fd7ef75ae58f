//! The AI gateway client (docs/design.md §4).
//!
//! Owns the two wire styles (Anthropic Messages, OpenAI chat completions), SSE decoding, the
//! translation of streamed responses back into canonical content blocks, usage, and the one
//! retry layer. It knows nothing of agents, history files or the terminal: it takes an assembled
//! [`Prompt`] and reports progress through a callback of [`GatewayEvent`]s.

pub mod anthropic;
pub mod client;
pub mod openai;
pub mod overflow;
pub mod props;
pub mod response;
pub mod retry;
pub mod round;
pub mod sse;

use serde::Serialize;
use serde_json::Value;

use cicy_protocol::message::{ContentBlock, Role, Usage};

pub use cicy_protocol::prompt::{ApiStyle, AuxKind, Prompt, PromptBlock, PromptMessage, SystemBlock, ToolSpec};
pub use client::{CallOptions, GatewayClient, GatewaySettings};
pub use response::{CallProblem, RejectedCall, Response, StopReason, StreamAccumulator};
pub use round::RoundFailure;

/// An encoded request body and its cache-prefix digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRequest {
    /// The exact JSON bytes sent as the HTTP body (compact, fixed key order).
    pub body: Vec<u8>,
    /// Lowercase hex sha256 of the Anthropic-shaped body up to and including the end of its last
    /// `"cache_control":{"type":"ephemeral"}` object (the whole body when there is none), whatever
    /// the wire style (docs/design.md §5 "prefix_sha256").
    pub prefix_sha256: String,
}

/// Progress reported while a request runs.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayEvent {
    TextDelta(String),
    ThinkingDelta(String),
    /// The attempt failed and the round will be sent again after `delay_ms` (`attempt` is the
    /// 1-based retry number within the round). When deltas of the failed attempt were already
    /// reported, they are void: the round starts over from nothing (a re-run after content).
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
}

/// Why a gateway call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot reach the gateway at {url}: {message}")]
    Connect { url: String, message: String },
    #[error("gateway answered HTTP {status}: {body}")]
    Status { status: u16, body: String, retry_after_ms: Option<u64>, should_retry: Option<bool> },
    /// HTTP 401 or 403 — or a 500 whose body speaks of auth or a key — while no API key is
    /// configured: `env` names the variable(s) to set.
    #[error("gateway answered HTTP {status} and no API key is set: put the key in {env} ({body})")]
    NoKey { status: u16, env: String, body: String },
    /// HTTP 404: `url` is the endpoint tried; `base_has_v1` when the configured base URL already
    /// ends in `/v1` (cicy appends `/v1/...` itself).
    #[error("gateway answered HTTP 404 (not found) for {url}{}{}", not_empty(body), v1_hint(*base_has_v1))]
    NotFound { url: String, body: String, base_has_v1: bool },
    #[error("gateway stream error ({kind}): {message}")]
    StreamError { kind: String, message: String },
    #[error("the gateway stream ended before the response was complete ({0})")]
    Incomplete(String),
    #[error("cannot decode the gateway stream: {0}")]
    Decode(String),
    #[error("the request timed out after {0} s")]
    Timeout(u64),
    #[error("cancelled")]
    Cancelled,
}

/// Whether `s` is 1 to `max` characters of `[a-zA-Z0-9_-]`.
fn wire_safe(s: &str, max: usize) -> bool {
    (1..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `s` with every character outside `[a-zA-Z0-9_-]` replaced by `_`.
fn replace_unsafe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// A `tool_use` id (or the `tool_use_id` answering it) as either style sends it: unchanged when
/// it matches `^[a-zA-Z0-9_-]+$` (the Anthropic Messages pattern for `tool_use.id`, refused with
/// 400 otherwise); else each other character becomes `_` and `_` plus the first 8 hex digits of
/// the id's sha256 is appended, so ids differing only in those characters stay distinct. A
/// gateway in front of another model can hand out ids like `functions.shell:0`. Wire-only (the
/// history keeps the gateway's id) and deterministic (the cached prefix is stable).
pub(crate) fn wire_tool_id(id: &str) -> String {
    if wire_safe(id, usize::MAX) {
        return id.to_string();
    }
    format!("{}_{}", replace_unsafe(id), &anthropic::sha256_hex(id.as_bytes())[..8])
}

/// A called tool's name as either style sends it: unchanged when it matches
/// `^[a-zA-Z0-9_-]{1,64}$` (the pattern both APIs hold tool names to; OpenAI checks it on the
/// history's `tool_calls[].function.name` too, so a name a model made up, e.g.
/// `repo_browser.open_file`, would be refused on every later request); else each other character
/// becomes `_`, cut to 64 characters, and `tool` when nothing is left. Such a call never ran (no
/// tool has that name), so only its error result depends on it. Wire-only and deterministic.
pub(crate) fn wire_tool_name(name: &str) -> String {
    if wire_safe(name, 64) {
        return name.to_string();
    }
    let safe: String = replace_unsafe(name).chars().take(64).collect();
    if safe.is_empty() {
        "tool".to_string()
    } else {
        safe
    }
}

/// The messages of `prompt` as either style sends them: `thinking` blocks without a signature
/// are left out (the Anthropic API refuses a thinking block without its `signature`; they stay
/// in the history for display), then a message left with only thinking blocks or none at all
/// is left out (a reply that was only thinking carries nothing to send back, and an empty
/// message is refused), and neighbours of the same role that this leaves merge into one, in
/// order.
pub(crate) fn wire_messages(prompt: &Prompt) -> Vec<(Role, Vec<&PromptBlock>)> {
    let mut out: Vec<(Role, Vec<&PromptBlock>)> = Vec::with_capacity(prompt.messages.len());
    for message in &prompt.messages {
        let blocks: Vec<&PromptBlock> = message
            .blocks
            .iter()
            .filter(|b| !matches!(&b.block, ContentBlock::Thinking { signature, .. } if signature.is_empty()))
            .collect();
        if blocks.iter().all(|b| matches!(b.block, ContentBlock::Thinking { .. })) {
            continue;
        }
        match out.last_mut() {
            Some((role, prev)) if *role == message.role => prev.extend(blocks),
            _ => out.push((message.role, blocks)),
        }
    }
    out
}

fn not_empty(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

fn v1_hint(base_has_v1: bool) -> &'static str {
    if base_has_v1 {
        "; the gateway URL must not end in `/v1`: cicy appends `/v1/messages` or `/v1/chat/completions` itself, so drop `/v1` from it"
    } else {
        ""
    }
}

/// Serialises `value` as compact JSON onto `out`.
///
/// Writing into a `Vec<u8>` cannot fail, and neither can serialising the types used here (`str`,
/// numbers, `serde_json::Value`, whose map keys are always strings), so there is no error to
/// report and none is swallowed in practice.
pub(crate) fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let _ = serde_json::to_writer(out, value);
}

/// Merges usage numbers reported in several places of one response: a non-zero value replaces
/// the one seen before (gateways put the real numbers in `message_start`, in `message_delta`,
/// or in both — docs/design.md §4 "usage merges").
pub(crate) fn merge_usage(into: &mut Usage, from: &Usage) {
    for (dst, src) in [
        (&mut into.input_tokens, from.input_tokens),
        (&mut into.output_tokens, from.output_tokens),
        (&mut into.cache_creation_input_tokens, from.cache_creation_input_tokens),
        (&mut into.cache_read_input_tokens, from.cache_read_input_tokens),
    ] {
        if src != 0 {
            *dst = src;
        }
    }
}

/// Reads a JSON unsigned integer field, treating absent, `null` or non-numbers as 0.
pub(crate) fn json_u64(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Cuts `s` to at most `max` bytes on a character boundary (for error messages).
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
