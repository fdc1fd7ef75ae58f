//! `write_todos` and skills through real turns against the scripted gateway (DESIGN.md §12):
//! the plan file and the result the model reads, the `plan_change` event.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

mod common;

use cicy::event::EventKind;
use cicy::tools::plan::{Status, Todo};
use common::fixture::{collector, kinds, TestHome};
use common::gateway::*;
use common::history::body;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn write_todos_replaces_the_plan_and_the_model_reads_effect_applied() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("planner", "[core, plan]", 10);
    let id = t.create("planner", None);
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t1", "write_todos", r#"{"todos": [{"id": "1", "content": "Look", "status": "in_progress"}, {"id": "2", "content": "Fix", "status": "pending"}]}"#),
        ("t2", "write_todos", r#"{"todos": [{"id": "1", "content": "Look", "status": "in_progress"}, {"id": "2", "content": "Fix", "status": "in_progress"}]}"#),
    ])));
    gw.push(Reply::sse(anthropic_text("Planned.")));
    let mut s = t.open(&id);
    let (events, seen) = collector(&id);
    cicy::turn::run_turn(&mut s, "plan it", &events, &CancellationToken::new()).await.unwrap();

    let reqs = gw.requests();
    let tools: Vec<String> = body(&reqs[0])["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(tools, ["shell", "skill", "write_todos"]);
    let second = body(&reqs[1]);
    let results = &second["messages"].as_array().unwrap().last().unwrap()["content"];
    assert_eq!(results[0]["content"], "[effect applied] 2 todos: 1 pending, 1 in_progress");
    assert_eq!(results[0].get("is_error"), None);
    assert_eq!(results[1]["content"], "error: 2 todos are in_progress (1, 2); at most one may be; the plan was not changed");
    assert_eq!(results[1]["is_error"], true);
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(t.workspace(&id).join(".cicy/plan.json")).unwrap()).unwrap();
    assert_eq!(plan, serde_json::json!({"todos": [{"id": "1", "content": "Look", "status": "in_progress"}, {"id": "2", "content": "Fix", "status": "pending"}]}));
    let todos = vec![
        Todo { id: "1".into(), content: "Look".into(), status: Status::InProgress },
        Todo { id: "2".into(), content: "Fix".into(), status: Status::Pending },
    ];
    let plan_events: Vec<EventKind> = kinds(&seen).into_iter().filter(|k| matches!(k, EventKind::PlanChange { .. })).collect();
    assert_eq!(plan_events, [EventKind::PlanChange { todos }]);
}
