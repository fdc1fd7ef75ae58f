//! Unit tests of `openai.rs`: exact request bytes and every streaming case.

use serde_json::json;

use super::*;
use crate::anthropic::tests::sample_prompt;
use crate::{PromptBlock, PromptMessage, Response};

const SAMPLE_BODY: &str = concat!(
    r#"{"model":"gpt-x","max_tokens":2048,"stream":true,"stream_options":{"include_usage":true},"#,
    r#""tools":[{"type":"function","function":{"name":"shell","description":"Run a command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}}],"#,
    r#""messages":[{"role":"system","content":"You are a helper.\n\nSkills: none"},"#,
    r#"{"role":"user","content":[{"type":"text","text":"<role>\nR\n</role>"},{"type":"text","text":"list files"}]},"#,
    r#"{"role":"assistant","content":"Sure.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"shell","arguments":"{\"z\":1,\"cmd\":\"ls\"}"}}]},"#,
    r#"{"role":"tool","tool_call_id":"toolu_1","content":"a.txt\n\"b\".txt"},"#,
    r#"{"role":"user","content":[{"type":"text","text":"<memories>\nm\n</memories>"}]}]}"#
);

#[test]
fn encode_exact_bytes_and_shared_digest() {
    let p = sample_prompt();
    let enc = encode(&p, "gpt-x", 2048);
    assert_eq!(String::from_utf8(enc.body.clone()).expect("utf8"), SAMPLE_BODY);
    assert_eq!(enc.prefix_sha256, anthropic::encode(&p, "gpt-x", 2048).prefix_sha256);
    assert_eq!(encode(&p, "gpt-x", 2048), enc);
}

#[test]
fn tool_only_assistant_has_null_content_and_no_system_when_empty() {
    let p = Prompt {
        messages: vec![PromptMessage {
            role: Role::Assistant,
            blocks: vec![PromptBlock { block: ContentBlock::ToolUse { id: "c1".into(), name: "f".into(), input: json!({}) }, cache: true }],
        }],
        ..Prompt::default()
    };
    let body = String::from_utf8(encode(&p, "m", 5).body).expect("utf8");
    assert_eq!(
        body,
        r#"{"model":"m","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}"#
    );
}

fn chunk(data: &str) -> SseEvent {
    SseEvent { event: "message".into(), data: data.into() }
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

fn tool_stream() -> Vec<SseEvent> {
    vec![
        chunk(r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#),
        chunk(r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}"#),
        chunk(r#"{"id":"c","choices":[{"index":0,"delta":{"content":"look 中"},"finish_reason":null}]}"#),
        // Second call's fragment arrives first, without id/name (they come later).
        chunk(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"b\""}}]}}]}"#),
        chunk(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_A","type":"function","function":{"name":"shell","arguments":""}}]}}]}"#,
        ),
        chunk(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"cmd\":"}}]}}]}"#),
        chunk(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_B","function":{"name":"read","arguments":":2}"}}]}}]}"#,
        ),
        chunk(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}"#),
        chunk(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"call_C","function":{"name":"noargs"}}]}}]}"#),
        chunk(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#),
        chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":64}}}"#,
        ),
        chunk("[DONE]"),
    ]
}

#[test]
fn tool_calls_merge_by_index_with_late_ids() {
    let (resp, seen) = run(&tool_stream());
    let resp = resp.expect("complete");
    assert_eq!(seen, vec![GatewayEvent::TextDelta("Let me ".into()), GatewayEvent::TextDelta("look 中".into())]);
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::text("Let me look 中"),
            ContentBlock::ToolUse { id: "call_A".into(), name: "shell".into(), input: json!({"cmd": "ls"}) },
            ContentBlock::ToolUse { id: "call_B".into(), name: "read".into(), input: json!({"b": 2}) },
            ContentBlock::ToolUse { id: "call_C".into(), name: "noargs".into(), input: json!({}) },
        ]
    );
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(resp.usage, Usage { input_tokens: 36, output_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 64 });
}

#[test]
fn finish_reason_without_done_is_complete_and_eof_before_is_incomplete() {
    let events = tool_stream();
    let (resp, _) = run(&events[..10]);
    assert_eq!(resp.expect("complete at finish_reason").usage, Usage::default());
    let (resp, _) = run(&events[..9]);
    assert!(matches!(resp, Err(GatewayError::Incomplete(ref w)) if w == "no finish_reason"), "{resp:?}");
    let (resp, _) = run(&[]);
    assert!(matches!(resp, Err(GatewayError::Incomplete(_))));
}

#[test]
fn bad_final_arguments_are_a_rejected_call_with_input_object() {
    let (resp, _) = run(&[
        chunk(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"f","arguments":"{\"a\":"}}]}}]}"#),
        chunk(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#),
    ]);
    let resp = resp.expect("a malformed call does not fail the response");
    assert_eq!(resp.content, vec![ContentBlock::ToolUse { id: "x".into(), name: "f".into(), input: json!({}) }]);
    assert_eq!(
        resp.rejected,
        vec![crate::RejectedCall {
            id: "x".into(),
            name: "f".into(),
            problem: crate::CallProblem::NotJson { error: "EOF while parsing a value at line 1 column 5".into(), raw: "{\"a\":".into() },
        }]
    );
}

#[test]
fn finish_reason_mapping() {
    assert_eq!(StopReason::from_openai("stop"), StopReason::EndTurn);
    assert_eq!(StopReason::from_openai("tool_calls"), StopReason::ToolUse);
    assert_eq!(StopReason::from_openai("length"), StopReason::MaxTokens);
    assert_eq!(StopReason::from_openai("content_filter"), StopReason::Other("content_filter".into()));
}

#[test]
fn error_chunk_is_stream_error() {
    let err = Accumulator::new()
        .on_event(&chunk(r#"{"error":{"message":"Overloaded","type":"overloaded_error","code":null}}"#), &mut |_| {})
        .expect_err("error");
    assert!(matches!(err, GatewayError::StreamError { ref kind, ref message } if kind == "overloaded_error" && message == "Overloaded"));
    let err = Accumulator::new().on_event(&chunk("{not json"), &mut |_| {}).expect_err("decode");
    assert!(matches!(err, GatewayError::Decode(_)));
}

#[test]
fn reasoning_is_emitted_usage_in_last_choice_chunk_and_done_alone_completes() {
    let (resp, seen) = run(&[
        chunk(r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#),
        chunk(
            r#"{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
        ),
    ]);
    let resp = resp.expect("ok");
    assert_eq!(seen, vec![GatewayEvent::ThinkingDelta("think".into()), GatewayEvent::TextDelta("ok".into())]);
    assert_eq!(resp.content, vec![ContentBlock::text("ok")]);
    assert_eq!(resp.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(resp.usage.input_tokens, 5);
    let (resp, _) = run(&[chunk(r#"{"choices":[{"index":0,"delta":{"content":"x"}}]}"#), chunk("[DONE]")]);
    assert_eq!(resp.expect("done completes").stop_reason, None);
}

/// Replays OpenAI chunks given as JSON texts (plus `[DONE]`) through `client::replay`, as bytes.
fn replay_chunks(chunks: &[&str]) -> (Response, Vec<GatewayEvent>) {
    let bytes: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    crate::client::replay(crate::ApiStyle::Openai, &bytes).expect("complete")
}

#[test]
fn length_inside_tool_arguments_keeps_the_text_and_rejects_the_cut_call() {
    let (resp, seen) = replay_chunks(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Writing it."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"shell","arguments":"{\"command\":\"true\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"shell","arguments":"{\"command\":\"cat > f <<EOF\\nlong"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2048}}"#,
        "[DONE]",
    ]);
    assert_eq!(seen, vec![GatewayEvent::TextDelta("Writing it.".into())]);
    assert_eq!(resp.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::text("Writing it."),
            ContentBlock::ToolUse { id: "call_1".into(), name: "shell".into(), input: json!({"command": "true"}) },
            ContentBlock::ToolUse { id: "call_2".into(), name: "shell".into(), input: json!({}) },
        ]
    );
    assert_eq!(resp.rejected, vec![crate::RejectedCall { id: "call_2".into(), name: "shell".into(), problem: crate::CallProblem::CutOff }]);
}

#[test]
fn done_once_usage_follows_finish_reason_but_not_before() {
    let mut acc = Accumulator::new();
    let feed = |acc: &mut Accumulator, c: &str| StreamAccumulator::on_event(acc, &chunk(c), &mut |_| {}).expect("ok");
    // Usage before the finish (some servers send it with every chunk) is not the final one.
    feed(&mut acc, r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#);
    assert!(!acc.is_complete() && !acc.is_done());
    feed(&mut acc, r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
    assert!(acc.is_complete() && !acc.is_done());
    feed(&mut acc, r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#);
    assert!(acc.is_done());
    let resp = Box::new(acc).finish().expect("complete");
    assert_eq!(resp.usage, Usage { input_tokens: 3, output_tokens: 2, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
    // Usage in the finish chunk itself is final too.
    let mut acc = Accumulator::new();
    feed(
        &mut acc,
        r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
    );
    assert!(acc.is_done());
}

#[test]
fn encode_sends_no_thinking_and_no_message_left_empty() {
    let user = |t: &str| PromptMessage { role: Role::User, blocks: vec![PromptBlock { block: ContentBlock::text(t), cache: false }] };
    let thinking =
        |sig: &str| PromptBlock { block: ContentBlock::Thinking { thinking: "hmm".into(), signature: sig.into() }, cache: false };
    let p = Prompt {
        messages: vec![
            user("a"),
            PromptMessage { role: Role::Assistant, blocks: vec![thinking("")] },
            user("b"),
            PromptMessage {
                role: Role::Assistant,
                blocks: vec![thinking("s"), PromptBlock { block: ContentBlock::text("ok"), cache: false }],
            },
            user("c"),
        ],
        ..Prompt::default()
    };
    let body = String::from_utf8(encode(&p, "m", 5).body).expect("utf8");
    assert_eq!(
        body,
        concat!(
            r#"{"model":"m","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"messages":["#,
            r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},"#,
            r#"{"role":"assistant","content":"ok"},"#,
            r#"{"role":"user","content":[{"type":"text","text":"c"}]}]}"#
        )
    );
}
