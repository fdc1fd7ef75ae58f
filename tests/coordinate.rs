//! The master/worker topology (DESIGN.md §11, cicy's `msg`, `broadcast`, `fork`) against a real
//! `serve` and a scripted gateway: a coordinator's `msg` waits for the worker's final answer,
//! a timed-out call comes back as one 🔔 message that needs no reply, a busy worker answers
//! after its turn, `broadcast` collects one line per worker, `fork` copies an agent, the `msg`
//! and `msgs` commands, and a group task split between two workers.
//!
//! Agents run concurrently, so the gateway answers each request from that agent's own script
//! ([`Scripts`]); each agent's AGENTS.md names it, which is how a request is told apart.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

mod common;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use cicy::conversation::message::ContentBlock;
use cicy::messages::store::{CallState, MessageStore};
use cicy::wake::inbox::{self, Mailbox};

use common::fixture::TestHome;
use common::gateway::{anthropic_text, anthropic_tool_use, RecordedRequest, Reply, ScriptedGateway};
use common::history::wire_messages;
use common::serve::Serve;
use common::wake::{last_user_text, mask_now, note};

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
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pending(&t, &coord), 0);
    assert_eq!(gw.requests().len(), 3);
    assert_eq!(s.stop().await, 0);
}
