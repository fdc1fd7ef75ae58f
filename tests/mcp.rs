//! MCP tools (DESIGN.md §12) against a real MCP server nobody on this project wrote: the MCP
//! project's reference server `@modelcontextprotocol/server-everything`, installed from npm by
//! `scripts/mcp-test-server.sh` (scripts/test.sh passes its path in `CICY_TEST_MCP_SERVER`;
//! without it the test runs the script itself). Turns run against the scripted gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use cicy::event::{EventKind, TurnOutcome};
use cicy::turn;
use common::fixture::{collector, collector_with, kinds, TestHome};
use common::gateway::*;
use common::wait::Pidfd;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The variable named as the gateway's `api_key_env` in these tests, set in this process: an
/// MCP server must not see it.
const KEY_VAR: &str = "CICY_MCP_TEST_GATEWAY_KEY";
const KEY: &str = "sk-mcp-test-secret-4711";

/// The server's entry script ([`common::mcp::server_entry`]). Also sets [`KEY_VAR`] once,
/// before any test of this binary starts a process (every test calls this first).
fn server_entry() -> &'static str {
    static KEY_SET: OnceLock<()> = OnceLock::new();
    KEY_SET.get_or_init(|| std::env::set_var(KEY_VAR, KEY));
    common::mcp::server_entry()
}

/// A home whose `tester` role has server `everything` (with `timeout_secs`) and whose
/// gateway key lives in [`KEY_VAR`].
fn home(gw: &ScriptedGateway, timeout_secs: u64) -> TestHome {
    let entry = server_entry();
    let t = TestHome::new(&gw.url(), 0);
    let cfg = t.home.config_path();
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!("  api_key_env: {KEY_VAR}\n"));
    std::fs::write(&cfg, text).unwrap();
    let meta = t.home.roles_dir().join("tester/meta.yaml");
    let mut meta_text = std::fs::read_to_string(&meta).unwrap();
    meta_text.push_str(&format!(
        "mcp_servers:\n  everything:\n    command: node\n    args: [{entry:?}, stdio]\n    env: {{MCP_TEST_MARK: from-meta}}\n    timeout_secs: {timeout_secs}\n"
    ));
    std::fs::write(meta, meta_text).unwrap();
    t
}

fn body(r: &RecordedRequest) -> Value {
    serde_json::from_slice(&r.body).expect("request body is JSON")
}

/// The `tool_result` blocks of the last message of request `r`: (content, is_error).
fn results(r: &RecordedRequest) -> Vec<(String, bool)> {
    let b = body(r);
    let last = b["messages"].as_array().unwrap().last().unwrap().clone();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "tool_result")
        .map(|c| (c["content"].as_str().unwrap().to_string(), c["is_error"] == json!(true)))
        .collect()
}

const TOOLS: &[&str] = &[
    "mcp__everything__echo",
    "mcp__everything__get-annotated-message",
    "mcp__everything__get-env",
    "mcp__everything__get-resource-links",
    "mcp__everything__get-resource-reference",
    "mcp__everything__get-structured-content",
    "mcp__everything__get-sum",
    "mcp__everything__get-tiny-image",
    "mcp__everything__gzip-file-as-resource",
    "mcp__everything__simulate-research-query",
    "mcp__everything__toggle-simulated-logging",
    "mcp__everything__toggle-subscriber-updates",
    "mcp__everything__trigger-long-running-operation",
    "shell",
    "skill",
];

#[tokio::test]
async fn a_turn_lists_the_servers_tools_sorted_and_calls_them() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t1", "mcp__everything__echo", r#"{"message":"hi there"}"#),
        ("t2", "mcp__everything__get-sum", r#"{"a":2,"b":40}"#),
        ("t3", "mcp__everything__get-tiny-image", r#"{}"#),
        ("t4", "mcp__everything__get-env", r#"{}"#),
        ("t5", "mcp__everything__get-sum", r#"{"a":"x"}"#),
    ])));
    gw.push(Reply::sse(anthropic_text("Done.")));
    gw.push(Reply::sse(anthropic_text("Again.")));
    let t = home(&gw, 60);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "use the tools", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let pid = s.mcp.pid("everything").await.expect("the server runs after the turn");

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    let first = body(&reqs[0]);
    let names: Vec<&str> = first["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOLS);
    // The server's description and schema, key order as the server sent it, on the wire.
    let echo = r#"{"name":"mcp__everything__echo","description":"Echoes back the input string","input_schema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"message":{"type":"string","description":"Message to echo"}},"required":["message"]}}"#;
    assert!(reqs[0].body_str().contains(echo), "{}", reqs[0].body_str());

    let got = results(&reqs[1]);
    assert_eq!(got[0], ("Echo: hi there".to_string(), false));
    assert_eq!(got[1], ("The sum of 2 and 40 is 42.".to_string(), false));
    assert_eq!(got[2], ("Here's the image you requested:\n[image: image/png, 4033 bytes]\nThe image above is the MCP logo.".to_string(), false));
    // The server's environment: the meta.yaml `env` is there, the gateway key is not.
    assert!(got[3].0.contains("from-meta"), "{}", got[3].0);
    assert!(!got[3].0.contains(KEY) && !got[3].0.contains(KEY_VAR), "the gateway key reached the server: {}", got[3].0);
    // The server refuses the input with `isError: true`: an error result with its text.
    let refused = "MCP error -32602: Input validation error: Invalid arguments for tool get-sum: Invalid input: expected number, received string at a\nInvalid input: expected number, received undefined at b";
    assert_eq!(got[4], (refused.to_string(), true));

    // stderr went to the log, never into a request or an event.
    let log = std::fs::read_to_string(t.workspace(&id).join(".cicy/logs/mcp-everything.log")).unwrap();
    assert!(log.starts_with("--- ") && log.contains("Starting default (STDIO) server..."), "{log}");
    assert!(reqs.iter().all(|r| !r.body_str().contains("Starting default")));
    assert!(!format!("{:?}", kinds(&ev)).contains("Starting default"));

    // The next turn reuses the running server and sends the same tools, byte for byte.
    assert_eq!(turn::run_turn(&mut s, "again", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(s.mcp.pid("everything").await, Some(pid));
    let reqs = gw.requests();
    let tools = |r: &RecordedRequest| serde_json::to_vec(&body(r)["tools"]).unwrap();
    assert_eq!(tools(&reqs[2]), tools(&reqs[0]));
    drop(s);
    assert!(ends(pid).await, "the server outlived its session");
}

#[tokio::test]
async fn a_crashed_server_gives_an_error_result_and_is_started_again() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "mcp__everything__echo", r#"{"message":"one"}"#)));
    let (held, gate) = Reply::gated(anthropic_tool_use("t2", "mcp__everything__echo", r#"{"message":"two"}"#));
    gw.push(held);
    gw.push(Reply::sse(anthropic_tool_use("t3", "mcp__everything__echo", r#"{"message":"three"}"#)));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let t = home(&gw, 60);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let pool = s.mcp.clone();
    let (em, _ev) = collector(&id);
    let kill = async {
        gw.wait_for_requests(2).await;
        let pid = pool.pid("everything").await.expect("running after the first call");
        let proc = Pidfd::open(pid as i32).expect("the server process");
        // SAFETY: kill takes a pid and a signal number.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
        assert!(proc.exited_within(Duration::from_secs(10)).await);
        gate.add_permits(1);
        pid
    };
    let never = CancellationToken::new();
    let (outcome, old_pid) = tokio::join!(turn::run_turn(&mut s, "echo thrice", &em, &never), kill);
    assert_eq!(outcome.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(results(&reqs[1]), [("Echo: one".to_string(), false)]);
    assert_eq!(
        results(&reqs[2]),
        [("error: mcp server everything: the server exited; it is started again on the next call".to_string(), true)]
    );
    assert_eq!(results(&reqs[3]), [("Echo: three".to_string(), false)]);
    let new_pid = s.mcp.pid("everything").await.expect("started again");
    assert_ne!(new_pid, old_pid);
    let log = std::fs::read_to_string(t.workspace(&id).join(".cicy/logs/mcp-everything.log")).unwrap();
    assert_eq!(log.matches("Starting default (STDIO) server...").count(), 2, "{log}");
}

#[tokio::test]
async fn a_cancel_ends_a_running_call_and_a_slow_call_times_out() {
    let gw = ScriptedGateway::start().await;
    let slow = r#"{"duration":30,"steps":3}"#;
    gw.push(Reply::sse(anthropic_tool_use("t1", "mcp__everything__trigger-long-running-operation", slow)));
    gw.push(Reply::sse(anthropic_tool_use("t2", "mcp__everything__trigger-long-running-operation", slow)));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let t = home(&gw, 1);
    let id = t.create("tester", None);
    let mut s = t.open(&id);

    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let (em, ev) = collector_with(&id, move |k| {
        if matches!(k, EventKind::ToolStarted { .. }) {
            c.cancel();
        }
    });
    // timeout_secs 1 does not matter here: the cancel comes first (and a start gets 60 s).
    assert_eq!(turn::run_turn(&mut s, "slow", &em, &cancel).await.unwrap(), TurnOutcome::Cancelled);
    let finished: Vec<(String, bool)> = kinds(&ev)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ToolFinished { result, is_error, .. } => Some((result, is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [("error: cancelled by user".to_string(), true)]);

    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "slow again", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(
        results(&reqs[2]),
        [("error: mcp server everything: tool trigger-long-running-operation timed out after 1 s".to_string(), true)]
    );
}

/// Whether process `pid` is gone or ends within 10 s.
async fn ends(pid: u32) -> bool {
    match Pidfd::open(pid as i32) {
        None => true,
        Some(p) => p.exited_within(Duration::from_secs(10)).await,
    }
}

#[tokio::test]
async fn a_server_that_cannot_start_is_left_out_with_a_system_event() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("One.")));
    gw.push(Reply::sse(anthropic_text("Two.")));
    let t = home(&gw, 60);
    let meta = t.home.roles_dir().join("tester/meta.yaml");
    let mut text = std::fs::read_to_string(&meta).unwrap();
    text.push_str("  broken:\n    command: cicy-no-such-mcp-server\n");
    std::fs::write(meta, text).unwrap();
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let system = |ev: &std::sync::Arc<std::sync::Mutex<Vec<cicy::event::Event>>>| -> Vec<String> {
        kinds(ev)
            .into_iter()
            .filter_map(|k| match k {
                EventKind::System { text } => Some(text),
                _ => None,
            })
            .collect()
    };
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "one", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let failed = "mcp server broken: its tools are left out of this turn: cannot start `cicy-no-such-mcp-server`: No such file or directory (os error 2)";
    assert_eq!(system(&ev), [failed]);
    let names: Vec<String> =
        body(&gw.requests()[0])["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, TOOLS);
    // The next turn tries again at once (later failures in a row wait: `pool::tests`).
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "two", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(system(&ev), [failed]);
    assert!(std::fs::read_to_string(t.workspace(&id).join(".cicy/logs/mcp-broken.log")).unwrap().starts_with("--- "));
}
