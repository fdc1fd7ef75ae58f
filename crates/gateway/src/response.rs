//! A finished response and how a stream becomes one.
//!
//! Owns: [`Response`] and [`StopReason`]; the [`StreamAccumulator`] trait both wire styles
//! implement; and the one normalisation step every streamed response goes through
//! ([`Draft::into_response`]): tool input is checked (a call cut off at the output limit, input
//! that is not JSON or not a JSON object is stored with input `{}`, never run, and listed in
//! [`Response::rejected`] with the reason), every `tool_use` gets an id unique within the
//! response, and blocks that carry nothing are dropped; [`Response::rename_ids_used_in`] extends
//! the unique ids to a whole conversation. Must not touch: HTTP, SSE framing, the
//! wire format of either style (`anthropic.rs` / `openai.rs`), or what the turn loop does with a
//! rejected call.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::sse::SseEvent;
use super::{GatewayError, GatewayEvent};
use cicy_protocol::message::{ContentBlock, Message, Usage};

/// Why the model stopped (Anthropic Messages `stop_reason`; OpenAI's `finish_reason` is mapped
/// by [`StopReason::from_openai`]). Serialized as the Anthropic string (`end_turn`, …), which is
/// also what `reply.json`'s `last_stop_reason` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    /// The output limit (`max_tokens` of the request) was reached.
    MaxTokens,
    StopSequence,
    /// Any other value, kept as sent (e.g. `refusal`, `content_filter`).
    Other(String),
}

impl StopReason {
    /// Anthropic `stop_reason` string → value.
    pub fn parse(s: &str) -> Self {
        match s {
            "end_turn" => StopReason::EndTurn,
            "tool_use" => StopReason::ToolUse,
            "max_tokens" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            other => StopReason::Other(other.to_string()),
        }
    }

    /// OpenAI `finish_reason` → value: `stop` → `EndTurn`, `tool_calls` (and the older
    /// `function_call`) → `ToolUse`, `length` → `MaxTokens`, anything else kept as `Other`.
    pub fn from_openai(s: &str) -> Self {
        match s {
            "stop" => StopReason::EndTurn,
            "tool_calls" | "function_call" => StopReason::ToolUse,
            "length" => StopReason::MaxTokens,
            other => StopReason::Other(other.to_string()),
        }
    }

    /// The Anthropic string (`end_turn`, `tool_use`, `max_tokens`, `stop_sequence`, or the
    /// `Other` value).
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::Other(s) => s,
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for StopReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for StopReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(StopReason::parse(&s))
    }
}

/// What is wrong with a tool call that must not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallProblem {
    /// The response stopped at the output limit while the call's input was still streaming.
    CutOff,
    /// The input parsed, but as an array, string, number, boolean or null.
    NotAnObject { kind: &'static str, raw: String },
    /// The input is not JSON at all (and the response did not stop at the output limit).
    NotJson { error: String, raw: String },
}

/// A `tool_use` of the response that must not run: it is stored with input `{}` and answered
/// with the error [`RejectedCall::result_text`] instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedCall {
    /// The call's id in [`Response::content`] (after the unique-id step).
    pub id: String,
    pub name: String,
    pub problem: CallProblem,
}

impl RejectedCall {
    /// The `tool_result` text (sent with `is_error`); `max_tokens` is the request's output
    /// limit, named so the model knows how small the pieces must be.
    pub fn result_text(&self, max_tokens: u32) -> String {
        match &self.problem {
            CallProblem::CutOff => format!(
                "error: not run: this call was cut off at the output limit (max_tokens {max_tokens}) before its \
                 input was complete. Retry with smaller pieces (e.g. write a long file in several calls)."
            ),
            CallProblem::NotAnObject { kind, raw } => {
                format!("error: not run: the tool input must be a JSON object, but it was {kind}: {raw}")
            }
            CallProblem::NotJson { error, raw } => {
                format!("error: not run: the tool input is not valid JSON ({error}): {raw}")
            }
        }
    }
}

/// A complete response, translated into canonical blocks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Response {
    /// Text, thinking and `tool_use` blocks in the order they were streamed; every `tool_use`
    /// id is unique within the response; no block is empty.
    pub content: Vec<ContentBlock>,
    pub stop_reason: Option<StopReason>,
    pub usage: Usage,
    /// sha256 (hex) of the Anthropic-shaped request body up to the end of its last cache
    /// breakpoint, whatever the wire style, so digests compare across rounds and styles.
    pub prefix_sha256: String,
    /// The `tool_use` blocks of `content` that must not run, in content order.
    pub rejected: Vec<RejectedCall>,
}

impl Response {
    /// The text blocks of the response joined with newlines (tool and thinking blocks skipped).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The rejection of the call with this id, if it must not run.
    pub fn rejection(&self, id: &str) -> Option<&RejectedCall> {
        self.rejected.iter().find(|r| r.id == id)
    }

    /// Renames every `tool_use` whose id an earlier message of `history` already uses, the same
    /// way as within a response (`<id>_2`, `<id>_3`, … the first id free in both), so an id is
    /// unique in the whole conversation (a gateway that numbers calls per response, or sends
    /// none, would otherwise repeat `call_0`, and a tool_result would pair with two calls).
    pub fn rename_ids_used_in(&mut self, history: &[Message]) {
        let used: BTreeSet<&str> = history.iter().flat_map(|m| m.tool_uses().map(|(id, _, _)| id)).collect();
        if used.is_empty() {
            return;
        }
        let mine: BTreeSet<String> = self.content.iter().filter_map(call_id).map(str::to_string).collect();
        let mut renamed: Vec<String> = Vec::new();
        for block in &mut self.content {
            let ContentBlock::ToolUse { id, .. } = block else { continue };
            if !used.contains(id.as_str()) {
                continue;
            }
            let new = unique_id(id.clone(), |c| used.contains(c) || mine.contains(c) || renamed.iter().any(|r| r == c));
            for r in self.rejected.iter_mut().filter(|r| r.id == *id) {
                r.id.clone_from(&new);
            }
            renamed.push(new.clone());
            *id = new;
        }
    }
}

fn call_id(block: &ContentBlock) -> Option<&str> {
    match block {
        ContentBlock::ToolUse { id, .. } => Some(id),
        _ => None,
    }
}

/// One piece of a streamed response, before normalisation.
#[derive(Debug)]
pub enum Part {
    /// A text or thinking block (an empty one is dropped later).
    Block(ContentBlock),
    /// A tool call and its raw input text; empty when no input streamed (it means `{}`, unless
    /// the response stopped at the output limit right after the call began).
    Call { id: String, name: String, input: String },
}

/// What a stream accumulated: its parts in streaming order, the stop reason and the usage.
#[derive(Debug)]
pub struct Draft {
    pub parts: Vec<Part>,
    pub stop_reason: Option<StopReason>,
    pub usage: Usage,
}

impl Draft {
    /// The normalised response (see the module doc); `prefix_sha256` is left empty.
    pub fn into_response(self) -> Response {
        let cut_off = self.stop_reason == Some(StopReason::MaxTokens);
        let last = self.parts.len().saturating_sub(1);
        let mut content = Vec::with_capacity(self.parts.len());
        let mut rejected = Vec::new();
        let mut ids: Vec<String> = Vec::new();
        for (i, part) in self.parts.into_iter().enumerate() {
            let (id, name, raw) = match part {
                Part::Block(block) if block.is_empty() => continue,
                Part::Block(block) => {
                    content.push(block);
                    continue;
                }
                Part::Call { id, name, input } => (id, name, input),
            };
            let id = if id.is_empty() { format!("call_{}", ids.len()) } else { id };
            let id = unique_id(id, |c| ids.iter().any(|t| t == c));
            ids.push(id.clone());
            let (input, problem) = check_input(raw, cut_off, cut_off && i == last);
            if let Some(problem) = problem {
                rejected.push(RejectedCall { id: id.clone(), name: name.clone(), problem });
            }
            content.push(ContentBlock::ToolUse { id, name, input });
        }
        Response { content, stop_reason: self.stop_reason, usage: self.usage, prefix_sha256: String::new(), rejected }
    }
}

/// `id` if it is not `taken`; otherwise `<id>_2`, `<id>_3`, … (the first free one).
fn unique_id(id: String, taken: impl Fn(&str) -> bool) -> String {
    if !taken(&id) {
        return id;
    }
    let mut n = 2;
    loop {
        let candidate = format!("{id}_{n}");
        if !taken(&candidate) {
            return candidate;
        }
        n += 1;
    }
}

/// Parses a call's raw input: a JSON object is the input; anything else gives `{}` and the
/// problem. A parse failure in a response that stopped at the output limit (`cut_off`) is a
/// cut-off call, and so is an empty input when the call was the last thing streamed
/// (`cut_last`): the limit came before its first fragment.
fn check_input(raw: String, cut_off: bool, cut_last: bool) -> (Value, Option<CallProblem>) {
    let empty = Value::Object(Map::new());
    if raw.trim().is_empty() {
        return (empty, cut_last.then_some(CallProblem::CutOff));
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(v @ Value::Object(_)) => (v, None),
        Ok(other) => (empty, Some(CallProblem::NotAnObject { kind: json_kind(&other), raw })),
        Err(_) if cut_off => (empty, Some(CallProblem::CutOff)),
        Err(e) => (empty, Some(CallProblem::NotJson { error: e.to_string(), raw })),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Object(_) => "an object",
    }
}

/// Turns one wire style's streaming events into a [`Response`]; the client drives it.
///
/// Feed every decoded SSE event to `on_event`; stop reading once `is_done`; a stream that ends
/// (or goes quiet) after `is_complete` is a normal end; then `finish`.
pub trait StreamAccumulator: Send {
    /// Handles one event; text and thinking deltas go to `emit` as they arrive. Errors: an
    /// in-stream error → [`GatewayError::StreamError`]; an event that cannot be decoded →
    /// [`GatewayError::Decode`].
    fn on_event(&mut self, ev: &SseEvent, emit: &mut dyn FnMut(GatewayEvent)) -> Result<(), GatewayError>;

    /// True once content began (from then on a failure is not retried by the request layer).
    fn content_started(&self) -> bool;

    /// True when nothing more is needed from the stream.
    fn is_done(&self) -> bool;

    /// True when the response is complete even if the stream ends now.
    fn is_complete(&self) -> bool;

    /// The accumulated parts. Errors: [`GatewayError::Incomplete`] when the response is not
    /// complete (then no block at all is returned, so no tool runs on unfinished input).
    fn into_draft(self: Box<Self>) -> Result<Draft, GatewayError>;

    /// The normalised response ([`Draft::into_response`]).
    fn finish(self: Box<Self>) -> Result<Response, GatewayError> {
        self.into_draft().map(Draft::into_response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str, input: &str) -> Part {
        Part::Call { id: id.into(), name: "shell".into(), input: input.into() }
    }

    fn draft(parts: Vec<Part>, stop: StopReason) -> Response {
        Draft { parts, stop_reason: Some(stop), usage: Usage::default() }.into_response()
    }

    #[test]
    fn duplicate_and_empty_ids_become_unique_and_the_first_keeps_its_id() {
        let r = draft(vec![call("t1", "{}"), call("t1", "{}"), call("t1_2", "{}"), call("", "{}")], StopReason::ToolUse);
        let ids: Vec<&str> = r
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, vec!["t1", "t1_2", "t1_2_2", "call_3"]);
        assert!(r.rejected.is_empty());
    }

    #[test]
    fn ids_an_earlier_message_uses_are_renamed_with_their_rejection() {
        let history = vec![Message::assistant(vec![ContentBlock::ToolUse { id: "call_0".into(), name: "shell".into(), input: json!({}) }])];
        let mut r = draft(vec![call("call_0", "[]"), call("call_0_2", "{}"), call("x", "{}")], StopReason::ToolUse);
        r.rename_ids_used_in(&history);
        let ids: Vec<&str> = r.content.iter().filter_map(call_id).collect();
        assert_eq!(ids, vec!["call_0_3", "call_0_2", "x"]);
        assert_eq!(r.rejected.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(), vec!["call_0_3"]);
    }

    #[test]
    fn input_that_is_not_an_object_is_rejected_with_its_raw_text() {
        let r = draft(vec![call("a", "[1, 2]"), call("b", "\"ls\""), call("c", "{\"x\":"), call("d", " ")], StopReason::ToolUse);
        let inputs: Vec<&Value> = r
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { input, .. } => Some(input),
                _ => None,
            })
            .collect();
        assert_eq!(inputs, vec![&json!({}); 4]);
        let texts: Vec<String> = r.rejected.iter().map(|x| format!("{}: {}", x.id, x.result_text(100))).collect();
        assert_eq!(
            texts,
            vec![
                "a: error: not run: the tool input must be a JSON object, but it was an array: [1, 2]",
                "b: error: not run: the tool input must be a JSON object, but it was a string: \"ls\"",
                "c: error: not run: the tool input is not valid JSON (EOF while parsing a value at line 1 column 5): {\"x\":",
            ]
        );
    }

    #[test]
    fn unparsable_input_at_max_tokens_is_a_cut_off_call() {
        let r = draft(vec![call("a", "{\"ok\":1}"), call("b", "{\"content\":\"lo")], StopReason::MaxTokens);
        assert_eq!(r.rejected, vec![RejectedCall { id: "b".into(), name: "shell".into(), problem: CallProblem::CutOff }]);
        assert_eq!(
            r.rejected[0].result_text(2048),
            "error: not run: this call was cut off at the output limit (max_tokens 2048) before its input was complete. \
             Retry with smaller pieces (e.g. write a long file in several calls)."
        );
        assert_eq!(r.content[0], ContentBlock::ToolUse { id: "a".into(), name: "shell".into(), input: json!({"ok": 1}) });
        // Cut before its first fragment: an empty input is not a call without arguments.
        let r = draft(vec![call("a", ""), call("b", "")], StopReason::MaxTokens);
        assert_eq!(r.rejected, vec![RejectedCall { id: "b".into(), name: "shell".into(), problem: CallProblem::CutOff }]);
    }

    #[test]
    fn stop_reason_strings_round_trip() {
        for s in ["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal"] {
            let r = StopReason::parse(s);
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<StopReason>(&format!("\"{s}\"")).unwrap(), r);
        }
        assert_eq!(StopReason::from_openai("length"), StopReason::MaxTokens);
        assert_eq!(StopReason::from_openai("content_filter"), StopReason::Other("content_filter".into()));
    }
}
