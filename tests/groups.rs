//! Groups of agents and people (docs/design.md §11) over the §10 inbox, against a real `serve`: a
//! person's post wakes the agent members with the Choruz envelope (roster included), an
//! agent's `reply` is posted in the group and wakes the other agents, two agents answering
//! each other stop after 8 hops, a post whose files a crash cut short is delivered at the
//! next start, and the `group` commands create, post, page and list.

use serde_json::{json, Value};

use cicy::conversation::message::ContentBlock;
use cicy::messages::groups;
use cicy::messages::store::{MessageStore, NewMessage};
use cicy::wake::inbox::Mailbox;

use cicy_test_support::cli::cicy;
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, anthropic_tool_use, Reply, ScriptedGateway};
use cicy_test_support::history::wire_messages;
use cicy_test_support::serve::Serve;
use cicy_test_support::wake::{last_user_text, mask_now, waker};

fn reply_call(text: &str) -> Reply {
    Reply::sse(anthropic_tool_use("toolu_r", "reply", &json!({"text": text}).to_string()))
}

fn senders_and_hops(messages: &[Value]) -> Vec<(String, u64)> {
    messages.iter().map(|m| (m["sender"].as_str().unwrap().to_string(), m["metadata"]["hops"].as_u64().unwrap())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_post_wakes_the_agent_with_the_roster_and_its_reply_lands_in_the_group() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.push(reply_call("on it"));
    gw.push(Reply::sse(anthropic_text("done")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (status, created) = s.post("/api/groups", json!({"name": "ops", "members": [id], "from": "ada"})).await;
    assert_eq!(status, 201, "{created}");
    let conv = created["id"].as_str().unwrap().to_string();
    let mut events = s.events(&id, None).await;
    let (status, posted) = s.post("/api/groups/ops/messages", json!({"text": "please check the build", "from": "ada"})).await;
    assert_eq!(status, 201, "{posted}");
    assert_eq!((posted["seq"].as_i64(), posted["delivered"].clone()), (Some(1), json!([id])));
    events.until("done").await;

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2, "one wake: the tool round and the answer");
    assert_eq!(
        mask_now(&last_user_text(&reqs[0])),
        format!(
            "[cicy-wake] reason:inbox wake:1 now:NOW\n\nTodos: none.\n\n[choruz-incoming] from:@ada group:ops conv:{} \
             roster:[{{\"id\":\"{id}\",\"name\":\"Tess\",\"type\":\"agent\"}}] | please check the build",
            &conv[..13]
        )
    );
    let (status, page) = s.get("/api/groups/ops/messages?from=ada").await;
    assert_eq!(status, 200);
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(senders_and_hops(msgs), [("human:ada".to_string(), 0), (id.clone(), 1)]);
    assert_eq!(msgs[1]["content"], "on it");
    assert_eq!(page["before"], Value::Null);
    let store = MessageStore::open(&t.home).unwrap();
    let d = store.deliveries(posted["id"].as_str().unwrap()).unwrap();
    assert_eq!((d.len(), d[0].state), (1, cicy::messages::store::DeliveryState::Answered), "claimed, then answered with the reply");
    assert!(d[0].obligation_id.is_some());
    // The agent's own reply wakes nobody: it is the only agent of the group.
    assert!(Mailbox::of_workspace(&t.workspace(&id)).pending().unwrap().0.is_empty());
    let (status, err) = s.get("/api/groups/nope/messages").await;
    assert_eq!((status, err["message"].as_str()), (404, Some("there is no group 'nope' (see `cicy-agent group create`)")));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_answering_each_other_in_a_group_stop_after_eight_hops() {
    let gw = ScriptedGateway::start().await;
    let (t, a) = waker(&gw);
    let b = t.create("waker", None);
    // Each wake: a reply, then a closing text once the tool result is back. Decided per request:
    // one agent's closing request and the other's wake may be in flight at once.
    gw.route(|r| {
        let last = wire_messages(r).last().unwrap().content.to_blocks();
        let answered = last.iter().any(|b| matches!(b, ContentBlock::ToolResult { .. }));
        Some(if answered { Reply::sse(anthropic_text("ok")) } else { reply_call("pong") })
    });
    groups::create(&t.home, &a, "pair", "", std::slice::from_ref(&b)).unwrap();
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    groups::post(&t.home, &a, "pair", "ping", None).unwrap();
    gw.wait_for_requests(18).await;
    let mut last = Vec::new();
    for _ in 0..100 {
        // The routes read as a person; the group has only the two agents.
        let (_, page) = groups::page(&t.home, &a, "pair", None, 100).unwrap();
        let page = serde_json::to_value(page).unwrap();
        last = senders_and_hops(page["messages"].as_array().unwrap());
        if last.len() == 10 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let expected: Vec<(String, u64)> = (0..10).map(|h| (if h % 2 == 0 { a.clone() } else { b.clone() }, h)).collect();
    assert_eq!(last, expected);
    // The 9th hop is stored for the people of the group but delivered to no agent.
    let store = MessageStore::open(&t.home).unwrap();
    let conv = store.resolve_group(&a, "pair").unwrap();
    let newest = store.messages(&conv.id, None, 1).unwrap().messages.remove(0);
    assert!(store.deliveries(&newest.id).unwrap().is_empty());
    s.settled(&t.workspaces()).await;
    assert_eq!(gw.requests().len(), 18, "no wake after the ninth hop");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_committed_without_its_inbox_file_is_delivered_at_the_next_start() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.push(reply_call("late but here"));
    gw.push(Reply::sse(anthropic_text("ok")));
    let conv = groups::create(&t.home, "ada", "ops", "", std::slice::from_ref(&id)).unwrap();
    // What a kill between the post's commit and its files leaves: a pending delivery, no file.
    let mut store = MessageStore::open(&t.home).unwrap();
    let m = store
        .post(&NewMessage {
            conv_id: &conv.id,
            sender: "human:ada",
            content: "are you there?",
            content_type: None,
            metadata: serde_json::Map::new(),
            thread: None,
            deliver: true,
        })
        .unwrap();
    drop(store);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    gw.wait_for_requests(2).await;
    assert!(last_user_text(&gw.requests()[0]).ends_with("| are you there?"));
    let store = MessageStore::open(&t.home).unwrap();
    let d = store.deliveries(&m.id).unwrap();
    assert_eq!(d.len(), 1);
    assert!(d[0].file.is_some(), "the file written at start is recorded");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test]
async fn the_group_commands_create_post_page_and_list_tasks() {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    let id = t.create("tester", None);
    let home = t.root();
    let run = |args: Vec<&'static str>| async move { cicy(home, "http://127.0.0.1:9", &args, None).await };
    let out = cicy(home, "http://127.0.0.1:9", &["group", "create", "ops", "--members", &id, "--from", "ada"], None).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let conv = out.stdout.trim().to_string();
    assert_eq!(conv.len(), 36);
    for text in ["one", "two", "three"] {
        let out = cicy(home, "http://127.0.0.1:9", &["group", "post", "ops", text, "--from", "ada"], None).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.trim_end().ends_with(&format!("(delivered to {id})")), "{}", out.stdout);
    }
    let files = Mailbox::of_workspace(&t.workspace(&id)).pending().unwrap().0;
    assert_eq!(files.len(), 3);
    let meta: Vec<(&str, &str)> = files[0].meta.iter().filter(|(k, _)| *k != "message_id").map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(meta, [("conv", conv.as_str()), ("group", "ops"), ("hops", "0")]);
    assert_eq!((files[0].from.as_str(), files[0].body.as_str()), ("ada", "one"));

    let out = cicy(home, "http://127.0.0.1:9", &["group", "messages", "ops", "--from", "ada", "--limit", "2"], None).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[0].starts_with("#2 ") && lines[0].ends_with(" human:ada: two"), "{}", lines[0]);
    assert!(lines[1].starts_with("#3 ") && lines[1].ends_with(" human:ada: three"), "{}", lines[1]);
    assert_eq!(lines[2], "older: --before s2");
    let out = cicy(home, "http://127.0.0.1:9", &["group", "messages", "ops", "--from", "ada", "--before", "s2"], None).await;
    assert_eq!(out.stdout.lines().count(), 1);
    assert!(out.stdout.trim_end().ends_with(" human:ada: one"), "{}", out.stdout);

    let out = run(vec!["group", "tasks", "ops", "--from", "ada"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "No tasks.\n"));
    // A person is told whether the group is missing or they are not in it.
    let out = run(vec!["group", "post", "nope", "x", "--from", "ada"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (2, "error: there is no group 'nope' (see `cicy-agent group create`)\n"));
    let out = run(vec!["group", "messages", "nope", "--from", "ada"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (2, "error: there is no group 'nope' (see `cicy-agent group create`)\n"));
    let out = run(vec!["group", "post", "ops", "x", "--from", "bob"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (2, "error: human:bob is not a member of group 'ops'\n"));
    let out = run(vec!["group", "post", "ops", "  ", "--from", "ada"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (2, "error: the message body is empty\n"));
    let out = run(vec!["group", "post", "ops", "x", "--from", "w-1"]).await;
    assert_eq!(out.code, 2, "a person posts here, not an agent: {}", out.stderr);
    let out = run(vec!["group", "create", "gone", "--members", "w-99", "--from", "ada"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (2, "error: no agent `w-99` (see `cicy-agent ls`)\n"));
    let out = run(vec!["group", "messages", "ops", "--from", "ada"]).await;
    assert_eq!(out.stdout.lines().count(), 3, "the refused posts stored nothing: {}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_less_agents_final_answer_is_its_reply_in_a_group() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("concierge", None);
    gw.push(Reply::sse(anthropic_text("Welcome, ada.")));
    groups::create(&t.home, "ada", "lobby", "", std::slice::from_ref(&id)).unwrap();
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    groups::post(&t.home, "ada", "lobby", "hello", None).unwrap();
    events.until("done").await;
    let (_, page) = s.get("/api/groups/lobby/messages?from=ada").await;
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(senders_and_hops(msgs), [("human:ada".to_string(), 0), (id.clone(), 1)]);
    assert_eq!(msgs[1]["content"], "Welcome, ada.");
    assert_eq!(s.stop().await, 0);
}
