//! Hibernate and wake in a real `serve` (docs/design.md §10): an inbox file wakes the agent however
//! it was written (tmp + rename, a plain write, while serve was down, after the watch lost its
//! folder), one turn per conversation, a claimed message never replayed after `kill -9`, a
//! killed wake's todos rescheduled, a silent or crashed wake never silent, a late wake says
//! so, and an unreadable `cicy.db` stops the start.

use std::path::Path;

use serde_json::Value;

use cicy::wake::at::{at_of_unix, At};
use cicy::wake::db::WakeDb;
use cicy::wake::inbox::settle::FileStamp;
use cicy::wake::inbox::{self, Mailbox, MessageFile};
use cicy::wake::obligation::ClaimedFile;

use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
use cicy_test_support::serve::{types, Frame, Serve};
use cicy_test_support::wake::{last_user_text, mask_now, note, waker};

fn mailbox(t: &TestHome, id: &str) -> Mailbox {
    Mailbox::of_workspace(&t.workspace(id))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.path().is_file()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The outbox files, parsed, oldest first.
fn outbox(t: &TestHome, id: &str) -> Vec<MessageFile> {
    let mb = mailbox(t, id);
    names(&mb.outbox_dir()).into_iter().filter(|n| n.ends_with(".md")).map(|n| mb.read(&n).unwrap()).collect()
}

/// The frames of one wake run (up to its `done`), keeping the types that tell its story.
fn story(frames: &[Frame]) -> Vec<String> {
    let keep = ["wake", "message_in", "todo_change", "turn_started", "turn_ended", "message_out", "done"];
    types(frames).into_iter().filter(|t| keep.contains(&t.as_str())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_written_tmp_then_rename_wakes_the_agent_and_its_answer_is_the_reply() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.push(Reply::sse(anthropic_text("Noted, thanks.")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let written = mailbox(&t, &id).write(inbox::Folder::Inbox, &note("human", "please note this")).unwrap();
    let frames = events.until("done").await;
    assert_eq!(story(&frames), ["wake", "message_in", "turn_started", "turn_ended", "message_out", "done"]);
    let wake = &frames.iter().find(|f| f.event == "wake").unwrap().data;
    assert_eq!((wake["reason"].as_str(), wake["n"].as_u64()), (Some("inbox"), Some(1)));
    assert_eq!(wake["messages"], serde_json::json!([written.name]));

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1);
    // A direct chat without a `conv`: the first 13 hex digits of the SHA-256 of `direct:<from>`.
    let conv = &format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(b"direct:human"))[..13];
    assert_eq!(
        mask_now(&last_user_text(&reqs[0])),
        format!("[cicy-wake] reason:inbox wake:1 now:NOW\n\nTodos: none.\n\n[choruz-incoming] from:@human direct-chat conv:{conv} roster:[] | please note this")
    );
    // Claimed: archived, nothing left in the inbox; the answer went back to the sender.
    let mb = mailbox(&t, &id);
    assert_eq!(names(&mb.archive_dir()), std::slice::from_ref(&written.name));
    assert!(mb.pending().unwrap().0.is_empty());
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].from.as_str(), out[0].body.as_str()), (id.as_str(), "Noted, thanks."));
    assert_eq!(out[0].meta.get("to").map(String::as_str), Some("human"));
    let db = WakeDb::open(&t.home).unwrap();
    assert_eq!(db.obligation_count_unresolved(&id).unwrap(), 0);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_write_a_file_left_while_down_and_a_recreated_inbox_each_wake_it_and_tmp_files_do_not() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.fallback(|n| Reply::sse(anthropic_text(&format!("answer {n}"))));
    let inbox_dir = mailbox(&t, &id).inbox_dir();
    std::fs::create_dir_all(&inbox_dir).unwrap();
    // Dropped while serve is down: found by the start scan.
    std::fs::write(inbox_dir.join("2026-01-01T00-00-00_down_1.md"), "---\nfrom: human\nsubject: down\n---\n\nwhile you were away\n")
        .unwrap();
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, Some(0)).await;
    let first = events.until("done").await;
    assert_eq!(first.iter().find(|f| f.event == "wake").unwrap().data["messages"], serde_json::json!(["2026-01-01T00-00-00_down_1.md"]));

    // A temp file alone wakes nothing; a plain `echo >` of a whole file does.
    std::fs::write(inbox_dir.join(".2026-01-01T00-00-01_x.md.tmp"), "---\nfrom: human\n---\n\nhalf").unwrap();
    std::fs::write(inbox_dir.join("2026-01-01T00-00-02_echo_2.md"), "---\nfrom: human\nsubject: echo\n---\n\nplain write\n").unwrap();
    let second = events.until("done").await;
    assert_eq!(second.iter().find(|f| f.event == "wake").unwrap().data["messages"], serde_json::json!(["2026-01-01T00-00-02_echo_2.md"]));
    assert_eq!(names(&inbox_dir), [".2026-01-01T00-00-01_x.md.tmp"], "the temp file is never claimed");

    // The watch loses its folder (removed and made again): it must still see the next file.
    std::fs::remove_dir_all(&inbox_dir).unwrap();
    std::fs::create_dir_all(&inbox_dir).unwrap();
    std::fs::write(inbox_dir.join("2026-01-01T00-00-03_again_3.md"), "---\nfrom: human\nsubject: again\n---\n\nafter the loss\n").unwrap();
    let third = events.until("done").await;
    assert_eq!(third.iter().find(|f| f.event == "wake").unwrap().data["messages"], serde_json::json!(["2026-01-01T00-00-03_again_3.md"]));
    assert_eq!(gw.requests().len(), 3);
    assert!(names(&inbox_dir).is_empty());
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_messages_of_one_sender_written_together_make_one_turn_with_a_batch() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.fallback(|_| Reply::sse(anthropic_text("both seen")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let mb = mailbox(&t, &id);
    let a = mb.write(inbox::Folder::Inbox, &note("human", "first")).unwrap();
    let b = mb.write(inbox::Folder::Inbox, &note("human", "second")).unwrap();
    let frames = events.until("done").await;
    assert_eq!(frames.iter().find(|f| f.event == "wake").unwrap().data["messages"], serde_json::json!([a.name, b.name]));
    let text = last_user_text(&gw.requests()[0]);
    assert!(text.contains("[choruz-batch] You have 2 pending messages waiting for you."), "{text}");
    assert!(text.contains("\n\n[1/2] [choruz-incoming] from:@human direct-chat conv:") && text.ends_with("roster:[] | second"), "{text}");
    assert_eq!(gw.requests().len(), 1);
    assert_eq!(s.stop().await, 0);
}

/// What a `kill -9` right after the claim's commit leaves: the obligation committed, the files
/// still in the inbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_committed_before_a_kill_is_archived_answered_with_the_notice_and_never_replayed() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let mb = mailbox(&t, &id);
    let claimed = mb.write(inbox::Folder::Inbox, &note("human", "do the thing")).unwrap();
    let mut db = WakeDb::open(&t.home).unwrap();
    let stamp = FileStamp::of(&std::fs::metadata(mb.inbox_dir().join(&claimed.name)).unwrap());
    db.obligation_commit(&id, "direct:human", &[ClaimedFile { name: claimed.name.clone(), archived: claimed.name.clone(), stamp }])
        .unwrap();
    drop(db);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, Some(0)).await;
    let f = events.next().await.unwrap();
    assert_eq!((f.event.as_str(), f.data["from"].as_str()), ("message_out", Some("cicy")));
    assert_eq!(names(&mb.archive_dir()), std::slice::from_ref(&claimed.name));
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].from.as_str(), out[0].body.as_str()), ("cicy", cicy::wake::run::INTERRUPTED_NOTICE));
    assert_eq!(WakeDb::open(&t.home).unwrap().obligation_count_unresolved(&id).unwrap(), 0);
    assert_eq!(s.stop().await, 0);
    assert!(gw.requests().is_empty(), "a claimed message is never replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_a_wake_turn_sends_the_notice_and_reschedules_the_todo_as_attempt_1() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let now = chrono::Local::now().timestamp();
    WakeDb::open(&t.home).unwrap().todo_add(&id, "check the build", &at_of_unix(now - 30)).unwrap();
    let msg = mailbox(&t, &id).write(inbox::Folder::Inbox, &note("human", "and tell me")).unwrap();
    let (held, _gate) = Reply::gated(anthropic_text("never sent"));
    gw.push(held);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    gw.wait_for_requests(1).await;
    s.kill9().await;

    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, Some(0)).await;
    let mut seen = Vec::new();
    while !seen.iter().any(|f: &Frame| f.event == "todo_change" && f.data["action"] == "retry") {
        seen.push(events.next().await.unwrap());
    }
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!((out[0].body.as_str(), out[0].meta.get("to").map(String::as_str)), (cicy::wake::run::INTERRUPTED_NOTICE, Some("human")));
    let todos = WakeDb::open(&t.home).unwrap().todo_list(&id, true).unwrap();
    let retry = todos.iter().find(|t| t.text == "check the build (attempt 1)").expect("the retry todo");
    assert_eq!(retry.status, cicy::wake::todo::TodoStatus::Pending);
    let expected = chrono::Local::now().timestamp() + 120;
    assert!((expected - 10..=expected).contains(&retry.at_unix), "retry at {} for about {expected}", retry.at_unix);
    assert!(todos.iter().any(|t| t.text == "check the build" && t.status == cicy::wake::todo::TodoStatus::Done));
    assert_eq!(names(&mailbox(&t, &id).archive_dir()), [msg.name]);
    assert_eq!(s.stop().await, 0);
    assert_eq!(gw.requests().len(), 1, "the claimed message was not replayed and the retry is not due yet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_a_wake_for_todos_alone_tells_the_human_and_reschedules() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let now = chrono::Local::now().timestamp();
    WakeDb::open(&t.home).unwrap().todo_add(&id, "rotate the logs", &at_of_unix(now - 30)).unwrap();
    let (held, _gate) = Reply::gated(anthropic_text("never sent"));
    gw.push(held);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    gw.wait_for_requests(1).await;
    s.kill9().await;

    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, Some(0)).await;
    while events.next().await.unwrap().event != "message_out" {}
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(out[0].meta.get("to").map(String::as_str), Some("human"));
    assert_eq!(out[0].body, format!("{} (#1 rotate the logs)", cicy::wake::run::TODO_INTERRUPTED_NOTICE));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_model_gets_the_exact_fallbacks_and_a_crashed_one_quotes_its_errors() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    // A group message: only a send answers it, so the silent answer is not the reply.
    let mut group = note("human", "status please");
    group.meta.insert("group".into(), "ops".into());
    mailbox(&t, &id).write(inbox::Folder::Inbox, &group).unwrap();
    gw.push(Reply::sse(anthropic_text("thinking to myself")));
    let s = Serve::start(t.root(), &gw.url(), &["--wake-retries", "0"]).await;
    let mut events = s.events(&id, Some(0)).await;
    events.until("done").await;
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].from.as_str(), out[0].body.as_str()), ("cicy", "(cicy: agent hibernated before replying)"));
    assert_eq!(out[0].meta.get("group").map(String::as_str), Some("ops"));

    // A todo wake whose model says nothing to anyone.
    gw.push(Reply::sse(anthropic_text("done quietly")));
    let now = chrono::Local::now().timestamp();
    let (status, _) =
        s.post(&format!("/api/agents/{id}/todos"), serde_json::json!({"text": "tidy", "at": at_of_unix(now - 60).local})).await;
    assert_eq!(status, 201);
    events.until("done").await;
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 2);
    let silent = out.iter().find(|m| m.body != "(cicy: agent hibernated before replying)").unwrap();
    assert_eq!((silent.from.as_str(), silent.body.as_str()), ("cicy", "(cicy: agent hibernated without sending anything)"));
    assert_eq!(silent.meta.get("to").map(String::as_str), Some("human"));

    // A wake whose turn fails (the gateway refuses it) quotes the error lines.
    gw.push(Reply::status(400, &[], r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad model"}}"#));
    mailbox(&t, &id).write(inbox::Folder::Inbox, &note("w-99", "help")).unwrap();
    events.until("done").await;
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 3, "{out:#?}");
    // Names order by second, then subject: find the new one by what it says.
    let crashed = out.iter().find(|m| m.body.starts_with("(cicy: agent crashed")).expect("the crash fallback");
    assert!(crashed.body.starts_with("(cicy: agent crashed before replying)\n\n````\n"), "{}", crashed.body);
    assert!(crashed.body.ends_with("\n````") && crashed.body.contains("bad model"), "{}", crashed.body);
    assert_eq!(crashed.meta.get("to").map(String::as_str), Some("w-99"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_todo_6_minutes_overdue_wakes_at_start_with_the_delayed_wake_notice() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let at: At = at_of_unix(chrono::Local::now().timestamp() - 6 * 60 - 5);
    WakeDb::open(&t.home).unwrap().todo_add(&id, "water the plants", &at).unwrap();
    gw.push(Reply::sse(anthropic_text("watered")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, Some(0)).await;
    let frames = events.until("done").await;
    assert_eq!(frames.iter().find(|f| f.event == "wake").unwrap().data["reason"], "recovery");
    let text = mask_now(&last_user_text(&gw.requests()[0]));
    assert_eq!(
        text,
        format!(
            "[cicy-wake] reason:recovery wake:1 now:NOW\nDELAYED WAKE: scheduled {at}, 6m late\nDue: #1 water the plants (at: {at})\n\n\
             Todos (the whole list; no need to call todo ls):\n1. [~] water the plants (at: {at})",
            at = at.local
        )
    );
    let todos = WakeDb::open(&t.home).unwrap().todo_list(&id, true).unwrap();
    assert_eq!(todos[0].status, cicy::wake::todo::TodoStatus::Done);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_cicy_db_stops_serve_with_exit_1_naming_the_file() {
    let gw = ScriptedGateway::start().await;
    let (t, _id) = waker(&gw);
    let db = t.home.db_path();
    let bytes = std::fs::read(&db).unwrap();
    std::fs::write(&db, &bytes[..100]).unwrap();
    let out = cicy_test_support::cli::command(t.root(), &gw.url(), &["serve", "--port", "0"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&db.display().to_string()), "{err}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes[..100], "nothing in it was overwritten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wake_tools_refuse_to_sleep_over_unread_mail_and_reply_answers_the_claim() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let mb = mailbox(&t, &id);
    use cicy_test_support::gateway::{anthropic_tool_use, anthropic_tool_uses};
    // Round 1: sleep with the claim unanswered → refused; reply; sleep again → accepted.
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "sleep_until", r#"{"at": "+1 hour"}"#)));
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("toolu_2", "reply", r#"{"text": "on it"}"#),
        ("toolu_3", "sleep_until", r#"{"at": "+1 hour", "summary": "check back"}"#),
    ])));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    mb.write(inbox::Folder::Inbox, &note("human", "can you look later?")).unwrap();
    let frames = events.until("done").await;
    let results: Vec<(String, bool)> = frames
        .iter()
        .filter(|f| f.event == "tool_finished")
        .map(|f| (f.data["result"].as_str().unwrap().to_string(), f.data["is_error"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        results[0],
        ("error: refused: the conversation from human is not answered yet. Call reply first, then sleep_until again.".to_string(), true)
    );
    assert!(results[1].0.starts_with("Replied to human ("), "{results:?}");
    assert!(results[2].0.starts_with("Sleeping until "), "{results:?}");
    // The turn ended after the batch: no third request.
    assert_eq!(gw.requests().len(), 2);
    let out = outbox(&t, &id);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].body, "on it");
    let todos = WakeDb::open(&t.home).unwrap().todo_list(&id, false).unwrap();
    assert_eq!(todos.len(), 1);
    assert_eq!(todos[0].text, "check back");
    let (_, row) = s.get(&format!("/api/agents/{id}")).await;
    assert_eq!(row["wake_at"], Value::String(todos[0].at_local.clone()));
    assert_eq!(row["unanswered"], 0);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_created_while_serve_runs_is_adopted_and_wakes_for_its_mail() {
    let gw = ScriptedGateway::start().await;
    let (t, _first) = waker(&gw);
    gw.push(Reply::sse(anthropic_text("hello back")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    // What `cicy-agent create` in another process does while serve runs.
    let late = t.create("waker", None);
    mailbox(&t, &late).write(inbox::Folder::Inbox, &note("human", "welcome")).unwrap();
    let (status, row) = s.get(&format!("/api/agents/{late}")).await;
    assert_eq!((status, row["id"].as_str()), (200, Some(late.as_str())));
    let mut events = s.events(&late, Some(0)).await;
    events.until("done").await;
    let out = outbox(&t, &late);
    assert_eq!((out.len(), out[0].body.as_str()), (1, "hello back"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_fallback_to_an_agent_sender_is_a_record_and_wakes_nobody() {
    let gw = ScriptedGateway::start().await;
    let (t, a) = waker(&gw);
    let b = t.create("waker", None);
    gw.push(Reply::sse(cicy_test_support::gateway::anthropic_empty()));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&b, None).await;
    mailbox(&t, &b).write(inbox::Folder::Inbox, &note(&a, "for bob")).unwrap();
    events.until("done").await;
    let out = outbox(&t, &b);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(
        (out[0].body.as_str(), out[0].meta.get("to").map(String::as_str)),
        ("(cicy: agent hibernated before replying)", Some(a.as_str()))
    );
    assert!(mailbox(&t, &a).pending().unwrap().0.is_empty(), "the sender agent is not woken by serve's notice");
    assert_eq!(gw.requests().len(), 1);
    assert_eq!(s.stop().await, 0);
}
