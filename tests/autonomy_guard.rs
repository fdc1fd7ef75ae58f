//! The wish guard's judge against the scripted gateway (docs/design.md §13 "Guardrails at write
//! time"): the exact request it sends (`x-cicy-aux: guard`, session `guard-<id>`, its system
//! text and user text, one attempt), and each outcome — allow, refuse with the judge's class and
//! reason, HTTP 500, an unreadable answer and a gateway that is not listening all refusing with
//! class `judge` — and `check` making no gateway call when the `run` line is refused.

use std::path::Path;
use std::time::Duration;

use cicy::autonomy::guard::{self, GuardCtx, Judge, Refusal, JUDGE_SYSTEM_TEXT};
use cicy::gateway::{ApiStyle, GatewayClient, GatewaySettings};
use cicy_test_support::gateway::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Retries allowed by the client's settings, so a single request proves the judge makes one
/// attempt of its own accord.
fn client(url: &str) -> GatewayClient {
    GatewayClient::new(GatewaySettings {
        api_key: Some("sk-test".into()),
        max_retries: 3,
        retry_base_delay: Duration::from_millis(1),
        ..GatewaySettings::new(url, ApiStyle::Anthropic)
    })
    .unwrap()
}

async fn ask(gw_url: &str, what: &str, why: Option<&str>) -> Result<(), Refusal> {
    let c = client(gw_url);
    let j = Judge { client: &c, model: "judge-model", agent_id: "w-1" };
    guard::judge(&j, what, why, &CancellationToken::new()).await
}

fn refusal(class: &str, reason: &str) -> Result<(), Refusal> {
    Err(Refusal { class: class.into(), reason: reason.into() })
}

#[tokio::test]
async fn an_allowed_wish_sends_exactly_the_judge_request() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text(r#"{"verdict":"allow","class":"none","reason":"tidying notes is harmless"}"#)));
    assert_eq!(ask(&gw.url(), "tidy the notes folder", Some("it is a mess")).await, Ok(()));
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(r.header("x-cicy-aux"), Some("guard"));
    assert_eq!(r.header("x-cicy-session-id"), Some("guard-w-1"));
    let want = json!({
        "model": "judge-model",
        "max_tokens": 256,
        "stream": true,
        "system": [{"type": "text", "text": JUDGE_SYSTEM_TEXT}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "what: tidy the notes folder\nwhy: it is a mess\n"}]}],
    });
    assert_eq!(r.body_str(), want.to_string());
    assert!(JUDGE_SYSTEM_TEXT.starts_with("You are the guard of an AI agent's idle-time wishes."));
    assert!(
        JUDGE_SYSTEM_TEXT.ends_with(r#"{"verdict":"allow"|"refuse","class":"<one class above, or none>","reason":"<one short sentence>"}"#)
    );
}

#[tokio::test]
async fn a_refusal_carries_the_judges_class_and_reason() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text(
        "Refused.\n```json\n{\"verdict\":\"refuse\",\"class\":\"model\",\"reason\":\"it switches the agent to another model\"}\n```",
    )));
    assert_eq!(ask(&gw.url(), "switch myself to a bigger model", None).await, refusal("model", "it switches the agent to another model"));
    let body: serde_json::Value = serde_json::from_slice(&gw.requests()[0].body).unwrap();
    assert_eq!(body["messages"][0]["content"][0]["text"], "what: switch myself to a bigger model\nwhy: (none)\n");
}

#[tokio::test]
async fn a_gateway_error_refuses_after_one_attempt() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(500, &[], "boom"));
    gw.push(Reply::sse(anthropic_text(r#"{"verdict":"allow"}"#)));
    let r = ask(&gw.url(), "tidy", None).await;
    assert_eq!(r, refusal("judge", "the guard judge call failed: gateway answered HTTP 500: boom"));
    assert_eq!(gw.requests().len(), 1, "no retry");
}

#[tokio::test]
async fn an_unreadable_answer_refuses() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("I think it is fine.")));
    assert_eq!(
        ask(&gw.url(), "tidy", None).await,
        refusal("judge", "the guard judge did not answer with a JSON object: I think it is fine.")
    );
    gw.push(Reply::sse(anthropic_text(r#"{"verdict":"probably"}"#)));
    assert_eq!(
        ask(&gw.url(), "tidy", None).await,
        refusal("judge", r#"the guard judge's verdict is neither allow nor refuse: {"verdict":"probably"}"#)
    );
}

#[tokio::test]
async fn a_gateway_that_is_not_listening_refuses() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = ask(&url, "tidy", None).await.unwrap_err();
    assert_eq!(err.class, "judge");
    let want = format!("the guard judge call failed: cannot reach the gateway at {url}/v1/messages");
    assert!(err.reason.starts_with(&want), "{}", err.reason);
}

#[tokio::test]
async fn check_asks_the_judge_only_when_the_run_line_passes() {
    let gw = ScriptedGateway::start().await;
    let c = client(&gw.url());
    let j = Judge { client: &c, model: "judge-model", agent_id: "w-1" };
    let ctx = GuardCtx { workspace: Path::new("/h/workers/w-1"), home: Path::new("/h") };
    let cancel = CancellationToken::new();
    let r = guard::check("clean up", None, Some("rm -rf .cicy/memory"), &ctx, &j, &cancel).await;
    assert_eq!(r, refusal("memory", "`rm` on `.cicy/memory` would delete or overwrite the agent's memory (.cicy/memory)"));
    assert!(gw.requests().is_empty(), "a refused run line costs no gateway call");
    gw.push(Reply::sse(anthropic_text(r#"{"verdict":"allow","class":"none","reason":"ok"}"#)));
    assert_eq!(guard::check("write a note", None, Some("echo hi > notes.txt"), &ctx, &j, &cancel).await, Ok(()));
    assert_eq!(gw.requests().len(), 1);
    gw.push(Reply::sse(anthropic_text(r#"{"verdict":"refuse","class":"limits","reason":"raises the compaction threshold"}"#)));
    assert_eq!(
        guard::check("raise my context limit to 900K", None, None, &ctx, &j, &cancel).await,
        refusal("limits", "raises the compaction threshold")
    );
}
