//! The turn loop against the scripted gateway (docs/design.md §5, §6): tool rounds through `shell`,
//! the final tool-free round, the exact request bytes, cancel, and failures that leave a
//! well-formed history.

use std::time::Duration;

use cicy::conversation::invariants;
use cicy::conversation::message::{ContentBlock, Message};
use cicy::event::{ErrorKind, EventKind, TurnOutcome};
use cicy::prompt::WRAP_UP_NOTICE;
use cicy::turn;
use cicy_test_support::fixture::{cached_prefix, collector, collector_with, kinds, TestHome, TEST_SYSTEM};
use cicy_test_support::gateway::*;
use cicy_test_support::wait::{Fifo, Pidfd};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn body(r: &RecordedRequest) -> Value {
    serde_json::from_slice(&r.body).expect("request body is JSON")
}

fn messages(id: &str, t: &TestHome) -> Vec<Message> {
    serde_json::from_value(t.current_json(id)["messages"].clone()).expect("messages parse")
}

#[tokio::test]
async fn a_tool_round_trip_runs_shell_and_sends_its_result_back() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text_and_tool("Let me look.", "toolu_1", "shell", r#"{"command":"echo hello-from-tool"}"#)));
    gw.push(Reply::sse(anthropic_text("It printed hello-from-tool.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "run echo", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/messages");
    let second = body(&reqs[1]);
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(
        msgs[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"command": "echo hello-from-tool"}})
    );
    assert_eq!(
        msgs[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello-from-tool\nexit code: 0", "cache_control": {"type": "ephemeral"}})
    );

    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 4);
    assert_eq!(invariants::check(&hist), Ok(()));
    assert_eq!(hist[3].plain_text(), "It printed hello-from-tool.");
    let k = kinds(&ev);
    assert!(k.contains(&EventKind::ToolStarted {
        id: "toolu_1".into(),
        name: "shell".into(),
        input: json!({"command": "echo hello-from-tool"})
    }));
    let finished = k.iter().find_map(|e| match e {
        EventKind::ToolFinished { result, is_error, .. } => Some((result.clone(), *is_error)),
        _ => None,
    });
    assert_eq!(finished, Some(("hello-from-tool\nexit code: 0".to_string(), false)));
    let text: String = k
        .iter()
        .filter_map(|e| match e {
            EventKind::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Let me look.It printed hello-from-tool.");
    assert_eq!(k.last(), Some(&EventKind::TurnEnded { outcome: TurnOutcome::Completed }));
    let reply = t.reply_json(&id);
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["input_tokens"], 50);
    assert_eq!(reply["cache_read_input_tokens"], 200);
    assert_eq!(reply["items"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn the_final_round_sends_no_tools_and_the_wrap_up_notice() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", r#"{"command":"true"}"#)));
    // On the final round the model still asks for a tool: it must not run.
    gw.push(Reply::sse(anthropic_text_and_tool("Out of budget.", "t2", "shell", r#"{"command":"touch should-not-exist"}"#)));
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("tight", "[core]", 2);
    let id = t.create("tight", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    let first = body(&reqs[0]);
    let last = body(&reqs[1]);
    assert!(first.get("tools").is_some());
    assert!(last.get("tools").is_none(), "final round must not offer tools");
    // The Anthropic API refuses tool blocks in a request without tools: the final round sends them as text.
    assert!(!reqs[1].body_str().contains(r#""type":"tool_use""#));
    assert_eq!(last["messages"][1]["content"][0], json!({"type": "text", "text": "[called tool `shell` with {\"command\":\"true\"}]"}));
    assert_eq!(last["messages"][2]["content"][0]["text"], "[tool result] exit code: 0");
    assert_eq!(first["system"][0]["text"], TEST_SYSTEM);
    assert_eq!(last["system"][0]["text"], format!("{TEST_SYSTEM}\n\n{WRAP_UP_NOTICE}"));
    assert!(!t.workspace(&id).join("should-not-exist").exists());
    let hist = messages(&id, &t);
    assert_eq!(invariants::check(&hist), Ok(()));
    match &hist.last().unwrap().content {
        cicy::conversation::message::Content::Blocks(b) => assert!(matches!(&b[0], ContentBlock::ToolResult { is_error: true, .. })),
        other => panic!("expected the unrun call's result, got {other:?}"),
    }
}

#[tokio::test]
async fn request_bytes_are_exact_and_the_prefix_is_stable_across_rounds() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", r#"{"command":"echo hi"}"#)));
    gw.push(Reply::sse(anthropic_text("done")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mem = t.workspace(&id).join(".cicy/memory");
    std::fs::create_dir_all(&mem).unwrap();
    // A memory file as a person would write it; MEMORY.md is built from it before the turn.
    std::fs::write(mem.join("preference_colour.md"), "---\ntype: preference\ntitle: favourite colour\nsalience: 4\n---\n\nteal\n").unwrap();
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    turn::run_turn(&mut s, "hello", &em, &CancellationToken::new()).await.unwrap();
    let reqs = gw.requests();
    let first = &reqs[0];
    assert_eq!(first.header("x-cicy-session-id"), Some(s.conversation().current.conversation_id.as_str()));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(first.header("x-cicy-aux"), None);
    insta::assert_snapshot!("first_request_body", first.body_str());

    for r in &reqs {
        let b = body(r);
        let msgs = b["messages"].as_array().unwrap();
        let first_blocks = msgs[0]["content"].as_array().unwrap();
        assert_eq!(first_blocks[0]["text"], "<role>\n# Role\n\nYou are Tess, the test agent.\n</role>");
        let last_blocks = msgs.last().unwrap()["content"].as_array().unwrap();
        let memories = last_blocks.last().unwrap()["text"].as_str().unwrap();
        assert!(memories.starts_with("<memories>\n- [preference★4] favourite colour: teal\n"));
        assert!(memories.ends_with("\n</memories>"));
        assert_eq!(r.body_str().matches(r#""cache_control":{"type":"ephemeral"}"#).count(), 3);
        assert_eq!(last_blocks[last_blocks.len() - 2]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(b["system"].as_array().unwrap().last().unwrap()["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(b["tools"].as_array().unwrap().last().unwrap()["cache_control"], json!({"type": "ephemeral"}));
    }
    assert!(reqs[1].body.starts_with(cached_prefix(&reqs[0].body)), "round 2 must repeat round 1's cached prefix byte for byte");
}

#[tokio::test]
async fn the_same_history_gives_the_same_bytes_every_time() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(500, &[("x-should-retry", "false")], "boom"));
    gw.push(Reply::status(500, &[("x-should-retry", "false")], "boom"));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let (em, _ev) = collector(&id);
    // Two separate processes' worth of sessions: a failed turn is replaced by the next one.
    let mut s = t.open(&id);
    turn::run_turn(&mut s, "same question", &em, &CancellationToken::new()).await.unwrap();
    let mut s = t.open(&id);
    turn::run_turn(&mut s, "same question", &em, &CancellationToken::new()).await.unwrap();
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2, "x-should-retry: false is neither retried nor re-run");
    assert_eq!(reqs[0].body, reqs[1].body);
}

#[tokio::test]
async fn cancel_during_a_stream_leaves_a_marker_and_loadable_files() {
    let gw = ScriptedGateway::start().await;
    let mut chunks = anthropic_prelude();
    chunks.push(event("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#));
    chunks.push(event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"partial"}}"#));
    gw.push(Reply::SseThenHang { chunks });
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    // Cancelled by the first delta: the stream is then hanging.
    let (em, _) = collector_with(&id, move |k| {
        if matches!(k, EventKind::TextDelta { .. }) {
            c.cancel();
        }
    });
    let outcome = tokio::time::timeout(Duration::from_secs(20), turn::run_turn(&mut s, "talk", &em, &cancel)).await.unwrap().unwrap();
    assert_eq!(outcome, TurnOutcome::Cancelled);
    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 2);
    assert_eq!(hist[1].plain_text(), "partial\n[cut off: cancelled by user]\n(no reply this turn · cancelled)");
    assert_eq!(t.reply_json(&id)["status"], "cancelled");
    assert_eq!(t.current_json(&id)["status"], "idle");
    let reopened = t.open(&id);
    assert_eq!(reopened.conversation().current.messages.len(), 2);
    assert!(reopened.notes().restored.is_empty(), "{:?}", reopened.notes().restored);
}

#[tokio::test]
async fn cancel_during_a_tool_kills_its_process_group() {
    let gw = ScriptedGateway::start().await;
    // The tool says through a FIFO, once its background child runs, the pids of both processes
    // that would go on to `touch`: the shell ($$) and the child ($!).
    let cmd = r#"{"command":"(sleep 30; touch late-child) & echo $$ $! > started; sleep 30; touch late-parent"}"#;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", cmd)));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let started = Fifo::new(t.workspace(&id).join("started"));
    let mut s = t.open(&id);
    let (em, _) = collector(&id);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let canceller = tokio::spawn(async move {
        let pids = started.read().await;
        // Held from while the processes surely run, so a reused pid cannot stand in for them.
        let procs: Vec<Pidfd> = pids.split_whitespace().map(|p| Pidfd::open(p.parse().unwrap()).expect("the tool runs")).collect();
        c.cancel();
        procs
    });
    let outcome = tokio::time::timeout(Duration::from_secs(20), turn::run_turn(&mut s, "sleep", &em, &cancel)).await.unwrap().unwrap();
    assert_eq!(outcome, TurnOutcome::Cancelled);
    let hist = messages(&id, &t);
    assert_eq!(invariants::check(&hist), Ok(()));
    assert_eq!(hist.len(), 4, "{hist:?}");
    match &hist[2].content {
        cicy::conversation::message::Content::Blocks(b) => match &b[0] {
            ContentBlock::ToolResult { is_error, content, .. } => {
                assert!(*is_error);
                assert!(content.contains("cancelled"), "{content}");
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert_eq!(hist[3].plain_text(), "(no reply this turn · cancelled)");
    let procs = canceller.await.unwrap();
    assert_eq!(procs.len(), 2);
    for p in procs {
        assert!(p.exited_within(Duration::from_secs(10)).await, "the tool's process {} survived the cancel", p.pid());
    }
}

#[tokio::test]
async fn an_unreachable_gateway_fails_the_turn_clearly_and_keeps_history() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = TestHome::new(&format!("http://127.0.0.1:{port}"), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "anyone there?", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Failed);
    let err = kinds(&ev).into_iter().find_map(|k| match k {
        EventKind::Error { kind, message } => Some((kind, message)),
        _ => None,
    });
    let (kind, message) = err.expect("an error event");
    assert_eq!(kind, ErrorKind::Connect);
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    let hist = messages(&id, &t);
    assert_eq!(hist[0].plain_text(), "anyone there?");
    assert_eq!(hist[1].plain_text(), "(no reply this turn · generation failed)");
    assert_eq!(t.reply_json(&id)["status"], "failed");
    // Its context window was not asked of anyone: the next turn asks again.
    assert!(!cicy::compact::window::path(&t.workspace(&id)).exists());
}

#[tokio::test]
async fn a_stream_cut_inside_tool_input_never_runs_the_tool() {
    let gw = ScriptedGateway::start().await;
    let full = anthropic_tool_use("t1", "shell", r#"{"command":"touch ran"}"#);
    // message_start, ping, block start, "" fragment, first fragment — then EOF.
    gw.push(Reply::sse(full[..5].to_vec()));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "touch it", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Failed);
    assert_eq!(gw.requests().len(), 1, "max_retries 0: a budget of one attempt, so no re-run");
    assert!(!t.workspace(&id).join("ran").exists());
    assert!(!kinds(&ev).iter().any(|k| matches!(k, EventKind::ToolStarted { .. })));
    assert_eq!(invariants::check(&messages(&id, &t)), Ok(()));
}

#[tokio::test]
async fn a_retry_after_a_failure_replays_the_same_user_turn() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], r#"{"error":{"type":"invalid_request_error","message":"nope"}}"#));
    gw.push(Reply::sse(anthropic_text("second time lucky")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    let o = turn::run_turn(&mut s, "question", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(o, TurnOutcome::Blocked);
    assert_eq!(messages(&id, &t)[1].plain_text(), "(no reply this turn · blocked)");
    let o = turn::retry_turn(&mut s, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(o, Some(TurnOutcome::Completed));
    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 2);
    assert_eq!(hist[0].plain_text(), "question");
    assert_eq!(hist[1].plain_text(), "second time lucky");
    assert_eq!(turn::retry_turn(&mut s, &em, &CancellationToken::new()).await.unwrap(), None);
}

#[tokio::test]
async fn openai_style_tool_round_trip() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(openai_tool_call("call_1", "shell", r#"{"command":"echo via-openai"}"#)));
    gw.push(Reply::sse(openai_text("All done.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", Some(cicy::gateway::ApiStyle::Openai));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let o = turn::run_turn(&mut s, "echo please", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(o, TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    let first = body(&reqs[0]);
    let second = body(&reqs[1]);
    assert_eq!(first["stream_options"], json!({"include_usage": true}));
    assert!(first.get("tools").is_some());
    assert_eq!(second["tools"], first["tools"]);
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs[0], json!({"role": "system", "content": TEST_SYSTEM}));
    assert_eq!(msgs[2]["tool_calls"][0]["function"], json!({"name": "shell", "arguments": "{\"command\":\"echo via-openai\"}"}));
    assert_eq!(msgs[3], json!({"role": "tool", "tool_call_id": "call_1", "content": "via-openai\nexit code: 0"}));
    let usage = kinds(&ev).into_iter().find_map(|k| match k {
        EventKind::Usage { input, output, cache_read, .. } => Some((input, output, cache_read)),
        _ => None,
    });
    assert_eq!(usage, Some((25, 15, 100)));
    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 4);
    assert_eq!(hist[3].plain_text(), "All done.");
}

#[tokio::test]
async fn a_pure_chat_role_sends_no_tools() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Welcome.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("concierge", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "hi", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let b = body(&gw.requests()[0]);
    assert!(b.get("tools").is_none());
}

#[tokio::test]
async fn openai_style_retries_a_529_and_never_runs_a_cut_tool_call() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(529, &[], r#"{"error":{"type":"overloaded_error","message":"busy"}}"#));
    gw.push(Reply::sse(openai_text("after the retry")));
    let cut = openai_tool_call("call_9", "shell", r#"{"command":"touch ran"}"#);
    for _ in 0..3 {
        gw.push(Reply::sse(cut[..3].to_vec()));
    }
    let t = TestHome::new(&gw.url(), 1);
    let id = t.create("tester", Some(cicy::gateway::ApiStyle::Openai));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let o = turn::run_turn(&mut s, "first", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(o, TurnOutcome::Completed);
    let retry = kinds(&ev).into_iter().find_map(|k| match k {
        EventKind::Retry { attempt, reason, .. } => Some((attempt, reason)),
        _ => None,
    });
    let (attempt, reason) = retry.expect("a retry event");
    assert_eq!(attempt, 1);
    assert!(reason.contains("529"), "{reason}");
    assert_eq!(gw.requests()[0].body, gw.requests()[1].body);

    let o = turn::run_turn(&mut s, "second", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(o, TurnOutcome::Failed);
    // One budget of 1 + max_retries (1) attempts for the round, re-runs included.
    assert_eq!(gw.requests().len(), 4);
    assert!(!t.workspace(&id).join("ran").exists());
    let hist = messages(&id, &t);
    assert_eq!(invariants::check(&hist), Ok(()));
    assert_eq!(hist.last().unwrap().plain_text(), "(no reply this turn · generation failed)");
}

#[tokio::test]
async fn markers_never_reach_the_wire_and_a_refused_turn_is_replaced_by_the_next_question() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], r#"{"error":{"type":"invalid_request_error","message":"messages.0: unexpected content"}}"#));
    gw.push(Reply::sse(anthropic_text("answer two")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    let huge = "x".repeat(1000);
    assert_eq!(turn::run_turn(&mut s, &huge, &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Blocked);
    assert_eq!(turn::run_turn(&mut s, "question two", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let second = gw.requests()[1].body_str();
    assert!(!second.contains(&huge), "the refused message is not sent again");
    assert!(!second.contains("no reply this turn"));
    let hist = messages(&id, &t);
    assert_eq!(hist.iter().map(Message::plain_text).collect::<Vec<_>>(), ["question two", "answer two"]);

    // A cancelled turn stays in the history, but its marker is not sent.
    let c = CancellationToken::new();
    c.cancel();
    assert_eq!(turn::run_turn(&mut s, "question three", &em, &c).await.unwrap(), TurnOutcome::Cancelled);
    gw.push(Reply::sse(anthropic_text("answer four")));
    turn::run_turn(&mut s, "question four", &em, &CancellationToken::new()).await.unwrap();
    let fourth = body(&gw.requests()[2]);
    let msgs = fourth["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[2]["content"][0]["text"], "question three");
    assert_eq!(msgs[2]["content"][1]["text"], "question four");
    assert!(!gw.requests()[2].body_str().contains("no reply this turn"));
    assert_eq!(messages(&id, &t)[3].plain_text(), "(no reply this turn · cancelled)");
}

#[tokio::test]
async fn retry_continues_the_turn_without_running_completed_tools_again() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", r#"{"command":"echo ran >> counter.txt"}"#)));
    gw.push(Reply::status(500, &[("x-should-retry", "false")], "down"));
    gw.push(Reply::sse(anthropic_text("finished")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "count", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Failed);
    assert_eq!(turn::retry_turn(&mut s, &em, &CancellationToken::new()).await.unwrap(), Some(TurnOutcome::Completed));
    assert_eq!(std::fs::read_to_string(t.workspace(&id).join("counter.txt")).unwrap(), "ran\n");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[1].body, reqs[2].body, "the retry sends the failed round again, nothing else");
    let hist = messages(&id, &t);
    assert_eq!(invariants::check(&hist), Ok(()));
    assert_eq!(hist.len(), 4);
    assert_eq!(hist[3].plain_text(), "finished");
}

/// The two calls of one response: the first writes a file and finishes, the second is still
/// running when the turn dies.
fn two_calls() -> Vec<Vec<u8>> {
    anthropic_tool_uses(&[
        ("t1", "shell", r#"{"command":"echo ran > first.txt; echo first-done"}"#),
        ("t2", "shell", r#"{"command":"sleep 30"}"#),
    ])
}

#[tokio::test]
async fn a_crash_after_the_first_of_two_tool_calls_keeps_its_real_result() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(two_calls()));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let second_started = std::sync::Arc::new(tokio::sync::Notify::new());
    let n = second_started.clone();
    let em = cicy::event::Emitter::new(&id, move |ev| {
        if matches!(&ev.kind, EventKind::ToolStarted { id, .. } if id == "t2") {
            n.notify_one();
        }
    });
    // The process dies while the second call runs: the turn's future is dropped there.
    let never = CancellationToken::new();
    tokio::select! {
        o = turn::run_turn(&mut s, "two steps", &em, &never) => panic!("the turn ended: {o:?}"),
        () = second_started.notified() => {}
    }
    drop(s);
    assert_eq!(std::fs::read_to_string(t.workspace(&id).join("first.txt")).unwrap(), "ran\n");
    let on_disk: Vec<Message> = serde_json::from_value(t.reply_json(&id)["items"].clone()).unwrap();
    assert_eq!(on_disk.len(), 2, "reply.json holds the answer and the finished result: {on_disk:?}");

    let mut s = t.open(&id);
    let hist = s.conversation().current.messages.clone();
    assert_eq!(invariants::check(&hist), Ok(()));
    assert_eq!(hist.len(), 4, "{hist:?}");
    let results = match &hist[2].content {
        cicy::conversation::message::Content::Blocks(b) => b.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        results,
        vec![
            ContentBlock::ToolResult { tool_use_id: "t1".into(), content: "first-done\nexit code: 0".into(), is_error: false },
            ContentBlock::ToolResult { tool_use_id: "t2".into(), content: invariants::SYNTHETIC_RESULT.into(), is_error: true },
        ]
    );
    assert_eq!(hist[3].plain_text(), "(no reply this turn · cancelled)");

    // The next request tells the model the first command ran, with its real output.
    gw.push(Reply::sse(anthropic_text("noted")));
    let (em, _ev) = collector(&id);
    turn::run_turn(&mut s, "what happened?", &em, &CancellationToken::new()).await.unwrap();
    let sent = body(&gw.requests()[1]);
    assert_eq!(
        sent["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "t1", "content": "first-done\nexit code: 0"})
    );
    assert_eq!(
        sent["messages"][2]["content"][1],
        json!({"type": "tool_result", "tool_use_id": "t2", "content": invariants::SYNTHETIC_RESULT, "is_error": true})
    );
}

/// A custom tool whose name or schema a real API refuses (`^[a-zA-Z0-9_-]{1,64}$`, an object
/// schema) is a configuration error naming the file and the tool, before any request is sent.
#[tokio::test]
async fn a_custom_tool_the_api_would_refuse_is_a_config_error_before_any_request() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("ok")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let lite = t.home.lite_config_path();
    for (name, schema, expected) in [
        (
            "deploy.prod",
            r#"{"type":"object"}"#,
            "customTools: `deploy.prod` is not a valid tool name: the APIs accept 1 to 64 letters, digits, `_` and `-`",
        ),
        ("deploy", "{}", "customTools: `deploy`: input_schema must be a JSON Schema object (`\"type\": \"object\"`), got {}"),
    ] {
        let config = format!(
            r#"{{"toolGroups":{{"core":["shell","skill","{name}"]}},"customTools":{{"{name}":{{"description":"d","command":"true","input_schema":{schema}}}}}}}"#
        );
        std::fs::write(&lite, config).unwrap();
        let err = match cicy::agent::Session::open(&t.home, &id) {
            Ok(mut s) => {
                let (em, _ev) = collector(&id);
                let outcome = turn::run_turn(&mut s, "hi", &em, &CancellationToken::new()).await;
                panic!("the session opened and the turn ran ({outcome:?}); referee: {:?}", gw.violations());
            }
            Err(e) => e.to_string(),
        };
        assert_eq!(err, format!("{}: {expected}", lite.display()));
    }
    assert!(gw.requests().is_empty());
}

/// Found by the referee: a blank message left the Anthropic request with `"messages":[]` (a 400
/// on the real API, the turn ended blocked). The CLI skips blank lines; the library refuses them.
#[tokio::test]
async fn a_blank_message_is_refused_before_anything_is_written_or_sent() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let err = turn::run_turn(&mut s, " \n\t", &em, &CancellationToken::new()).await.unwrap_err();
    assert_eq!(err.to_string(), "the message is empty (only whitespace): nothing to send");
    assert!(gw.requests().is_empty());
    assert!(kinds(&ev).is_empty());
    assert!(s.conversation().current.messages.is_empty());
}

/// Runs a turn on `id` that the user cancels at the first text delta of a stream that then
/// hangs; the delta is `word0 word1 word2 word3`.
async fn cancel_after_the_first_delta(gw: &ScriptedGateway, t: &TestHome, id: &str) -> cicy::agent::Session {
    let mut chunks = anthropic_prelude();
    chunks.push(event("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#));
    chunks.push(event(
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word0 word1 word2 word3"}}"#,
    ));
    gw.push(Reply::SseThenHang { chunks });
    let mut s = t.open(id);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let (em, _) = collector_with(id, move |k| {
        if matches!(k, EventKind::TextDelta { .. }) {
            c.cancel();
        }
    });
    let outcome = tokio::time::timeout(Duration::from_secs(20), turn::run_turn(&mut s, "talk", &em, &cancel)).await.unwrap().unwrap();
    assert_eq!(outcome, TurnOutcome::Cancelled);
    let hist = messages(id, t);
    assert_eq!(hist.len(), 2);
    assert_eq!(
        hist[1].content.to_blocks(),
        [
            ContentBlock::text("word0 word1 word2 word3"),
            ContentBlock::text("[cut off: cancelled by user]"),
            ContentBlock::text("(no reply this turn · cancelled)")
        ],
        "the text the reader saw is kept, marked, and the marker ends the message"
    );
    s
}

#[tokio::test]
async fn text_shown_before_a_cancel_is_kept_and_the_next_question_is_sent() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = cancel_after_the_first_delta(&gw, &t, &id).await;
    gw.push(Reply::sse(anthropic_text("Hello.")));
    let (em, _) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "again", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let next = body(&gw.requests()[1]);
    let msgs = next["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "the cancelled turn's kept text is history, not sent (like its marker)");
    let texts: Vec<&str> = msgs[0]["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(texts[texts.len() - 2..], ["talk", "again"]);
    assert!(!gw.requests()[1].body_str().contains("word0"));
    assert_eq!(messages(&id, &t).len(), 4);
}

#[tokio::test]
async fn retry_after_a_cancel_kept_the_shown_text_sends_a_valid_request() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = cancel_after_the_first_delta(&gw, &t, &id).await;
    gw.push(Reply::sse(anthropic_text("Hello.")));
    let (em, _) = collector(&id);
    assert_eq!(turn::retry_turn(&mut s, &em, &CancellationToken::new()).await.unwrap(), Some(TurnOutcome::Completed));
    assert_eq!(gw.requests()[0].body, gw.requests()[1].body, "the round is sent again as it was");
    let hist = messages(&id, &t);
    assert_eq!(hist.iter().map(Message::plain_text).collect::<Vec<_>>(), ["talk", "Hello."]);
}
