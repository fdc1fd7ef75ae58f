//! `task` against the scripted gateway (docs/design.md §12): the child's last text comes back as the
//! parent's tool result, the child's requests carry a fresh conversation and no `task` tool,
//! nesting is refused, a role slug gives the child that role, the timeout stops the child, the
//! parent's cancel reaches it, and `subagent_start` / `subagent_end` frame it on the parent's
//! stream.

use cicy::conversation::message::{ContentBlock, Message};
use cicy::event::{EventKind, SubagentOutcome, TurnOutcome};
use cicy::turn;
use cicy_test_support::fixture::{collector, kinds, TestHome, TEST_SYSTEM};
use cicy_test_support::gateway::*;
use cicy_test_support::history::{body, wire_messages};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// A home with a `planner` role (groups `core` and `plan`, meta.yaml `extra`) and an agent of it.
fn planner(gw: &ScriptedGateway, extra: &str) -> (TestHome, String) {
    let t = TestHome::new(&gw.url(), 0);
    let id = t.planner(extra);
    (t, id)
}

fn task_call(id: &str, description: &str, subagent_type: &str) -> Vec<Vec<u8>> {
    anthropic_tool_use(id, "task", &json!({"description": description, "subagent_type": subagent_type}).to_string())
}

fn tool_names(r: &RecordedRequest) -> Vec<String> {
    body(r)["tools"].as_array().map_or_else(Vec::new, |t| t.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect())
}

/// The one `tool_result` of the last message of a request: (content, is_error).
fn last_result(r: &RecordedRequest) -> (String, bool) {
    let msgs = wire_messages(r);
    match &msgs.last().unwrap().content {
        cicy::conversation::message::Content::Blocks(b) => match &b[0] {
            ContentBlock::ToolResult { content, is_error, .. } => (content.clone(), *is_error),
            other => panic!("not a tool result: {other:?}"),
        },
        other => panic!("not blocks: {other:?}"),
    }
}

/// The sub-agent ids under `.cicy/history/sub/`.
fn sub_ids(t: &TestHome, id: &str) -> Vec<String> {
    let dir = t.workspace(id).join(".cicy/history/sub");
    let mut ids: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    ids.sort();
    ids
}

/// A sub-agent's current.json.
fn sub_current(t: &TestHome, id: &str, sub: &str) -> Value {
    let p = t.workspace(id).join(".cicy/history/sub").join(sub).join("current.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// The events about tools and sub-agents, in order.
fn tool_and_sub_events(all: &[EventKind]) -> Vec<EventKind> {
    all.iter()
        .filter(|k| matches!(k, EventKind::ToolStarted { .. } | EventKind::SubagentStart { .. } | EventKind::SubagentEnd { .. }))
        .cloned()
        .collect()
}

fn sub_end(all: &[EventKind]) -> (String, SubagentOutcome, String) {
    all.iter()
        .find_map(|k| match k {
            EventKind::SubagentEnd { id, outcome, result } => Some((id.clone(), *outcome, result.clone())),
            _ => None,
        })
        .expect("a subagent_end event")
}

#[tokio::test]
async fn the_childs_last_text_is_the_parents_tool_result_and_the_child_starts_fresh() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(task_call("toolu_1", "Count to three.", "general-purpose")));
    gw.push(Reply::sse(anthropic_text("one two three")));
    gw.push(Reply::sse(anthropic_text("The sub-agent counted.")));
    let (t, id) = planner(&gw, "");
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "delegate the counting", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(tool_names(&reqs[0]), ["ask_user", "shell", "skill", "task", "write_todos"]);
    assert_eq!(
        tool_names(&reqs[1]),
        ["ask_user", "shell", "skill"],
        "the child is offered no `task` and no `write_todos` (the plan is the parent's)"
    );
    // A fresh conversation: the child's one message is the description, under the same role
    // block the parent's first message has.
    let parent_first = wire_messages(&reqs[0]);
    let child = wire_messages(&reqs[1]);
    assert_eq!(child.len(), 1);
    let mut expected = parent_first[0].content.to_blocks();
    *expected.last_mut().unwrap() = ContentBlock::text("Count to three.");
    assert_eq!(child[0].content.to_blocks(), expected);
    assert_eq!(body(&reqs[1])["system"][0]["text"], TEST_SYSTEM);
    assert_eq!(last_result(&reqs[2]), ("one two three".to_string(), false));

    let all = kinds(&ev);
    let subs = sub_ids(&t, &id);
    assert_eq!(subs.len(), 1);
    assert_eq!(
        tool_and_sub_events(&all),
        vec![
            EventKind::ToolStarted {
                id: "toolu_1".into(),
                name: "task".into(),
                input: json!({"description": "Count to three.", "subagent_type": "general-purpose"})
            },
            EventKind::SubagentStart {
                id: subs[0].clone(),
                description: "Count to three.".into(),
                subagent_type: "general-purpose".into()
            },
            EventKind::SubagentEnd { id: subs[0].clone(), outcome: SubagentOutcome::Completed, result: "one two three".into() },
        ]
    );
    let end = all.iter().position(|k| matches!(k, EventKind::SubagentEnd { .. })).unwrap();
    let finished = all.iter().position(|k| matches!(k, EventKind::ToolFinished { name, .. } if name == "task")).unwrap();
    assert_eq!(finished, end + 1, "the task call finishes right after its sub-agent ends");
    assert_eq!(all.iter().filter(|k| matches!(k, EventKind::TurnStarted { .. })).count(), 1, "the child's events stay its own");

    // The child's conversation is in its own folder; the parent's history holds only its own turn.
    let sub = sub_current(&t, &id, &subs[0]);
    let sub_msgs: Vec<Message> = serde_json::from_value(sub["messages"].clone()).unwrap();
    assert_eq!(sub_msgs.iter().map(Message::plain_text).collect::<Vec<_>>(), ["Count to three.", "one two three"]);
    assert_ne!(sub["conversation_id"], t.current_json(&id)["conversation_id"]);
    let parent: Vec<Message> = serde_json::from_value(t.current_json(&id)["messages"].clone()).unwrap();
    assert_eq!(parent.len(), 4);
    assert_eq!(parent[3].plain_text(), "The sub-agent counted.");
    // Only the parent's turn went to the memory buffer.
    let pending = cicy::memory::buffer::load(&t.workspace(&id).join(".cicy/memory")).unwrap();
    assert_eq!(pending.turns.iter().map(|t| t.user.as_str()).collect::<Vec<_>>(), ["delegate the counting"]);
}

#[tokio::test]
async fn a_child_cannot_start_a_child_and_a_role_slug_gives_it_that_role() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(task_call("toolu_1", "Try to nest.", "helper")));
    // The child asks for `task` although it was not offered.
    gw.push(Reply::sse(task_call("toolu_c1", "deeper", "general-purpose")));
    gw.push(Reply::sse(anthropic_text("I could not nest.")));
    gw.push(Reply::sse(task_call("toolu_2", "x", "no-such-role")));
    gw.push(Reply::sse(anthropic_text("done")));
    let (t, id) = planner(&gw, "");
    t.write_role("helper", "[core]", 200);
    let helper = t.home.roles_dir().join("helper");
    std::fs::write(helper.join("system.md"), "You are a helper.\n").unwrap();
    std::fs::write(helper.join("role.md"), "You help {{TITLE}}.\n").unwrap();
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 5);
    assert_eq!(tool_names(&reqs[1]), ["shell", "skill"], "the helper role's own tools");
    assert_eq!(body(&reqs[1])["system"][0]["text"], "You are a helper.");
    let child_first = wire_messages(&reqs[1]);
    assert_eq!(
        child_first[0].plain_text(),
        "<role>\n# Role\n\nYou help Tess.\n</role>\nTry to nest.",
        "the role block is the helper role.md as `create` seeds it"
    );
    assert_eq!(last_result(&reqs[2]), ("error: tool `task` is not available to this agent (available: shell, skill)".to_string(), true));
    assert_eq!(last_result(&reqs[3]), ("I could not nest.".to_string(), false));
    let (content, is_error) = last_result(&reqs[4]);
    assert!(is_error);
    assert!(
        content.starts_with("error: subagent_type `no-such-role` is neither `general-purpose` nor a usable role template: "),
        "{content}"
    );
    let starts = kinds(&ev).iter().filter(|k| matches!(k, EventKind::SubagentStart { .. })).count();
    assert_eq!(starts, 1, "neither the nested call nor the unknown role started a sub-agent");
}

#[tokio::test]
async fn a_child_of_another_role_gets_no_tool_its_parent_lacks() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(task_call("toolu_1", "Run something.", "assistant")));
    // The child asks for `shell`: the assistant role has it, its parent does not.
    gw.push(Reply::sse(anthropic_tool_uses(&[("toolu_c1", "shell", r#"{"command": "echo ESCALATED"}"#)])));
    gw.push(Reply::sse(anthropic_text("I have no shell.")));
    gw.push(Reply::sse(anthropic_text("done")));
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("planonly", "[plan, skill]", 200);
    let id = t.create("planonly", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(tool_names(&reqs[0]), ["ask_user", "skill", "task", "write_todos"]);
    assert_eq!(tool_names(&reqs[1]), ["skill"], "the assistant role's tools that the parent has too");
    assert_eq!(last_result(&reqs[2]), ("error: tool `shell` is not available to this agent (available: skill)".to_string(), true));
    assert_eq!(last_result(&reqs[3]), ("I have no shell.".to_string(), false));
    assert!(!std::fs::read_dir(t.workspace(&id)).unwrap().any(|e| e.unwrap().file_name() == "ESCALATED"));
}

#[tokio::test]
async fn under_a_strict_skill_guard_a_child_gets_only_what_the_active_skills_allow() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_uses(&[("toolu_0", "skill", r#"{"name": "delegating"}"#)])));
    gw.push(Reply::sse(task_call("toolu_1", "Run something.", "general-purpose")));
    // The child's fresh conversation has no active skill; the parent's guard still limits it.
    gw.push(Reply::sse(anthropic_tool_uses(&[("toolu_c1", "shell", r#"{"command": "echo ESCAPED > escaped.txt"}"#)])));
    gw.push(Reply::sse(anthropic_text("No shell here.")));
    gw.push(Reply::sse(anthropic_text("done")));
    let (t, id) = planner(&gw, "skill_guard: strict\n");
    let skill = t.workspace(&id).join(".cicy/skills/delegating");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(skill.join("SKILL.md"), "---\nname: delegating\nallowed_tools: [task]\n---\nDelegate.\n").unwrap();
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 5);
    assert_eq!(tool_names(&reqs[2]), ["skill"], "the active skill allows `task` (not offered to a child) and `skill` always runs");
    assert_eq!(last_result(&reqs[3]), ("error: tool `shell` is not available to this agent (available: skill)".to_string(), true));
    assert_eq!(last_result(&reqs[4]), ("No shell here.".to_string(), false));
    assert!(!t.workspace(&id).join("escaped.txt").exists());
}

#[tokio::test]
async fn a_child_past_its_timeout_is_stopped_and_the_parent_goes_on() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(task_call("toolu_1", "Take forever.", "general-purpose")));
    let (held, _gate) = Reply::gated(anthropic_text("never sent"));
    gw.push(held);
    gw.push(Reply::sse(anthropic_text("It timed out.")));
    let (t, id) = planner(&gw, "task_timeout_secs: 1\n");
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 3);
    let result = "error: the sub-agent did not finish within 1 s and was stopped";
    assert_eq!(last_result(&reqs[2]), (result.to_string(), true));
    let subs = sub_ids(&t, &id);
    assert_eq!(sub_end(&kinds(&ev)), (subs[0].clone(), SubagentOutcome::TimedOut, result.to_string()));
    let sub = sub_current(&t, &id, &subs[0]);
    let last: Message = serde_json::from_value(sub["messages"].as_array().unwrap().last().unwrap().clone()).unwrap();
    assert_eq!(last.plain_text(), "(no reply this turn · cancelled)", "the stopped child's history ends well-formed");
}

#[tokio::test]
async fn the_parents_cancel_reaches_the_child() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(task_call("toolu_1", "Hang.", "general-purpose")));
    let (held, _gate) = Reply::gated(anthropic_text("never sent"));
    gw.push(held);
    let (t, id) = planner(&gw, "");
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let cancel = CancellationToken::new();
    let run = turn::run_turn(&mut s, "go", &em, &cancel);
    let cancel_when_child_asks = async {
        gw.wait_for_requests(2).await;
        cancel.cancel();
    };
    let (outcome, ()) = tokio::join!(run, cancel_when_child_asks);
    assert_eq!(outcome.unwrap(), TurnOutcome::Cancelled);
    assert_eq!(gw.requests().len(), 2, "the parent sent nothing after the cancel");
    let subs = sub_ids(&t, &id);
    assert_eq!(sub_end(&kinds(&ev)), (subs[0].clone(), SubagentOutcome::Cancelled, "error: cancelled by user".to_string()));
    let sub = sub_current(&t, &id, &subs[0]);
    assert_eq!(sub["status"], "idle");
    let last: Message = serde_json::from_value(sub["messages"].as_array().unwrap().last().unwrap().clone()).unwrap();
    assert_eq!(last.plain_text(), "(no reply this turn · cancelled)");
    let parent: Vec<Message> = serde_json::from_value(t.current_json(&id)["messages"].clone()).unwrap();
    match &parent[2].content {
        cicy::conversation::message::Content::Blocks(b) => {
            assert!(matches!(&b[0], ContentBlock::ToolResult { content, is_error: true, .. } if content == "error: cancelled by user"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(parent[3].plain_text(), "(no reply this turn · cancelled)");
}
