//! Integration tests of the gateway client against the scripted gateway (docs/design.md §4, §10):
//! exact wire bytes and headers, streaming, tool rounds, retries, cut-off streams, cancel,
//! unreachable gateways, and key hygiene. Split invariance is in `gateway_split.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cicy::conversation::message::{ContentBlock, Role, Usage};
use cicy::gateway::{
    ApiStyle, AuxKind, CallOptions, GatewayClient, GatewayError, GatewayEvent, GatewaySettings, Prompt, PromptBlock, PromptMessage,
    Response, StopReason, SystemBlock, ToolSpec,
};
use cicy_test_support::gateway::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk-test-SECRET-0123456789";

fn settings(url: &str, style: ApiStyle) -> GatewaySettings {
    GatewaySettings {
        api_key: Some(KEY.into()),
        idle_timeout: Duration::from_secs(30),
        max_retries: 3,
        retry_base_delay: Duration::from_millis(1),
        ..GatewaySettings::new(url, style)
    }
}

fn client(url: &str, style: ApiStyle) -> GatewayClient {
    GatewayClient::new(settings(url, style)).expect("client")
}

fn opts() -> CallOptions {
    CallOptions { model: "test-model".into(), max_tokens: 2048, session_id: "conv-1234".into(), aux: None, timeout: None }
}

fn prompt() -> Prompt {
    Prompt {
        system: vec![SystemBlock { text: "You are terse.".into(), cache: true }],
        tools: vec![ToolSpec {
            name: "shell".into(),
            description: "Run a shell command".into(),
            input_schema: json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
        }],
        tools_cache: true,
        messages: vec![PromptMessage {
            role: Role::User,
            blocks: vec![PromptBlock { block: ContentBlock::text("hello 中"), cache: true }],
        }],
    }
}

/// Sends with a recording callback; returns the result and every event.
async fn send(
    c: &GatewayClient,
    p: &Prompt,
    o: &CallOptions,
    cancel: &CancellationToken,
) -> (Result<Response, GatewayError>, Vec<GatewayEvent>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let mut on_event = move |e: GatewayEvent| sink.lock().expect("lock").push(e);
    // A generous guard so a broken cancel or retry fails the test instead of hanging it.
    let r = tokio::time::timeout(Duration::from_secs(60), c.send(p, o, &mut on_event, cancel)).await.expect("send hung");
    let seen = events.lock().expect("lock").clone();
    (r, seen)
}

fn retries(events: &[GatewayEvent]) -> Vec<u32> {
    events.iter().filter_map(|e| if let GatewayEvent::Retry { attempt, .. } = e { Some(*attempt) } else { None }).collect()
}

fn text_of(events: &[GatewayEvent]) -> Vec<String> {
    events.iter().filter_map(|e| if let GatewayEvent::TextDelta(t) = e { Some(t.clone()) } else { None }).collect()
}

/// Headers minus the transport's own (`host`, `content-length`), sorted.
fn product_headers(req: &RecordedRequest) -> Vec<(String, String)> {
    let mut h: Vec<_> = req.headers.iter().filter(|(k, _)| k != "host" && k != "content-length").cloned().collect();
    h.sort();
    h
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    v.sort();
    v
}

#[tokio::test]
async fn anthropic_exact_wire_bytes_and_headers() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Hi!")));
    // A trailing slash on the base URL must not double the slash.
    let c = client(&format!("{}/", gw.url()), ApiStyle::Anthropic);
    let (r, _) = send(&c, &prompt(), &opts(), &CancellationToken::new()).await;
    let r = r.expect("response");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, "/v1/messages");
    let body = concat!(
        r#"{"model":"test-model","max_tokens":2048,"stream":true,"#,
        r#""tools":[{"name":"shell","description":"Run a shell command","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]},"cache_control":{"type":"ephemeral"}}],"#,
        r#""system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],"#,
        r#""messages":[{"role":"user","content":[{"type":"text","text":"hello 中","cache_control":{"type":"ephemeral"}}]}]}"#
    );
    assert_eq!(reqs[0].body_str(), body);
    assert_eq!(
        product_headers(&reqs[0]),
        pairs(&[
            ("x-api-key", KEY),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("accept-encoding", "identity"),
            ("x-cicy-session-id", "conv-1234"),
        ])
    );
    // The digest covers the whole body here: the last breakpoint ends just before `}]}]}`.
    let end = body.len() - "}]}]}".len();
    assert_eq!(r.prefix_sha256, sha256_hex(&body.as_bytes()[..end]));
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn openai_exact_wire_bytes_and_headers_on_aux_call() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(openai_text("Hi!")));
    let c = client(&gw.url(), ApiStyle::Openai);
    let o = CallOptions { aux: Some(AuxKind::Compact), max_tokens: 4096, ..opts() };
    let (r, _) = send(&c, &prompt(), &o, &CancellationToken::new()).await;
    let r = r.expect("response");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(
        reqs[0].body_str(),
        concat!(
            r#"{"model":"test-model","max_tokens":4096,"stream":true,"stream_options":{"include_usage":true},"#,
            r#""tools":[{"type":"function","function":{"name":"shell","description":"Run a shell command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}}],"#,
            r#""messages":[{"role":"system","content":"You are terse."},{"role":"user","content":[{"type":"text","text":"hello 中"}]}]}"#
        )
    );
    assert_eq!(
        product_headers(&reqs[0]),
        pairs(&[
            ("authorization", &format!("Bearer {KEY}")),
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("accept-encoding", "identity"),
            ("x-cicy-session-id", "conv-1234"),
            ("x-cicy-aux", "compact"),
        ])
    );
    // Same prompt, same digest in both styles.
    let a = cicy::gateway::anthropic::encode(&prompt(), "test-model", 4096);
    assert_eq!(r.prefix_sha256, a.prefix_sha256);
    assert_eq!(r.content, vec![ContentBlock::text("Hi!")]);
    assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(r.usage, Usage { input_tokens: 25, output_tokens: 15, cache_creation_input_tokens: 0, cache_read_input_tokens: 100 });
}

#[tokio::test]
async fn no_key_sends_no_auth_header() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("x")));
    gw.push(Reply::sse(openai_text("x")));
    for style in [ApiStyle::Anthropic, ApiStyle::Openai] {
        let c = GatewayClient::new(GatewaySettings::new(gw.url(), style)).expect("client");
        send(&c, &prompt(), &opts(), &CancellationToken::new()).await.0.expect("ok");
    }
    for req in gw.requests() {
        assert_eq!(req.header("x-api-key"), None);
        assert_eq!(req.header("authorization"), None);
    }
}

#[tokio::test]
async fn streaming_text_deltas_arrive_in_order() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::Sse { chunks: anthropic_text("Hello there, 世界 🎉!"), delay: Duration::from_millis(5) });
    let c = client(&gw.url(), ApiStyle::Anthropic);
    let (r, events) = send(&c, &prompt(), &opts(), &CancellationToken::new()).await;
    let r = r.expect("response");
    assert_eq!(text_of(&events), pieces("Hello there, 世界 🎉!", 3));
    assert_eq!(events.len(), 3, "only text deltas: {events:?}");
    assert_eq!(r.content, vec![ContentBlock::text("Hello there, 世界 🎉!")]);
    assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(r.usage, Usage { input_tokens: 25, output_tokens: 15, cache_creation_input_tokens: 10, cache_read_input_tokens: 100 });
}

#[tokio::test]
async fn tool_use_round_in_both_styles() {
    let gw = ScriptedGateway::start().await;
    let args = r#"{"cmd": "ls -la", "cwd": "/tmp/中"}"#;
    gw.push(Reply::sse(anthropic_text_and_tool("Let me look.", "toolu_01", "shell", args)));
    gw.push(Reply::sse(openai_tool_call("call_01", "shell", args)));
    let want_input = json!({"cmd": "ls -la", "cwd": "/tmp/中"});
    let (r, _) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &opts(), &CancellationToken::new()).await;
    let r = r.expect("anthropic");
    assert_eq!(
        r.content,
        vec![
            ContentBlock::text("Let me look."),
            ContentBlock::ToolUse { id: "toolu_01".into(), name: "shell".into(), input: want_input.clone() },
        ]
    );
    assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
    let (r, _) = send(&client(&gw.url(), ApiStyle::Openai), &prompt(), &opts(), &CancellationToken::new()).await;
    let r = r.expect("openai");
    assert_eq!(r.content, vec![ContentBlock::ToolUse { id: "call_01".into(), name: "shell".into(), input: want_input }]);
    assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
}

// On tokio's paused clock: the 2 s wait passes at once, and the clock still shows it passed.
#[tokio::test(start_paused = true)]
async fn status_429_with_retry_after_waits_at_least_that_long() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(429, &[("retry-after", "2")], r#"{"type":"error","error":{"type":"rate_limit_error"}}"#));
    gw.push(Reply::sse(anthropic_text("ok")));
    let c = client(&gw.url(), ApiStyle::Anthropic);
    let started = tokio::time::Instant::now();
    let (r, events) = send(&c, &prompt(), &opts(), &CancellationToken::new()).await;
    assert!(started.elapsed() >= Duration::from_secs(2), "waited only {:?}", started.elapsed());
    assert_eq!(r.expect("ok after retry").content, vec![ContentBlock::text("ok")]);
    match &events[0] {
        GatewayEvent::Retry { attempt, delay_ms, reason } => {
            assert_eq!(*attempt, 1);
            assert_eq!(*delay_ms, 2000);
            assert!(reason.contains("429"), "{reason}");
        }
        other => panic!("first event should be the retry: {other:?}"),
    }
    assert_eq!(gw.requests().len(), 2);
}

#[tokio::test]
async fn status_529_then_success() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(529, &[], r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#));
    gw.push(Reply::sse(anthropic_text("fine")));
    let (r, events) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &opts(), &CancellationToken::new()).await;
    assert_eq!(r.expect("ok").content, vec![ContentBlock::text("fine")]);
    assert_eq!(retries(&events), vec![1]);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body, reqs[1].body, "a retry sends the same bytes");
}

#[tokio::test]
async fn should_retry_false_stops_a_retryable_status() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(503, &[("x-should-retry", "false")], "maintenance"));
    let (r, events) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &opts(), &CancellationToken::new()).await;
    match r {
        Err(GatewayError::Status { status: 503, body, should_retry: Some(false), .. }) => assert_eq!(body, "maintenance"),
        other => panic!("{other:?}"),
    }
    assert!(retries(&events).is_empty());
    assert_eq!(gw.requests().len(), 1);
}

#[tokio::test]
async fn should_retry_true_retries_a_400() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[("x-should-retry", "true")], "try again"));
    gw.push(Reply::sse(anthropic_text("ok")));
    let (r, events) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &opts(), &CancellationToken::new()).await;
    r.expect("ok");
    assert_eq!(retries(&events), vec![1]);
}

#[tokio::test]
async fn overloaded_error_before_content_is_retried() {
    let gw = ScriptedGateway::start().await;
    let mut chunks = anthropic_prelude();
    chunks.push(anthropic_error("overloaded_error", "Overloaded"));
    gw.push(Reply::sse(chunks));
    gw.push(Reply::sse(anthropic_text("second try")));
    let (r, events) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &opts(), &CancellationToken::new()).await;
    assert_eq!(r.expect("ok").content, vec![ContentBlock::text("second try")]);
    assert_eq!(retries(&events), vec![1]);
    assert_eq!(gw.requests().len(), 2);
}

#[tokio::test]
async fn an_error_after_content_reruns_the_round_and_reports_the_text_it_streamed() {
    let gw = ScriptedGateway::start().await;
    let full = anthropic_text("partial answer");
    // message_start, ping, block start, first text delta — then the error.
    let mut chunks = full[..4].to_vec();
    chunks.push(anthropic_error("overloaded_error", "Overloaded"));
    gw.push(Reply::sse(chunks));
    gw.push(Reply::sse(anthropic_text("second run")));
    let (r, events) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &opts(), &CancellationToken::new()).await;
    assert_eq!(r.expect("the re-run answers").content, vec![ContentBlock::text("second run")]);
    let first = pieces("partial answer", 3)[0].clone();
    assert_eq!(events[0], GatewayEvent::TextDelta(first));
    match &events[1] {
        GatewayEvent::Retry { attempt: 1, reason, .. } => {
            assert_eq!(reason, "gateway stream error (overloaded_error): Overloaded; up to 3 retries this round")
        }
        other => panic!("the re-run is announced as a retry: {other:?}"),
    }
    assert_eq!(text_of(&events[2..]), pieces("second run", 3));
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body, reqs[1].body);
}

#[tokio::test]
async fn a_stream_cut_after_content_for_good_fails_after_two_reruns_keeping_the_partial_text() {
    let gw = ScriptedGateway::start().await;
    let full = anthropic_text("cut every time");
    for _ in 0..3 {
        gw.push(Reply::sse(full[..4].to_vec()));
    }
    let c = client(&gw.url(), ApiStyle::Anthropic);
    let mut seen = Vec::new();
    let r = c.send_round(&prompt(), &opts(), &mut |e| seen.push(e), &CancellationToken::new()).await;
    let f = r.expect_err("cut three times");
    assert!(matches!(f.error, GatewayError::Incomplete(_)), "{:?}", f.error);
    assert_eq!(f.partial, pieces("cut every time", 3)[0]);
    assert_eq!(f.attempts, 3);
    assert_eq!(retries(&seen), vec![1, 2]);
    assert_eq!(gw.requests().len(), 3, "one send and two re-runs, not more");
}

#[tokio::test]
async fn eof_inside_tool_input_is_incomplete_and_returns_no_tool() {
    let gw = ScriptedGateway::start().await;
    let full = anthropic_tool_use("toolu_1", "shell", r#"{"cmd": "rm -rf /tmp/x"}"#);
    // message_start, ping, block start, empty fragment, first real fragment — then EOF.
    for _ in 0..3 {
        gw.push(Reply::sse(full[..5].to_vec()));
    }
    let c = client(&gw.url(), ApiStyle::Anthropic);
    let mut seen = Vec::new();
    let r = c.send_round(&prompt(), &opts(), &mut |e| seen.push(e), &CancellationToken::new()).await;
    let f = r.expect_err("cut");
    match &f.error {
        GatewayError::Incomplete(why) => assert!(why.contains("shell"), "{why}"),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    assert_eq!(f.partial, "", "no text streamed");
    assert_eq!(retries(&seen), vec![1, 2], "content had started: two re-runs");
    assert_eq!(gw.requests().len(), 3);
}

#[tokio::test]
async fn eof_before_any_content_is_retried_then_reported() {
    let gw = ScriptedGateway::start().await;
    for _ in 0..4 {
        gw.push(Reply::sse(anthropic_prelude()));
    }
    let (r, events) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &opts(), &CancellationToken::new()).await;
    assert!(matches!(r, Err(GatewayError::Incomplete(_))), "{r:?}");
    assert_eq!(retries(&events), vec![1, 2, 3]);
    assert_eq!(gw.requests().len(), 4);
}

#[tokio::test]
async fn openai_eof_before_finish_reason_is_incomplete() {
    let gw = ScriptedGateway::start().await;
    let full = openai_tool_call("call_1", "shell", r#"{"cmd":"ls"}"#);
    for _ in 0..3 {
        gw.push(Reply::sse(full[..3].to_vec()));
    }
    let (r, _) = send(&client(&gw.url(), ApiStyle::Openai), &prompt(), &opts(), &CancellationToken::new()).await;
    assert!(matches!(r, Err(GatewayError::Incomplete(_))), "{r:?}");
    assert_eq!(gw.requests().len(), 3, "a send and two re-runs");
}

// A paused clock: the timeout fires when the stream has gone quiet, never while a loaded
// machine is still sending it.
#[tokio::test(start_paused = true)]
async fn openai_finished_answer_without_done_ends_at_idle() {
    let gw = ScriptedGateway::start().await;
    let full = openai_text("done early");
    // Everything but the usage chunk and [DONE]; the connection then stays open.
    gw.push(Reply::SseThenHang { chunks: full[..full.len() - 2].to_vec() });
    let s = GatewaySettings { idle_timeout: Duration::from_millis(300), ..settings(&gw.url(), ApiStyle::Openai) };
    let c = GatewayClient::new(s).expect("client");
    let (r, _) = send(&c, &prompt(), &opts(), &CancellationToken::new()).await;
    assert_eq!(r.expect("complete at finish_reason").content, vec![ContentBlock::text("done early")]);
}

#[tokio::test]
async fn cancel_during_a_hanging_stream() {
    let gw = ScriptedGateway::start().await;
    let full = anthropic_text("never finished");
    gw.push(Reply::SseThenHang { chunks: full[..4].to_vec() });
    let c = client(&gw.url(), ApiStyle::Anthropic);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    // Cancel as soon as the first delta shows: the stream is then hanging.
    let mut on_event = move |e: GatewayEvent| {
        if matches!(e, GatewayEvent::TextDelta(_)) {
            trigger.cancel();
        }
    };
    let r = tokio::time::timeout(Duration::from_secs(10), c.send(&prompt(), &opts(), &mut on_event, &cancel)).await;
    assert!(matches!(r, Ok(Err(GatewayError::Cancelled))), "{r:?}");
    assert_eq!(gw.requests().len(), 1);
}

#[tokio::test]
async fn cancel_from_another_task_and_during_a_retry_wait() {
    let gw = ScriptedGateway::start().await;
    // A hanging stream after its first delta, then a 429 whose retry wait (60 s) is cut short.
    gw.push(Reply::SseThenHang { chunks: anthropic_text("never finished")[..4].to_vec() });
    gw.push(Reply::status(429, &[("retry-after", "60")], "slow down"));
    let c = client(&gw.url(), ApiStyle::Anthropic);
    let hanging: fn(&GatewayEvent) -> bool = |e| matches!(e, GatewayEvent::TextDelta(_));
    let waiting: fn(&GatewayEvent) -> bool = |e| matches!(e, GatewayEvent::Retry { delay_ms: 60_000, .. });
    for cancel_after in [hanging, waiting] {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        let (seen, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let canceller = tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if cancel_after(&e) {
                    trigger.cancel();
                    return true;
                }
            }
            false
        });
        // The canceller stops listening once it has cancelled.
        let mut on_event = move |e: GatewayEvent| drop(seen.send(e));
        let r = tokio::time::timeout(Duration::from_secs(60), c.send(&prompt(), &opts(), &mut on_event, &cancel)).await;
        assert!(matches!(r, Ok(Err(GatewayError::Cancelled))), "{r:?}");
        drop(on_event);
        assert!(canceller.await.expect("canceller"), "cancelled before the awaited event");
    }
    assert_eq!(gw.requests().len(), 2);
}

// A paused clock: the timeout fires when the stream has gone quiet, never while a loaded
// machine is still sending it.
#[tokio::test(start_paused = true)]
async fn whole_call_timeout() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::SseThenHang { chunks: anthropic_prelude() });
    let o = CallOptions { timeout: Some(Duration::from_millis(300)), ..opts() };
    let (r, _) = send(&client(&gw.url(), ApiStyle::Anthropic), &prompt(), &o, &CancellationToken::new()).await;
    assert!(matches!(r, Err(GatewayError::Timeout(0))), "{r:?}");
}

#[tokio::test]
async fn unreachable_gateway_is_a_connect_error_after_retries() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let c = client(&format!("http://127.0.0.1:{port}"), ApiStyle::Anthropic);
    let (r, events) = send(&c, &prompt(), &opts(), &CancellationToken::new()).await;
    let err = r.expect_err("closed port");
    assert!(matches!(err, GatewayError::Connect { .. }), "{err:?}");
    assert_eq!(retries(&events), vec![1, 2, 3]);
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.to_string().contains(KEY));
}

#[tokio::test]
async fn script_running_out_answers_500() {
    let gw = ScriptedGateway::start().await;
    let s = GatewaySettings { max_retries: 0, ..settings(&gw.url(), ApiStyle::Anthropic) };
    let (r, _) = send(&GatewayClient::new(s).expect("client"), &prompt(), &opts(), &CancellationToken::new()).await;
    match r {
        Err(GatewayError::Status { status: 500, body, .. }) => assert!(body.contains("ran out"), "{body}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn api_key_never_appears_in_errors() {
    let gw = ScriptedGateway::start().await;
    // A gateway that echoes the key back, in a status body and in a stream error.
    gw.push(Reply::status(401, &[], &format!("invalid x-api-key: {KEY}")));
    let mut chunks = anthropic_text("x")[..4].to_vec();
    chunks.push(anthropic_error("invalid_request_error", &format!("bad key {KEY}")));
    gw.push(Reply::sse(chunks));
    let c = client(&gw.url(), ApiStyle::Anthropic);
    let mut shown = Vec::new();
    for _ in 0..2 {
        let (r, _) = send(&c, &prompt(), &opts(), &CancellationToken::new()).await;
        let e = r.expect_err("error");
        shown.push(format!("{e} {e:?}"));
    }
    // Bad configuration errors, and the settings' Debug.
    let bad = GatewaySettings { api_key: Some(format!("{KEY}\n")), ..settings(&gw.url(), ApiStyle::Openai) };
    shown.push(format!("{:?}", bad));
    let e = GatewayClient::new(bad).expect_err("invalid header value");
    assert!(matches!(e, GatewayError::Connect { .. }), "{e:?}");
    shown.push(format!("{e} {e:?}"));
    shown.push(format!("{:?}", client(&gw.url(), ApiStyle::Anthropic)));
    for s in &shown {
        assert!(!s.contains(KEY), "key leaked: {s}");
    }
    assert!(shown[0].contains("[redacted]"), "{}", shown[0]);
}
