//! The wake tools' gate and the edges of a wake in a real `serve` (docs/design.md §10): unread mail
//! and a due todo refuse `sleep_until`, `inbox receive` claims the next conversation, a
//! half-written inbox file is claimed once complete, a wake that runs past its cap is cancelled
//! and ends as a crash, and the messages route and `status` show the result.

use cicy::wake::at::at_of_unix;
use cicy::wake::db::WakeDb;
use cicy::wake::inbox::{Folder, Mailbox};
use cicy::wake::todo::TodoStatus;

use cicy_test_support::gateway::{anthropic_text, anthropic_tool_uses, Reply, ScriptedGateway};
use cicy_test_support::serve::{Frame, Serve};
use cicy_test_support::wake::{note, waker};

fn results(frames: &[Frame]) -> Vec<(String, String, bool)> {
    frames
        .iter()
        .filter(|f| f.event == "tool_finished")
        .map(|f| {
            (
                f.data["name"].as_str().unwrap().to_string(),
                f.data["result"].as_str().unwrap().to_string(),
                f.data["is_error"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn calls(list: &[(&str, &str, &str)]) -> Reply {
    Reply::sse(anthropic_tool_uses(list))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleep_until_waits_for_unread_mail_and_due_todos_and_receive_claims_the_next_conversation() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let mb = Mailbox::of_workspace(&t.workspace(&id));
    let first = mb.write(Folder::Inbox, &note("human", "question one")).unwrap();
    let second = mb.write(Folder::Inbox, &note("ada", "question two")).unwrap();
    let now = chrono::Local::now().timestamp();
    WakeDb::open(&t.home).unwrap().todo_add(&id, "file the report", &at_of_unix(now - 60)).unwrap();
    gw.push(calls(&[("t1", "reply", r#"{"text": "answer one"}"#), ("t2", "sleep_until", r#"{"at": "+1 hour"}"#)]));
    gw.push(calls(&[("t3", "inbox", r#"{"action": "receive"}"#)]));
    gw.push(calls(&[("t4", "reply", r#"{"text": "answer two"}"#), ("t5", "sleep_until", r#"{"complete": true}"#)]));
    gw.push(calls(&[
        ("t6", "todo", r#"{"action": "done", "id": 1}"#),
        ("t7", "sleep_until", r#"{"complete": true, "summary": "all done"}"#),
    ]));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let frames = s.events(&id, Some(0)).await.until("done").await;
    let wake = &frames.iter().find(|f| f.event == "wake").unwrap().data;
    // One conversation per wake: the oldest message's; the other waits for `inbox receive`.
    assert_eq!(wake["messages"], serde_json::json!([first.name]));
    assert_eq!(wake["todos"], serde_json::json!([1]));
    let r = results(&frames);
    assert_eq!(r[0].0, "reply");
    assert_eq!(
        r[1],
        (
            "sleep_until".to_string(),
            "error: refused: unread messages are waiting in your inbox. Call inbox {\"action\":\"receive\"}, answer them, then sleep_until again.".to_string(),
            true
        )
    );
    assert_eq!(r[2].0, "inbox");
    assert!(
        r[2].1.starts_with("[choruz-incoming] from:@ada direct-chat conv:") && r[2].1.ends_with("roster:[] | question two"),
        "{}",
        r[2].1
    );
    let todo = WakeDb::open(&t.home).unwrap().todo_list(&id, true).unwrap().remove(0);
    assert_eq!(
        r[4].1,
        format!(
            "error: refused: todo #1 is due (file the report, at: {}). Do it and mark it done, or remove it, before completing the plan.",
            todo.at_local
        )
    );
    assert_eq!(r[5], ("todo".to_string(), "Done: #1 file the report".to_string(), false));
    assert_eq!(r[6], ("sleep_until".to_string(), "Plan complete. all done".to_string(), false));
    assert_eq!(gw.requests().len(), 4, "the turn ended after the accepted sleep_until's batch");
    assert_eq!(todo.status, TodoStatus::Done);
    // Both conversations answered by the agent, each to its sender; nothing left to claim.
    let (_, page) = s.get(&format!("/api/agents/{id}/messages")).await;
    let rows = page["messages"].as_array().unwrap();
    let sent: Vec<(String, String)> = rows
        .iter()
        .filter(|m| m["box"] == "outbox")
        .map(|m| (m["meta"]["to"].as_str().unwrap().to_string(), m["body"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(sent.len(), 2, "{rows:#?}");
    assert!(sent.contains(&("human".into(), "answer one".into())) && sent.contains(&("ada".into(), "answer two".into())));
    assert_eq!(rows.iter().filter(|m| m["box"] == "inbox").count(), 2);
    let db = WakeDb::open(&t.home).unwrap();
    assert_eq!(db.obligation_count_unresolved(&id).unwrap(), 0);
    assert!(mb.pending().unwrap().0.is_empty());
    assert!(mb.archive_dir().join(&second.name).is_file(), "inbox receive archived what it claimed");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_file_is_claimed_once_whole_and_an_old_unparsable_one_goes_to_bad() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.fallback(|_| Reply::sse(anthropic_text("got it")));
    let mb = Mailbox::of_workspace(&t.workspace(&id));
    std::fs::create_dir_all(mb.inbox_dir()).unwrap();
    let old = mb.inbox_dir().join("2026-01-01T00-00-00_junk_1.md");
    std::fs::write(&old, "no front matter at all").unwrap();
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(two_hours_ago).unwrap();
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    // A writer that does not rename: the first bytes land, then the rest.
    let path = mb.inbox_dir().join("2026-01-01T00-00-05_slow_2.md");
    std::fs::write(&path, "---\nfrom: hu").unwrap();
    std::fs::write(&path, "---\nfrom: human\nsubject: slow\n---\n\nwritten in two steps\n").unwrap();
    let frames = events.until("done").await;
    assert_eq!(frames.iter().find(|f| f.event == "wake").unwrap().data["messages"], serde_json::json!(["2026-01-01T00-00-05_slow_2.md"]));
    assert!(mb.bad_dir().join("2026-01-01T00-00-00_junk_1.md").is_file(), "the old unparsable file is set aside");
    assert!(!old.exists());
    assert_eq!(gw.requests().len(), 1);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_past_its_cap_is_cancelled_and_ends_as_a_crash_with_its_todo_retried() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let now = chrono::Local::now().timestamp();
    WakeDb::open(&t.home).unwrap().todo_add(&id, "long job", &at_of_unix(now - 1)).unwrap();
    let (held, _gate) = Reply::gated(anthropic_text("too late"));
    gw.push(held);
    let s = Serve::start(t.root(), &gw.url(), &["--max-wake-secs", "1"]).await;
    let frames = s.events(&id, Some(0)).await.until("done").await;
    let ended = frames.iter().find(|f| f.event == "turn_ended").unwrap();
    assert_eq!(ended.data["outcome"], "cancelled");
    let error = frames.iter().find(|f| f.event == "error" && f.data["kind"] == "wake").unwrap();
    assert_eq!(error.data["message"], "the wake turn was cancelled after 1 s (the longest a wake may run)");
    let out = Mailbox::of_workspace(&t.workspace(&id));
    let sent: Vec<String> =
        std::fs::read_dir(out.outbox_dir()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(sent.len(), 1);
    let msg = out.read(&sent[0]).unwrap();
    assert_eq!(
        msg.body,
        "(cicy: agent crashed before sending)\n\n````\nthe wake turn was cancelled after 1 s (the longest a wake may run)\n````"
    );
    let todos = WakeDb::open(&t.home).unwrap().todo_list(&id, false).unwrap();
    assert_eq!(todos.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(), ["long job (attempt 1)"]);
    // The status row and the CLI say when it wakes next.
    let (_, row) = s.get(&format!("/api/agents/{id}")).await;
    assert_eq!(row["wake_at"], todos[0].at_local.as_str());
    let status = cicy_test_support::cli::command(t.root(), &gw.url(), &["status", &id]).output().await.unwrap();
    assert_eq!(status.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        format!("{id}  Tess\nstate: idle (serve)\nnext wake: {}\nunanswered: 0\ninbox: 0 pending\n", todos[0].at_local)
    );
    assert_eq!(s.stop().await, 0);
    let local = cicy_test_support::cli::command(t.root(), &gw.url(), &["status", &id]).output().await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&local.stdout),
        format!("{id}  Tess\nstate: idle (no serve running)\nnext wake: {}\nunanswered: 0\ninbox: 0 pending\n", todos[0].at_local)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_turn_that_failed_before_sending_runs_again_after_the_backoff_and_answers() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.push(Reply::status(500, &[], r#"{"type":"error","error":{"type":"api_error","message":"overloaded"}}"#));
    gw.push(Reply::sse(anthropic_text("recovered answer")));
    let s = Serve::start(t.root(), &gw.url(), &["--wake-retries", "1"]).await;
    let mut events = s.events(&id, None).await;
    let mb = Mailbox::of_workspace(&t.workspace(&id));
    mb.write(Folder::Inbox, &note("human", "are you there?")).unwrap();
    let frames = events.until("done").await;
    let system: Vec<&str> = frames.iter().filter(|f| f.event == "system").map(|f| f.data["text"].as_str().unwrap()).collect();
    assert!(system.contains(&"the wake turn failed before it sent anything; running it again in 1 s (1/1)"), "{system:?}");
    let outcomes: Vec<&str> = frames.iter().filter(|f| f.event == "turn_ended").map(|f| f.data["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["failed", "completed"]);
    assert_eq!(gw.requests().len(), 2);
    let sent: Vec<String> =
        std::fs::read_dir(mb.outbox_dir()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(sent.len(), 1, "one reply, no fallback");
    assert_eq!(mb.read(&sent[0]).unwrap().body, "recovered answer");
    assert_eq!(s.stop().await, 0);
}
