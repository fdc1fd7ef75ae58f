//! The gateway client's one retry layer against the scripted gateway (docs/design.md §4, §6.2): one
//! attempt budget per round, `retry-after`, errors that repeat, refused connections, errors
//! that say what to fix (no key, a 404), and compressed bodies. Waits run on tokio's paused
//! clock, so nothing here sleeps for real.

use std::io::Write;
use std::time::Duration;

use cicy::conversation::message::{ContentBlock, Role};
use cicy::gateway::{
    ApiStyle, CallOptions, GatewayClient, GatewayError, GatewayEvent, GatewaySettings, Prompt, PromptBlock, PromptMessage, Response,
};
use cicy_test_support::gateway::*;
use tokio_util::sync::CancellationToken;

fn opts() -> CallOptions {
    CallOptions { model: "test-model".into(), max_tokens: 2048, session_id: "conv-1".into(), aux: None, timeout: None }
}

fn prompt() -> Prompt {
    Prompt {
        messages: vec![PromptMessage { role: Role::User, blocks: vec![PromptBlock { block: ContentBlock::text("hi"), cache: false }] }],
        ..Prompt::default()
    }
}

/// cicy's defaults, no key: what a one-shot command uses.
fn defaults(url: &str) -> GatewayClient {
    GatewayClient::new(GatewaySettings::new(url, ApiStyle::Anthropic)).expect("client")
}

/// Fast backoff for tests that count requests, not waits.
fn fast(url: &str) -> GatewayClient {
    GatewayClient::new(GatewaySettings { retry_base_delay: Duration::from_millis(1), ..GatewaySettings::new(url, ApiStyle::Anthropic) })
        .expect("client")
}

async fn send(c: &GatewayClient) -> (Result<Response, GatewayError>, Vec<GatewayEvent>) {
    let mut seen = Vec::new();
    let r = c.send(&prompt(), &opts(), &mut |e| seen.push(e), &CancellationToken::new()).await;
    (r, seen)
}

/// `(attempt, delay_ms, reason)` of every retry event.
fn retries(events: &[GatewayEvent]) -> Vec<(u32, u64, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            GatewayEvent::Retry { attempt, delay_ms, reason } => Some((*attempt, *delay_ms, reason.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_429_forever_costs_one_budget_of_eleven_requests_each_waiting_at_least_retry_after() {
    let gw = ScriptedGateway::start().await;
    gw.fallback(|_| {
        Reply::status(429, &[("retry-after", "1")], r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#)
    });
    let started = tokio::time::Instant::now();
    let (r, events) = send(&defaults(&gw.url())).await;
    assert!(matches!(r, Err(GatewayError::Status { status: 429, .. })), "{r:?}");
    assert_eq!(gw.requests().len(), 11, "1 + max_retries (10) attempts for the round, not (1 + 10) × 3");
    let waits = retries(&events);
    assert_eq!(waits.iter().map(|w| w.0).collect::<Vec<_>>(), (1..=10).collect::<Vec<u32>>());
    for (n, (_, delay, _)) in waits.iter().enumerate() {
        // max(retry-after, backoff × jitter in [0.75, 1]), backoff = min(0.5 s · 2^n, 8 s).
        let backoff = (500u64 << n).min(8000);
        let (low, high) = ((backoff * 3 / 4).max(1000), backoff.max(1000));
        assert!((low..=high).contains(delay), "wait {n}: {delay} ms not in {low}..={high}");
    }
    assert_eq!(waits[0].1, 1000);
    assert_eq!(waits[1].1, 1000);
    let total: u64 = waits.iter().map(|w| w.1).sum();
    let elapsed = started.elapsed().as_millis() as u64;
    assert!((total..total + 50).contains(&elapsed), "waited {elapsed} ms for {total} ms of retry waits");
}

#[tokio::test]
async fn a_plain_500_or_an_in_stream_api_error_that_repeats_identically_is_tried_twice() {
    let gw = ScriptedGateway::start().await;
    gw.fallback(|_| Reply::status(500, &[], "Internal Server Error"));
    let (r, events) = send(&fast(&gw.url())).await;
    assert!(matches!(r, Err(GatewayError::Status { status: 500, .. })), "{r:?}");
    assert_eq!(gw.requests().len(), 2);
    assert_eq!(retries(&events).len(), 1);

    let gw = ScriptedGateway::start().await;
    gw.fallback(|_| {
        let mut chunks = anthropic_prelude();
        chunks.push(anthropic_error("api_error", "litellm.APIError: upstream said no"));
        Reply::sse(chunks)
    });
    let (r, _) = send(&fast(&gw.url())).await;
    assert!(matches!(r, Err(GatewayError::StreamError { .. })), "{r:?}");
    assert_eq!(gw.requests().len(), 2);

    // A 500 whose text changes is not a repeat: the budget decides.
    let gw = ScriptedGateway::start().await;
    gw.fallback(|n| Reply::status(500, &[], &format!("request {n} failed")));
    send(&fast(&gw.url())).await.0.expect_err("500s");
    assert_eq!(gw.requests().len(), 11);
}

#[tokio::test]
async fn a_refusal_without_a_key_names_the_variable_to_set_and_is_not_retried() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(401, &[], "missing x-api-key"));
    gw.push(Reply::status(403, &[], "forbidden"));
    gw.push(Reply::status(500, &[], "litellm.AuthenticationError: Missing Anthropic API Key"));
    let (r, _) = send(&fast(&gw.url())).await;
    assert_eq!(
        r.expect_err("401").to_string(),
        "gateway answered HTTP 401 and no API key is set: put the key in `CICY_API_KEY` (missing x-api-key)"
    );
    let named = GatewaySettings {
        api_key_env: "MY_GATEWAY_KEY".into(),
        retry_base_delay: Duration::from_millis(1),
        ..GatewaySettings::new(gw.url(), ApiStyle::Anthropic)
    };
    let named = GatewayClient::new(named).expect("client");
    let (r, _) = send(&named).await;
    assert_eq!(
        r.expect_err("403").to_string(),
        "gateway answered HTTP 403 and no API key is set: put the key in `MY_GATEWAY_KEY` (named by gateway.api_key_env) or `CICY_API_KEY` (forbidden)"
    );
    let (r, _) = send(&named).await;
    assert!(matches!(r, Err(GatewayError::NoKey { status: 500, .. })), "{r:?}");
    assert_eq!(gw.requests().len(), 3, "none of them is retried");

    // With a key set, a 401 is the gateway's word alone.
    gw.push(Reply::status(401, &[], "bad key"));
    let keyed = GatewaySettings { api_key: Some("sk-test-key".into()), ..GatewaySettings::new(gw.url(), ApiStyle::Anthropic) };
    let (r, _) = send(&GatewayClient::new(keyed).expect("client")).await;
    assert_eq!(r.expect_err("401").to_string(), "gateway answered HTTP 401: bad key");
}

#[tokio::test]
async fn a_404_names_the_url_tried_and_a_base_url_ending_in_v1_gets_a_hint() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(404, &[], ""));
    gw.push(Reply::status(404, &[], "no such route"));
    let (r, _) = send(&fast(&format!("{}/v1/", gw.url()))).await;
    assert_eq!(
        r.expect_err("404").to_string(),
        format!(
            "gateway answered HTTP 404 (not found) for {}/v1/v1/messages; the gateway URL must not end in `/v1`: cicy appends `/v1/messages` or `/v1/chat/completions` itself, so drop `/v1` from it",
            gw.url()
        )
    );
    let (r, _) = send(&fast(&gw.url())).await;
    assert_eq!(
        r.expect_err("404").to_string(),
        format!("gateway answered HTTP 404 (not found) for {}/v1/messages: no such route", gw.url())
    );
    let reqs = gw.requests();
    assert_eq!(reqs.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(), ["/v1/v1/messages", "/v1/messages"]);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("deflate");
    e.finish().expect("deflate")
}

fn encoded(encoding: &str, body: Vec<u8>) -> Reply {
    Reply::Raw {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into()), ("content-encoding".into(), encoding.into())],
        body,
    }
}

#[tokio::test]
async fn a_compressed_stream_is_decoded_and_identity_is_asked_for() {
    let gw = ScriptedGateway::start().await;
    let stream = anthropic_text("über gzip").concat();
    gw.push(encoded("gzip", gzip(&stream)));
    gw.push(encoded("deflate", zlib(&anthropic_text("deflated").concat())));
    gw.push(encoded("zstd", stream.clone()));
    let c = fast(&gw.url());
    assert_eq!(send(&c).await.0.expect("gzip").content, vec![ContentBlock::text("über gzip")]);
    assert_eq!(send(&c).await.0.expect("deflate").content, vec![ContentBlock::text("deflated")]);
    let (r, events) = send(&c).await;
    assert_eq!(
        r.expect_err("zstd").to_string(),
        "cannot decode the gateway stream: the response body has `content-encoding: zstd`, which cicy cannot decode (it asks for `identity` and reads gzip, br and deflate)"
    );
    assert!(retries(&events).is_empty(), "an encoding cicy cannot read is not retried");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.header("accept-encoding") == Some("identity")));
}

fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    format!("http://127.0.0.1:{}", l.local_addr().expect("addr").port())
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_for_ten_seconds_with_one_reason_naming_the_url_once() {
    let url = closed_port_url();
    let started = tokio::time::Instant::now();
    let (r, events) = send(&defaults(&url)).await;
    let elapsed = started.elapsed();
    let err = r.expect_err("nothing listens");
    assert!(matches!(err, GatewayError::Connect { .. }), "{err:?}");
    let waits = retries(&events);
    // 0.5 + 1 + 2 + 4 s (× jitter), then the last wait is cut to what is left of the 10 s.
    assert_eq!(waits.iter().map(|w| w.0).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    let total: u64 = waits.iter().map(|w| w.1).sum();
    assert!((9_995..=10_000).contains(&total), "{total} ms");
    assert!(elapsed >= Duration::from_millis(9_995) && elapsed <= Duration::from_millis(10_050), "{elapsed:?}");
    let endpoint = format!("{url}/v1/messages");
    for (_, _, reason) in &waits {
        assert_eq!(reason, &waits[0].2, "one reason for the whole wait");
        assert_eq!(reason.matches(&url[7..]).count(), 1, "the URL once: {reason}");
        assert!(reason.starts_with(&format!("cannot reach the gateway at {endpoint}: ")), "{reason}");
        assert!(reason.ends_with(": Connection refused (os error 111); trying again for up to 10 s"), "{reason}");
    }
    assert_eq!(err.to_string().matches(&url[7..]).count(), 1, "{err}");
}

#[tokio::test(start_paused = true)]
async fn without_a_connect_budget_a_refused_connection_is_retried_past_the_attempt_budget() {
    let settings =
        GatewaySettings { max_retries: 1, connect_retry_budget: None, ..GatewaySettings::new(closed_port_url(), ApiStyle::Anthropic) };
    let c = GatewayClient::new(settings).expect("client");
    let cancel = CancellationToken::new();
    let mut seen = Vec::new();
    let trigger = cancel.clone();
    let r = c
        .send(
            &prompt(),
            &opts(),
            &mut |e| {
                if matches!(e, GatewayEvent::Retry { attempt: 6, .. }) {
                    trigger.cancel();
                }
                seen.push(e);
            },
            &cancel,
        )
        .await;
    assert!(matches!(r, Err(GatewayError::Cancelled)), "{r:?}");
    let waits = retries(&seen);
    assert_eq!(waits.iter().map(|w| w.0).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    assert!(waits[5].1 >= 6000, "backoff keeps growing to its ceiling: {waits:?}");
    assert!(waits[0].2.ends_with("; trying again until it answers"), "{}", waits[0].2);
}
