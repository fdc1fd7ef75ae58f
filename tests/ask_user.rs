//! `ask_user` through real processes against the scripted gateway (docs/design.md §12): answered
//! through `POST /api/agents/<id>/respond` of a running serve, answered by the next stdin line of
//! a chat session, refused in a one-shot chat, and timed out when no answer comes.

use serde_json::{json, Value};

use cicy_test_support::cli::cicy;
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::*;
use cicy_test_support::history::wire_messages;
use cicy_test_support::serve::{types, Serve};

use cicy::conversation::message::{Content, ContentBlock};

/// A home with a `planner` role (groups `core` and `plan`, meta.yaml `extra`) and an agent of it.
fn planner(gw: &ScriptedGateway, extra: &str) -> (TestHome, String) {
    let t = TestHome::new(&gw.url(), 0);
    let id = t.planner(extra);
    (t, id)
}

fn ask(call_id: &str) -> Vec<Vec<u8>> {
    let input = json!({"question": "Which colour?", "options": [{"id": "b", "label": "blue"}, {"id": "g", "label": "green"}]});
    anthropic_tool_use(call_id, "ask_user", &input.to_string())
}

/// The one `tool_result` of a request's last message: (content, is_error).
fn last_result(r: &RecordedRequest) -> (String, bool) {
    match &wire_messages(r).last().unwrap().content {
        Content::Blocks(b) => match &b[0] {
            ContentBlock::ToolResult { content, is_error, .. } => (content.clone(), *is_error),
            other => panic!("not a tool result: {other:?}"),
        },
        other => panic!("not blocks: {other:?}"),
    }
}

#[tokio::test]
async fn a_one_shot_chat_has_no_user_to_ask() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(ask("toolu_1")));
    gw.push(Reply::sse(anthropic_text("I will assume blue.")));
    let (t, id) = planner(&gw, "");
    let o = cicy(t.root(), &gw.url(), &["chat", &id, "pick a colour"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "I will assume blue.\n");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(last_result(&reqs[1]), ("error: no user attached".to_string(), true));
    assert!(!o.stderr.contains("? Which colour?"), "no question is shown where nobody can answer: {}", o.stderr);
}

#[tokio::test]
async fn a_chat_session_answers_with_the_next_stdin_line() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(ask("toolu_1")));
    gw.push(Reply::sse(anthropic_text("You chose blue.")));
    gw.push(Reply::sse(anthropic_text("Bye.")));
    let (t, id) = planner(&gw, "");
    // The second line answers the question; the third is the next message.
    let o = cicy(t.root(), &gw.url(), &["chat", &id], Some("pick a colour\n\nblue please\nthanks\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "You chose blue.\nBye.\n");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(last_result(&reqs[1]), ("blue please".to_string(), false));
    assert_eq!(wire_messages(&reqs[2]).last().unwrap().plain_text(), "thanks");
    let shown = o.stderr.find("? Which colour?\n  b: blue\n  g: green\n  (question ").expect(&o.stderr);
    let hint = o.stderr.find("· type your answer on the next line\n").expect(&o.stderr);
    assert!(shown < hint, "{}", o.stderr);
}

#[tokio::test]
async fn a_question_nobody_answers_times_out() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(ask("toolu_1")));
    gw.push(Reply::sse(anthropic_text("No answer, so blue.")));
    let (t, id) = planner(&gw, "ask_user_timeout_secs: 1\n");
    // stdin ends right after the message: the answer can never come.
    let o = cicy(t.root(), &gw.url(), &["chat", &id], Some("pick a colour\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(last_result(&reqs[1]), ("error: no answer from the user within 1 s".to_string(), true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_the_answer_through_the_respond_route() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(ask("toolu_1")));
    gw.push(Reply::sse(anthropic_text("Green it is.")));
    let (t, id) = planner(&gw, "");
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut stream = s.chat(&id, "pick a colour").await;
    let frames = stream.until("ask_user").await;
    let asked = frames.last().unwrap();
    let reference = asked.data["ref"].as_str().unwrap().to_string();
    assert_eq!(
        asked.data,
        json!({"seq": asked.id.unwrap(), "agent_id": id, "type": "ask_user", "ref": reference, "question": "Which colour?",
               "options": [{"id": "b", "label": "blue"}, {"id": "g", "label": "green"}]})
    );
    let route = format!("/api/agents/{id}/respond");
    assert_eq!(
        s.post(&route, json!({"ref": reference})).await,
        (400, json!({"error": "bad_request", "message": "ref and response required"}))
    );
    assert_eq!(s.post(&route, json!({"response": "g"})).await.0, 400);
    assert_eq!(
        s.post(&route, json!({"ref": "nope", "response": "g"})).await,
        (404, json!({"error": "not_found", "message": "no open question with ref `nope`"}))
    );
    assert_eq!(s.post("/api/agents/w-99/respond", json!({"ref": reference, "response": "g"})).await.0, 404);
    assert_eq!(s.post(&route, json!({"ref": reference, "response": "g"})).await, (200, json!({"success": true, "ref": reference})));
    assert_eq!(s.post(&route, json!({"ref": reference, "response": "again"})).await.0, 404, "an answered question takes no second answer");
    let rest = stream.until("done").await;
    assert_eq!(
        types(&rest).into_iter().filter(|t| t != "state").collect::<Vec<_>>(),
        ["tool_finished", "round_started", "text_delta", "text_delta", "text_delta", "text_end", "usage", "turn_ended", "done"]
    );
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(last_result(&reqs[1]), ("g".to_string(), false));
    let status: Value = s.get(&format!("/api/agents/{id}")).await.1;
    assert_eq!(status["busy"], false);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_session_through_serve_answers_with_the_next_stdin_line() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(ask("toolu_1")));
    gw.push(Reply::sse(anthropic_text("You chose blue.")));
    let (t, id) = planner(&gw, "");
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let o = cicy(t.root(), &gw.url(), &["chat", &id], Some("pick a colour\nblue please\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "You chose blue.\n");
    assert!(o.stderr.contains("· type your answer on the next line\n"), "{}", o.stderr);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2, "the answer line went to the question, not to the agent as a message");
    assert_eq!(last_result(&reqs[1]), ("blue please".to_string(), false));
    let status = s.get(&format!("/api/agents/{id}")).await.1;
    assert!(status["last_seq"].as_u64().unwrap() > 0, "the serve ran the turn: {status}");
    assert_eq!(s.stop().await, 0);
}
