//! `cicy-agent serve` as a client sees it (docs/design.md §9): one per home, the guards and their
//! JSON errors, the dispatch of chats while busy (`queued` / `flush` / `done`), `/compact`
//! refused while busy, the states of a tool turn, agents that do not wait for each other.
//! Each test runs a real serve process against the scripted gateway.

use serde_json::{json, Value};

use cicy_test_support::cli::command;
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, anthropic_tool_use, Reply, ScriptedGateway};
use cicy_test_support::history::{body, wire_messages};
use cicy_test_support::serve::{types, Frame, Serve};

fn states(frames: &[Frame]) -> Vec<String> {
    frames.iter().filter(|f| f.event == "state").map(|f| f.data["state"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_of_the_same_home_exits_2_naming_the_first() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let out = command(t.root(), &gw.url(), &["serve", "--port", "0"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr), format!("error: serve already running (pid {}, port {})\n", s.pid, s.port));
    let info: Value = serde_json::from_slice(&std::fs::read(t.root().join("serve.json")).unwrap()).unwrap();
    assert_eq!(info["pid"], s.pid, "the second serve left the first's serve.json alone");
    let bind = command(t.root(), &gw.url(), &["serve", "--port", "0", "--bind", "0.0.0.0"]).output().await.unwrap();
    assert_eq!(bind.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bind.stderr).starts_with("error: --bind 0.0.0.0: serve listens on 127.0.0.1 only"));
    assert_eq!(s.stop().await, 0);
    assert!(!t.root().join("serve.json").exists(), "a clean stop withdraws serve.json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_answers_a_json_error() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();

    let health: Value = plain.get(s.url("/api/health")).send().await.unwrap().json().await.unwrap();
    let info: Value = serde_json::from_slice(&std::fs::read(t.root().join("serve.json")).unwrap()).unwrap();
    assert_eq!(health, json!({"ok": true, "instance_id": info["instance_id"], "pid": s.pid, "agents": 1}));

    let r = plain.get(s.url("/api/agents")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "unauthorized");
    let r = plain.get(s.url("/api/agents")).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status(), 401);

    let r = s.request(reqwest::Method::GET, "/api/agents").header("host", format!("evil.example:{}", s.port)).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "forbidden_host");

    let big = json!({"agent_id": id, "text": "x".repeat(1 << 20)});
    let (status, err) = s.post("/api/cicy/chat", big).await;
    assert_eq!((status, err["error"].as_str()), (413, Some("too_large")));

    let (status, err) = s.post("/api/cicy/chat", json!({"agent_id": "w-99", "text": "hi"})).await;
    assert_eq!((status, err), (404, json!({"error": "not_found", "message": "no agent `w-99` (see `cicy-agent ls`)"})));
    let (status, err) = s.get("/api/nowhere").await;
    assert_eq!((status, err["error"].as_str()), (404, Some("not_found")));

    let (status, err) = s.post("/api/cicy/chat", json!({"agent_id": id})).await;
    assert_eq!((status, err), (400, json!({"error": "bad_request", "message": "agent_id and text required"})));
    let r = s.request(reqwest::Method::POST, "/api/cicy/chat").body("{not json").send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.json::<Value>().await.unwrap()["message"].as_str().unwrap().starts_with("the body is not the JSON this route takes"));
    // A query string or a path parameter that does not parse is a JSON error too.
    let (status, err) = s.get(&format!("/api/agents/{id}/todos?all=yes")).await;
    assert_eq!((status, err["error"].as_str()), (400, Some("bad_request")));
    assert!(err["message"].as_str().unwrap().contains("all"), "{err}");
    let (status, err) = s.post(&format!("/api/agents/{id}/todos/abc/done"), json!({})).await;
    assert_eq!((status, err["error"].as_str()), (400, Some("bad_request")));
    let (status, err) = s.get(&format!("/api/cicy/history?agent_id={id}&all=maybe")).await;
    assert_eq!((status, err), (400, json!({"error": "bad_request", "message": "all=`maybe` is not one of 1, true, yes, 0, false, no"})));
    // A message the inbox refuses is the sender's mistake, not the server's.
    let (status, err) = s.post(&format!("/api/agents/{id}/messages"), json!({"text": "hi", "from": ""})).await;
    assert_eq!((status, err), (400, json!({"error": "bad_request", "message": "the sender (`from`) is empty"})));
    assert!(gw.requests().is_empty(), "no refused request reached the gateway");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_while_busy_are_queued_and_run_as_one_follow_up_turn() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let (slow, gate) = Reply::gated(anthropic_text("first answer"));
    gw.push(slow);
    gw.push(Reply::sse(anthropic_text("second answer")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;

    let mut first = s.chat(&id, "a").await;
    gw.wait_for_requests(1).await;
    for text in ["b", "c"] {
        let frames = s.chat(&id, text).await.until("done").await;
        assert_eq!(types(&frames), ["queued", "done"]);
        assert_eq!(frames[0].id, None, "a frame about one request is not in the log");
        assert_eq!(frames[0].data["text"], "Queued — will be handled after the current reply completes.");
    }
    let (status, row) = s.get(&format!("/api/agents/{id}")).await;
    assert_eq!((status, row["busy"].as_bool(), row["pending"].as_u64()), (200, Some(true), Some(2)));

    // `/compact` while busy is refused and changes no file.
    let current = std::fs::read(t.workspace(&id).join(".cicy/history/current.json")).unwrap();
    let (status, err) = s.post("/api/cicy/compact", json!({"agent_id": id})).await;
    assert_eq!((status, err["error"].as_str()), (409, Some("busy")));
    let refused = s.chat(&id, "/compact").await.until("done").await;
    assert_eq!(types(&refused), ["error", "done"]);
    assert_eq!(
        refused[0].data["message"],
        "/compact can only run when the agent is idle — it was NOT executed; resend after the current reply finishes"
    );
    assert_eq!(std::fs::read(t.workspace(&id).join(".cicy/history/current.json")).unwrap(), current);

    gate.add_permits(1);
    let frames = first.until("done").await;
    let shown: Vec<String> =
        types(&frames).into_iter().filter(|t| ["turn_started", "turn_ended", "flush", "done"].contains(&t.as_str())).collect();
    assert_eq!(shown, ["turn_started", "turn_ended", "flush", "turn_started", "turn_ended", "done"]);
    let flush = frames.iter().find(|f| f.event == "flush").unwrap();
    assert_eq!(flush.data["text"], "Processing queued input…");
    let ids: Vec<u64> = frames.iter().map(|f| f.id.expect("logged frames carry their seq")).collect();
    assert!(ids.windows(2).all(|w| w[1] > w[0]), "seq strictly increases: {ids:?}");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    let last = wire_messages(&reqs[1]).pop().unwrap();
    assert_eq!(last.plain_text(), "b\nc");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_turn_goes_through_its_states_in_order() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command": "echo hi"}"#)));
    gw.push(Reply::sse(anthropic_text("done it")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let frames = s.chat(&id, "run it").await.until("done").await;
    assert_eq!(states(&frames), ["running", "executing_tools", "running", "streaming", "idle"]);
    let tool = frames.iter().find(|f| f.event == "tool_finished").unwrap();
    assert_eq!(tool.data["result"], "hi\nexit code: 0");
    assert_eq!(body(&gw.requests()[1])["messages"].as_array().unwrap().len(), 3);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_on_one_agent_never_waits_for_a_slow_turn_on_another() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let (a, b) = (t.create("tester", None), t.create("tester", None));
    let (slow, gate) = Reply::gated(anthropic_text("slow"));
    gw.push(slow);
    gw.push(Reply::sse(anthropic_text("quick")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut on_b = s.chat(&b, "take your time").await;
    gw.wait_for_requests(1).await;
    // B's answer is held until A's turn has ended: A must finish while B still waits.
    let frames = s.chat(&a, "be quick").await.until("done").await;
    let text: String = frames.iter().filter(|f| f.event == "text_delta").map(|f| f.data["text"].as_str().unwrap()).collect();
    assert_eq!(text, "quick");
    gate.add_permits(1);
    let frames = on_b.until("done").await;
    assert!(frames.iter().any(|f| f.event == "turn_ended" && f.data["outcome"] == "completed"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_of_one_agent_see_the_same_events_in_the_same_order() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command": "echo hi"}"#)));
    gw.push(Reply::sse(anthropic_text("all done")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut one = s.events(&id, None).await;
    let mut two = s.events(&id, None).await;
    let chat = s.chat(&id, "go").await.until("done").await;
    let (a, b) = (one.until("done").await, two.until("done").await);
    assert_eq!(a, b);
    assert_eq!(a, chat, "the chat stream is the agent's stream for that run");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_are_listed_created_and_their_agents_md_read_and_written() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (status, created) = s.post("/api/agents", json!({"title": "Ada", "role_template": "tester"})).await;
    assert_eq!((status, created.clone()), (201, json!({"id": "w-1"})));
    let (_, rows) = s.get("/api/agents").await;
    assert_eq!(
        rows,
        json!([{"id": "w-1", "title": "Ada", "role": "worker", "master_id": null, "state": "idle", "busy": false,
                "pending": 0, "steering": 0, "wake_at": null, "last_seq": 0, "unanswered": 0}])
    );
    let (status, md) = s.get("/api/memory/templates/agent/w-1").await;
    assert_eq!(
        (status, md["scope"].as_str(), md["filename"].as_str(), md["exists"].as_bool()),
        (200, Some("agent"), Some("AGENTS.md"), Some(true))
    );
    assert_eq!(md["content"], "# Role\n\nYou are Ada.\n");
    let r = s
        .request(reqwest::Method::PUT, "/api/memory/templates/agent/w-1")
        .json(&json!({"content": "# Role\n\nYou are Ada, terse.\n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(std::fs::read_to_string(t.workspace("w-1").join("AGENTS.md")).unwrap(), "# Role\n\nYou are Ada, terse.\n");
    gw.push(Reply::sse(anthropic_text("ok")));
    s.chat("w-1", "hello").await.until("done").await;
    let sent = gw.requests()[0].body_str();
    assert!(sent.contains(r#"<role>\n# Role\n\nYou are Ada, terse.\n</role>"#), "the next round reads the new AGENTS.md: {sent}");
    let (_, hist) = s.get("/api/cicy/history?agent_id=w-1").await;
    assert_eq!(hist["messages"].as_array().unwrap().len(), 2);
    assert_eq!(hist["agent_id"], "w-1");
    assert_eq!(s.stop().await, 0);
}
