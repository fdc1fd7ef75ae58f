//! Unit tests of `anthropic.rs`: exact request bytes, digest, and every streaming case.

use serde_json::json;

use super::*;
use crate::{PromptBlock, PromptMessage, Response, SystemBlock, ToolSpec};

pub(crate) fn sample_prompt() -> Prompt {
    Prompt {
        system: vec![
            SystemBlock { text: "You are a helper.".into(), cache: false },
            SystemBlock { text: "Skills: none".into(), cache: true },
        ],
        tools: vec![ToolSpec {
            name: "shell".into(),
            description: "Run a command".into(),
            input_schema: serde_json::from_str(r#"{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}"#)
                .expect("schema"),
        }],
        tools_cache: true,
        messages: vec![
            PromptMessage {
                role: Role::User,
                blocks: vec![
                    PromptBlock { block: ContentBlock::text("<role>\nR\n</role>"), cache: false },
                    PromptBlock { block: ContentBlock::text("list files"), cache: false },
                ],
            },
            PromptMessage {
                role: Role::Assistant,
                blocks: vec![
                    PromptBlock { block: ContentBlock::Thinking { thinking: "hmm".into(), signature: "sig".into() }, cache: false },
                    PromptBlock { block: ContentBlock::text("Sure."), cache: false },
                    PromptBlock {
                        block: ContentBlock::ToolUse {
                            id: "toolu_1".into(),
                            name: "shell".into(),
                            // Key order as the model produced it (z before a).
                            input: serde_json::from_str(r#"{"z":1,"cmd":"ls"}"#).expect("input"),
                        },
                        cache: false,
                    },
                ],
            },
            PromptMessage {
                role: Role::User,
                blocks: vec![
                    PromptBlock {
                        block: ContentBlock::ToolResult {
                            tool_use_id: "toolu_1".into(),
                            content: "a.txt\n\"b\".txt".into(),
                            is_error: true,
                        },
                        cache: true,
                    },
                    PromptBlock { block: ContentBlock::text("<memories>\nm\n</memories>"), cache: false },
                ],
            },
        ],
    }
}

pub(crate) const SAMPLE_BODY: &str = concat!(
    r#"{"model":"claude-x","max_tokens":2048,"stream":true,"#,
    r#""tools":[{"name":"shell","description":"Run a command","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]},"cache_control":{"type":"ephemeral"}}],"#,
    r#""system":[{"type":"text","text":"You are a helper."},{"type":"text","text":"Skills: none","cache_control":{"type":"ephemeral"}}],"#,
    r#""messages":[{"role":"user","content":[{"type":"text","text":"<role>\nR\n</role>"},{"type":"text","text":"list files"}]},"#,
    r#"{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"Sure."},{"type":"tool_use","id":"toolu_1","name":"shell","input":{"z":1,"cmd":"ls"}}]},"#,
    r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt\n\"b\".txt","is_error":true,"cache_control":{"type":"ephemeral"}},{"type":"text","text":"<memories>\nm\n</memories>"}]}]}"#
);

#[test]
fn encode_exact_bytes() {
    let enc = encode(&sample_prompt(), "claude-x", 2048);
    assert_eq!(String::from_utf8(enc.body.clone()).expect("utf8"), SAMPLE_BODY);
    // Byte stability: the same prompt gives the same bytes.
    assert_eq!(encode(&sample_prompt(), "claude-x", 2048), enc);
}

#[test]
fn prefix_digest_ends_at_last_breakpoint() {
    let enc = encode(&sample_prompt(), "claude-x", 2048);
    let marker = r#""cache_control":{"type":"ephemeral"}"#;
    let end = SAMPLE_BODY.rfind(marker).expect("marker") + marker.len();
    assert_eq!(enc.prefix_sha256, sha256_hex(&SAMPLE_BODY.as_bytes()[..end]));
    assert_eq!(enc.prefix_sha256.len(), 64);
    // Changing only the uncached tail (memories) keeps the digest; changing the prefix does not.
    let mut p = sample_prompt();
    p.messages[2].blocks[1].block = ContentBlock::text("<memories>\nother\n</memories>");
    assert_eq!(encode(&p, "claude-x", 2048).prefix_sha256, enc.prefix_sha256);
    p.messages[0].blocks[1].block = ContentBlock::text("list all files");
    assert_ne!(encode(&p, "claude-x", 2048).prefix_sha256, enc.prefix_sha256);
}

#[test]
fn digest_ignores_cache_control_lookalikes_after_the_breakpoint() {
    let mut p = sample_prompt();
    p.messages[2].blocks[0].cache = false;
    p.messages.push(PromptMessage {
        role: Role::Assistant,
        blocks: vec![PromptBlock {
            block: ContentBlock::ToolUse { id: "t".into(), name: "x".into(), input: json!({"cache_control": {"type": "ephemeral"}}) },
            cache: false,
        }],
    });
    let enc = encode(&p, "m", 1);
    let body = String::from_utf8(enc.body.clone()).expect("utf8");
    // The real last breakpoint is the one on the system block.
    let marker = r#""Skills: none","cache_control":{"type":"ephemeral"}"#;
    let end = body.find(marker).expect("marker") + marker.len();
    assert_eq!(enc.prefix_sha256, sha256_hex(&body.as_bytes()[..end]));
}

#[test]
fn no_tools_no_breakpoint_empty_system() {
    let p = Prompt {
        messages: vec![PromptMessage { role: Role::User, blocks: vec![PromptBlock { block: ContentBlock::text("hi"), cache: false }] }],
        ..Prompt::default()
    };
    let enc = encode(&p, "m", 10);
    let body =
        r#"{"model":"m","max_tokens":10,"stream":true,"system":[],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
    assert_eq!(String::from_utf8(enc.body.clone()).expect("utf8"), body);
    assert_eq!(enc.prefix_sha256, sha256_hex(body.as_bytes()));
}

// ---- Accumulator --------------------------------------------------------------------------------

fn sse(event: &str, data: &str) -> SseEvent {
    SseEvent { event: event.into(), data: data.into() }
}

fn run(events: &[SseEvent]) -> (Result<Response, GatewayError>, Vec<GatewayEvent>) {
    let mut acc = Accumulator::new();
    let mut seen = Vec::new();
    for ev in events {
        if let Err(e) = acc.on_event(ev, &mut |g| seen.push(g)) {
            return (Err(e), seen);
        }
    }
    (Box::new(acc).finish(), seen)
}

fn full_stream() -> Vec<SseEvent> {
    vec![
        sse(
            "message_start",
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1,"cache_creation_input_tokens":100,"cache_read_input_tokens":0}}}"#,
        ),
        sse("ping", r#"{"type": "ping"}"#),
        sse("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"let me"}}"#),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG"}}"#),
        sse("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        sse("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hel"}}"#),
        sse("message", ""),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"lo 中"}}"#),
        sse("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
        sse(
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_9","name":"shell","input":{}}}"#,
        ),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}"#),
        sse(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\": \"l"}}"#,
        ),
        // No `event:` line: the type comes from the JSON.
        sse("message", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"s\", \"a\": 1}"}}"#),
        sse("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
        sse("future_event", r#"{"type":"future_event","x":1}"#),
        sse(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}"#,
        ),
        sse("message", "[DONE]"),
        sse("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

#[test]
fn full_stream_gives_exact_response_and_deltas() {
    let (resp, seen) = run(&full_stream());
    let resp = resp.expect("complete");
    assert_eq!(
        seen,
        vec![GatewayEvent::ThinkingDelta("let me".into()), GatewayEvent::TextDelta("Hel".into()), GatewayEvent::TextDelta("lo 中".into()),]
    );
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::Thinking { thinking: "let me".into(), signature: "SIG".into() },
            ContentBlock::text("Hello 中"),
            ContentBlock::ToolUse { id: "toolu_9".into(), name: "shell".into(), input: json!({"cmd": "ls", "a": 1}) },
        ]
    );
    // Key order of the tool input is kept as streamed.
    if let ContentBlock::ToolUse { input, .. } = &resp.content[2] {
        assert_eq!(input.to_string(), r#"{"cmd":"ls","a":1}"#);
    }
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(resp.usage, Usage { input_tokens: 12, output_tokens: 42, cache_creation_input_tokens: 100, cache_read_input_tokens: 0 });
}

#[test]
fn usage_from_message_delta_when_start_has_zeros() {
    let (resp, _) = run(&[
        sse("message_start", r#"{"type":"message_start","message":{"usage":{"input_tokens":0,"output_tokens":0}}}"#),
        sse(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":7,"output_tokens":3,"cache_read_input_tokens":5,"cache_creation_input_tokens":null}}"#,
        ),
        sse("message_stop", r#"{"type":"message_stop"}"#),
    ]);
    let resp = resp.expect("ok");
    assert_eq!(resp.usage, Usage { input_tokens: 7, output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 5 });
    assert!(resp.content.is_empty());
}

#[test]
fn tool_input_from_start_when_fragments_empty() {
    let (resp, _) = run(&[
        sse(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"n","input":{"k":"v"}}}"#,
        ),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}"#),
        sse("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        sse("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t2","name":"n"}}"#),
        sse("message_stop", r#"{"type":"message_stop"}"#),
    ]);
    let resp = resp.expect("ok");
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::ToolUse { id: "t1".into(), name: "n".into(), input: json!({"k": "v"}) },
            ContentBlock::ToolUse { id: "t2".into(), name: "n".into(), input: json!({}) },
        ]
    );
}

#[test]
fn bad_tool_json_is_a_rejected_call_not_a_run_with_empty_input() {
    let (resp, _) = run(&[
        sse(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"n","input":{}}}"#,
        ),
        sse(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": "}}"#,
        ),
        sse("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        sse("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#),
        sse("message_stop", r#"{"type":"message_stop"}"#),
    ]);
    let resp = resp.expect("a malformed call does not fail the response");
    assert_eq!(resp.content, vec![ContentBlock::ToolUse { id: "t1".into(), name: "n".into(), input: json!({}) }]);
    assert_eq!(
        resp.rejected[0].result_text(10),
        "error: not run: the tool input is not valid JSON (EOF while parsing a value at line 1 column 6): {\"a\": "
    );
}

#[test]
fn eof_before_message_stop_is_incomplete_without_blocks() {
    let events = full_stream();
    // Cut inside the tool's input_json_delta fragments.
    let (resp, _) = run(&events[..14]);
    match resp {
        Err(GatewayError::Incomplete(why)) => assert!(why.contains("shell"), "{why}"),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    let (resp, _) = run(&events[..events.len() - 1]);
    assert!(matches!(resp, Err(GatewayError::Incomplete(_))));
    let (resp, _) = run(&[]);
    assert!(matches!(resp, Err(GatewayError::Incomplete(ref w)) if w == "no event received"));
}

#[test]
fn error_event_is_typed() {
    let mut acc = Accumulator::new();
    let err = acc
        .on_event(&sse("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#), &mut |_| {})
        .expect_err("error");
    match err {
        GatewayError::StreamError { kind, message } => {
            assert_eq!(kind, "overloaded_error");
            assert_eq!(message, "Overloaded");
        }
        other => panic!("{other:?}"),
    }
    assert!(!acc.content_started());
    // Without an `event:` line, and with a non-JSON body.
    let err = Accumulator::new()
        .on_event(&sse("message", r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#), &mut |_| {})
        .expect_err("error");
    assert!(matches!(err, GatewayError::StreamError { ref kind, .. } if kind == "api_error"));
    let err = Accumulator::new().on_event(&sse("error", "upstream died"), &mut |_| {}).expect_err("error");
    assert!(matches!(err, GatewayError::StreamError { ref kind, ref message } if kind == "error" && message == "upstream died"));
}

#[test]
fn content_started_only_after_a_content_block() {
    let mut acc = Accumulator::new();
    let events = full_stream();
    acc.on_event(&events[0], &mut |_| {}).expect("ok");
    acc.on_event(&events[1], &mut |_| {}).expect("ok");
    assert!(!acc.content_started());
    acc.on_event(&events[2], &mut |_| {}).expect("ok");
    assert!(acc.content_started());
}

#[test]
fn bad_json_in_known_event_is_decode_error_unknown_is_ignored() {
    let mut acc = Accumulator::new();
    acc.on_event(&sse("whatever", "not json"), &mut |_| {}).expect("ignored");
    let err = acc.on_event(&sse("content_block_delta", "{oops"), &mut |_| {}).expect_err("decode");
    assert!(matches!(err, GatewayError::Decode(_)));
}

#[test]
fn events_after_message_stop_are_ignored() {
    let mut events = full_stream();
    events.push(sse("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"late"}}"#));
    assert!(run(&events).0.is_ok());
}

// ---- Malformed responses, replayed as the exact bytes a gateway sends --------------------------

/// Replays `(event, data)` pairs through `client::replay` as one SSE byte stream.
fn replay_events(events: &[(&str, &str)]) -> (Response, Vec<GatewayEvent>) {
    let bytes: String = events.iter().map(|(e, d)| format!("event: {e}\ndata: {d}\n\n")).collect();
    crate::client::replay(crate::ApiStyle::Anthropic, [bytes]).expect("complete")
}

fn tool_start(index: u32, id: &str) -> String {
    format!(
        r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"tool_use","id":"{id}","name":"shell","input":{{}}}}}}"#
    )
}

fn input_delta(index: u32, partial: &str) -> String {
    json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": partial}}).to_string()
}

fn block_stop(index: u32) -> String {
    format!(r#"{{"type":"content_block_stop","index":{index}}}"#)
}

const TEXT_START_0: &str = r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;

fn text_delta(index: u32, text: &str) -> String {
    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}).to_string()
}

fn stop_with(reason: &str) -> String {
    json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": 2048}}).to_string()
}

const MESSAGE_STOP: &str = r#"{"type":"message_stop"}"#;

#[test]
fn max_tokens_inside_tool_json_keeps_the_text_and_rejects_only_the_cut_call() {
    let (t0, t1, t2) = (text_delta(0, "Writing the file."), tool_start(1, "toolu_a"), tool_start(2, "toolu_b"));
    let (d1, d2) = (input_delta(1, r#"{"command":"true"}"#), input_delta(2, r#"{"command":"cat > big.txt <<'EOF'\nline"#));
    let (s0, s1, s2, end) = (block_stop(0), block_stop(1), block_stop(2), stop_with("max_tokens"));
    let (resp, seen) = replay_events(&[
        ("content_block_start", TEXT_START_0),
        ("content_block_delta", &t0),
        ("content_block_stop", &s0),
        ("content_block_start", &t1),
        ("content_block_delta", &d1),
        ("content_block_stop", &s1),
        ("content_block_start", &t2),
        ("content_block_delta", &d2),
        ("content_block_stop", &s2),
        ("message_delta", &end),
        ("message_stop", MESSAGE_STOP),
    ]);
    assert_eq!(seen, vec![GatewayEvent::TextDelta("Writing the file.".into())]);
    assert_eq!(resp.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::text("Writing the file."),
            ContentBlock::ToolUse { id: "toolu_a".into(), name: "shell".into(), input: json!({"command": "true"}) },
            ContentBlock::ToolUse { id: "toolu_b".into(), name: "shell".into(), input: json!({}) },
        ]
    );
    assert_eq!(resp.rejected.len(), 1);
    assert_eq!(resp.rejected[0].id, "toolu_b");
    assert_eq!(resp.rejected[0].problem, crate::CallProblem::CutOff);
}

#[test]
fn tool_use_blocks_sharing_an_id_get_unique_ids_in_order() {
    let (t0, t1, t2) = (tool_start(0, "toolu_x"), tool_start(1, "toolu_x"), tool_start(2, "toolu_x"));
    let (d0, d1, d2) = (input_delta(0, r#"{"command":"echo 1"}"#), input_delta(1, r#"{"command":"echo 2"}"#), input_delta(2, "{}"));
    let end = stop_with("tool_use");
    let (resp, _) = replay_events(&[
        ("content_block_start", &t0),
        ("content_block_delta", &d0),
        ("content_block_start", &t1),
        ("content_block_delta", &d1),
        ("content_block_start", &t2),
        ("content_block_delta", &d2),
        ("message_delta", &end),
        ("message_stop", MESSAGE_STOP),
    ]);
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::ToolUse { id: "toolu_x".into(), name: "shell".into(), input: json!({"command": "echo 1"}) },
            ContentBlock::ToolUse { id: "toolu_x_2".into(), name: "shell".into(), input: json!({"command": "echo 2"}) },
            ContentBlock::ToolUse { id: "toolu_x_3".into(), name: "shell".into(), input: json!({}) },
        ]
    );
    assert!(resp.rejected.is_empty());
}

#[test]
fn tool_input_that_is_an_array_is_stored_as_empty_object_and_rejected() {
    let (t0, d0, end) = (tool_start(0, "toolu_1"), input_delta(0, r#"["ls", "-l"]"#), stop_with("tool_use"));
    let (resp, _) = replay_events(&[
        ("content_block_start", &t0),
        ("content_block_delta", &d0),
        ("message_delta", &end),
        ("message_stop", MESSAGE_STOP),
    ]);
    assert_eq!(resp.content, vec![ContentBlock::ToolUse { id: "toolu_1".into(), name: "shell".into(), input: json!({}) }]);
    assert_eq!(
        resp.rejected[0].result_text(2048),
        r#"error: not run: the tool input must be a JSON object, but it was an array: ["ls", "-l"]"#
    );
}

#[test]
fn a_second_start_with_the_same_index_keeps_what_was_already_streamed() {
    let (a, b, s0, end) = (text_delta(0, "Hello, "), text_delta(0, "world."), block_stop(0), stop_with("end_turn"));
    let (resp, seen) = replay_events(&[
        ("content_block_start", TEXT_START_0),
        ("content_block_delta", &a),
        ("content_block_start", TEXT_START_0),
        ("content_block_delta", &b),
        ("content_block_stop", &s0),
        ("message_delta", &end),
        ("message_stop", MESSAGE_STOP),
    ]);
    let streamed: String = seen
        .iter()
        .map(|e| match e {
            GatewayEvent::TextDelta(t) => t.as_str(),
            _ => "",
        })
        .collect();
    assert_eq!(streamed, "Hello, world.");
    assert_eq!(resp.content, vec![ContentBlock::text("Hello, "), ContentBlock::text("world.")]);
    assert_eq!(resp.text(), "Hello, \nworld.");
}

#[test]
fn encode_drops_unsigned_thinking_and_thinking_only_messages() {
    let user = |t: &str| PromptMessage { role: Role::User, blocks: vec![PromptBlock { block: ContentBlock::text(t), cache: false }] };
    let thinking =
        |sig: &str| PromptBlock { block: ContentBlock::Thinking { thinking: "hmm".into(), signature: sig.into() }, cache: false };
    let text = |t: &str| PromptBlock { block: ContentBlock::text(t), cache: false };
    let p = Prompt {
        messages: vec![
            user("a"),
            PromptMessage { role: Role::Assistant, blocks: vec![thinking("")] },
            user("b"),
            PromptMessage { role: Role::Assistant, blocks: vec![thinking("sig")] },
            user("c"),
            PromptMessage { role: Role::Assistant, blocks: vec![thinking(""), text("ok"), thinking("sig2")] },
            user("d"),
        ],
        ..Prompt::default()
    };
    let body = String::from_utf8(encode(&p, "m", 5).body).expect("utf8");
    assert_eq!(
        body,
        concat!(
            r#"{"model":"m","max_tokens":5,"stream":true,"system":[],"messages":["#,
            r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"}]},"#,
            r#"{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"thinking","thinking":"hmm","signature":"sig2"}]},"#,
            r#"{"role":"user","content":[{"type":"text","text":"d"}]}]}"#
        )
    );
}

#[test]
fn tool_ids_and_names_outside_the_api_pattern_are_rewritten_for_the_wire_only() {
    use crate::{wire_tool_id, wire_tool_name};
    assert_eq!(wire_tool_id("toolu_01A-b"), "toolu_01A-b");
    let hash = &sha256_hex(b"functions.shell:0")[..8];
    assert_eq!(wire_tool_id("functions.shell:0"), format!("functions_shell_0_{hash}"));
    assert_ne!(wire_tool_id("a.b"), wire_tool_id("a:b"), "ids differing only in refused characters stay distinct");
    assert_eq!(wire_tool_name("shell"), "shell");
    assert_eq!(wire_tool_name("repo_browser.open_file"), "repo_browser_open_file");
    assert_eq!(wire_tool_name(""), "tool");
    assert_eq!(wire_tool_name(&"é".repeat(70)), "_".repeat(64));
    assert_eq!(wire_tool_name(&"a".repeat(65)), "a".repeat(64));
}
