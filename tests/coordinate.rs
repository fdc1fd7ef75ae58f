//! The master/worker topology (docs/design.md §11, cicy's `msg`, `broadcast`, `fork`) against a real
//! `serve` and a scripted gateway: a coordinator's `msg` waits for the worker's final answer,
//! a timed-out call comes back as one 🔔 message that needs no reply, a busy worker answers
//! after its turn, `broadcast` collects one line per worker, `fork` copies an agent, the `msg`
//! and `msgs` commands, and a group task split between two workers.
//!
//! Agents run concurrently, so the gateway answers each request from that agent's own script
//! ([`Scripts`]); each agent's AGENTS.md names it, which is how a request is told apart.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use cicy::conversation::message::ContentBlock;
use cicy::messages::store::{CallState, MessageStore};
use cicy::wake::inbox::{self, Mailbox};

use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, anthropic_tool_use, anthropic_tool_uses, RecordedRequest, Reply, ScriptedGateway};
use cicy_test_support::history::wire_messages;
use cicy_test_support::serve::Serve;
use cicy_test_support::wake::{last_user_text, mask_now, note};

/// Each agent's replies, in order; a request of an agent whose script ran out gets the
/// gateway's HTTP 500 (the test fails loudly).
#[derive(Clone, Default)]
struct Scripts(Arc<Mutex<HashMap<String, VecDeque<Reply>>>>);

impl Scripts {
    fn on(gw: &ScriptedGateway) -> Self {
        let s = Self::default();
        let q = s.0.clone();
        gw.route(move |r| {
            let mut q = q.lock().unwrap();
            let id = agent_of(r)?;
            q.get_mut(&id).and_then(VecDeque::pop_front)
        });
        s
    }

    fn push(&self, agent: &str, reply: Reply) {
        self.0.lock().unwrap().entry(agent.to_string()).or_default().push_back(reply);
    }
}

/// The AGENTS.md of agent `id`: what tells its requests apart.
fn agents_md(id: &str) -> String {
    format!("# Role\n\nYou are agent {id}.\n")
}

/// The agent a request is for (its AGENTS.md line).
fn agent_of(r: &RecordedRequest) -> Option<String> {
    let body = r.body_str();
    let at = body.find("You are agent ")? + "You are agent ".len();
    let rest = &body[at..];
    Some(rest[..rest.find('.')?].to_string())
}

/// The requests made for agent `id`, in order.
fn requests_of(gw: &ScriptedGateway, id: &str) -> Vec<RecordedRequest> {
    gw.requests().into_iter().filter(|r| agent_of(r).as_deref() == Some(id)).collect()
}

/// The tool results of the last message of a request, as (tool_use_id, content).
fn tool_results(r: &RecordedRequest) -> Vec<(String, String)> {
    wire_messages(r)
        .last()
        .unwrap()
        .content
        .to_blocks()
        .into_iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, content, .. } => Some((tool_use_id, content)),
            _ => None,
        })
        .collect()
}

/// A home with the role `coord` (`[core, wake, coordinate]`) and `waker` (`[core, wake]`).
fn home(gw: &ScriptedGateway) -> TestHome {
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("coord", "[core, wake, coordinate]", 20);
    t.write_role("waker", "[core, wake]", 20);
    t
}

/// Creates an agent of `role_template` whose master is `master`, with its own AGENTS.md.
fn create(t: &TestHome, role_template: &str, master: Option<&str>) -> String {
    let created = cicy::agent::create(
        &t.home,
        cicy::agent::CreateOptions {
            title: "Tess".into(),
            role_template: role_template.into(),
            role: "worker".into(),
            model: None,
            master: master.map(str::to_string),
            workspace: None,
            api_style: None,
        },
    )
    .unwrap();
    let id = created.record.id;
    std::fs::write(created.record.workspace.join("AGENTS.md"), agents_md(&id)).unwrap();
    id
}

fn tool(id: &str, name: &str, input: Value) -> Reply {
    Reply::sse(anthropic_tool_use(id, name, &input.to_string()))
}

fn text(t: &str) -> Reply {
    Reply::sse(anthropic_text(t))
}

/// The envelope's roster of agents `ids` (all titled Tess).
fn roster(ids: &[&str]) -> String {
    let members: Vec<Value> = ids.iter().map(|id| json!({"id": id, "name": "Tess", "type": "agent"})).collect();
    Value::from(members).to_string()
}

/// The outbox files of agent `id` (`outbox/` and `outbox/archive/`) in file-name order, as
/// (from, to, body).
fn outbox(t: &TestHome, id: &str) -> Vec<(String, String, String)> {
    let mb = Mailbox::of_workspace(&t.workspace(id));
    let list = |dir: std::path::PathBuf| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".md")).collect()
            })
            .unwrap_or_default()
    };
    let mut names = list(mb.outbox_dir());
    names.extend(list(mb.outbox_dir().join("archive")));
    names.sort();
    names
        .iter()
        .map(|n| mb.read(n).unwrap())
        .map(|m| (m.from.clone(), m.meta.get("to").cloned().unwrap_or_default(), m.body.clone()))
        .collect()
}

fn pending(t: &TestHome, id: &str) -> usize {
    Mailbox::of_workspace(&t.workspace(id)).pending().unwrap().0.len()
}

/// Polls `f` every 20 ms for up to 10 s until it is true.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_msg_waits_for_the_workers_final_answer_which_is_the_tool_result() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let worker = create(&t, "waker", Some(&coord));
    let sc = Scripts::on(&gw);
    sc.push(&coord, tool("toolu_m", "msg", json!({"to": worker, "text": "what is 2+2?"})));
    sc.push(&worker, text("4"));
    sc.push(&coord, text("The worker says 4."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "ask the worker")).unwrap();
    events.until("done").await;

    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 2);
    assert_eq!(tool_results(&mine[1]), [("toolu_m".to_string(), format!("[{worker}] 4"))]);
    let theirs = requests_of(&gw, &worker);
    assert_eq!(theirs.len(), 1);
    let calls = MessageStore::open(&t.home).unwrap().calls_of(&coord, 10).unwrap();
    assert_eq!(
        mask_now(&last_user_text(&theirs[0])),
        format!("[cicy-wake] reason:inbox wake:1 now:NOW\n\nTodos: none.\n\n[choruz-incoming] from:@Tess direct-chat conv:{} roster:{} | what is 2+2?", &calls[0].conv_id[..13], roster(&[&coord, &worker]))
    );
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].state, calls[0].reply.as_deref(), calls[0].from.as_str()), (CallState::Done, Some("4"), coord.as_str()));
    // The answer went back through the call: nothing wakes the coordinator again.
    s.settled(&t.workspaces()).await;
    assert_eq!(pending(&t, &coord), 0);
    assert_eq!(gw.requests().len(), 3);
    // The coordinator's final answer is still its reply to ada (a msg is no reply to her).
    assert_eq!(outbox(&t, &coord), [(coord.clone(), "ada".to_string(), "The worker says 4.".to_string())]);
    assert_eq!(outbox(&t, &worker), [(worker.clone(), coord.clone(), "4".to_string())], "the record of its answer");
    assert_eq!(s.stop().await, 0);
}

/// Call `id`, once it is `done` (within 10 s).
async fn done_call(t: &TestHome, id: i64) -> cicy::messages::store::MsgCall {
    let home = t.home.clone();
    eventually(&format!("msg {id} done"), move || {
        MessageStore::open(&home).unwrap().call(id).unwrap().is_some_and(|c| c.state == CallState::Done)
    })
    .await;
    MessageStore::open(&t.home).unwrap().call(id).unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_msg_that_times_out_is_queued_and_its_answer_comes_as_one_bell_that_needs_no_reply() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let worker = create(&t, "waker", Some(&coord));
    let sc = Scripts::on(&gw);
    sc.push(&coord, tool("toolu_m", "msg", json!({"to": worker, "text": "slow question", "timeout_secs": 1})));
    sc.push(&coord, text("I'll wait for the bell."));
    let (slow, gate) = Reply::gated(anthropic_text("slow answer"));
    sc.push(&worker, slow);
    sc.push(&coord, text("Got it."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "ask slowly")).unwrap();
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 2);
    assert_eq!(
        tool_results(&mine[1]),
        [("toolu_m".to_string(), "msg 1 queued: no answer within 1 s; the answer will come as a 🔔 message".to_string())]
    );
    assert_eq!(MessageStore::open(&t.home).unwrap().call(1).unwrap().unwrap().state, CallState::Queued);

    gate.add_permits(1);
    events.until("done").await;
    let call = done_call(&t, 1).await;
    assert_eq!(call.reply.as_deref(), Some("slow answer"));
    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 3, "the 🔔 woke the coordinator once");
    assert!(last_user_text(&mine[2]).ends_with(&format!("| 🔔 [{worker}] msg 1 → done\nslow answer")), "{}", last_user_text(&mine[2]));
    // The 🔔 claim needs no reply: nothing goes back to the worker, nothing wakes it.
    s.settled(&t.workspaces()).await;
    assert_eq!((pending(&t, &worker), pending(&t, &coord)), (0, 0));
    assert_eq!(requests_of(&gw, &worker).len(), 1);
    // Its answer to ada is its final answer; the 🔔 turn sent nothing and needs no fallback.
    assert_eq!(outbox(&t, &coord), [(coord.clone(), "ada".to_string(), "I'll wait for the bell.".to_string())]);
    let mut store = MessageStore::open(&t.home).unwrap();
    let conv = store.direct(&coord, &worker).unwrap();
    let msgs = store.messages(&conv.id, None, 10).unwrap().messages;
    let said: Vec<(String, String)> = msgs.iter().map(|m| (m.sender.clone(), m.content.clone())).collect();
    assert_eq!(
        said,
        [
            (coord.clone(), "slow question".to_string()),
            (worker.clone(), "slow answer".to_string()),
            (worker.clone(), format!("🔔 [{worker}] msg 1 → done\nslow answer")),
        ]
    );
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_false_is_queued_at_once_and_callback_false_brings_no_bell() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let quick = create(&t, "waker", Some(&coord));
    let slow = create(&t, "waker", Some(&coord));
    let sc = Scripts::on(&gw);
    sc.push(
        &coord,
        Reply::sse(anthropic_tool_uses(&[
            ("toolu_a", "msg", &json!({"to": quick, "text": "no wait", "wait": false}).to_string()),
            ("toolu_b", "msg", &json!({"to": slow, "text": "no bell", "timeout_secs": 1, "callback": false}).to_string()),
        ])),
    );
    sc.push(&coord, text("Sent both."));
    sc.push(&coord, text("Noted the bell."));
    sc.push(&quick, text("quick answer"));
    let (held, gate) = Reply::gated(anthropic_text("late answer"));
    sc.push(&slow, held);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "fan out")).unwrap();
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(
        tool_results(&mine[1]),
        [("toolu_a".to_string(), "msg 1 queued".to_string()), ("toolu_b".to_string(), "msg 2 queued: no answer within 1 s".to_string()),]
    );
    // The quick worker's answer to a call nobody waited for comes as a 🔔.
    assert_eq!(done_call(&t, 1).await.reply.as_deref(), Some("quick answer"));
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 3);
    assert!(last_user_text(&mine[2]).ends_with(&format!("| 🔔 [{quick}] msg 1 → done\nquick answer")), "{}", last_user_text(&mine[2]));
    // The slow one's answer asked for no callback: stored, and nobody is woken.
    gate.add_permits(1);
    assert_eq!(done_call(&t, 2).await.reply.as_deref(), Some("late answer"));
    s.settled(&t.workspaces()).await;
    assert_eq!(requests_of(&gw, &coord).len(), 3);
    assert_eq!(pending(&t, &coord), 0);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_msg_to_a_worker_in_a_long_turn_is_answered_after_that_turn() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let worker = create(&t, "waker", Some(&coord));
    let sc = Scripts::on(&gw);
    let (long, gate) = Reply::gated(anthropic_text("long job done"));
    sc.push(&worker, long);
    // This time the worker answers with its `reply` tool, and its final answer is no second one.
    sc.push(&worker, tool("toolu_r", "reply", json!({"text": "answer after the job"})));
    sc.push(&worker, text("replied"));
    sc.push(&coord, tool("toolu_m", "msg", json!({"to": worker, "text": "are you free?", "timeout_secs": 20})));
    sc.push(&coord, text("It answered."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut worker_events = s.events(&worker, None).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&worker)).write(inbox::Folder::Inbox, &note("bob", "a long job")).unwrap();
    gw.wait_for_requests(1).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "ask the busy one")).unwrap();
    let w2 = t.workspace(&worker);
    eventually("the msg waits in the busy worker's inbox", move || Mailbox::of_workspace(&w2).pending().unwrap().0.len() == 1).await;
    assert_eq!(MessageStore::open(&t.home).unwrap().call(1).unwrap().unwrap().state, CallState::Waiting);
    gate.add_permits(1);
    worker_events.until("done").await;
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 2);
    assert_eq!(tool_results(&mine[1]), [("toolu_m".to_string(), format!("[{worker}] answer after the job"))]);
    worker_events.until("done").await;
    let theirs = requests_of(&gw, &worker);
    assert_eq!(theirs.len(), 3);
    assert!(last_user_text(&theirs[1]).ends_with("| are you free?"), "{}", last_user_text(&theirs[1]));
    // Both written within the same second: file names do not order them.
    let mut out = outbox(&t, &worker);
    out.sort();
    assert_eq!(
        out,
        [
            (worker.clone(), "bob".to_string(), "long job done".to_string()),
            (worker.clone(), coord.clone(), "answer after the job".to_string())
        ]
    );
    assert_eq!(pending(&t, &coord), 0);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_to_three_workers_gives_one_line_each_in_id_order_and_timeout_for_the_slow_one() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let workers: Vec<String> = (0..3).map(|_| create(&t, "waker", Some(&coord))).collect();
    // Not a worker of this coordinator: left out.
    let other = create(&t, "waker", None);
    let sc = Scripts::on(&gw);
    sc.push(&coord, tool("toolu_b", "broadcast", json!({"text": "status?", "timeout_ms": 1500})));
    sc.push(&coord, text("Collected."));
    sc.push(&workers[0], text("first ok"));
    let (held, gate) = Reply::gated(anthropic_text("too late"));
    sc.push(&workers[1], held);
    sc.push(&workers[2], text("third ok"));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "ask everyone")).unwrap();
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 2);
    assert_eq!(
        tool_results(&mine[1]),
        [("toolu_b".to_string(), format!("{}: first ok\n{}: timeout\n{}: third ok", workers[0], workers[1], workers[2]))]
    );
    // The late answer is stored but brings no 🔔 (a broadcast asks for none).
    gate.add_permits(1);
    assert_eq!(done_call(&t, 2).await.reply.as_deref(), Some("too late"));
    s.settled(&t.workspaces()).await;
    assert_eq!((requests_of(&gw, &coord).len(), pending(&t, &coord)), (2, 0));
    assert!(requests_of(&gw, &other).is_empty());
    assert_eq!(s.stop().await, 0);
}

#[tokio::test]
async fn fork_copies_the_template_agents_md_memory_and_conversation_under_a_new_id() {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    t.write_role("coord", "[core, wake, coordinate]", 20);
    let master = create(&t, "coord", None);
    let src = create(&t, "coord", Some(&master));
    let ws = t.workspace(&src);
    std::fs::write(ws.join("AGENTS.md"), "# Role\n\nbytes \u{00e9}\r\nexact\n").unwrap();
    let mem = ws.join(".cicy/memory");
    std::fs::create_dir_all(mem.join("_archive")).unwrap();
    std::fs::write(mem.join("notes.md"), "remember this\n").unwrap();
    std::fs::write(mem.join("_archive/old.md"), "old note\n").unwrap();
    std::fs::write(mem.join("backoff.json"), "{}").unwrap();
    let seeded = cicy_test_support::history::seed(&t, &src, cicy_test_support::history::tool_turns(2));
    let before = t.current_json(&src);

    let out = cicy_test_support::cli::cicy(t.root(), "http://127.0.0.1:9", &["fork", &src, "--title", "Copy"], None).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "w-3\n"), "{}", out.stderr);
    let reg = cicy::registry::Registry::open(&t.home.db_path()).unwrap();
    let (a, b) = (reg.get(&src).unwrap(), reg.get("w-3").unwrap());
    assert_eq!(
        (b.title.as_str(), b.role_template.as_str(), b.role.as_str(), b.master_id.as_deref(), b.default_model.clone()),
        ("Copy", "coord", "worker", Some(master.as_str()), a.default_model.clone())
    );
    let copy = t.workspace("w-3");
    assert_eq!(std::fs::read(copy.join("AGENTS.md")).unwrap(), std::fs::read(ws.join("AGENTS.md")).unwrap());
    assert_eq!(std::fs::read_to_string(copy.join(".cicy/memory/notes.md")).unwrap(), "remember this\n");
    assert_eq!(std::fs::read_to_string(copy.join(".cicy/memory/_archive/old.md")).unwrap(), "old note\n");
    assert!(!copy.join(".cicy/memory/backoff.json").exists(), "the backoff state stays behind");
    let forked = t.current_json("w-3");
    assert_ne!(forked["conversation_id"], before["conversation_id"]);
    assert_eq!((forked["agent_id"].as_str(), forked["max_history_id"].as_u64()), (Some("w-3"), Some(8)));
    assert_eq!(forked["messages"], before["messages"]);
    assert_eq!(forked["messages"].as_array().unwrap().len(), seeded.len());
    // The source is read, not touched.
    assert_eq!(t.current_json(&src), before);

    // The tool's default master is the source's; `--master` names another.
    let out = cicy_test_support::cli::cicy(t.root(), "http://127.0.0.1:9", &["fork", &src, "--master", &src], None).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "w-4\n"), "{}", out.stderr);
    let d = reg.get("w-4").unwrap();
    assert_eq!((d.title.as_str(), d.master_id.as_deref()), ("Tess (fork)", Some(src.as_str())));
    let out = cicy_test_support::cli::cicy(t.root(), "http://127.0.0.1:9", &["fork", "w-99"], None).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_forking_itself_mid_turn_leaves_its_turn_alone() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let sc = Scripts::on(&gw);
    sc.push(&coord, tool("toolu_f", "fork", json!({"title": "Twin"})));
    sc.push(&coord, text("Forked."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "make a twin")).unwrap();
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(tool_results(&mine[1]), [("toolu_f".to_string(), format!("Forked {coord} as w-2 (Twin)."))]);
    let reply = t.reply_json(&coord);
    assert_eq!(reply["status"], "completed", "{reply}");
    let cur = t.current_json(&coord);
    let texts: Vec<String> = cur["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_string()).collect();
    assert_eq!(texts, ["user", "assistant", "user", "assistant"]);
    // The twin has what was written of the conversation when it was made: the wake message.
    let twin = t.current_json("w-2");
    assert_ne!(twin["conversation_id"], cur["conversation_id"]);
    assert_eq!(twin["messages"], json!([cur["messages"][0]]));
    assert_eq!(outbox(&t, &coord), [(coord.clone(), "ada".to_string(), "Forked.".to_string())]);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_msg_command_waits_for_the_answer_no_wait_queues_and_msgs_lists_the_calls() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    // The master only lends its id to `broadcast`: it never runs a turn here.
    let master = create(&t, "coord", None);
    let worker = create(&t, "waker", Some(&master));
    let sc = Scripts::on(&gw);
    sc.push(&worker, text("hello ada"));
    sc.push(&worker, text("later answer"));
    let (held, gate) = Reply::gated(anthropic_text("too slow"));
    sc.push(&worker, held);
    sc.push(&worker, text("all good"));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let cli = |args: Vec<String>| {
        let root = t.root().to_path_buf();
        let url = gw.url();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cicy_test_support::cli::cicy(&root, &url, &args, None).await
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let out = cli(args(&["msg", &worker, "hi", "--from", "ada"])).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "hello ada\n"), "{}", out.stderr);
    assert!(last_user_text(&requests_of(&gw, &worker)[0]).ends_with("| hi"));

    let out = cli(args(&["msg", &worker, "when you can", "--from", "ada", "--no-wait"])).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "msg 2 queued\n"), "{}", out.stderr);
    done_call(&t, 2).await;

    let out = cli(args(&["msg", &worker, "quick!", "--from", "ada", "--timeout", "1", "--no-callback"])).await;
    assert_eq!((out.code, out.stdout.as_str()), (1, "msg 3 queued: no answer within 1 s\n"), "{}", out.stderr);
    gate.add_permits(1);
    done_call(&t, 3).await;

    let out = cli(args(&["msgs", &worker])).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (
            0,
            format!(
                "#3 human:ada → {worker} [done] quick!\n    ↳ too slow\n#2 human:ada → {worker} [done] when you can\n    ↳ later answer\n\
                 #1 human:ada → {worker} [done] hi\n    ↳ hello ada\n"
            )
            .as_str()
        ),
        "{}",
        out.stderr
    );
    let out = cli(args(&["msgs", "ada", "--open"])).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "No msgs.\n"));
    let out = cli(args(&["msgs", &worker, "--json"])).await;
    let calls: Value = serde_json::from_str(&out.stdout).unwrap();
    let ids: Vec<(i64, bool, &str)> = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_i64().unwrap(), c["callback"].as_bool().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    assert_eq!(ids, [(3, false, "done"), (2, true, "done"), (1, true, "done")]);
    let out = cli(args(&["broadcast", &master, "status?", "--timeout", "5000"])).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, format!("{worker}: all good\n").as_str()), "{}", out.stderr);
    let out = cli(args(&["broadcast", &worker, "anyone?"])).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "No workers.\n"));
    let out = cli(args(&["msg", "w-99", "hi"])).await;
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("no agent `w-99` to message"), "{}", out.stderr);
    let out = cli(args(&["broadcast", "w-99", "anyone?"])).await;
    assert_eq!((out.code, out.stderr.as_str()), (2, "error: no agent `w-99` (see `cicy-agent ls`)\n"));
    let out = cli(args(&["msgs", &worker, "--status", "bogus"])).await;
    assert_eq!((out.code, out.stderr.as_str()), (2, "error: --status `bogus` is not a call state: use waiting, queued or done\n"));
    assert_eq!(s.stop().await, 0);
}

/// The issue's scenario: a person posts a task in a group; the coordinator splits it between
/// its two workers with `msg` and answers in the group with both answers.
///
/// The group holds the person and the coordinator only; the workers are the coordinator's
/// (`master`) and hear of the task through `msg`. Decided so because every agent member of a
/// group is woken by every post and must answer it (never silent): workers in the group would
/// each be woken by the task and by the coordinator's answer, and post in the group themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_posted_in_a_group_is_split_between_two_workers_and_answered_in_the_group() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let (a, b) = (create(&t, "waker", Some(&coord)), create(&t, "waker", Some(&coord)));
    let sc = Scripts::on(&gw);
    sc.push(
        &coord,
        Reply::sse(anthropic_tool_uses(&[
            ("toolu_a", "msg", &json!({"to": a, "text": "count the red boxes"}).to_string()),
            ("toolu_b", "msg", &json!({"to": b, "text": "count the blue boxes"}).to_string()),
        ])),
    );
    sc.push(&a, text("3 red"));
    sc.push(&b, text("5 blue"));
    sc.push(&coord, tool("toolu_r", "reply", json!({"text": "Counted: 3 red and 5 blue."})));
    sc.push(&coord, text("Answered in the group."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (status, created) = s.post("/api/groups", json!({"name": "boxes", "members": [coord], "from": "ada"})).await;
    assert_eq!(status, 201, "{created}");
    let mut events = s.events(&coord, None).await;
    let (status, posted) = s.post("/api/groups/boxes/messages", json!({"text": "How many red and blue boxes?", "from": "ada"})).await;
    assert_eq!((status, posted["delivered"].clone()), (201, json!([coord])), "{posted}");
    events.until("done").await;

    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 3);
    assert_eq!(tool_results(&mine[1]), [("toolu_a".to_string(), format!("[{a}] 3 red")), ("toolu_b".to_string(), format!("[{b}] 5 blue"))]);
    assert!(last_user_text(&requests_of(&gw, &a)[0]).ends_with("| count the red boxes"));
    assert!(last_user_text(&requests_of(&gw, &b)[0]).ends_with("| count the blue boxes"));
    let (status, page) = s.get("/api/groups/boxes/messages?from=ada").await;
    assert_eq!(status, 200);
    let said: Vec<(String, String, u64)> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (m["sender"].as_str().unwrap().to_string(), m["content"].as_str().unwrap().to_string(), m["metadata"]["hops"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        said,
        [
            ("human:ada".to_string(), "How many red and blue boxes?".to_string(), 0),
            (coord.clone(), "Counted: 3 red and 5 blue.".to_string(), 1),
        ]
    );
    s.settled(&t.workspaces()).await;
    assert_eq!(gw.requests().len(), 5, "nobody is woken again");
    assert_eq!((pending(&t, &coord), pending(&t, &a), pending(&t, &b)), (0, 0, 0));
    let calls = MessageStore::open(&t.home).unwrap().calls_of(&coord, 10).unwrap();
    let states: Vec<(i64, &str, CallState)> = calls.iter().map(|c| (c.id, c.to.as_str(), c.state)).collect();
    assert_eq!(states, [(2, b.as_str(), CallState::Done), (1, a.as_str(), CallState::Done)]);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_msging_each_other_stop_after_eight_hops() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let (a, b) = (create(&t, "coord", None), create(&t, "coord", None));
    let sc = Scripts::on(&gw);
    // Turn k (0-based) answers hop k and msgs the other agent: hop k + 1.
    for k in 0..9 {
        let (me, other) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let input = json!({"to": other, "text": format!("ping {}", k + 1), "wait": false, "callback": false});
        sc.push(me, tool(&format!("toolu_{k}"), "msg", input));
        sc.push(me, text(&format!("pong {k}")));
    }
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    Mailbox::of_workspace(&t.workspace(&a)).write(inbox::Folder::Inbox, &note("ada", "start")).unwrap();
    gw.wait_for_requests(18).await;
    s.settled(&t.workspaces()).await;
    // Hops 1 to 8 were delivered and answered; the ninth msg is refused, not left waiting.
    let results: Vec<Vec<(String, String)>> = requests_of(&gw, &a).iter().map(tool_results).filter(|r| !r.is_empty()).collect();
    let expected: Vec<Vec<(String, String)>> = [0, 2, 4, 6]
        .iter()
        .map(|k| vec![(format!("toolu_{k}"), format!("msg {} queued", k + 1))])
        .chain([vec![(
            "toolu_8".to_string(),
            "error: not sent: it would be hop 9, past the limit of 8 (agents answering each other stop there)".to_string(),
        )]])
        .collect();
    assert_eq!(results, expected);
    let calls = MessageStore::open(&t.home).unwrap().calls_of(&a, 20).unwrap();
    let answers: Vec<(i64, CallState, Option<String>)> = calls.iter().map(|c| (c.id, c.state, c.reply.clone())).collect();
    let done: Vec<(i64, CallState, Option<String>)> = (1..=8).rev().map(|i| (i, CallState::Done, Some(format!("pong {i}")))).collect();
    assert_eq!(answers, done);
    assert_eq!(gw.requests().len(), 18, "no wake after the eighth hop");
    assert_eq!(s.stop().await, 0);
}

#[test]
fn a_bell_carries_at_most_2000_characters_and_reaches_its_caller_even_past_the_hop_limit() {
    use cicy::messages::coordinate;
    let t = TestHome::new("http://127.0.0.1:9", 0);
    t.write_role("coord", "[core, wake, coordinate]", 20);
    let (a, b) = (create(&t, "coord", None), create(&t, "coord", None));
    let first = coordinate::send(&t.home, &a, &b, "last hop", false, true, 8).unwrap();
    // The answer to a msg at hop 8 is hop 9: its 🔔 still wakes the caller.
    coordinate::answer(&t.home, &b, &[first], "fine", 9).unwrap();
    let long = coordinate::send(&t.home, &a, &b, "tell me everything", false, true, 1).unwrap();
    let answer = format!("{}é tail", "x".repeat(1999));
    coordinate::answer(&t.home, &b, &[long], &answer, 2).unwrap();
    // Nobody waits and no callback was asked: stored only.
    let quiet = coordinate::send(&t.home, &a, &b, "no bell", false, false, 1).unwrap();
    coordinate::answer(&t.home, &b, &[quiet], "shh", 2).unwrap();
    let bells = Mailbox::of_workspace(&t.workspace(&a)).pending().unwrap().0;
    let got: Vec<(String, String, Option<String>)> =
        bells.iter().map(|m| (m.from.clone(), m.body.clone(), m.meta.get("callback_of").cloned())).collect();
    assert_eq!(
        got,
        [
            (b.clone(), format!("🔔 [{b}] msg {first} → done\nfine"), Some(first.to_string())),
            (b.clone(), format!("🔔 [{b}] msg {long} → done\n{}é\n…", "x".repeat(1999)), Some(long.to_string())),
        ]
    );
    assert_eq!(bells[0].meta.get("hops").map(String::as_str), Some("8"));
    let err = coordinate::send(&t.home, &a, &b, "one too many", true, true, 9).unwrap_err();
    assert_eq!(err.to_string(), "not sent: it would be hop 9, past the limit of 8 (agents answering each other stop there)");
    let calls = MessageStore::open(&t.home).unwrap().calls_of(&a, 10).unwrap();
    assert_eq!(calls.len(), 3, "a refused msg leaves no call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_releases_the_call_to_its_bell() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let worker = create(&t, "waker", Some(&coord));
    let sc = Scripts::on(&gw);
    sc.push(&coord, tool("toolu_m", "msg", json!({"to": worker, "text": "take your time"})));
    let (held, gate) = Reply::gated(anthropic_text("took my time"));
    sc.push(&worker, held);
    sc.push(&coord, text("Bell read."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "ask and wait")).unwrap();
    let home = t.home.clone();
    eventually("the worker's turn started", || requests_of(&gw, &worker).len() == 1).await;
    let (status, body) = s.post("/api/cicy/cancel", json!({"agent_id": coord})).await;
    assert_eq!((status, body["canceled"].clone()), (200, json!(true)), "{body}");
    events.until("done").await;
    eventually("the call is released", move || MessageStore::open(&home).unwrap().call(1).unwrap().unwrap().state == CallState::Queued)
        .await;
    gate.add_permits(1);
    assert_eq!(done_call(&t, 1).await.reply.as_deref(), Some("took my time"));
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(mine.len(), 2, "the cancelled turn made one request, the 🔔 wake one");
    assert!(last_user_text(&mine[1]).ends_with(&format!("| 🔔 [{worker}] msg 1 → done\ntook my time")), "{}", last_user_text(&mine[1]));
    // ada hears of the cancelled turn (a cancel ends a wake like a crash); the 🔔 wake says nothing.
    let crashed =
        "(cicy: agent crashed before replying)\n\n````\nthe wake was cancelled: serve was stopping, or the turn was aborted\n````";
    assert_eq!(outbox(&t, &coord), [("cicy".to_string(), "ada".to_string(), crashed.to_string())]);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_lists_who_can_be_messaged_and_a_bad_msg_is_an_error_at_once() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let worker = create(&t, "waker", Some(&coord));
    let stranger = create(&t, "waker", None);
    let sc = Scripts::on(&gw);
    sc.push(
        &coord,
        Reply::sse(anthropic_tool_uses(&[
            ("toolu_a", "agents", "{}"),
            ("toolu_s", "msg", &json!({"to": coord, "text": "me?"}).to_string()),
            ("toolu_u", "msg", &json!({"to": "w-99", "text": "anyone?"}).to_string()),
            ("toolu_e", "msg", &json!({"to": worker, "text": "  "}).to_string()),
        ])),
    );
    sc.push(&coord, text("Listed."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&coord, None).await;
    Mailbox::of_workspace(&t.workspace(&coord)).write(inbox::Folder::Inbox, &note("ada", "who is there?")).unwrap();
    events.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(
        tool_results(&mine[1]),
        [
            (
                "toolu_a".to_string(),
                format!("{worker}  Tess  template:waker  master:{coord}  (your worker)\n{stranger}  Tess  template:waker  master:-")
            ),
            ("toolu_s".to_string(), format!("error: an agent cannot msg itself ({coord})")),
            ("toolu_u".to_string(), "error: no agent `w-99` to message (see `cicy-agent ls`)".to_string()),
            ("toolu_e".to_string(), "error: `to` and `text` are required for msg".to_string()),
        ]
    );
    assert!(MessageStore::open(&t.home).unwrap().calls_of(&coord, 10).unwrap().is_empty());
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_msg_from_a_chat_turn_waits_for_the_answer_too() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let coord = create(&t, "coord", None);
    let worker = create(&t, "waker", Some(&coord));
    let sc = Scripts::on(&gw);
    sc.push(&coord, tool("toolu_m", "msg", json!({"to": worker, "text": "from the chat"})));
    sc.push(&worker, text("chat answer"));
    sc.push(&coord, text("Relayed."));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    s.chat(&coord, "ask the worker").await.until("done").await;
    let mine = requests_of(&gw, &coord);
    assert_eq!(tool_results(&mine[1]), [("toolu_m".to_string(), format!("[{worker}] chat answer"))]);
    let call = MessageStore::open(&t.home).unwrap().call(1).unwrap().unwrap();
    assert_eq!((call.state, call.reply.as_deref()), (CallState::Done, Some("chat answer")));
    s.settled(&t.workspaces()).await;
    assert_eq!((gw.requests().len(), pending(&t, &coord)), (3, 0));
    assert_eq!(s.stop().await, 0);
}
