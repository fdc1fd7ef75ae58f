//! The referee: checks a request body against the rules a real Anthropic Messages or OpenAI
//! chat-completions API enforces with HTTP 400, so no test can pass while the runtime sends a
//! request a real API would refuse. The scripted gateway ([`crate::gateway`]) applies it to every
//! request it receives (main and `x-cicy-aux` alike).
//!
//! Owns: the rules and the 400 bodies that report a broken one. Must not touch: the product's
//! code (it reads only the bytes on the wire) or how the gateway answers valid requests.
//!
//! Rule sources: the Anthropic Messages API reference and the `invalid_request_error` messages it
//! returns (quoted on each rule below, e.g. "`tool_use` ids were found without `tool_result`
//! blocks immediately after"); the OpenAI Chat Completions API reference and its 400 messages
//! ("An assistant message with 'tool_calls' must be followed by tool messages responding to each
//! 'tool_call_id'", "messages with role 'tool' must be a response to a preceding message with
//! 'tool_calls'"). Where the API is lenient today but the runtime must not rely on it (Anthropic
//! merges consecutive same-role turns), the referee is strict.
//!
//! Both: a JSON object with a non-empty `model`; tool definitions named `^[a-zA-Z0-9_-]{1,64}$`,
//! unique, with an object schema. Anthropic: `max_tokens` ≥ 1; `messages` non-empty, first from
//! the user, roles alternating, last from the user (no prefill); no empty content, no blank text
//! block (system too), no `cache_control` on one, at most 4 breakpoints; `tool_use` only from the
//! assistant, with a non-empty name, an id matching `^[a-zA-Z0-9_-]+$` and unique in the request,
//! an object `input`, and its `tool_result` in the next message, where `tool_result`s come first
//! and answer only the previous message's calls, once each (an error one not empty); signed
//! `thinking`; no tool blocks without `tools`. OpenAI: `messages` non-empty; every `tool_calls` id
//! answered by a `tool` message before the next other message, no `tool` message without its
//! call; called names matching `^[a-zA-Z0-9_-]+$`; `arguments` a string holding a JSON object;
//! no null or empty-array content except an assistant's with `tool_calls`.

use std::collections::HashSet;

use serde_json::{json, Value};

/// The wire style of a request, known from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST …/v1/messages`
    Anthropic,
    /// `POST …/v1/chat/completions`
    OpenAi,
}

impl Api {
    /// The style served at `path`, by its ending (so `/v1/v1/messages` from a base URL that
    /// wrongly ends in `/v1` is checked too); `None` for any other path.
    pub fn for_path(path: &str) -> Option<Api> {
        if path.ends_with("/messages") {
            Some(Api::Anthropic)
        } else if path.ends_with("/chat/completions") {
            Some(Api::OpenAi)
        } else {
            None
        }
    }

    /// The body of the HTTP 400 this API answers a broken rule with: Anthropic
    /// `{"type":"error","error":{"type":"invalid_request_error","message":…}}`, OpenAI
    /// `{"error":{"message":…,"type":"invalid_request_error","param":null,"code":null}}`.
    pub fn refusal_body(self, message: &str) -> String {
        match self {
            Api::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
            Api::OpenAi => json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
        }
        .to_string()
    }
}

/// Checks `body` as a request to `api`; `Err` names the first broken rule and where
/// (`messages.3.content.1: …`, the API's own path notation).
pub fn check(api: Api, body: &[u8]) -> Result<(), String> {
    let b: Value = serde_json::from_slice(body).map_err(|e| format!("the request body is not valid JSON: {e}"))?;
    if !b.is_object() {
        return Err("the request body is not a JSON object".into());
    }
    // `model`: "Field required".
    if !filled(&b["model"]) {
        return Err("model: a non-empty string is required".into());
    }
    match api {
        Api::Anthropic => anthropic(&b),
        Api::OpenAi => openai(&b),
    }
}

/// A non-empty string.
fn filled(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty())
}

/// An integer ≥ 1.
fn positive(v: &Value) -> bool {
    v.as_u64().is_some_and(|n| n >= 1)
}

fn fail<T>(at: impl std::fmt::Display, what: impl std::fmt::Display) -> Result<T, String> {
    Err(format!("{at}: {what}"))
}

/// Anthropic `tool_use.id`: "String should match pattern '^[a-zA-Z0-9_-]+$'".
fn valid_tool_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Tool definitions, both APIs: each name matches `^[a-zA-Z0-9_-]{1,64}$` ("String should
/// match pattern"), names are unique ("Tool names must be unique"), and the schema is a JSON
/// Schema object of `"type": "object"` (Anthropic "input_schema.type: Field required").
/// `name` and `schema` pick the fields out of one entry of `tools`; `labels` are their paths.
fn tool_definitions(tools: &Value, name: fn(&Value) -> &Value, schema: fn(&Value) -> &Value, labels: [&str; 2]) -> Result<(), String> {
    let mut names = HashSet::new();
    for (i, tool) in tools.as_array().into_iter().flatten().enumerate() {
        let n = name(tool).as_str().unwrap_or("");
        if n.len() > 64 || !valid_tool_id(n) {
            return fail(format!("tools.{i}.{}", labels[0]), format!("String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$', got {n:?}"));
        }
        if !names.insert(n) {
            return fail("tools", format!("Tool names must be unique, found {n:?} twice"));
        }
        if schema(tool)["type"] != "object" {
            return fail(
                format!("tools.{i}.{}", labels[1]),
                format!("must be a JSON Schema with \"type\": \"object\", got {}", schema(tool)),
            );
        }
    }
    Ok(())
}

/// A `text` block's text is refused when empty ("text content blocks must be non-empty") or
/// only whitespace ("text content blocks must contain non-whitespace text").
fn blank(text: &Value) -> bool {
    text.as_str().is_none_or(|t| t.trim().is_empty())
}

/// Anthropic Messages rules; the first one broken is reported.
fn anthropic(b: &Value) -> Result<(), String> {
    // `max_tokens`: required, an integer ≥ 1.
    if !positive(&b["max_tokens"]) {
        return fail("max_tokens", format!("must be an integer >= 1, got {}", b["max_tokens"]));
    }
    let has_tools = b["tools"].as_array().is_some_and(|t| !t.is_empty());
    tool_definitions(&b["tools"], |t| &t["name"], |t| &t["input_schema"], ["name", "input_schema"])?;
    // "A maximum of 4 blocks with cache_control may be provided": tools, system and messages.
    let cached = |v: &Value| usize::from(v.get("cache_control").is_some());
    let mut breakpoints: usize = b["tools"].as_array().into_iter().flatten().map(cached).sum();
    match &b["system"] {
        Value::Null | Value::String(_) => {}
        Value::Array(blocks) => {
            for (i, blk) in blocks.iter().enumerate() {
                breakpoints += cached(blk);
                if blk["type"] != "text" || blank(&blk["text"]) {
                    return fail(format!("system.{i}"), "text content blocks must be non-empty");
                }
            }
        }
        other => return fail("system", format!("must be a string or an array of text blocks, got {other}")),
    }
    let Some(msgs) = b["messages"].as_array().filter(|m| !m.is_empty()) else {
        return fail("messages", "at least one message is required");
    };
    let mut ids = HashSet::new();
    for (i, m) in msgs.iter().enumerate() {
        let at = format!("messages.{i}");
        let role = m["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            return fail(&at, format!("role must be \"user\" or \"assistant\", got {}", m["role"]));
        }
        if i == 0 && role != "user" {
            return fail(&at, "the first message must use the \"user\" role");
        }
        // The API merges consecutive same-role turns today; the runtime must not rely on it.
        if i > 0 && msgs[i - 1]["role"] == role {
            return fail(
                &at,
                format!("roles must alternate between \"user\" and \"assistant\", but found two \"{role}\" messages in a row"),
            );
        }
        let blocks = match &m["content"] {
            Value::String(s) if !s.trim().is_empty() => continue,
            Value::Array(a) if !a.is_empty() => a,
            _ => return fail(&at, "all messages must have non-empty content"),
        };
        let mut results_done = false;
        for (j, blk) in blocks.iter().enumerate() {
            let at = format!("{at}.content.{j}");
            breakpoints += cached(blk);
            let kind = blk["type"].as_str().unwrap_or("");
            match kind {
                "text" if blank(&blk["text"]) => {
                    return match blk.get("cache_control") {
                        Some(_) => fail(&at, "cache_control cannot be set for empty text blocks"),
                        None => fail(&at, "text content blocks must be non-empty"),
                    };
                }
                "tool_use" | "tool_result" if !has_tools => {
                    return fail(
                        &at,
                        format!("requests which include `tool_use` or `tool_result` blocks must define tools (found `{kind}`)"),
                    );
                }
                "tool_use" => {
                    let id = blk["id"].as_str().unwrap_or("");
                    if role != "assistant" {
                        return fail(&at, "`tool_use` blocks are only allowed in assistant messages");
                    }
                    if !valid_tool_id(id) {
                        return fail(&at, format!("tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$', got {:?}", id));
                    }
                    if !filled(&blk["name"]) {
                        return fail(&at, "tool_use.name: a non-empty string is required");
                    }
                    if !ids.insert(id.to_string()) {
                        return fail(&at, format!("`tool_use` ids must be unique, found {id} twice"));
                    }
                    if !blk["input"].is_object() {
                        return fail(&at, format!("tool_use.input: Input should be a valid dictionary, got {}", blk["input"]));
                    }
                }
                "tool_result" => {
                    if role != "user" {
                        return fail(&at, "`tool_result` blocks are only allowed in user messages");
                    }
                    if results_done {
                        return fail(&at, "`tool_result` blocks must come first in a user message, before any other block");
                    }
                    if blk["is_error"] == true && blk["content"].as_str().is_some_and(|c| c.is_empty()) {
                        return fail(&at, "tool_result: content cannot be empty if `is_error` is true");
                    }
                }
                "thinking" => {
                    if role != "assistant" {
                        return fail(&at, "`thinking` blocks are only allowed in assistant messages");
                    }
                    if !filled(&blk["signature"]) {
                        return fail(&at, "thinking.signature: Field required (a non-empty string)");
                    }
                }
                "text" | "redacted_thinking" | "image" | "document" => {}
                other => return fail(&at, format!("unknown content block type {other:?}")),
            }
            results_done |= kind != "tool_result";
        }
        pairing(msgs, i)?;
    }
    // Prefill: current models refuse it ("This model does not support assistant message
    // prefill. The conversation must end with a user message."), older ones refuse trailing
    // whitespace in it; cicy never means to prefill, so a final assistant message is a bug.
    if msgs.last().is_some_and(|m| m["role"] == "assistant") {
        return fail(format!("messages.{}", msgs.len() - 1), "the conversation must end with a user message (no assistant prefill)");
    }
    if breakpoints > 4 {
        return fail("request", format!("A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."));
    }
    Ok(())
}

/// The blocks of message `m` of type `kind`, with their ids (`id` / `tool_use_id`).
fn ids_of<'a>(m: &'a Value, kind: &str) -> Vec<&'a str> {
    let key = if kind == "tool_use" { "id" } else { "tool_use_id" };
    m["content"].as_array().into_iter().flatten().filter(|b| b["type"] == kind).map(|b| b[key].as_str().unwrap_or("")).collect()
}

/// Anthropic tool pairing around message `i`: each `tool_use` of an assistant message has its
/// `tool_result` in the very next (user) message, and each `tool_result` answers a `tool_use`
/// of the previous message.
fn pairing(msgs: &[Value], i: usize) -> Result<(), String> {
    let m = &msgs[i];
    let uses = ids_of(m, "tool_use");
    if m["role"] == "assistant" && !uses.is_empty() {
        let Some(next) = msgs.get(i + 1) else {
            // A request ending in a tool call asks the model to continue a call it already made.
            return fail(
                format!("messages.{i}"),
                format!("the final assistant message ends with `tool_use` ({}) that has no `tool_result`", uses.join(", ")),
            );
        };
        let results = ids_of(next, "tool_result");
        let missing: Vec<&str> = uses.iter().copied().filter(|id| !results.contains(id)).collect();
        if !missing.is_empty() {
            return fail(
                format!("messages.{i}"),
                format!("`tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", missing.join(", ")),
            );
        }
    }
    if m["role"] == "user" {
        let prev = if i == 0 { Vec::new() } else { ids_of(&msgs[i - 1], "tool_use") };
        let mut seen = HashSet::new();
        for (j, id) in ids_of(m, "tool_result").into_iter().enumerate() {
            if !prev.contains(&id) {
                return fail(
                    format!("messages.{i}.content.{j}"),
                    format!("unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."),
                );
            }
            if !seen.insert(id) {
                return fail(format!("messages.{i}.content.{j}"), format!("two `tool_result` blocks answer {id}"));
            }
        }
    }
    Ok(())
}

/// OpenAI chat-completions rules.
fn openai(b: &Value) -> Result<(), String> {
    if !b["max_tokens"].is_null() && !positive(&b["max_tokens"]) {
        return fail("max_tokens", format!("must be an integer >= 1, got {}", b["max_tokens"]));
    }
    let Some(msgs) = b["messages"].as_array().filter(|m| !m.is_empty()) else {
        return fail("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1");
    };
    tool_definitions(&b["tools"], |t| &t["function"]["name"], |t| &t["function"]["parameters"], ["function.name", "function.parameters"])?;
    // Calls of the last assistant message still waiting for their tool message.
    let mut pending: Vec<String> = Vec::new();
    // Calls answered since that assistant message (a tool message may follow only those).
    let mut open: Vec<String> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = m["role"].as_str().unwrap_or("");
        if role != "tool" && !pending.is_empty() {
            return fail(
                &at,
                format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", pending.join(", ")),
            );
        }
        let calls = m["tool_calls"].as_array().filter(|c| !c.is_empty());
        match &m["content"] {
            Value::String(_) => {}
            Value::Array(parts) if !parts.is_empty() => {
                if let Some(j) = parts.iter().position(|p| p["type"] == "text" && !p["text"].is_string()) {
                    return fail(format!("{at}.content[{j}]"), "a text part needs a string `text`");
                }
            }
            Value::Array(_) => return fail(format!("{at}.content"), "empty array. Expected an array with minimum length 1"),
            Value::Null if role == "assistant" && calls.is_some() => {}
            other => return fail(format!("{at}.content"), format!("expected a string or an array of parts, got {other}")),
        }
        match role {
            "system" | "developer" | "user" => open.clear(),
            "assistant" => {
                open.clear();
                for (j, c) in calls.into_iter().flatten().enumerate() {
                    let at = format!("{at}.tool_calls[{j}]");
                    let id = c["id"].as_str().unwrap_or("");
                    if id.is_empty() {
                        return fail(&at, "id: a non-empty string is required");
                    }
                    if c["type"] != "function" {
                        return fail(&at, "type: must be \"function\"");
                    }
                    // "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'".
                    if !valid_tool_id(c["function"]["name"].as_str().unwrap_or("")) {
                        return fail(
                            format!("{at}.function.name"),
                            format!("Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$', got {}", c["function"]["name"]),
                        );
                    }
                    let args = &c["function"]["arguments"];
                    let parsed = args.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok());
                    if !parsed.is_some_and(|v| v.is_object()) {
                        return fail(format!("{at}.function.arguments"), format!("must be a string holding a JSON object, got {args}"));
                    }
                    pending.push(id.to_string());
                    open.push(id.to_string());
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                if !open.iter().any(|o| o == id) {
                    return fail(
                        &at,
                        format!(
                            "messages with role 'tool' must be a response to a preceding message with 'tool_calls' (tool_call_id {id:?})"
                        ),
                    );
                }
                pending.retain(|p| p != id);
            }
            other => return fail(format!("{at}.role"), format!("unknown role {other:?}")),
        }
    }
    if !pending.is_empty() {
        return fail(
            "messages",
            format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", pending.join(", ")),
        );
    }
    Ok(())
}
