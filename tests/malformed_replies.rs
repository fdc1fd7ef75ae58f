//! Malformed and awkward model replies against the scripted gateway (issue 7 items 2–6, 13):
//! a tool call cut at the output limit, tool_use blocks sharing an id, tool input that is not a
//! JSON object, a reply of only thinking, an OpenAI stream held open after `finish_reason`, and
//! two content blocks opened with the same index. Each test checks the exact bytes sent on the
//! next round, the history, or the events.

use std::time::Duration;

use cicy::conversation::message::{ContentBlock, Message};
use cicy::event::{EventKind, TurnOutcome};
use cicy::gateway::{ApiStyle, CallOptions, GatewayClient, GatewaySettings, Prompt, PromptBlock, PromptMessage, StopReason};
use cicy::turn;
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The error result of a call cut off at the test role's output limit (meta.yaml: 512).
const CUT_RESULT: &str = "error: not run: this call was cut off at the output limit (max_tokens 512) before its input \
                          was complete. Retry with smaller pieces (e.g. write a long file in several calls).";

fn body(r: &RecordedRequest) -> Value {
    serde_json::from_slice(&r.body).expect("request body is JSON")
}

fn history(id: &str, t: &TestHome) -> Vec<Message> {
    serde_json::from_value(t.current_json(id)["messages"].clone()).expect("messages parse")
}

fn ev(name: &str, data: Value) -> Vec<u8> {
    event(name, &data.to_string())
}

fn text_block(index: u32, text: &str) -> Vec<Vec<u8>> {
    vec![
        ev("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})),
        ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})),
        ev("content_block_stop", json!({"type": "content_block_stop", "index": index})),
    ]
}

fn tool_block(index: u32, id: &str, input_json: &str) -> Vec<Vec<u8>> {
    vec![
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": "shell", "input": {}}}),
        ),
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": input_json}}),
        ),
        ev("content_block_stop", json!({"type": "content_block_stop", "index": index})),
    ]
}

fn end(stop_reason: &str) -> Vec<Vec<u8>> {
    vec![
        ev(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 512}}),
        ),
        ev("message_stop", json!({"type": "message_stop"})),
    ]
}

/// Runs one turn of a new `tester` agent; returns the home, agent id, outcome and events.
async fn one_turn(gw: &ScriptedGateway, style: Option<ApiStyle>, text: &str) -> (TestHome, String, TurnOutcome, Vec<EventKind>) {
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", style);
    let mut s = t.open(&id);
    let (em, events) = collector(&id);
    let outcome = turn::run_turn(&mut s, text, &em, &CancellationToken::new()).await.expect("turn runs");
    (t, id, outcome, kinds(&events))
}

#[tokio::test]
async fn max_tokens_inside_a_tool_call_keeps_the_text_runs_the_complete_call_and_continues() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(
        [
            anthropic_prelude(),
            text_block(0, "Writing the file."),
            tool_block(1, "toolu_a", r#"{"command":"echo part-a"}"#),
            tool_block(2, "toolu_b", r#"{"command":"cat > big.txt <<'EOF'\nline 1\nline"#),
            end("max_tokens"),
        ]
        .concat(),
    ));
    gw.push(Reply::sse(anthropic_text("I will write it in smaller pieces.")));
    let (t, id, outcome, events) = one_turn(&gw, None, "write big.txt").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2, "the cut response is not sent again");
    let msgs = body(&reqs[1])["messages"].clone();
    assert_eq!(
        msgs[1]["content"],
        json!([
            {"type": "text", "text": "Writing the file."},
            {"type": "tool_use", "id": "toolu_a", "name": "shell", "input": {"command": "echo part-a"}},
            {"type": "tool_use", "id": "toolu_b", "name": "shell", "input": {}},
        ])
    );
    assert_eq!(
        msgs[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "part-a\nexit code: 0"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": CUT_RESULT, "is_error": true, "cache_control": {"type": "ephemeral"}},
        ])
    );
    let started: Vec<String> =
        events.iter().filter_map(|e| if let EventKind::ToolStarted { id, .. } = e { Some(id.clone()) } else { None }).collect();
    assert_eq!(started, vec!["toolu_a".to_string()], "the cut call never runs");
    let told = format!("tool call `shell` (toolu_b) not run: {}", CUT_RESULT.trim_start_matches("error: not run: "));
    assert!(events.contains(&EventKind::System { text: told }), "{events:?}");
    let hist = history(&id, &t);
    assert_eq!(hist[1].plain_text(), "Writing the file.");
    assert_eq!(hist.last().map(Message::plain_text).as_deref(), Some("I will write it in smaller pieces."));
    assert_eq!(t.reply_json(&id)["last_stop_reason"], "end_turn");
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> Vec<u8> {
    data(
        &json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string(),
    )
}

#[tokio::test]
async fn openai_length_inside_arguments_is_answered_with_an_error_and_the_turn_goes_on() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(vec![
        openai_chunk(json!({"content": "Writing."}), None),
        openai_chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":\"printf 'abc"}}]}), None),
        openai_chunk(json!({}), Some("length")),
        data(&format!(r#"{{"choices":[],"usage":{OPENAI_USAGE}}}"#)),
        data("[DONE]"),
    ]));
    gw.push(Reply::sse(openai_text("Smaller, then.")));
    let (_t, _id, outcome, _) = one_turn(&gw, Some(ApiStyle::Openai), "write it").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = body(&reqs[1])["messages"].clone();
    assert_eq!(
        msgs[2],
        json!({"role": "assistant", "content": "Writing.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]})
    );
    assert_eq!(msgs[3], json!({"role": "tool", "tool_call_id": "call_1", "content": CUT_RESULT}));
}

#[tokio::test]
async fn tool_use_blocks_sharing_an_id_run_once_each_under_unique_ids() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(
        [
            anthropic_prelude(),
            tool_block(0, "toolu_1", r#"{"command":"echo one"}"#),
            tool_block(1, "toolu_1", r#"{"command":"echo two"}"#),
            end("tool_use"),
        ]
        .concat(),
    ));
    gw.push(Reply::sse(anthropic_text("Both ran.")));
    let (_t, _id, outcome, events) = one_turn(&gw, None, "run both").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    let msgs = body(&gw.requests()[1])["messages"].clone();
    assert_eq!(
        msgs[1]["content"],
        json!([
            {"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"command": "echo one"}},
            {"type": "tool_use", "id": "toolu_1_2", "name": "shell", "input": {"command": "echo two"}},
        ])
    );
    assert_eq!(
        msgs[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one\nexit code: 0"},
            {"type": "tool_result", "tool_use_id": "toolu_1_2", "content": "two\nexit code: 0", "cache_control": {"type": "ephemeral"}},
        ])
    );
    let started = events.iter().filter(|e| matches!(e, EventKind::ToolStarted { .. })).count();
    assert_eq!(started, 2);
}

#[tokio::test]
async fn tool_input_that_is_not_an_object_is_never_resent_and_gets_an_error_naming_it() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse([anthropic_prelude(), tool_block(0, "toolu_s", r#""rm -rf /""#), end("tool_use")].concat()));
    gw.push(Reply::sse(anthropic_text("Sorry.")));
    let (t, id, outcome, events) = one_turn(&gw, None, "go").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(!events.iter().any(|e| matches!(e, EventKind::ToolStarted { .. })));
    let msgs = body(&gw.requests()[1])["messages"].clone();
    assert_eq!(msgs[1]["content"], json!([{"type": "tool_use", "id": "toolu_s", "name": "shell", "input": {}}]));
    assert_eq!(
        msgs[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_s", "is_error": true, "cache_control": {"type": "ephemeral"},
               "content": "error: not run: the tool input must be a JSON object, but it was a string: \"rm -rf /\""})
    );
    assert_eq!(history(&id, &t)[1].tool_uses().map(|(_, _, input)| input.clone()).collect::<Vec<_>>(), vec![json!({})]);
}

#[tokio::test]
async fn a_reply_of_only_unsigned_thinking_is_reported_kept_and_never_resent() {
    let gw = ScriptedGateway::start().await;
    let thinking = vec![
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "pondering"}}),
        ),
        ev("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
    ];
    gw.push(Reply::sse([anthropic_prelude(), thinking, end("end_turn")].concat()));
    gw.push(Reply::sse(anthropic_text("Here it is.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, events) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "first", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert!(kinds(&events).contains(&EventKind::NoAnswerText));
    assert_eq!(
        history(&id, &t)[1].content,
        cicy::conversation::message::Content::Blocks(vec![ContentBlock::Thinking {
            thinking: "pondering".into(),
            signature: String::new()
        }])
    );
    turn::run_turn(&mut s, "again", &em, &CancellationToken::new()).await.unwrap();
    let second = gw.requests()[1].body_str();
    assert!(!second.contains("thinking"), "{second}");
    let msgs = body(&gw.requests()[1])["messages"].clone();
    let msgs = msgs.as_array().expect("messages");
    assert_eq!(msgs.len(), 1, "the two user messages merge once the thinking-only reply is left out");
    let texts: Vec<&str> = msgs[0]["content"].as_array().expect("blocks").iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(&texts[1..], ["first", "again"]);
}

fn openai_client(url: &str) -> GatewayClient {
    GatewayClient::new(GatewaySettings { max_retries: 0, ..GatewaySettings::new(url, ApiStyle::Openai) }).expect("client")
}

fn hi() -> Prompt {
    Prompt {
        messages: vec![PromptMessage {
            role: cicy::conversation::message::Role::User,
            blocks: vec![PromptBlock { block: ContentBlock::text("hi"), cache: false }],
        }],
        ..Prompt::default()
    }
}

fn call_opts() -> CallOptions {
    CallOptions { model: "m".into(), max_tokens: 64, session_id: "conv".into(), aux: None, timeout: None }
}

/// Sends `hi()`; returns the response and the (paused-clock) time the call took.
async fn timed_send(c: &GatewayClient) -> (cicy::gateway::Response, Duration) {
    let start = tokio::time::Instant::now();
    let r = c.send(&hi(), &call_opts(), &mut |_| {}, &CancellationToken::new()).await.expect("response");
    (r, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn openai_finish_reason_without_done_on_an_open_socket_ends_after_the_grace_not_the_idle_timeout() {
    let gw = ScriptedGateway::start().await;
    let full = openai_text("done early");
    // Everything but the usage chunk and [DONE]; the connection then stays open.
    gw.push(Reply::SseThenHang { chunks: full[..full.len() - 2].to_vec() });
    let (r, took) = timed_send(&openai_client(&gw.url())).await;
    assert_eq!(r.content, vec![ContentBlock::text("done early")]);
    assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
    assert!(took >= cicy::gateway::client::COMPLETE_GRACE && took < Duration::from_secs(3), "took {took:?} (idle timeout is 300 s)");
}

#[tokio::test(start_paused = true)]
async fn openai_usage_after_finish_reason_ends_the_response_at_once_on_an_open_socket() {
    let gw = ScriptedGateway::start().await;
    let full = openai_text("with usage");
    // Everything but [DONE]; the connection then stays open.
    gw.push(Reply::SseThenHang { chunks: full[..full.len() - 1].to_vec() });
    let (r, took) = timed_send(&openai_client(&gw.url())).await;
    assert_eq!(r.usage.output_tokens, 15);
    assert!(took < cicy::gateway::client::COMPLETE_GRACE, "took {took:?}");
}

#[tokio::test]
async fn a_second_block_start_with_the_same_index_stores_what_was_streamed() {
    let gw = ScriptedGateway::start().await;
    let mut again = text_block(0, "world.");
    again.pop();
    let mut first = text_block(0, "Hello, ");
    first.pop();
    gw.push(Reply::sse([anthropic_prelude(), first, again, end("end_turn")].concat()));
    let (t, id, outcome, events) = one_turn(&gw, None, "greet").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    let streamed: String =
        events.iter().filter_map(|e| if let EventKind::TextDelta { text } = e { Some(text.as_str()) } else { None }).collect();
    assert_eq!(streamed, "Hello, world.");
    assert_eq!(
        history(&id, &t)[1].content,
        cicy::conversation::message::Content::Blocks(vec![ContentBlock::text("Hello, "), ContentBlock::text("world.")])
    );
}

#[tokio::test]
async fn calls_without_ids_in_two_rounds_get_ids_unique_in_the_conversation() {
    let gw = ScriptedGateway::start().await;
    // A gateway that sends no call ids: cicy numbers them per response, so both are call_0_0.
    gw.push(Reply::sse(openai_tool_call("", "shell", r#"{"command":"echo a"}"#)));
    gw.push(Reply::sse(openai_tool_call("", "shell", r#"{"command":"echo b"}"#)));
    gw.push(Reply::sse(openai_text("Done.")));
    let (_t, _id, outcome, _) = one_turn(&gw, Some(ApiStyle::Openai), "two steps").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    let msgs = body(&gw.requests()[2])["messages"].clone();
    let calls: Vec<Value> = [2, 4].iter().map(|&i| msgs[i]["tool_calls"][0]["id"].clone()).collect();
    assert_eq!(calls, vec![json!("call_0_0"), json!("call_0_0_2")]);
    assert_eq!(msgs[3], json!({"role": "tool", "tool_call_id": "call_0_0", "content": "a\nexit code: 0"}));
    assert_eq!(msgs[5], json!({"role": "tool", "tool_call_id": "call_0_0_2", "content": "b\nexit code: 0"}));
}

/// The first 8 hex digits of sha256(`s`): the suffix of a rewritten tool id.
fn id_hash(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// Found by the referee: an id like `functions.shell:0` (a gateway in front of another model)
/// and a nameless call were sent back as received, and the real API refuses both with 400.
#[tokio::test]
async fn tool_ids_and_names_the_api_refuses_are_sent_in_a_form_it_accepts() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(
        [
            anthropic_prelude(),
            tool_block(0, "functions.shell:0", r#"{"command":"echo hi"}"#),
            vec![
                ev("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "", "input": {}}})),
                ev("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
            ],
            end("tool_use"),
        ]
        .concat(),
    ));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let (t, id, outcome, _) = one_turn(&gw, None, "go").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    let msgs = body(&gw.requests()[1])["messages"].clone();
    let wire_id = format!("functions_shell_0_{}", id_hash("functions.shell:0"));
    assert_eq!(msgs[1]["content"][0], json!({"type": "tool_use", "id": wire_id, "name": "shell", "input": {"command": "echo hi"}}));
    assert_eq!(msgs[1]["content"][1], json!({"type": "tool_use", "id": "toolu_2", "name": "tool", "input": {}}));
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], json!(wire_id));
    assert_eq!(msgs[2]["content"][0]["content"], json!("hi\nexit code: 0"));
    assert_eq!(msgs[2]["content"][1]["tool_use_id"], json!("toolu_2"));
    // The history keeps what the gateway sent.
    let ids: Vec<String> = history(&id, &t)[1].tool_uses().map(|(id, name, _)| format!("{id}/{name}")).collect();
    assert_eq!(ids, vec!["functions.shell:0/shell".to_string(), "toolu_2/".to_string()]);
}

/// Found by the referee: OpenAI holds `tool_calls[].function.name` in the history to
/// `^[a-zA-Z0-9_-]+$`, so a tool name the model made up was refused on the next request.
#[tokio::test]
async fn an_openai_call_to_a_made_up_tool_name_is_sent_back_with_a_name_the_api_accepts() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(openai_tool_call("call_1", "repo_browser.open_file", r#"{"path":"a"}"#)));
    gw.push(Reply::sse(openai_text("Done.")));
    let (_t, _id, outcome, _) = one_turn(&gw, Some(ApiStyle::Openai), "open a").await;
    assert_eq!(outcome, TurnOutcome::Completed);
    let msgs = body(&gw.requests()[1])["messages"].clone();
    assert_eq!(msgs[2]["tool_calls"][0]["function"], json!({"name": "repo_browser_open_file", "arguments": "{\"path\":\"a\"}"}));
    assert_eq!(msgs[3]["tool_call_id"], json!("call_1"));
    assert_eq!(msgs[3]["role"], json!("tool"));
}
