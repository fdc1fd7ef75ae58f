//! The referee of the scripted gateway (crates/test-support/src/referee.rs): for each rule, a body that
//! keeps it passes and one that breaks it is refused with a message naming the rule and where.

use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
use cicy_test_support::referee::{check, Api};
use serde_json::{json, Value};

/// A valid Anthropic body with every kind of block: a tool round, signed thinking, and four
/// cache breakpoints (tools, system, two in messages).
fn anthropic_body() -> Value {
    let cc = json!({"type": "ephemeral"});
    json!({
        "model": "claude-test", "max_tokens": 512, "stream": true,
        "tools": [{"name": "shell", "description": "d", "input_schema": {"type": "object"}, "cache_control": cc}],
        "system": [{"type": "text", "text": "sys", "cache_control": cc}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": cc}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_A-1", "name": "shell", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_A-2", "name": "shell", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_A-2", "content": "b"},
                {"type": "tool_result", "tool_use_id": "toolu_A-1", "content": "a", "is_error": true},
                {"type": "text", "text": "go on"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"}, {"type": "text", "text": "Done."}]},
            {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": cc}]}
        ]
    })
}

/// The check of the Anthropic body after `edit`.
fn anthropic(edit: impl FnOnce(&mut Value)) -> Result<(), String> {
    let mut b = anthropic_body();
    edit(&mut b);
    check(Api::Anthropic, b.to_string().as_bytes())
}

#[track_caller]
fn refused(r: Result<(), String>, expected: &str) {
    let msg = r.expect_err("the referee let a broken request through");
    assert!(msg.contains(expected), "expected a refusal containing {expected:?}, got {msg:?}");
}

#[test]
fn a_valid_anthropic_request_passes() {
    assert_eq!(anthropic(|_| {}), Ok(()));
}

#[test]
fn anthropic_model_and_max_tokens_are_required() {
    assert_eq!(anthropic(|b| b["max_tokens"] = json!(1)), Ok(()));
    refused(anthropic(|b| b["model"] = json!("")), "model: a non-empty string is required");
    refused(anthropic(|b| b["max_tokens"] = json!(0)), "max_tokens: must be an integer >= 1, got 0");
    refused(anthropic(|b| drop(b.as_object_mut().unwrap().remove("max_tokens"))), "max_tokens");
}

#[test]
fn anthropic_messages_must_not_be_empty() {
    assert_eq!(anthropic(|b| b["messages"] = json!([{"role": "user", "content": "hi"}])), Ok(()));
    refused(anthropic(|b| b["messages"] = json!([])), "messages: at least one message is required");
}

#[test]
fn anthropic_first_message_is_from_the_user() {
    let ok = json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]);
    assert_eq!(anthropic(|b| b["messages"] = ok), Ok(()));
    let bad = json!([{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]);
    refused(anthropic(|b| b["messages"] = bad), "messages.0: the first message must use the \"user\" role");
}

#[test]
fn anthropic_roles_alternate() {
    let bad = json!([{"role": "user", "content": "q"}, {"role": "user", "content": "q2"}]);
    refused(anthropic(|b| b["messages"] = bad), "messages.1: roles must alternate");
}

#[test]
fn anthropic_content_and_text_blocks_are_non_empty() {
    assert_eq!(anthropic(|b| b["messages"][4]["content"] = json!("thanks")), Ok(()));
    refused(anthropic(|b| b["messages"][4]["content"] = json!([])), "messages.4: all messages must have non-empty content");
    refused(anthropic(|b| b["messages"][4]["content"] = json!("")), "messages.4: all messages must have non-empty content");
    refused(
        anthropic(|b| b["messages"][3]["content"][1]["text"] = json!(" \n")),
        "messages.3.content.1: text content blocks must be non-empty",
    );
    refused(anthropic(|b| b["system"][0]["text"] = json!("")), "system.0: text content blocks must be non-empty");
}

#[test]
fn anthropic_cache_control_is_not_set_on_an_empty_text_block() {
    refused(
        anthropic(|b| b["messages"][0]["content"][0]["text"] = json!("")),
        "messages.0.content.0: cache_control cannot be set for empty text blocks",
    );
}

#[test]
fn anthropic_at_most_four_cache_breakpoints() {
    let fifth = |b: &mut Value| b["messages"][3]["content"][1]["cache_control"] = json!({"type": "ephemeral"});
    refused(anthropic(fifth), "A maximum of 4 blocks with cache_control may be provided. Found 5.");
}

#[test]
fn anthropic_tool_use_ids_match_the_pattern() {
    let rename = |b: &mut Value, id: &str| {
        b["messages"][1]["content"][1]["id"] = json!(id);
        b["messages"][2]["content"][1]["tool_use_id"] = json!(id);
    };
    assert_eq!(anthropic(|b| rename(b, "call_0-Z")), Ok(()));
    refused(anthropic(|b| rename(b, "call.0")), "messages.1.content.1: tool_use.id: String should match pattern");
}

#[test]
fn anthropic_tool_use_ids_are_unique_in_the_request() {
    let again = json!([
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_A-1", "name": "shell", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A-1", "content": "x"}]}]);
    let mut other = again.clone();
    other[0]["content"][0]["id"] = json!("toolu_B");
    other[1]["content"][0]["tool_use_id"] = json!("toolu_B");
    assert_eq!(anthropic(|b| b["messages"].as_array_mut().unwrap().extend(other.as_array().unwrap().clone())), Ok(()));
    refused(
        anthropic(|b| b["messages"].as_array_mut().unwrap().extend(again.as_array().unwrap().clone())),
        "messages.5.content.0: `tool_use` ids must be unique",
    );
}

#[test]
fn anthropic_tool_use_names_are_non_empty() {
    refused(
        anthropic(|b| b["messages"][1]["content"][1]["name"] = json!("")),
        "messages.1.content.1: tool_use.name: a non-empty string is required",
    );
}

#[test]
fn anthropic_tool_use_input_is_an_object() {
    refused(
        anthropic(|b| b["messages"][1]["content"][2]["input"] = json!([1])),
        "messages.1.content.2: tool_use.input: Input should be a valid dictionary, got [1]",
    );
    refused(anthropic(|b| b["messages"][1]["content"][2]["input"] = json!("{}")), "tool_use.input");
}

#[test]
fn anthropic_every_tool_use_has_its_result_in_the_next_message() {
    let drop_result = |b: &mut Value| drop(b["messages"][2]["content"].as_array_mut().unwrap().remove(1));
    refused(anthropic(drop_result), "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A-1.");
}

#[test]
fn anthropic_tool_results_come_first_in_their_message() {
    let text_first = |b: &mut Value| b["messages"][2]["content"].as_array_mut().unwrap().rotate_right(1);
    refused(anthropic(text_first), "messages.2.content.1: `tool_result` blocks must come first");
}

#[test]
fn anthropic_no_tool_result_without_its_tool_use() {
    let stray = |b: &mut Value| b["messages"][4]["content"] = json!([{"type": "tool_result", "tool_use_id": "toolu_A-1", "content": "x"}]);
    refused(anthropic(stray), "messages.4.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_A-1");
    let twice = |b: &mut Value| b["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_A-1");
    refused(anthropic(twice), "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A-2");
}

#[test]
fn anthropic_an_error_tool_result_is_not_empty() {
    assert_eq!(anthropic(|b| b["messages"][2]["content"][0]["content"] = json!("")), Ok(()));
    refused(
        anthropic(|b| b["messages"][2]["content"][1]["content"] = json!("")),
        "messages.2.content.1: tool_result: content cannot be empty if `is_error` is true",
    );
}

#[test]
fn anthropic_tool_definitions_have_valid_unique_names_and_object_schemas() {
    let long = "a".repeat(64);
    assert_eq!(anthropic(|b| b["tools"][0]["name"] = json!(long)), Ok(()));
    refused(
        anthropic(|b| b["tools"][0]["name"] = json!("a".repeat(65))),
        "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
    );
    refused(anthropic(|b| b["tools"][0]["name"] = json!("deploy.prod")), "tools.0.name: String should match pattern");
    refused(
        anthropic(|b| b["tools"][0]["input_schema"] = json!({})),
        "tools.0.input_schema: must be a JSON Schema with \"type\": \"object\", got {}",
    );
    let twice = |b: &mut Value| {
        let t = b["tools"][0].clone();
        b["tools"].as_array_mut().unwrap().insert(0, t);
    };
    refused(anthropic(twice), "tools: Tool names must be unique, found \"shell\" twice");
}

#[test]
fn anthropic_thinking_blocks_are_signed() {
    refused(anthropic(|b| b["messages"][3]["content"][0]["signature"] = json!("")), "messages.3.content.0: thinking.signature");
    refused(anthropic(|b| drop(b["messages"][3]["content"][0].as_object_mut().unwrap().remove("signature"))), "thinking.signature");
}

#[test]
fn anthropic_no_tool_blocks_without_tools() {
    let textified = |b: &mut Value| {
        b.as_object_mut().unwrap().remove("tools");
        b["messages"] = json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "[called tool `shell`]"}, {"role": "user", "content": "[tool result] x"}]);
    };
    assert_eq!(anthropic(textified), Ok(()));
    refused(
        anthropic(|b| b["tools"] = json!([])),
        "messages.1.content.1: requests which include `tool_use` or `tool_result` blocks must define tools",
    );
}

#[test]
fn anthropic_the_last_message_is_from_the_user() {
    refused(
        anthropic(|b| drop(b["messages"].as_array_mut().unwrap().pop())),
        "messages.3: the conversation must end with a user message (no assistant prefill)",
    );
}

#[test]
fn anthropic_the_last_message_does_not_end_with_a_tool_use() {
    let cut = |b: &mut Value| drop(b["messages"].as_array_mut().unwrap().drain(2..));
    refused(anthropic(cut), "messages.1: the final assistant message ends with `tool_use` (toolu_A-1, toolu_A-2)");
}

/// A valid OpenAI body: system, a user turn, two parallel calls answered, the answer.
fn openai_body() -> Value {
    json!({
        "model": "gpt-test", "max_tokens": 512, "stream": true,
        "tools": [{"type": "function", "function": {"name": "shell", "description": "d", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_2", "content": "b"},
            {"role": "tool", "tool_call_id": "call_1", "content": ""},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
        ]
    })
}

fn openai(edit: impl FnOnce(&mut Value)) -> Result<(), String> {
    let mut b = openai_body();
    edit(&mut b);
    check(Api::OpenAi, b.to_string().as_bytes())
}

#[test]
fn a_valid_openai_request_passes() {
    assert_eq!(openai(|_| {}), Ok(()));
}

#[test]
fn openai_messages_must_not_be_empty() {
    refused(openai(|b| b["messages"] = json!([])), "messages: Invalid 'messages': empty array");
}

#[test]
fn openai_every_call_is_answered_before_the_next_message() {
    let late = |b: &mut Value| b["messages"].as_array_mut().unwrap().swap(4, 5);
    refused(openai(late), "messages[4]: An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_1");
    let cut = |b: &mut Value| drop(b["messages"].as_array_mut().unwrap().drain(4..));
    refused(openai(cut), "did not have response messages: call_1");
}

#[test]
fn openai_no_tool_message_without_its_call() {
    let stray =
        |b: &mut Value| b["messages"].as_array_mut().unwrap().insert(6, json!({"role": "tool", "tool_call_id": "call_1", "content": "x"}));
    refused(openai(stray), "messages[6]: messages with role 'tool' must be a response to a preceding message with 'tool_calls'");
}

#[test]
fn openai_arguments_are_a_string_holding_a_json_object() {
    refused(
        openai(|b| b["messages"][2]["tool_calls"][1]["function"]["arguments"] = json!({})),
        "messages[2].tool_calls[1].function.arguments: must be a string holding a JSON object",
    );
    refused(openai(|b| b["messages"][2]["tool_calls"][1]["function"]["arguments"] = json!("[1]")), "function.arguments");
}

#[test]
fn openai_tool_definitions_have_valid_names_and_object_schemas() {
    refused(openai(|b| b["tools"][0]["function"]["name"] = json!("a b")), "tools.0.function.name: String should match pattern");
    refused(
        openai(|b| b["tools"][0]["function"]["parameters"] = json!({"properties": {}})),
        "tools.0.function.parameters: must be a JSON Schema",
    );
}

#[test]
fn openai_called_names_match_the_pattern() {
    let name = |b: &mut Value, n: &str| b["messages"][2]["tool_calls"][0]["function"]["name"] = json!(n);
    assert_eq!(openai(|b| name(b, "made_up-Tool")), Ok(()));
    refused(openai(|b| name(b, "repo_browser.open_file")), "messages[2].tool_calls[0].function.name: Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$', got \"repo_browser.open_file\"");
    refused(openai(|b| name(b, "")), "messages[2].tool_calls[0].function.name");
}

#[test]
fn openai_no_empty_content_where_refused() {
    assert_eq!(openai(|b| b["messages"][1]["content"] = json!("hi")), Ok(()));
    refused(openai(|b| b["messages"][1]["content"] = json!([])), "messages[1].content: empty array");
    refused(openai(|b| b["messages"][1]["content"] = Value::Null), "messages[1].content: expected a string or an array of parts, got null");
    refused(openai(|b| b["messages"][5]["content"] = Value::Null), "messages[5].content");
}

#[test]
fn refusals_have_each_apis_error_shape() {
    assert_eq!(Api::for_path("/v1/messages"), Some(Api::Anthropic));
    assert_eq!(Api::for_path("/v1/chat/completions"), Some(Api::OpenAi));
    assert_eq!(Api::for_path("/v1/models"), None);
    assert_eq!(Api::Anthropic.refusal_body("m"), r#"{"type":"error","error":{"type":"invalid_request_error","message":"m"}}"#);
    assert_eq!(Api::OpenAi.refusal_body("m"), r#"{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}"#);
}

/// The gateway answers a broken request with the API's 400 (leaving the script untouched),
/// records it, and panics when dropped.
#[tokio::test]
async fn the_gateway_refuses_a_broken_request_and_fails_the_test_on_drop() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("ok")));
    let http = reqwest::Client::new();
    let bad = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ""}]});
    let res = http.post(format!("{}/v1/messages", gw.url())).json(&bad).send().await.unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(
        res.text().await.unwrap(),
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0: all messages must have non-empty content"}}"#
    );
    let good = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]});
    let res = http.post(format!("{}/v1/messages", gw.url())).json(&good).send().await.unwrap();
    assert_eq!(res.status(), 200, "the scripted reply was kept for the next valid request");
    assert_eq!(gw.violations(), vec!["POST /v1/messages (request 0): messages.0: all messages must have non-empty content".to_string()]);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(gw)));
    let msg = dropped.expect_err("dropping a gateway that saw a violation panics");
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.starts_with("the runtime sent 1 request(s) a real API refuses with HTTP 400:\nPOST /v1/messages (request 0)"), "{msg}");
}
