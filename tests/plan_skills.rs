//! `write_todos` and skills through real turns against the scripted gateway (docs/design.md §12):
//! the plan file and the result the model reads, the `plan_change` event.

use cicy::event::EventKind;
use cicy::tools::plan::{Status, Todo};
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::history::body;
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
    assert_eq!(tools, ["ask_user", "shell", "skill", "task", "write_todos"]);
    let second = body(&reqs[1]);
    let results = &second["messages"].as_array().unwrap().last().unwrap()["content"];
    assert_eq!(results[0]["content"], "[effect applied] 2 todos: 1 pending, 1 in_progress");
    assert_eq!(results[0].get("is_error"), None);
    assert_eq!(results[1]["content"], "error: 2 todos are in_progress (1, 2); at most one may be; the plan was not changed");
    assert_eq!(results[1]["is_error"], true);
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(t.workspace(&id).join(".cicy/plan.json")).unwrap()).unwrap();
    assert_eq!(
        plan,
        serde_json::json!({"todos": [{"id": "1", "content": "Look", "status": "in_progress"}, {"id": "2", "content": "Fix", "status": "pending"}]})
    );
    let todos = vec![
        Todo { id: "1".into(), content: "Look".into(), status: Status::InProgress },
        Todo { id: "2".into(), content: "Fix".into(), status: Status::Pending },
    ];
    let plan_events: Vec<EventKind> = kinds(&seen).into_iter().filter(|k| matches!(k, EventKind::PlanChange { .. })).collect();
    assert_eq!(plan_events, [EventKind::PlanChange { todos }]);
}

fn install(dir: &std::path::Path, folder: &str, text: &str) {
    std::fs::create_dir_all(dir.join(folder)).unwrap();
    std::fs::write(dir.join(folder).join("SKILL.md"), text).unwrap();
}

/// The system blocks of a request, as sent.
fn system_bytes(r: &RecordedRequest) -> Vec<u8> {
    serde_json::to_vec(&body(r)["system"]).unwrap()
}

#[tokio::test]
async fn the_skills_list_is_byte_stable_until_a_project_skill_is_added() {
    let gw = ScriptedGateway::start().await;
    gw.fallback(|n| Reply::sse(anthropic_text(&format!("answer {n}"))));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    install(&t.home.skills_dir(), "pdf", "---\nname: pdf\ndescription: Global PDF.\n---\n");
    install(&t.home.skills_dir(), "zeta", "---\ndescription: Z.\n---\n");
    let mut s = t.open(&id);
    let (events, _) = collector(&id);
    for text in ["one", "two"] {
        cicy::turn::run_turn(&mut s, text, &events, &CancellationToken::new()).await.unwrap();
    }
    let project = t.workspace(&id).join(".cicy/skills");
    install(&project, "my-pdf", "---\nname: pdf\ndescription: Project PDF.\n---\n");
    install(&project, "alpha", "---\ndescription: A.\n---\n");
    cicy::turn::run_turn(&mut s, "three", &events, &CancellationToken::new()).await.unwrap();

    let reqs = gw.requests();
    assert_eq!(system_bytes(&reqs[0]), system_bytes(&reqs[1]));
    let block = |r: &RecordedRequest| body(r)["system"][1]["text"].as_str().unwrap().to_string();
    assert_eq!(block(&reqs[1]), "Installed skills (read one with the `skill` tool before you follow it):\n- pdf: Global PDF.\n- zeta: Z.");
    assert_ne!(system_bytes(&reqs[1]), system_bytes(&reqs[2]));
    assert_eq!(
        block(&reqs[2]),
        "Installed skills (read one with the `skill` tool before you follow it):\n- alpha: A.\n- pdf: Project PDF.\n- zeta: Z."
    );
    // The role's block before it is untouched.
    assert_eq!(body(&reqs[1])["system"][0], body(&reqs[2])["system"][0]);
}

#[tokio::test]
async fn with_skill_guard_strict_only_the_active_skills_allowed_tools_run() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("guarded", "[core, plan]", 10);
    let meta = t.home.roles_dir().join("guarded/meta.yaml");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, format!("{text}skill_guard: strict\n")).unwrap();
    let id = t.create("guarded", None);
    let skill_md = "---\nname: planning\nallowed_tools: [write_todos]\n---\nPlan first.\n";
    install(&t.workspace(&id).join(".cicy/skills"), "planning", skill_md);
    let blocked = "error: tool 'shell' is not in the active skills' allowed_tools (write_todos)";

    // Before any skill is active, everything runs.
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t0", "shell", r#"{"command": "echo free"}"#),
        ("t1", "skill", r#"{"name": "planning"}"#),
        ("t2", "shell", r#"{"command": "echo hi"}"#),
        ("t3", "write_todos", r#"{"todos": []}"#),
    ])));
    gw.push(Reply::sse(anthropic_text("Done.")));
    // The next turn of the conversation: the skill is still active.
    gw.push(Reply::sse(anthropic_tool_uses(&[("t4", "shell", r#"{"command": "echo again"}"#)])));
    gw.push(Reply::sse(anthropic_text("Still done.")));
    let mut s = t.open(&id);
    let (events, _) = collector(&id);
    cicy::turn::run_turn(&mut s, "go", &events, &CancellationToken::new()).await.unwrap();
    cicy::turn::run_turn(&mut s, "again", &events, &CancellationToken::new()).await.unwrap();

    let reqs = gw.requests();
    let results = |r: &RecordedRequest| -> Vec<(String, bool)> {
        let b = body(r);
        b["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "tool_result")
            .map(|c| (c["content"].as_str().unwrap().to_string(), c["is_error"].as_bool().unwrap_or(false)))
            .collect()
    };
    assert_eq!(
        results(&reqs[1]),
        [
            ("free\nexit code: 0".to_string(), false),
            (skill_md.to_string(), false),
            (blocked.to_string(), true),
            ("[effect applied] 0 todos".to_string(), false),
        ]
    );
    assert_eq!(results(&reqs[3]), [(blocked.to_string(), true)]);
}
