//! Unit tests of `anthropic.rs`: exact request bytes, digest, and every streaming case.

use serde_json::json;

use super::*;
use crate::gateway::{PromptBlock, PromptMessage, SystemBlock, ToolSpec};

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
                    PromptBlock {
                        block: ContentBlock::Thinking { thinking: "hmm".into(), signature: "sig".into() },
                        cache: false,
                    },
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
    let body = r#"{"model":"m","max_tokens":10,"stream":true,"system":[],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
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
    (acc.finish(), seen)
}

fn full_stream() -> Vec<SseEvent> {
    vec![
        sse("message_start", r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1,"cache_creation_input_tokens":100,"cache_read_input_tokens":0}}}"#),
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
        sse("content_block_start", r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_9","name":"shell","input":{}}}"#),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}"#),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\": \"l"}}"#),
        // No `event:` line: the type comes from the JSON.
        sse("message", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"s\", \"a\": 1}"}}"#),
        sse("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
        sse("future_event", r#"{"type":"future_event","x":1}"#),
        sse("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}"#),
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
        vec![
            GatewayEvent::ThinkingDelta("let me".into()),
            GatewayEvent::TextDelta("Hel".into()),
            GatewayEvent::TextDelta("lo 中".into()),
        ]
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
    assert_eq!(resp.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(resp.usage, Usage { input_tokens: 12, output_tokens: 42, cache_creation_input_tokens: 100, cache_read_input_tokens: 0 });
}

#[test]
fn usage_from_message_delta_when_start_has_zeros() {
    let (resp, _) = run(&[
        sse("message_start", r#"{"type":"message_start","message":{"usage":{"input_tokens":0,"output_tokens":0}}}"#),
        sse("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":7,"output_tokens":3,"cache_read_input_tokens":5,"cache_creation_input_tokens":null}}"#),
        sse("message_stop", r#"{"type":"message_stop"}"#),
    ]);
    let resp = resp.expect("ok");
    assert_eq!(resp.usage, Usage { input_tokens: 7, output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 5 });
    assert!(resp.content.is_empty());
}

#[test]
fn tool_input_from_start_when_fragments_empty() {
    let (resp, _) = run(&[
        sse("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"n","input":{"k":"v"}}}"#),
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
fn bad_tool_json_is_an_error_not_empty_object() {
    let (resp, _) = run(&[
        sse("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"n","input":{}}}"#),
        sse("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": "}}"#),
        sse("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
    ]);
    assert!(matches!(resp, Err(GatewayError::Decode(ref m)) if m.contains("t1")), "{resp:?}");
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
